// SPDX-License-Identifier: Apache-2.0
//! One module per subcommand. Each writes its output to the writer it is
//! given (stdout in the binary) and its warnings to stderr.

pub mod agent;
pub mod clock;
pub mod explain;
pub mod gc;
pub mod history;
pub mod ls;
pub mod push;
pub mod record;
pub mod sched;
pub mod serve;
pub mod show;
pub mod watch;
