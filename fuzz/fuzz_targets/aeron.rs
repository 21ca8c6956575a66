// SPDX-License-Identifier: Apache-2.0
//! The Aeron porthole on any bytes: `Cnc::parse` on them in memory, and
//! `aeron::read` on a file holding them, which copies only parts of it with
//! `pread`. Both must agree; what parses must describe regions inside the
//! file and counters with ids in order and labels inside their records.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdeck_portholes::aeron::{self, Cnc};

fuzz_target!(|data: &[u8]| {
    let parsed = Cnc::parse(data);
    if let Ok(cnc) = &parsed {
        let h = &cnc.header;
        assert!(h.error_log_offset() + h.error_log_len <= data.len() as u64);
        assert!(h.heartbeat_offset() + 8 <= h.to_driver_offset() + h.to_driver_len);
        assert!(cnc.counters.windows(2).all(|w| w[0].id < w[1].id));
        assert!(cnc.counters.iter().all(|c| c.label.len() <= 380 * 3 && c.key.len() == 112));
        let _ = cnc.liveness(i64::MAX);
        let _ = cnc.liveness(i64::MIN);
    }
    let dir = std::env::temp_dir().join(format!("topdeck-fuzz-aeron-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cnc.dat");
    std::fs::write(&path, data).unwrap();
    let read = aeron::read(&path);
    match (&parsed, &read) {
        (Ok(p), Ok(r)) => assert_eq!(p, r),
        (Err(p), Err(aeron::Error::Format { source, .. })) => assert_eq!(p, source),
        _ => panic!("parse {parsed:?} but read {read:?}"),
    }
});
