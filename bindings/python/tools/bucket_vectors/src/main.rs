// SPDX-License-Identifier: Apache-2.0
//! Prints what topdeck-format computes for histogram buckets, one case a
//! line, so the Python binding's tests hold its pure-Python bucket maths to
//! the Rust library bit for bit:
//!
//! - `index <schema> <bits of v, hex> <index>`: `bucket_index(schema, v)`;
//! - `bound <schema> <index> <bits, hex>`: `upper_bound(schema, index)`;
//! - `range <schema> <bits of min> <bits of max> <min_index> <bucket_count>
//!   <bits of zero_threshold>`: `BucketRange::covering`.
//!
//! Regenerate with `bindings/python/tools/bucket_vectors.sh`.

use topdeck_format::exponential::{bucket_index, upper_bound, BucketRange, MAX_SCHEMA, MIN_SCHEMA};

fn next_up(v: f64) -> f64 {
    f64::from_bits(v.to_bits() + 1)
}

fn next_down(v: f64) -> f64 {
    f64::from_bits(v.to_bits() - 1)
}

fn main() {
    let mut out = String::new();
    for schema in MIN_SCHEMA..=MAX_SCHEMA {
        let per_octave = 1i32 << schema.max(0);
        let mut values = Vec::new();
        // Every bound of one octave (the bounds table repeats per octave)
        // and its neighbours, then a sample of bounds near the ends of the
        // default range (1e-9 and 1e6) and of the double range.
        let step = (per_octave / 8).max(1) as usize;
        let near_ends = [
            -30 * per_octave,
            20 * per_octave,
            -1070 * per_octave,
            1020 * per_octave,
        ];
        let indices = (0..per_octave + 1).chain(
            near_ends
                .into_iter()
                .flat_map(|c| (c - per_octave..c + per_octave).step_by(step)),
        );
        for i in indices {
            let b = upper_bound(schema, i);
            if b > 0.0 && b < f64::MAX {
                values.extend([next_down(b), b, next_up(b)]);
            }
            if i % 3 == 0 {
                out.push_str(&format!("bound {schema} {i} {:016x}\n", b.to_bits()));
            }
        }
        // A geometric sweep, subnormals and the extremes; at the default
        // schema, the values the conformance script records.
        let mut v = 1e-12;
        while v < 1e12 {
            values.push(v);
            v *= 1.37;
        }
        if schema == 3 {
            values.extend((1..=1000).map(|i| f64::from(i) / 1000.0));
        }
        values.extend([1024.0, 1e9, 5e-324, 1e-310, f64::MIN_POSITIVE, f64::MAX]);
        for v in values {
            out.push_str(&format!(
                "index {schema} {:016x} {}\n",
                v.to_bits(),
                bucket_index(schema, v)
            ));
        }
        for (min, max) in [(1e-9, 1e6), (1e-6, 10.0), (0.001, 1.0), (1.0, 1e9)] {
            let r = BucketRange::covering(schema, min, max);
            out.push_str(&format!(
                "range {schema} {:016x} {:016x} {} {} {:016x}\n",
                f64::to_bits(min),
                f64::to_bits(max),
                r.min_index,
                r.bucket_count,
                r.zero_threshold().to_bits()
            ));
        }
    }
    print!("{out}");
}
