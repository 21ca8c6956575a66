// SPDX-License-Identifier: Apache-2.0
//! What one look spends reading the sources discovery found, per
//! directory: discovery opens at most a budget's worth of a directory's
//! files, and reading them is held to the same budget, so a directory of
//! valid-looking files costs a look no more than one of bad ones.

use std::path::{Path, PathBuf};

use topdeck::ErrorKind;
use topdeck_procfs::budget::DirBudget;

use crate::error::Error;
use crate::source::Kind;

/// One budget per directory, in the order the directories came.
#[derive(Debug, Default)]
pub(crate) struct Spent(Vec<(PathBuf, DirBudget)>);

impl Spent {
    /// The budget of `dir`, begun at its first file.
    pub(crate) fn of(&mut self, dir: &Path) -> &mut DirBudget {
        let at = match self.0.iter().position(|(d, _)| d == dir) {
            Some(at) => at,
            None => {
                self.0.push((dir.to_path_buf(), DirBudget::new()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    /// One error per directory of `kind`'s sources that left files unread
    /// or errors unshown.
    pub(crate) fn report(self, kind: Kind, errors: &mut Vec<Error>) {
        for (dir, budget) in self.0 {
            if let Some(what) = budget.summary(true) {
                let message = format!("{}: {what}", dir.display());
                errors.push(Error::new(kind, ErrorKind::TooLarge, Some(&dir), message));
            }
        }
    }
}
