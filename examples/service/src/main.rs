// SPDX-License-Identifier: Apache-2.0
//! Example service (placeholder).
fn main() {}
