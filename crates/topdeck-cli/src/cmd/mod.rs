// SPDX-License-Identifier: Apache-2.0
//! One module per subcommand.

pub mod gc;
pub mod ls;
pub mod show;
pub mod watch;
