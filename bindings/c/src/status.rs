// SPDX-License-Identifier: Apache-2.0
//! Return codes, the thread-local last error, and the guard every entry
//! point runs its body in, so that no panic crosses into C.

use std::cell::RefCell;
use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use topdeck::ErrorKind;

/// What a call returned. `TD_OK` is 0; on any other value the calling
/// thread's `td_last_error()` says what happened and what to do.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum td_status {
    /// Success.
    TD_OK = 0,
    /// A NULL pointer, a string that is not UTF-8, or an index out of range.
    TD_ERR_INVALID_ARGUMENT = 1,
    /// An I/O call failed.
    TD_ERR_IO = 2,
    /// A file is not a valid topdeck file: wrong magic, corrupt, truncated.
    TD_ERR_CORRUPT = 3,
    /// A file was created by a newer, incompatible format version.
    TD_ERR_UNSUPPORTED_VERSION = 4,
    /// The writer has not finished creating the file yet.
    TD_ERR_NOT_READY = 5,
    /// The file shrank while it was mapped.
    TD_ERR_SHRUNK = 6,
    /// A namespace directory is owned by someone else or writable by others.
    TD_ERR_UNSAFE_DIRECTORY = 7,
    /// A symlink, or another user's file, where a metrics file belongs.
    TD_ERR_PLANTED = 8,
    /// A metric or label name breaks the naming rules.
    TD_ERR_INVALID_NAME = 9,
    /// The same name and labels were registered twice.
    TD_ERR_DUPLICATE = 10,
    /// The registry has no room left for another metric.
    TD_ERR_REGISTRY_FULL = 11,
    /// No registry matched the request.
    TD_ERR_NOT_FOUND = 12,
    /// Another user's private directory or file.
    TD_ERR_PERMISSION_DENIED = 13,
    /// Larger than the format or the reader's limits allow.
    TD_ERR_TOO_LARGE = 14,
    /// A bug in topdeck (a Rust panic, caught at the boundary).
    TD_ERR_INTERNAL = 15,
}

impl From<ErrorKind> for td_status {
    fn from(kind: ErrorKind) -> Self {
        use td_status::*;
        match kind {
            ErrorKind::Io => TD_ERR_IO,
            ErrorKind::Corrupt => TD_ERR_CORRUPT,
            ErrorKind::UnsupportedVersion => TD_ERR_UNSUPPORTED_VERSION,
            ErrorKind::NotReady => TD_ERR_NOT_READY,
            ErrorKind::Shrunk => TD_ERR_SHRUNK,
            ErrorKind::UnsafeDirectory => TD_ERR_UNSAFE_DIRECTORY,
            ErrorKind::Planted => TD_ERR_PLANTED,
            ErrorKind::InvalidName => TD_ERR_INVALID_NAME,
            ErrorKind::Duplicate => TD_ERR_DUPLICATE,
            ErrorKind::RegistryFull => TD_ERR_REGISTRY_FULL,
            ErrorKind::NotFound => TD_ERR_NOT_FOUND,
            ErrorKind::PermissionDenied => TD_ERR_PERMISSION_DENIED,
            ErrorKind::TooLarge => TD_ERR_TOO_LARGE,
            // ErrorKind is non-exhaustive: a kind added later is still an error.
            _ => TD_ERR_IO,
        }
    }
}

/// A failed call: its code and the message `td_last_error()` returns.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: td_status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self {
            status: td_status::TD_ERR_INVALID_ARGUMENT,
            message: message.into(),
        }
    }
}

impl From<topdeck::Error> for Failure {
    fn from(e: topdeck::Error) -> Self {
        Self {
            status: e.kind().into(),
            message: e.to_string(),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    let text = c_string(message);
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_owned());
    format!("topdeck: internal error (a panic: {what}); the call did nothing; please report it")
}

/// Runs an entry point's body: its error, or a panic, becomes a status
/// and the thread's last error.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> td_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => td_status::TD_OK,
        Ok(Err(f)) => {
            set_last_error(&f.message);
            f.status
        }
        Err(payload) => {
            set_last_error(&panic_message(payload.as_ref()));
            td_status::TD_ERR_INTERNAL
        }
    }
}

