// SPDX-License-Identifier: Apache-2.0
//! Victim micro-workloads: small operations timed one by one, whose latency
//! distribution shows what an observer running beside them costs. `uds` is
//! the article's: a Unix socket created and closed, each call timed apart.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::timing::now_ns;
use crate::{Error, ErrorKind, Result};

/// A victim operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Victim {
    /// `socket(AF_UNIX, SOCK_STREAM)` then `close()`, timed as two series.
    Uds,
    /// One `getpid` system call (through `syscall(2)`, never cached).
    Getpid,
    /// One write to each cache line of a buffer of this many bytes.
    Memory {
        /// Buffer size.
        bytes: usize,
    },
}

impl FromStr for Victim {
    type Err = Error;

    /// `uds`, `getpid`, `memory` (256 KiB) or `memory:<n>k` / `memory:<n>m`.
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::new(
                ErrorKind::BadInput,
                format!("unknown victim {s:?}: use uds, getpid, memory or memory:<size>k|m"),
            )
        };
        match s {
            "uds" => Ok(Victim::Uds),
            "getpid" => Ok(Victim::Getpid),
            "memory" => Ok(Victim::Memory { bytes: 256 << 10 }),
            _ => {
                let size = s.strip_prefix("memory:").ok_or_else(bad)?.to_lowercase();
                let (n, shift) = match size.as_bytes().last() {
                    Some(b'k') => (&size[..size.len() - 1], 10),
                    Some(b'm') => (&size[..size.len() - 1], 20),
                    _ => (size.as_str(), 0),
                };
                let n: usize = n.parse().map_err(|_| bad())?;
                let bytes = n
                    .checked_shl(shift)
                    .filter(|&b| (64..=1 << 30).contains(&b));
                bytes.map(|bytes| Victim::Memory { bytes }).ok_or_else(|| {
                    Error::new(
                        ErrorKind::BadInput,
                        format!("victim buffer {s:?} must be between 64 bytes and 1 GiB"),
                    )
                })
            }
        }
    }
}

impl Victim {
    /// The names of the series one iteration produces.
    pub fn series(&self) -> &'static [&'static str] {
        match self {
            Victim::Uds => &["socket", "close"],
            Victim::Getpid => &["getpid"],
            Victim::Memory { .. } => &["memory"],
        }
    }

    /// A short description for tables.
    pub fn describe(&self) -> String {
        match self {
            Victim::Uds => "uds (socket + close)".into(),
            Victim::Getpid => "getpid".into(),
            Victim::Memory { bytes } => format!("memory ({} KiB touched)", bytes >> 10),
        }
    }

    /// Runs `iterations` iterations; returns one sample vector (ns) per series.
    pub fn run(&self, iterations: usize) -> Result<Vec<Vec<u64>>> {
        match *self {
            Victim::Uds => {
                let mut open = Vec::with_capacity(iterations);
                let mut close = Vec::with_capacity(iterations);
                for _ in 0..iterations {
                    let t0 = now_ns();
                    // SAFETY: socket(2) takes plain integers.
                    let fd = unsafe {
                        libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)
                    };
                    let t1 = now_ns();
                    if fd < 0 {
                        return Err(Error::last_os("socket(AF_UNIX, SOCK_STREAM)"));
                    }
                    // SAFETY: `fd` was just returned by socket(2) and is closed once.
                    unsafe { libc::close(fd) };
                    let t2 = now_ns();
                    open.push(t1 - t0);
                    close.push(t2 - t1);
                }
                Ok(vec![open, close])
            }
            Victim::Getpid => {
                let mut s = Vec::with_capacity(iterations);
                for _ in 0..iterations {
                    let t0 = now_ns();
                    // SAFETY: getpid takes no arguments and cannot fail.
                    std::hint::black_box(unsafe { libc::syscall(libc::SYS_getpid) });
                    s.push(now_ns() - t0);
                }
                Ok(vec![s])
            }
            Victim::Memory { bytes } => {
                let mut buf = vec![0u8; bytes];
                let mut s = Vec::with_capacity(iterations);
                for i in 0..iterations {
                    let t0 = now_ns();
                    for line in buf.chunks_mut(64) {
                        line[0] = line[0].wrapping_add(i as u8);
                    }
                    std::hint::black_box(&mut buf);
                    s.push(now_ns() - t0);
                }
                Ok(vec![s])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn victims_parse_and_refuse() {
        assert_eq!("uds".parse::<Victim>().unwrap(), Victim::Uds);
        assert_eq!(
            "memory:4m".parse::<Victim>().unwrap(),
            Victim::Memory { bytes: 4 << 20 }
        );
        assert_eq!(
            "nope".parse::<Victim>().unwrap_err().kind(),
            ErrorKind::BadInput
        );
        assert!("memory:0".parse::<Victim>().is_err());
        assert!("memory:99999m".parse::<Victim>().is_err());
    }

    #[test]
    fn every_series_gets_every_iteration() {
        for v in [Victim::Uds, Victim::Getpid, Victim::Memory { bytes: 4096 }] {
            let out = v.run(50).unwrap();
            assert_eq!(out.len(), v.series().len());
            assert!(out.iter().all(|s| s.len() == 50));
        }
    }
}
