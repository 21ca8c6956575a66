// SPDX-License-Identifier: Apache-2.0
//! The `topdeck` binary an observer command names. The lab is built into
//! the same directory as `topdeck` (`cargo build --release --workspace
//! --bins`, `make build`), so `topdeck` means the one beside it: the lab
//! measures the topdeck it was built with, not whichever is first on PATH.

use std::path::Path;

use anyhow::{bail, Context, Result};

/// `command` with a leading `topdeck` replaced by the binary beside this
/// one; any other command as it is.
pub fn resolve(command: Vec<String>) -> Result<Vec<String>> {
    let exe = std::env::current_exe().context("find the topdeck-lab binary")?;
    resolve_beside(command, &exe)
}

fn resolve_beside(mut command: Vec<String>, exe: &Path) -> Result<Vec<String>> {
    if command.first().map(String::as_str) != Some("topdeck") {
        return Ok(command);
    }
    let beside = exe.with_file_name("topdeck");
    if !beside.is_file() {
        bail!(
            "the command runs `topdeck`, but there is no {}: build it beside topdeck-lab \
             (`cargo build --release --workspace --bins`, or `make build`), or give the path \
             of the topdeck to measure",
            beside.display()
        );
    }
    let Some(path) = beside.to_str() else {
        bail!(
            "{} is not a UTF-8 path: give the path of the topdeck to measure",
            beside.display()
        );
    };
    command[0] = path.to_owned();
    Ok(command)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn topdeck_means_the_binary_beside_the_lab() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("topdeck-lab");
        std::fs::write(dir.path().join("topdeck"), "").unwrap();
        let got = resolve_beside(words(&["topdeck", "ls"]), &exe).unwrap();
        assert_eq!(
            got,
            [
                dir.path().join("topdeck").to_str().unwrap().to_owned(),
                "ls".into()
            ]
        );
        // Other commands, and other paths to a topdeck, are left alone.
        let other = words(&["/usr/bin/topdeck", "ls"]);
        assert_eq!(resolve_beside(other.clone(), &exe).unwrap(), other);
    }

    #[test]
    fn a_missing_topdeck_is_named_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let e = resolve_beside(words(&["topdeck", "ls"]), &dir.path().join("topdeck-lab"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&dir.path().join("topdeck").display().to_string()),
            "{e}"
        );
        assert!(e.contains("make build"), "{e}");
    }
}
