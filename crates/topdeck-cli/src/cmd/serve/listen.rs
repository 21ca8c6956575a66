// SPDX-License-Identifier: Apache-2.0
//! Where `topdeck serve` listens: a TCP address, or a Unix socket that only
//! its owner (or one group) may connect to, so that `--all-users` can be
//! served to the fleet's scraper alone (loopback is open to every local
//! user).
//!
//! The socket is made so that it is never connectable by more than it
//! should be, not even for a moment: it is bound in a fresh private
//! directory beside its path, given its mode and group there, and only then
//! renamed into place (never over an existing name). An existing name is
//! refused unless it is a socket of ours that nothing listens on (a serve
//! that was killed), which is removed.

use std::fmt;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::task::{Context, Poll};

use anyhow::{anyhow, bail, Context as _, Result};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// Where to listen: `HOST:PORT`, or `unix:/path/to/socket`.
///
/// ```ignore
/// let unix: Listen = "unix:/run/topdeck/metrics.sock".parse().unwrap();
/// assert_eq!(unix, Listen::Unix("/run/topdeck/metrics.sock".into()));
/// let tcp: Listen = "127.0.0.1:9464".parse().unwrap();
/// assert_eq!(tcp.to_string(), "127.0.0.1:9464");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address.
    Tcp(std::net::SocketAddr),
    /// The path of a Unix socket.
    Unix(PathBuf),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            let path = Path::new(path);
            if !path.is_absolute() || path.file_name().is_none() {
                return Err(format!(
                    "{s}: a Unix socket is named by an absolute path, e.g. unix:/run/topdeck/metrics.sock"
                ));
            }
            return Ok(Self::Unix(path.to_owned()));
        }
        s.parse().map(Self::Tcp).map_err(|_| {
            format!(
                "{s}: expected an address and port (127.0.0.1:9464, [::1]:9464) \
                 or unix:/path/to/socket"
            )
        })
    }
}

impl fmt::Display for Listen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tcp(addr) => addr.fmt(f),
            Self::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// A listening socket whose connections `serve` accepts.
pub trait Listener {
    /// One accepted connection.
    type Stream: AsyncRead + AsyncWrite + AsRawFd + Unpin + Send + 'static;

    /// Accepts a connection, as the tokio listener's `poll_accept`.
    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<Self::Stream>>;
}

impl Listener for TcpListener {
    type Stream = TcpStream;

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<TcpStream>> {
        self.poll_accept(cx).map_ok(|(stream, _)| {
            // A scrape's response is written whole: no reason to wait for
            // acknowledgements between its segments.
            let _ = stream.set_nodelay(true);
            stream
        })
    }
}

impl Listener for UnixListener {
    type Stream = UnixStream;

    fn poll_next(&self, cx: &mut Context<'_>) -> Poll<io::Result<UnixStream>> {
        self.poll_accept(cx).map_ok(|(stream, _)| stream)
    }
}

/// Makes the Unix socket `path`, mode `0600`, or `0660` with group `group`
/// (which must be the caller's, or the caller root), and listens on it.
/// Must be called within a tokio runtime.
pub fn bind_unix(path: &Path, group: Option<u32>) -> Result<UnixListener> {
    let parent = path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent directory", path.display()))?;
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{} names no file", path.display()))?;
    remove_stale(path)?;
    // Bound where no one else can reach it, then moved into place.
    let private = parent.join(format!(
        ".{}.{}.topdeck",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .with_context(|| {
            format!(
                "cannot make {} to create the socket in: {} must exist and be writable by this user",
                private.display(),
                parent.display()
            )
        })?;
    let made = private.join(name);
    let result = (|| {
        let listener = UnixListener::bind(&made)?;
        let mode = match group {
            Some(gid) => {
                std::os::unix::fs::chown(&made, None, Some(gid))?;
                0o660
            }
            None => 0o600,
        };
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(mode))?;
        rename_noreplace(&made, path)?;
        Ok::<_, io::Error>(listener)
    })();
    let _ = std::fs::remove_file(&made);
    let _ = std::fs::remove_dir(&private);
    result.map_err(|e| match (e.raw_os_error(), group) {
        (Some(libc::EEXIST), _) => anyhow!(
            "{} appeared while the socket was being made; is another serve starting there?",
            path.display()
        ),
        (Some(libc::EPERM), Some(gid)) => anyhow!(
            "cannot give {} to group {gid}: {e}; name a group this user is in (or run as root)",
            path.display()
        ),
        _ => anyhow!("cannot make the socket {}: {e}", path.display()),
    })
}

/// Removes `path` if it is a socket of this user's that nothing listens on
/// (left by a serve that was killed); refuses anything else there.
fn remove_stale(path: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => bail!("cannot look at {}: {e}", path.display()),
        Ok(m) => m,
    };
    if !meta.file_type().is_socket() {
        bail!(
            "{} exists and is not a socket; serve never replaces a file: \
             remove it if it is yours, or choose another path",
            path.display()
        );
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        bail!(
            "{} is a socket of uid {}, not this user's (uid {me}); \
             serve replaces only its own: choose another path",
            path.display(),
            meta.uid()
        );
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => bail!(
            "{} is in use: another serve listens on it (stop it first, or choose another path)",
            path.display()
        ),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            std::fs::remove_file(path)
                .with_context(|| format!("cannot remove the stale socket {}", path.display()))?;
            Ok(())
        }
        Err(e) => bail!("cannot tell whether {} is in use: {e}", path.display()),
    }
}

/// Renames `from` to `to`, failing with `EEXIST` rather than replacing
/// whatever was made there meanwhile.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: both paths are NUL-terminated and live for the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_is_an_address_or_an_absolute_unix_path() {
        let unix: Listen = "unix:/run/topdeck/metrics.sock".parse().unwrap();
        assert_eq!(unix, Listen::Unix("/run/topdeck/metrics.sock".into()));
        assert_eq!(unix.to_string(), "unix:/run/topdeck/metrics.sock");
        let tcp: Listen = "[::1]:9464".parse().unwrap();
        assert_eq!(tcp.to_string(), "[::1]:9464");
        let relative = "unix:metrics.sock".parse::<Listen>().unwrap_err();
        assert!(relative.contains("absolute path"), "{relative}");
        let host = "localhost:9464".parse::<Listen>().unwrap_err();
        assert!(host.contains("unix:/path/to/socket"), "{host}");
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap()
    }

    #[test]
    fn the_socket_is_private_and_only_a_stale_one_of_ours_is_replaced() {
        let rt = runtime();
        let _in = rt.enter();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.sock");
        let listener = bind_unix(&path, None).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o777, 0o600);
        // Listening: refused, and left alone.
        let busy = bind_unix(&path, None).unwrap_err().to_string();
        assert!(busy.contains("is in use"), "{busy}");
        // Killed serve: its socket stays with nothing behind it.
        drop(listener);
        bind_unix(&path, None).expect("a stale socket of ours is replaced");
        // Nothing left behind in the directory but the socket.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["metrics.sock"]);

        let file = dir.path().join("file");
        std::fs::write(&file, "keep me").unwrap();
        let refused = bind_unix(&file, None).unwrap_err().to_string();
        assert!(refused.contains("is not a socket"), "{refused}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let refused = bind_unix(&link, None).unwrap_err().to_string();
        assert!(refused.contains("is not a socket"), "{refused}");
    }
}
