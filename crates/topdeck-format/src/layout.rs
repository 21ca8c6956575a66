// SPDX-License-Identifier: Apache-2.0
//! Byte layout of a topdeck metrics file, format v1. This module is the only
//! place offsets are defined; `docs/FORMAT.md` describes the same layout in
//! prose and must be updated with it.
//!
//! ```text
//!  file
//!  +----------------------------+ 0
//!  | header (HEADER_LEN bytes)  |   magic, version (written last), sizes,
//!  |                            |   pid, start time, names, clock area
//!  +----------------------------+ desc_offset
//!  | descriptor table           |   desc_capacity x DESCRIPTOR_LEN,
//!  |                            |   desc_count of them published
//!  +----------------------------+ strings_offset
//!  | string area                |   names, labels, help, units (immutable
//!  |                            |   once referenced by a descriptor)
//!  +----------------------------+ shared_offset
//!  | shared value area          |   gauges: one 8-byte word each, atomic
//!  +----------------------------+ shards_offset
//!  | shard 0                    |   per-thread counter and histogram
//!  | shard 1                    |   words; each shard is written by one
//!  | ...                        |   thread at a time (plain load + store)
//!  | shard shard_count-1        |
//!  | overflow shard             |   same layout, updated with atomic RMW
//!  +----------------------------+ file_len
//! ```
//!
//! Header, every field little-endian:
//!
//! ```text
//!    0 magic            [u8; 8]  "TOPDECK\0"
//!    8 version          u32      major << 16 | minor; 0 = not ready (written last)
//!   12 header_len       u32
//!   16 file_len         u64
//!   24 pid              u32      as the writer sees it (its pid namespace)
//!   28 flags            u32      reserved, 0
//!   32 start_ticks      u64      /proc/<pid>/stat field 22 (clock ticks since boot)
//!   40 created_unix_ns  u64      registry creation, ns since the Unix epoch
//!   48 desc_offset      u64
//!   56 desc_capacity    u32
//!   60 desc_len         u32      DESCRIPTOR_LEN
//!   64 desc_count       u32      atomic; release-stored after each descriptor
//!   68 shard_count      u32      per-thread shards, the overflow shard excluded
//!   72 strings_offset   u64
//!   80 strings_len      u64
//!   88 shared_offset    u64
//!   96 shared_len       u64
//!  104 shards_offset    u64
//!  112 shard_len        u64      stride between consecutive shards
//!  120 shards_in_use    u32      atomic; shards [0, shards_in_use) may be non-zero
//!  124 reserved         u32
//!  128 process_name     [u8; 64] UTF-8, NUL-padded
//!  192 registry_name    [u8; 64] UTF-8, NUL-padded
//!  256 clock            [u8; 128] the writer's clock parameters (v1.1), see below
//!  384 reserved up to HEADER_LEN, zero
//! ```
//!
//! Clock area (v1.1), offsets relative to `CLOCK_OFFSET`, little-endian; all
//! zero when the writer recorded none. Ticks convert to ns as
//! `base_ns + ((ticks - base_ticks) * mult >> shift)`, with `base_frac` the
//! fraction of a nanosecond (2^-shift units) carried into the sum:
//!
//! ```text
//!    0 clock_version    u32      1; 0 = no parameters recorded
//!    4 source           u32      1 = OS clock (ticks are ns), 2 = TSC, 3 = TSC with per-CPU offsets
//!    8 shift            u32      fractional bits of mult (>= 32)
//!   12 base_frac        u32      fraction of base_ns, in 2^-32 ns
//!   16 mult             u64      ns per tick << shift
//!   24 base_ticks       u64      ticks at the anchor
//!   32 base_ns          u64      CLOCK_MONOTONIC ns at the anchor
//!   40 wall_offset_ns   i64      CLOCK_REALTIME - CLOCK_MONOTONIC, ns
//!   48 ticks_per_sec    u64      calibrated tick rate, rounded (informational)
//!   56 reserved up to 128, zero
//! ```

/// The eight bytes every topdeck metrics file starts with.
pub const MAGIC: [u8; 8] = *b"TOPDECK\0";
/// Major version of this layout: a reader rejects any other major.
pub const VERSION_MAJOR: u16 = 1;
/// Minor version of this layout: higher minors only add fields in reserved space.
pub const VERSION_MINOR: u16 = 1;
/// `version` word as written by this implementation.
pub const VERSION: u32 = (VERSION_MAJOR as u32) << 16 | VERSION_MINOR as u32;

/// Size of the header; one page so the descriptor table starts page-aligned.
pub const HEADER_LEN: usize = 4096;

