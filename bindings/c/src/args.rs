// SPDX-License-Identifier: Apache-2.0
//! Arguments from C: strings, label arrays, out-pointers and handles,
//! checked before use so that a NULL or non-UTF-8 argument is an error,
//! not undefined behaviour.

use std::ffi::{c_char, CStr};

use crate::status::Failure;

/// A label: a key and a value, both NUL-terminated UTF-8. Arrays of labels
/// go in with their length; snapshots hand them out the same way.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct td_label {
    /// Label name, Prometheus rules (`[a-zA-Z_][a-zA-Z0-9_]*`).
    pub key: *const c_char,
    /// Label value, any UTF-8.
    pub value: *const c_char,
}

/// A required string argument.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives `'a`.
pub(crate) unsafe fn text<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL; pass a string")));
    }
    // SAFETY: not NULL, and the caller promises a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|e| {
        Failure::invalid(format!(
            "{what} {:?} is not UTF-8 ({e}); pass UTF-8 text",
            s.to_string_lossy()
        ))
    })
}

/// An optional string argument: NULL gives `default`.
///
/// # Safety
/// As [`text`].
pub(crate) unsafe fn text_or<'a>(
    p: *const c_char,
    what: &str,
    default: &'a str,
) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Ok(default);
    }
    // SAFETY: the caller's promise, passed on.
    unsafe { text(p, what) }
}

/// A label array: `n` labels at `labels` (which may be NULL when `n` is 0).
///
/// # Safety
/// `labels` points to `n` readable `td_label`s whose strings outlive `'a`.
pub(crate) unsafe fn labels<'a>(
    labels: *const td_label,
    n: usize,
) -> Result<Vec<(&'a str, &'a str)>, Failure> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if labels.is_null() {
        return Err(Failure::invalid(format!(
            "labels is NULL but the label count is {n}; pass the array or a count of 0"
        )));
    }
    // SAFETY: not NULL, and the caller promises `n` readable labels.
    let all = unsafe { std::slice::from_raw_parts(labels, n) };
    all.iter()
        .enumerate()
        .map(|(i, l)| {
            // SAFETY: the caller promises NUL-terminated strings.
            let key = unsafe { text(l.key, &format!("labels[{i}].key")) }?;
            // SAFETY: as above.
            let value = unsafe { text(l.value, &format!("labels[{i}].value")) }?;
            Ok((key, value))
        })
        .collect()
}

/// Stores `value` through an out-pointer as a heap object C owns.
///
/// # Safety
/// `out` is NULL or valid for a write of one pointer.
pub(crate) unsafe fn give<T>(out: *mut *mut T, value: T) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid(
            "out is NULL; pass where to store the result",
        ));
    }
    // SAFETY: not NULL, and the caller promises it is writable.
    unsafe { out.write(Box::into_raw(Box::new(value))) };
    Ok(())
}

/// Clears an out-pointer first, so a failed call leaves NULL behind.
///
/// # Safety
/// As [`give`].
pub(crate) unsafe fn clear<T>(out: *mut *mut T) {
    if !out.is_null() {
        // SAFETY: not NULL, and the caller promises it is writable.
        unsafe { out.write(std::ptr::null_mut()) };
    }
}

/// A required handle argument.
///
/// # Safety
/// `p` is NULL or a live object this library handed out.
pub(crate) unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller's promise.
    unsafe { p.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// Frees what [`give`] handed out; NULL is ignored.
///
/// # Safety
/// `p` is NULL or came from [`give`] and was not freed before.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller's promise: a Box we leaked, freed once.
        drop(unsafe { Box::from_raw(p) });
    }
}
