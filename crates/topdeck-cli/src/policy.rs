// SPDX-License-Identifier: Apache-2.0
//! Who and how much `serve` and `push` export, from their flags and a
//! TOML file (`--policy FILE`, for the units in `deploy/`): one
//! [`topdeck_export::Policy`] for both exporters.
//!
//! ```toml
//! [deny]
//! users = ["mallory", 1234]
//! registries = ["debug-*"]
//! kinds = ["mmv"]
//! metrics = ["*_bucket_debug"]
//!
//! [caps]
//! series_per_user = 5000
//! bytes_per_user = "4MiB"
//! ```
//!
//! The file's lists and the flags' add up; a cap given as a flag wins
//! over the file's, and the file's over the defaults. With `--all-users`
//! the defaults are [`Caps::FLEET`] for every user but the caller, whose
//! own series are never capped.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use glob::Pattern;
use serde::Deserialize;
use topdeck_export::{Caps, Policy, Rules};
use topdeck_sources::Kind;

/// The policy's flags, shared by `serve` and `push`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PolicyArgs {
    /// Read allow and deny lists and caps from this TOML file (sections
    /// [allow], [deny] with users, registries, kinds, metrics; [caps]).
    /// Flags add to its lists and override its caps.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Export only these users' sources (name or uid; repeatable).
    #[arg(long, value_name = "USER")]
    pub allow_user: Vec<String>,
    /// Never export these users' sources (name or uid; repeatable).
    #[arg(long, value_name = "USER")]
    pub deny_user: Vec<String>,
    /// Export only registries whose name matches (a glob; another
    /// runtime's source matches by its process name).
    #[arg(long, value_name = "GLOB")]
    pub allow_registry: Vec<String>,
    /// Never export registries whose name matches (a glob).
    #[arg(long, value_name = "GLOB")]
    pub deny_registry: Vec<String>,
    /// Export only sources of this kind: topdeck, jvm, python
    /// (prometheus_client), aeron, mmv.
    #[arg(long, value_name = "KIND")]
    pub allow_kind: Vec<String>,
    /// Never export sources of this kind.
    #[arg(long, value_name = "KIND")]
    pub deny_kind: Vec<String>,
    /// Export only metrics whose name matches (a glob).
    #[arg(long, value_name = "GLOB")]
    pub allow_metric: Vec<String>,
    /// Never export metrics whose name matches (a glob).
    #[arg(long, value_name = "GLOB")]
    pub deny_metric: Vec<String>,
    /// Series of one registry of another user (0: no limit; default
    /// with --all-users 2000).
    #[arg(long, value_name = "N")]
    pub max_series_per_registry: Option<usize>,
    /// Series of one other user, all of that user's sources together
    /// (0: no limit; default with --all-users 5000).
    #[arg(long, value_name = "N")]
    pub max_series_per_user: Option<usize>,
    /// Series of all other users together (0: no limit; default with
    /// --all-users 50000).
    #[arg(long, value_name = "N")]
    pub max_series: Option<usize>,
    /// Exposition bytes of one registry of another user, estimated before
    /// encoding (0: no limit; default with --all-users 2MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_bytes_per_registry: Option<usize>,
    /// Exposition bytes of one other user (0: no limit; default with
    /// --all-users 4MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_bytes_per_user: Option<usize>,
    /// Exposition bytes of all other users together (0: no limit;
    /// default with --all-users 64MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub max_bytes: Option<usize>,
}

/// The policy file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    allow: Lists,
    #[serde(default)]
    deny: Lists,
    #[serde(default)]
    caps: FileCaps,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Lists {
    #[serde(default)]
    users: Vec<User>,
    #[serde(default)]
    registries: Vec<String>,
    #[serde(default)]
    kinds: Vec<String>,
    #[serde(default)]
    metrics: Vec<String>,
}

/// A user by uid or name.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum User {
    Uid(u32),
    Name(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileCaps {
    series_per_registry: Option<usize>,
    series_per_user: Option<usize>,
    series: Option<usize>,
    bytes_per_registry: Option<Size>,
    bytes_per_user: Option<Size>,
    bytes: Option<Size>,
}

/// Bytes as a number or a size (`"4MiB"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(usize),
    Text(String),
}

impl Size {
    fn bytes(&self) -> Result<usize> {
        match self {
            Size::Bytes(n) => Ok(*n),
            Size::Text(s) => parse_bytes(s).map_err(anyhow::Error::msg),
        }
    }
}