/// Offset of `magic`.
pub const MAGIC_OFFSET: usize = 0;
/// Offset of `version`.
pub const VERSION_OFFSET: usize = MAGIC_OFFSET + 8;
/// Offset of `header_len`.
pub const HEADER_LEN_OFFSET: usize = VERSION_OFFSET + 4;
/// Offset of `file_len`.
pub const FILE_LEN_OFFSET: usize = HEADER_LEN_OFFSET + 4;
/// Offset of `pid`.
pub const PID_OFFSET: usize = FILE_LEN_OFFSET + 8;
/// Offset of `flags`.
pub const FLAGS_OFFSET: usize = PID_OFFSET + 4;
/// Offset of `start_ticks`.
pub const START_TICKS_OFFSET: usize = FLAGS_OFFSET + 4;
/// Offset of `created_unix_ns`.
pub const CREATED_UNIX_NS_OFFSET: usize = START_TICKS_OFFSET + 8;
/// Offset of `desc_offset`.
pub const DESC_OFFSET_OFFSET: usize = CREATED_UNIX_NS_OFFSET + 8;
/// Offset of `desc_capacity`.
pub const DESC_CAPACITY_OFFSET: usize = DESC_OFFSET_OFFSET + 8;
/// Offset of `desc_len`.
pub const DESC_LEN_OFFSET: usize = DESC_CAPACITY_OFFSET + 4;
/// Offset of `desc_count`, the publication word for descriptors.
pub const DESC_COUNT_OFFSET: usize = DESC_LEN_OFFSET + 4;
/// Offset of `shard_count`.
pub const SHARD_COUNT_OFFSET: usize = DESC_COUNT_OFFSET + 4;
/// Offset of `strings_offset`.
pub const STRINGS_OFFSET_OFFSET: usize = SHARD_COUNT_OFFSET + 4;
/// Offset of `strings_len`.
pub const STRINGS_LEN_OFFSET: usize = STRINGS_OFFSET_OFFSET + 8;
/// Offset of `shared_offset`.
pub const SHARED_OFFSET_OFFSET: usize = STRINGS_LEN_OFFSET + 8;
/// Offset of `shared_len`.
pub const SHARED_LEN_OFFSET: usize = SHARED_OFFSET_OFFSET + 8;
/// Offset of `shards_offset`.
pub const SHARDS_OFFSET_OFFSET: usize = SHARED_LEN_OFFSET + 8;
/// Offset of `shard_len`.
pub const SHARD_LEN_OFFSET: usize = SHARDS_OFFSET_OFFSET + 8;
/// Offset of `shards_in_use`.
pub const SHARDS_IN_USE_OFFSET: usize = SHARD_LEN_OFFSET + 8;
/// Offset of `process_name`.
pub const PROCESS_NAME_OFFSET: usize = SHARDS_IN_USE_OFFSET + 8;
/// Capacity of `process_name` and `registry_name`, in bytes.
pub const NAME_FIELD_LEN: usize = 64;
/// Offset of `registry_name`.
pub const REGISTRY_NAME_OFFSET: usize = PROCESS_NAME_OFFSET + NAME_FIELD_LEN;
/// Offset of the clock parameter area.
pub const CLOCK_OFFSET: usize = REGISTRY_NAME_OFFSET + NAME_FIELD_LEN;
/// Size of the clock parameter area.
pub const CLOCK_LEN: usize = 128;
/// First byte after the fields defined by v1.x.
pub const HEADER_FIELDS_END: usize = CLOCK_OFFSET + CLOCK_LEN;

/// Clock area: `clock_version` (relative to [`CLOCK_OFFSET`]).
pub const C_VERSION: usize = 0;
/// Clock area: `source`.
pub const C_SOURCE: usize = C_VERSION + 4;
/// Clock area: `shift`.
pub const C_SHIFT: usize = C_SOURCE + 4;
/// Clock area: `base_frac`.
pub const C_BASE_FRAC: usize = C_SHIFT + 4;
/// Clock area: `mult`.
pub const C_MULT: usize = C_BASE_FRAC + 4;
/// Clock area: `base_ticks`.
pub const C_BASE_TICKS: usize = C_MULT + 8;
/// Clock area: `base_ns`.
pub const C_BASE_NS: usize = C_BASE_TICKS + 8;
/// Clock area: `wall_offset_ns`.
pub const C_WALL_OFFSET: usize = C_BASE_NS + 8;
/// Clock area: `ticks_per_sec`.
pub const C_TICKS_PER_SEC: usize = C_WALL_OFFSET + 8;
/// Clock area: first reserved byte.
pub const C_FIELDS_END: usize = C_TICKS_PER_SEC + 8;
/// The `clock_version` this implementation writes.
pub const CLOCK_VERSION: u32 = 1;

