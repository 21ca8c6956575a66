// SPDX-License-Identifier: Apache-2.0
//! `topdeck_portholes::mmv::parse` on any bytes: a PCP MMV file as a
//! hostile, half-written or truncated copy may hold it. A file that parses
//! must hold at least the records it announced (each value one 32-byte
//! record, each metric one of at least 48), give the same result a second
//! time, and every value must convert at any clock without a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdeck_portholes::mmv;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = mmv::parse(data, "fuzz") else {
        return;
    };
    let values: usize = file.metrics.iter().map(|m| m.values.len()).sum();
    assert!(40 + values * 32 + file.metrics.len() * 48 <= data.len());
    assert!(file.metrics.len() <= 1023);
    for metric in &file.metrics {
        assert!(metric.pcp_name.ends_with(&metric.name));
        let _ = metric.units.base_unit();
        for sample in &metric.values {
            assert_eq!(sample.instance.is_some(), metric.indom.is_some());
            if let Some(value) = &sample.value {
                for now in [0, i64::MIN, i64::MAX] {
                    if let Some(v) = value.as_f64(now) {
                        let _ = metric.units.to_base(v);
                    }
                }
            }
        }
    }
    let again = mmv::parse(data, "fuzz").ok();
    assert_eq!(
        again.map(|f| (f.metrics.len(), f.labels.len(), f.skipped.len())),
        Some((file.metrics.len(), file.labels.len(), file.skipped.len()))
    );
});
