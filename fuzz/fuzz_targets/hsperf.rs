// SPDX-License-Identifier: Apache-2.0
//! `topdeck_portholes::hsperf::parse` on any bytes: a JVM's hsperfdata
//! file as a hostile or truncated copy may hold it. A buffer that parses
//! must announce at least the entries read, inside what was copied, and
//! parse the same from its used area alone (nothing past it is read).
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdeck_portholes::hsperf::{self, Value};

fuzz_target!(|data: &[u8]| {
    let Ok(perf) = hsperf::parse(data) else {
        return;
    };
    let used = perf.prologue.used as usize;
    assert!(used <= data.len());
    assert!(perf.entries.len() <= perf.prologue.num_entries as usize);
    let mut bytes_in_entries = 0usize;
    for entry in &perf.entries {
        bytes_in_entries += entry.name.len() + 21;
        if let Value::Bytes(b) = &entry.value {
            bytes_in_entries += b.len();
        }
        let _ = perf.seconds(&entry.name);
    }
    assert!(bytes_in_entries <= used);
    assert_eq!(hsperf::parse(&data[..used]).ok().as_ref(), Some(&perf));
});