/// Descriptor, every field little-endian:
///
/// ```text
///   0 kind            u8    MetricKind
///   1 schema          i8    histogram bucket schema, else 0
///   2 flags           u16   reserved, 0
///   4 value_len       u32   bytes of the value block (per shard, or in the shared area)
///   8 value_offset    u64   relative to each shard (counter, histogram) or to the shared area (gauges)
///  16 name_off, name_len       u32, u32   relative to strings_offset
///  24 labels_off, labels_len   u32, u32   encoded label pairs, see `labels`
///  32 help_off, help_len       u32, u32
///  40 unit_off, unit_len       u32, u32
///  48 min_index       i32   histogram: index of the first bucket
///  52 bucket_count    u32   histogram: number of buckets
///  56 zero_threshold  f64   histogram: upper bound of the zero bucket
/// ```
pub const DESCRIPTOR_LEN: usize = 64;
/// Offset of `kind` in a descriptor.
pub const D_KIND: usize = 0;
/// Offset of `schema`.
pub const D_SCHEMA: usize = D_KIND + 1;
/// Offset of `flags`.
pub const D_FLAGS: usize = D_SCHEMA + 1;
/// Offset of `value_len`.
pub const D_VALUE_LEN: usize = D_FLAGS + 2;
/// Offset of `value_offset`.
pub const D_VALUE_OFFSET: usize = D_VALUE_LEN + 4;
/// Offset of the name reference.
pub const D_NAME: usize = D_VALUE_OFFSET + 8;
/// Offset of the labels reference.
pub const D_LABELS: usize = D_NAME + 8;
/// Offset of the help reference.
pub const D_HELP: usize = D_LABELS + 8;
/// Offset of the unit reference.
pub const D_UNIT: usize = D_HELP + 8;
/// Offset of `min_index`.
pub const D_MIN_INDEX: usize = D_UNIT + 8;
/// Offset of `bucket_count`.
pub const D_BUCKET_COUNT: usize = D_MIN_INDEX + 4;
/// Offset of `zero_threshold`.
pub const D_ZERO_THRESHOLD: usize = D_BUCKET_COUNT + 4;

/// Words of a histogram block before its buckets, in each shard:
/// `count`, `sum` (f64 bits), `max` (order-preserving bits, 0 = none), `zero`.
pub const HISTOGRAM_HEAD_WORDS: usize = 4;
/// Word index of a histogram's observation count.
pub const H_COUNT: usize = 0;
/// Word index of a histogram's sum, as f64 bits.
pub const H_SUM: usize = 1;
/// Word index of a histogram's maximum, see [`crate::exponential::ordered_bits`].
pub const H_MAX: usize = 2;
/// Word index of a histogram's zero-bucket count.
pub const H_ZERO: usize = 3;

/// Size of one value word.
pub const WORD: usize = 8;
/// Cache line size assumed for shard alignment.
pub const CACHE_LINE: usize = 64;
/// Alignment of every section start (and of `shard_len`).
pub const SECTION_ALIGN: usize = 4096;

// Limits a reader enforces (docs/FORMAT.md, section 8). A header is a
// claim anyone who can write the file makes; these bound what believing it
// can cost, far above what a real registry needs. The Rust writer refuses a
// capacity beyond them (`Capacity::validate`), so it never makes a file a
// reader refuses.

/// Largest `file_len`: 4 GiB, over 200 times the default registry.
pub const MAX_FILE_LEN: u64 = 1 << 32;
/// Most descriptor slots: 2^20 metrics in one file.
pub const MAX_DESC_CAPACITY: u32 = 1 << 20;
/// Largest `desc_len`: four times v1.0's 64 bytes, room for future minors.
pub const MAX_DESC_LEN: u32 = 256;
/// Most per-thread shards: threads beyond the writer's shards share the
/// overflow shard, and a reader sums every shard in use on each snapshot.
pub const MAX_SHARD_COUNT: u32 = 1024;
/// Largest `shard_len`: 256 MiB, 32 Mi counters or 82 K default histograms.
pub const MAX_SHARD_LEN: u64 = 256 << 20;
/// Largest `strings_len`: 256 MiB, 256 bytes for each of the most metrics.
pub const MAX_STRINGS_LEN: u64 = 256 << 20;
/// Largest `shared_len`: 64 MiB, 8 Mi gauges (eight times the most metrics).
pub const MAX_SHARED_LEN: u64 = 64 << 20;

const _: () = assert!(HEADER_FIELDS_END <= HEADER_LEN);
const _: () = assert!(CLOCK_OFFSET == 256);
const _: () = assert!(C_FIELDS_END == 56 && C_FIELDS_END <= CLOCK_LEN);
const _: () = assert!(D_ZERO_THRESHOLD + 8 == DESCRIPTOR_LEN);
const _: () = assert!(SHARDS_IN_USE_OFFSET == 120);
const _: () = assert!(DESC_COUNT_OFFSET % 4 == 0 && SHARDS_IN_USE_OFFSET % 4 == 0);
const _: () = assert!(SECTION_ALIGN % CACHE_LINE == 0 && HEADER_LEN % SECTION_ALIGN == 0);
const _: () = assert!(
    MAX_DESC_CAPACITY as u64 * MAX_DESC_LEN as u64 + MAX_STRINGS_LEN + MAX_SHARED_LEN
        < MAX_FILE_LEN
);
