// SPDX-License-Identifier: Apache-2.0
//! The facts about processes that every topdeck reader takes from `/proc`
//! (proc(5)), each parsed in one place:
//!
//! - [`locks`]: who holds a write `flock` on which file (`/proc/locks`).
//! - [`process`]: a process's start time, effective uid, pids in its pid
//!   namespaces, and one variable of its environment.
//! - [`view`]: which view of the file system (mount namespace and root) a
//!   process has, to look through each view once.
//! - [`root`]: a directory as another view sees it, its links resolved
//!   inside that view's root, not the reader's.
//! - [`cgroup`]: which container a process runs in, from its cgroups.
//! - [`host`]: the host at a glance: CPU time, load, memory, CPU pressure.
//! - [`usage`]: what a process uses as `top` shows it: command, CPU
//!   time, threads, the CPUs it may run on.
//! - [`table`]: every process, walked once per look, with the facts
//!   above read on demand and kept for every reader of that look.
//! - [`budget`]: what one look may spend in one directory of files other
//!   users write.
//! - [`unreadable`]: files of those directories that could not be read,
//!   remembered until they change, so they are not opened at every look.
//! - [`writer`]: whether a process can have written a file, and whether
//!   a file's writer still runs: the one check behind every pid a reader
//!   names.
//!
//! Every reading function has a parsing twin that takes the file's text,
//! so the rules are tested on text and the readers share them. Nothing here
//! panics on what a file holds, and nothing depends on the rest of topdeck.

pub mod budget;
pub mod cgroup;
pub mod host;
pub mod locks;
pub mod process;
pub mod root;
pub mod table;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing;
pub mod unreadable;
pub mod usage;
pub mod view;
pub mod writer;
