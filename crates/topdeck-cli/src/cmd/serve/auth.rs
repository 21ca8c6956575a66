// SPDX-License-Identifier: Apache-2.0
//! `--bearer-token-file`: a secret the fleet's scraper sends as
//! `Authorization: Bearer <token>` (Prometheus: `authorization:
//! credentials_file:`), so that `--all-users` is served to it alone and
//! not to every local user who can reach the port.
//!
//! The file is read once at start, and must be a regular file that others
//! cannot read or write: a token others can read protects nothing. Every
//! request is checked before anything else is done for it (no route, no
//! scrape, no body), in time that does not depend on how much of the
//! token a guess got right.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use hyper::header::{self, HeaderMap};

/// The longest token file read: tokens are tens of bytes.
const MAX_TOKEN_FILE: u64 = 4 << 10;

/// The token requests must carry.
///
/// ```ignore
/// let token = BearerToken::load(Path::new("/etc/topdeck/scrape.token"))?;
/// let mut h = HeaderMap::new();
/// h.insert(header::AUTHORIZATION, "Bearer s3cret".parse()?);
/// assert_eq!(token.admits(&h), token_is("s3cret"));
/// ```
pub struct BearerToken(Vec<u8>);

impl BearerToken {
    /// Reads the token from `path`: the file's contents without the
    /// whitespace around them (as Prometheus reads a `credentials_file`).
    pub fn load(path: &Path) -> Result<Self> {
        // Non-blocking, so that a FIFO named here is refused, not waited on.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .with_context(|| format!("cannot read the bearer token file {}", path.display()))?;
        // The file opened, not the path again: it cannot be swapped between.
        let meta = file.metadata()?;
        if !meta.is_file() {
            bail!(
                "the bearer token file {} is not a regular file",
                path.display()
            );
        }
        if meta.mode() & 0o006 != 0 {
            bail!(
                "the bearer token file {} is {} by others (mode {:04o}): any local user could \
                 read the token; run chmod o-rw {} (and give a copy to the scraper's user)",
                path.display(),
                if meta.mode() & 0o004 != 0 {
                    "readable"
                } else {
                    "writable"
                },
                meta.mode() & 0o7777,
                path.display()
            );
        }
        let mut bytes = Vec::new();
        file.take(MAX_TOKEN_FILE + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_TOKEN_FILE {
            bail!(
                "the bearer token file {} is over {MAX_TOKEN_FILE} bytes: it should hold one token",
                path.display()
            );
        }
        let token = bytes.trim_ascii();
        if token.is_empty() {
            bail!(
                "the bearer token file {} is empty: write a token into it, e.g. \
                 `head -c 32 /dev/urandom | base64 > {}`",
                path.display(),
                path.display()
            );
        }
        // RFC 6750's token68 is visible ASCII without spaces; anything else
        // could not be sent in a header as is.
        if !token.iter().all(|b| b.is_ascii_graphic()) {
            bail!(
                "the bearer token in {} has spaces or characters that are not visible ASCII; \
                 use letters, digits and -._~+/= (e.g. base64 of random bytes)",
                path.display()
            );
        }
        Ok(Self(token.to_vec()))
    }

    /// Whether `headers` carry the token: one `Authorization: Bearer`
    /// header whose credentials equal it.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return false;
        };
        let value = value.as_bytes();
        // The scheme is case-insensitive (RFC 9110, 11.1).
        let Some((scheme, credentials)) = value.split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && same(credentials, &self.0)
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths
/// only, not on where they first differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    // Kept from being turned into an early-exit comparison.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn token_file(contents: &str, mode: u32) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        (dir, path)
    }

    fn auth(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.append(header::AUTHORIZATION, value.parse().unwrap());
        h
    }

    #[test]
    fn only_the_token_itself_is_admitted() {
        let (_dir, path) = token_file("s3cret-T0ken\n", 0o640);
        let token = BearerToken::load(&path).unwrap();
        assert!(token.admits(&auth("Bearer s3cret-T0ken")));
        assert!(token.admits(&auth("bearer s3cret-T0ken")));
        for wrong in [
            "Bearer s3cret-T0ke",
            "Bearer s3cret-T0kenn",
            "Bearer S3cret-T0ken",
            "Basic s3cret-T0ken",
            "Bearer",
            "s3cret-T0ken",
        ] {
            assert!(!token.admits(&auth(wrong)), "{wrong}");
        }
        assert!(!token.admits(&HeaderMap::new()));
        let mut twice = auth("Bearer s3cret-T0ken");
        twice.append(header::AUTHORIZATION, "Bearer other".parse().unwrap());
        assert!(
            !token.admits(&twice),
            "one Authorization header, not a pick"
        );
    }

    #[test]
    fn a_token_file_others_can_read_or_write_is_refused() {
        for (mode, says) in [(0o644, "readable by others"), (0o602, "writable by others")] {
            let (_dir, path) = token_file("s3cret", mode);
            let e = BearerToken::load(&path).err().unwrap().to_string();
            assert!(e.contains(says) && e.contains("chmod o-rw"), "{e}");
        }
        let (_dir, path) = token_file(" \n", 0o600);
        let e = BearerToken::load(&path).err().unwrap().to_string();
        assert!(e.contains("is empty"), "{e}");
        let (_dir, path) = token_file("two words", 0o600);
        let e = BearerToken::load(&path).err().unwrap().to_string();
        assert!(e.contains("visible ASCII"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = BearerToken::load(dir.path()).err().unwrap().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }
}
