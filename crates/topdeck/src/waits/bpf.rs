// SPDX-License-Identifier: Apache-2.0
//! The few bpf(2) commands the thread-waits array needs, as raw system
//! calls: no libbpf in a library every metrics writer links. Each command
//! gets its own `#[repr(C)]` prefix of `union bpf_attr`; the kernel zero-
//! extends a shorter attribute, so only the fields used are spelled out.

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

pub(crate) const BPF_MAP_TYPE_ARRAY: u32 = 2;
/// The array's values can be mapped into user space.
pub(crate) const BPF_F_MMAPABLE: u32 = 1 << 10;

#[cfg(any(test, feature = "testing"))]
const BPF_MAP_CREATE: libc::c_int = 0;
#[cfg(any(test, feature = "testing"))]
const BPF_OBJ_PIN: libc::c_int = 6;
const BPF_OBJ_GET: libc::c_int = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;

/// `bpf_attr` for `BPF_OBJ_PIN` / `BPF_OBJ_GET`.
#[repr(C)]
#[derive(Default)]
struct ObjAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
    path_fd: i32,
    _pad: u32,
}

/// `bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The head of `struct bpf_map_info`: what the reader checks.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct MapInfo {
    pub(crate) map_type: u32,
    pub(crate) id: u32,
    pub(crate) key_size: u32,
    pub(crate) value_size: u32,
    pub(crate) max_entries: u32,
    pub(crate) map_flags: u32,
}

/// `bpf(cmd, attr, sizeof attr)`; a new descriptor or 0 on success.
fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised `#[repr(C)]` prefix of `union
    // bpf_attr` of the size passed; pointers inside it are valid for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))
}

/// `BPF_OBJ_GET` with flags 0: a read-write descriptor (a read-only one
/// cannot be mapped shared, FORMAT.md §10).
pub(crate) fn obj_get(path: &Path) -> io::Result<OwnedFd> {
    let p = c_path(path)?;
    let mut attr = ObjAttr {
        pathname: p.as_ptr() as u64,
        ..Default::default()
    };
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// What the kernel says the map behind `fd` is.
pub(crate) fn map_info(fd: RawFd) -> io::Result<MapInfo> {
    let mut info = MapInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: fd as u32,
        info_len: std::mem::size_of::<MapInfo>() as u32,
        info: &mut info as *mut MapInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info)
}

/// `BPF_MAP_CREATE` of an array (tests build a real one).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn create_array(value_size: u32, entries: u32, flags: u32) -> io::Result<OwnedFd> {
    #[repr(C)]
    #[derive(Default)]
    struct CreateAttr {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        map_flags: u32,
        inner_map_fd: u32,
        numa_node: u32,
        map_name: [u8; 16],
    }
    let mut attr = CreateAttr {
        map_type: BPF_MAP_TYPE_ARRAY,
        key_size: 4,
        value_size,
        max_entries: entries,
        map_flags: flags,
        ..Default::default()
    };
    attr.map_name[..9].copy_from_slice(b"td_waits\0");
    let fd = bpf(BPF_MAP_CREATE, &mut attr)?;
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `BPF_OBJ_PIN` of `fd` at `path`.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn pin(fd: RawFd, path: &Path) -> io::Result<()> {
    let p = c_path(path)?;
    let mut attr = ObjAttr {
        pathname: p.as_ptr() as u64,
        bpf_fd: fd as u32,
        ..Default::default()
    };
    bpf(BPF_OBJ_PIN, &mut attr).map(drop)
}
