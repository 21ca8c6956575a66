// SPDX-License-Identifier: Apache-2.0
//! The `topdeck` command (placeholder until the CLI lands).
fn main() {}
