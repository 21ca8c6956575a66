// SPDX-License-Identifier: Apache-2.0
//! The whole reader path on a file of the fuzzer's bytes:
//! `RegistryReader::open` (mapping and header), the clock area, and two
//! snapshots (descriptors, strings, value words of every shard), then
//! every accessor of the values. The file is extended with a hole to the
//! length its header claims, as a hostile user's sparse file is, so that
//! claims of huge tables and shards are read against the reader's limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
use topdeck_fuzz::{exercise, with_reader};

fuzz_target!(|data: &[u8]| {
    with_reader(data, |r| {
        let header = r.header().clone();
        if let Ok(Some(clock)) = r.clock_params() {
            for t in [0, 1, 1 << 32, u64::MAX] {
                let _ = clock.ticks_to_ns(t);
            }
            assert_eq!(
                topdeck_clock::Params::from_bytes(&clock.to_bytes()).ok(),
                Some(Some(clock))
            );
        }
        let Ok(first) = r.snapshot() else { return };
        assert!(first.len() <= header.desc_capacity as usize);
        exercise(&first);
        // Nothing changed: the second snapshot reads the same metrics.
        let second = r.snapshot().expect("a file that read once reads again");
        assert_eq!(second.len(), first.len());
        assert!(first.iter().zip(second.iter()).all(|(a, b)| a.0 == b.0));
    });
});