/// Runs an update that has no status to return: a panic leaves `fallback`
/// and a last error behind. The catch costs nothing on the hot path: the
/// updates cannot unwind, so no landing pad is emitted.
#[inline(always)]
pub(crate) fn quietly<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            set_last_error(&panic_message(payload.as_ref()));
            fallback
        }
    }
}

/// The message of the last failed call on this thread: the path or name
/// concerned, what happened and what to do. Never NULL; empty before any
/// failure. Valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn td_last_error() -> *const c_char {
    quietly(c"".as_ptr(), || LAST_ERROR.with(|e| e.borrow().as_ptr()))
}

/// The name of a status code, e.g. "TD_ERR_DUPLICATE" (a static string;
/// "TD_UNKNOWN" for a value that is not a `td_status`).
#[no_mangle]
pub extern "C" fn td_status_name(status: i32) -> *const c_char {
    use td_status::*;
    let all = [
        (TD_OK, c"TD_OK"),
        (TD_ERR_INVALID_ARGUMENT, c"TD_ERR_INVALID_ARGUMENT"),
        (TD_ERR_IO, c"TD_ERR_IO"),
        (TD_ERR_CORRUPT, c"TD_ERR_CORRUPT"),
        (TD_ERR_UNSUPPORTED_VERSION, c"TD_ERR_UNSUPPORTED_VERSION"),
        (TD_ERR_NOT_READY, c"TD_ERR_NOT_READY"),
        (TD_ERR_SHRUNK, c"TD_ERR_SHRUNK"),
        (TD_ERR_UNSAFE_DIRECTORY, c"TD_ERR_UNSAFE_DIRECTORY"),
        (TD_ERR_PLANTED, c"TD_ERR_PLANTED"),
        (TD_ERR_INVALID_NAME, c"TD_ERR_INVALID_NAME"),
        (TD_ERR_DUPLICATE, c"TD_ERR_DUPLICATE"),
        (TD_ERR_REGISTRY_FULL, c"TD_ERR_REGISTRY_FULL"),
        (TD_ERR_NOT_FOUND, c"TD_ERR_NOT_FOUND"),
        (TD_ERR_PERMISSION_DENIED, c"TD_ERR_PERMISSION_DENIED"),
        (TD_ERR_TOO_LARGE, c"TD_ERR_TOO_LARGE"),
        (TD_ERR_INTERNAL, c"TD_ERR_INTERNAL"),
    ];
    all.iter()
        .find(|(s, _)| *s as i32 == status)
        .map_or(c"TD_UNKNOWN".as_ptr(), |(_, name)| name.as_ptr())
}

/// A string for C: cut at an interior NUL (a hostile file's help text)
/// rather than lost.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s.split('\0').next().unwrap_or_default()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: td_last_error returns a NUL-terminated string owned by this thread.
        unsafe { CStr::from_ptr(td_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_an_internal_error_with_its_message() {
        let status = guard(|| panic!("deliberate"));
        assert_eq!(status, td_status::TD_ERR_INTERNAL);
        assert!(last().contains("deliberate"), "{}", last());
        assert_eq!(quietly(7, || panic!("again")), 7);
        assert!(last().contains("again"), "{}", last());
    }

    #[test]
    fn a_failure_sets_the_message_and_success_keeps_it() {
        let status = guard(|| Err(Failure::invalid("name is NULL\0tail")));
        assert_eq!(status, td_status::TD_ERR_INVALID_ARGUMENT);
        assert_eq!(last(), "name is NULL");
        assert_eq!(guard(|| Ok(())), td_status::TD_OK);
        assert_eq!(last(), "name is NULL");
    }

    #[test]
    fn every_status_has_its_name() {
        let name = |s: i32| {
            // SAFETY: td_status_name returns static NUL-terminated strings.
            unsafe { CStr::from_ptr(td_status_name(s)) }
                .to_str()
                .unwrap()
        };
        assert_eq!(name(0), "TD_OK");
        assert_eq!(name(td_status::TD_ERR_DUPLICATE as i32), "TD_ERR_DUPLICATE");
        assert_eq!(name(td_status::TD_ERR_INTERNAL as i32), "TD_ERR_INTERNAL");
        assert_eq!(name(99), "TD_UNKNOWN");
    }
}
