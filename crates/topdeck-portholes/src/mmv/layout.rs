// SPDX-License-Identifier: Apache-2.0
//! The on-disk layout of an MMV file, as libpcp_mmv writes it (PCP's
//! `pcp/mmv_dev.h`; sizes checked against Debian 12's 6.0.3 headers).
//! Every field is in the writer's byte order, which is this host's.
//!
//! ```text
//! header (40)   magic "MMV\0" | version i32 | g1 u64 | g2 u64 | tocs i32
//!               | flags i32 | process i32 | cluster i32
//! toc (16)      type i32 | count i32 | offset u64            × tocs
//! indom (32)    serial u32 | count u32 | offset u64 (first instance)
//!               | shorttext u64 | helptext u64
//! instance v1 (80)  indom u64 | pad u32 | internal i32 | external char[64]
//! instance v2 (24)  indom u64 | pad u32 | internal i32 | external u64 (string)
//! metric v1 (104)   name char[64] | item u32 | type i32 | sem i32 | units u32
//!                   | indom i32 | pad u32 | shorttext u64 | helptext u64
//! metric v2 (48)    name u64 (string) | item | type | sem | units | indom
//!                   | pad | shorttext u64 | helptext u64
//! value (32)    pmAtomValue (8) | extra i64 | metric u64 | instance u64
//! string (256)  NUL-terminated
//! label (256, 6.0.3 only)  flags u32 | identity u32 | internal i32 | payload char[244]
//! ```
//!
//! Offsets are from the start of the file; a text offset of 0 means none.

/// The file's first four bytes.
pub(crate) const MAGIC: [u8; 4] = *b"MMV\0";

pub(crate) const HEADER_SIZE: usize = 40;
pub(crate) const VERSION_OFFSET: usize = 4;
pub(crate) const G1_OFFSET: usize = VERSION_OFFSET + 4;
pub(crate) const G2_OFFSET: usize = G1_OFFSET + 8;
pub(crate) const TOCS_OFFSET: usize = G2_OFFSET + 8;
pub(crate) const FLAGS_OFFSET: usize = TOCS_OFFSET + 4;
pub(crate) const PROCESS_OFFSET: usize = FLAGS_OFFSET + 4;
pub(crate) const CLUSTER_OFFSET: usize = PROCESS_OFFSET + 4;
const _: () = assert!(CLUSTER_OFFSET + 4 == HEADER_SIZE);

pub(crate) const TOC_SIZE: usize = 16;
pub(crate) const TOC_COUNT_OFFSET: usize = 4;
pub(crate) const TOC_SECTION_OFFSET: usize = TOC_COUNT_OFFSET + 4;

/// TOC entry types (`mmv_toc_type_t`).
pub(crate) const TOC_INDOMS: i32 = 1;
pub(crate) const TOC_INSTANCES: i32 = 2;
pub(crate) const TOC_METRICS: i32 = 3;
pub(crate) const TOC_VALUES: i32 = 4;
pub(crate) const TOC_STRINGS: i32 = 5;
pub(crate) const TOC_LABELS: i32 = 6;

pub(crate) const INDOM_SIZE: usize = 32;
pub(crate) const INDOM_COUNT_OFFSET: usize = 4;
pub(crate) const INDOM_FIRST_OFFSET: usize = INDOM_COUNT_OFFSET + 4;
pub(crate) const INDOM_SHORT_OFFSET: usize = INDOM_FIRST_OFFSET + 8;
pub(crate) const INDOM_HELP_OFFSET: usize = INDOM_SHORT_OFFSET + 8;
const _: () = assert!(INDOM_HELP_OFFSET + 8 == INDOM_SIZE);

/// Bytes of an inline name (`MMV_NAMEMAX`), NUL included.
pub(crate) const NAME_MAX: usize = 64;
pub(crate) const INSTANCE_INTERNAL_OFFSET: usize = 12;
pub(crate) const INSTANCE_EXTERNAL_OFFSET: usize = INSTANCE_INTERNAL_OFFSET + 4;
pub(crate) const INSTANCE1_SIZE: usize = INSTANCE_EXTERNAL_OFFSET + NAME_MAX;
pub(crate) const INSTANCE2_SIZE: usize = INSTANCE_EXTERNAL_OFFSET + 8;
const _: () = assert!(INSTANCE1_SIZE == 80 && INSTANCE2_SIZE == 24);

/// Offsets of a metric's fields after its name (inline in v1, a string
/// offset in v2 and v3).
pub(crate) const METRIC1_NAME_SIZE: usize = NAME_MAX;
pub(crate) const METRIC2_NAME_SIZE: usize = 8;
pub(crate) const METRIC_ITEM: usize = 0;
pub(crate) const METRIC_TYPE: usize = METRIC_ITEM + 4;
pub(crate) const METRIC_SEM: usize = METRIC_TYPE + 4;
pub(crate) const METRIC_UNITS: usize = METRIC_SEM + 4;
pub(crate) const METRIC_INDOM: usize = METRIC_UNITS + 4;
pub(crate) const METRIC_SHORT: usize = METRIC_INDOM + 8;
pub(crate) const METRIC_HELP: usize = METRIC_SHORT + 8;
pub(crate) const METRIC_TAIL: usize = METRIC_HELP + 8;
pub(crate) const METRIC1_SIZE: usize = METRIC1_NAME_SIZE + METRIC_TAIL;
pub(crate) const METRIC2_SIZE: usize = METRIC2_NAME_SIZE + METRIC_TAIL;
const _: () = assert!(METRIC1_SIZE == 104 && METRIC2_SIZE == 48);

pub(crate) const VALUE_SIZE: usize = 32;
pub(crate) const VALUE_EXTRA_OFFSET: usize = 8;
pub(crate) const VALUE_METRIC_OFFSET: usize = VALUE_EXTRA_OFFSET + 8;
pub(crate) const VALUE_INSTANCE_OFFSET: usize = VALUE_METRIC_OFFSET + 8;
const _: () = assert!(VALUE_INSTANCE_OFFSET + 8 == VALUE_SIZE);

/// Bytes of a string slot (`MMV_STRINGMAX`), NUL included.
pub(crate) const STRING_SIZE: usize = 256;

/// PCP 6.0.3's `mmv_disk_label_t`; other releases lay labels out
/// differently, so the parser only looks for JSON text in them.
pub(crate) const LABEL_SIZE: usize = 256;
pub(crate) const LABEL_PAYLOAD_OFFSET: usize = 12;

/// `PM_INDOM_NULL`: a metric without instances (0 means the same to pmdammv).
pub(crate) const INDOM_NULL: u32 = 0xffff_ffff;

/// Limits pmdammv enforces (`MAX_MMV_ITEMS`, `MAX_MMV_LABELS`): a file
/// announcing more is not one PCP would read either.
pub(crate) const MAX_METRICS: usize = (1 << 10) - 1;
pub(crate) const MAX_LABELS: usize = (1 << 8) - 1;
/// Most values this reader takes from one file: each may carry a copy of
/// a 256-byte string and instance name, so a hostile file of 32-byte
/// records must not turn into gigabytes (1023 metrics of 256 instances
/// each is far above what writers publish).
pub(crate) const MAX_VALUES: usize = 1 << 18;
/// At most one entry per section type (six today); more is hostile.
pub(crate) const MAX_TOCS: usize = 16;
