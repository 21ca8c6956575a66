// SPDX-License-Identifier: Apache-2.0
//! Helpers shared by the integration tests (placeholder).