impl PolicyArgs {
    /// The policy for an exporter run by `caller` (its effective uid),
    /// reading every user's sources if `all_users`.
    pub fn policy(&self, all_users: bool, caller: u32) -> Result<Policy> {
        let file = match &self.policy {
            Some(path) => read(path)?,
            None => File::default(),
        };
        let what = |path: &Option<PathBuf>| {
            path.as_ref()
                .map_or_else(|| "flags".to_owned(), |p| p.display().to_string())
        };
        let from = what(&self.policy);
        let lists = |file: &Lists, users: &[String], registries, kinds, metrics| -> Result<Rules> {
            let mut u: Vec<u32> = Vec::new();
            for user in &file.users {
                u.push(match user {
                    User::Uid(n) => *n,
                    User::Name(name) => uid_of(name).with_context(|| format!("in {from}"))?,
                });
            }
            for user in users {
                u.push(uid_of(user)?);
            }
            Ok(Rules {
                uids: u,
                registries: globs(file.registries.iter().chain(registries), "registry")?,
                kinds: file
                    .kinds
                    .iter()
                    .chain(kinds)
                    .map(|k| kind(k))
                    .collect::<Result<_>>()?,
                metrics: globs(file.metrics.iter().chain(metrics), "metric")?,
            })
        };
        let allow = lists(
            &file.allow,
            &self.allow_user,
            &self.allow_registry,
            &self.allow_kind,
            &self.allow_metric,
        )?;
        let deny = lists(
            &file.deny,
            &self.deny_user,
            &self.deny_registry,
            &self.deny_kind,
            &self.deny_metric,
        )?;
        let base = if all_users {
            Caps::FLEET
        } else {
            Caps::default()
        };
        let f = &file.caps;
        let size = |s: &Option<Size>| s.as_ref().map(Size::bytes).transpose();
        // A flag, else the file, else the default; 0 is no limit.
        let pick = |flag: Option<usize>, file: Option<usize>, default: Option<usize>| {
            flag.or(file).map_or(default, |n| (n > 0).then_some(n))
        };
        let caps = Caps {
            series_per_registry: pick(
                self.max_series_per_registry,
                f.series_per_registry,
                base.series_per_registry,
            ),
            series_per_user: pick(
                self.max_series_per_user,
                f.series_per_user,
                base.series_per_user,
            ),
            series: pick(self.max_series, f.series, base.series),
            bytes_per_registry: pick(
                self.max_bytes_per_registry,
                size(&f.bytes_per_registry)?,
                base.bytes_per_registry,
            ),
            bytes_per_user: pick(
                self.max_bytes_per_user,
                size(&f.bytes_per_user)?,
                base.bytes_per_user,
            ),
            bytes: pick(self.max_bytes, size(&f.bytes)?, base.bytes),
        };
        Ok(Policy::new(allow, deny, caps, Some(caller)))
    }
}

fn read(path: &Path) -> Result<File> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the policy file {}", path.display()))?;
    toml::from_str(&text).with_context(|| {
        format!(
            "{} is not a valid policy file (sections [allow] and [deny] with users, \
             registries, kinds, metrics; [caps] with series_per_registry, series_per_user, \
             series, bytes_per_registry, bytes_per_user, bytes)",
            path.display()
        )
    })
}

fn globs<'s>(patterns: impl Iterator<Item = &'s String>, what: &str) -> Result<Vec<Pattern>> {
    patterns
        .map(|p| {
            Pattern::new(p)
                .with_context(|| format!("{p:?} is not a valid {what} glob (use *, ? and [...])"))
        })
        .collect()
}

fn kind(name: &str) -> Result<Kind> {
    Ok(match name {
        "topdeck" => Kind::Topdeck,
        "jvm" => Kind::Jvm,
        "python" | "prometheus_client" => Kind::Python,
        "aeron" => Kind::Aeron,
        "mmv" => Kind::Mmv,
        _ => bail!(
            "{name:?} is not a source kind: use topdeck, jvm, python (prometheus_client), \
             aeron or mmv (the scheduler agent is the topdeck registry named topdeck-agent)"
        ),
    })
}

/// A user's uid, from a number or a name in the user database.
fn uid_of(user: &str) -> Result<u32> {
    if let Ok(uid) = user.parse() {
        return Ok(uid);
    }
    let name =
        std::ffi::CString::new(user).with_context(|| format!("{user:?} is not a user name"))?;
    // SAFETY: passwd is plain old data; getpwnam_r fills it.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0u8; 16 << 10];
    let mut found = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and buf's length is given.
    let rc = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 || found.is_null() {
        bail!("no user named {user:?} on this host: give a user name from /etc/passwd or a uid");
    }
    Ok(pw.pw_uid)
}

fn parse_bytes(s: &str) -> Result<usize, String> {
    let n = parse_size::parse_size(s).map_err(|e| format!("{e} (try `4MiB` or `500KB`)"))?;
    usize::try_from(n).map_err(|_| format!("{s} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_and_flags_make_one_policy_and_mistakes_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(
            &path,
            "[deny]\nusers = [\"root\", 4321]\nkinds = [\"mmv\"]\n[caps]\nseries_per_user = 7\nbytes_per_user = \"1KiB\"\n",
        )
        .unwrap();
        let args = PolicyArgs {
            policy: Some(path.clone()),
            max_series_per_user: Some(0),
            ..PolicyArgs::default()
        };
        let p = format!("{:?}", args.policy(true, 1000).unwrap());
        assert!(p.contains("uids: [0, 4321]"), "{p}");
        assert!(p.contains("series_per_user: None"), "0 is no limit: {p}");
        assert!(p.contains("bytes_per_user: Some(1024)"), "{p}");
        assert!(
            p.contains("series_per_registry: Some(2000)"),
            "default: {p}"
        );
        std::fs::write(&path, "[caps]\nseries_per_users = 7\n").unwrap();
        let e = format!("{:#}", args.policy(true, 0).unwrap_err());
        assert!(
            e.contains("not a valid policy file") && e.contains("series_per_users"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            PolicyArgs {
                deny_kind: vec!["agent".into()],
                ..PolicyArgs::default()
            }
            .policy(true, 0)
            .unwrap_err()
        );
        assert!(e.contains("topdeck-agent"), "{e}");
        let e = format!(
            "{:#}",
            PolicyArgs {
                deny_user: vec!["no-such-user-here".into()],
                ..PolicyArgs::default()
            }
            .policy(true, 0)
            .unwrap_err()
        );
        assert!(e.contains("no user named"), "{e}");
    }
}
