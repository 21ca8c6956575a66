// SPDX-License-Identifier: Apache-2.0
//! Benchmark support (placeholder).
