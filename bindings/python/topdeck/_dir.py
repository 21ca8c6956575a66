# SPDX-License-Identifier: Apache-2.0
"""The writer's namespace directory (docs/FORMAT.md section 1,
docs/SECURITY.md): opened once without following links, checked through
its descriptor, and every later operation relative to that descriptor."""

import ctypes
import ctypes.util
import errno
import grp
import os
import secrets
import stat
import sys

ENV_DIR = "TOPDECK_DIR"
ENV_GROUP = "TOPDECK_GROUP"
SHM_ROOT = "/dev/shm"
PRIVATE_DIR, GROUP_DIR = 0o700, 0o750
PRIVATE_FILE, GROUP_FILE = 0o600, 0o640


class UnsafeDirectory(OSError):
    """The directory is a symlink, someone else's, or writable by others."""


def explicit_dir():
    return os.environ.get(ENV_DIR) or None


def env_group():
    """The gid ``TOPDECK_GROUP`` names (a group name or a gid), if set."""
    g = os.environ.get(ENV_GROUP)
    if not g:
        return None
    if g.isdigit():
        return int(g)
    try:
        return grp.getgrnam(g).gr_gid
    except KeyError:
        raise ValueError(f"{ENV_GROUP}={g}: no such group; give a group name from /etc/group or a gid") from None


def _open_checked(path, owner):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeDirectory(e.errno, _unsafe(path, "it is a symlink or not a directory")) from None
        raise
    st = os.fstat(fd)
    why = None
    if owner is not None and st.st_uid != owner:
        why = f"owned by uid {st.st_uid}, expected uid {owner}"
    elif st.st_mode & 0o022:
        why = f"mode {stat.S_IMODE(st.st_mode):o} lets others write in it"
    if why:
        os.close(fd)
        raise UnsafeDirectory(errno.EPERM, _unsafe(path, why))
    return fd


def _unsafe(path, why):
    return (f"{path}: unsafe namespace directory: {why}. topdeck uses only directories that are not "
            "symlinks, belong to their user and are writable by nobody else, and touched nothing in it: "
            f"find out who made it (`ls -ld {path}`) before changing it, or point {ENV_DIR} at a "
            "directory of your own")


def _create_and_open(path, owner):
    try:
        os.mkdir(path, PRIVATE_DIR)
    except FileExistsError:
        pass
    except OSError as e:
        raise OSError(e.errno, f"{path}: cannot create the namespace directory ({e.strerror}); "
                      f"create it, or point {ENV_DIR} at a directory you own") from None
    return _open_checked(path, owner)


def _set_sharing(fd, path, group):
    st = os.fstat(fd)
    want = PRIVATE_DIR
    if group is not None:
        want = GROUP_DIR
        if st.st_gid != group:
            os.fchown(fd, -1, group)
    if stat.S_IMODE(st.st_mode) != want:
        os.fchmod(fd, want)


def prepare(explicit=None, group=None):
    """Opens (creating if needed) the directory this writer publishes in:
    ``explicit``, else ``TOPDECK_DIR``, else ``/dev/shm/topdeck-<euid>``, or a
    private fallback ``/dev/shm/topdeck-<euid>.<tag>`` when someone else
    squats the default (said on stderr). Returns ``(fd, path)``."""
    uid = os.geteuid()
    path = explicit or explicit_dir()
    if path:
        path = os.fspath(path)
        fd = _create_and_open(path, None if _named_uid(path) is not None else uid)
    else:
        path = f"{SHM_ROOT}/topdeck-{uid}"
        try:
            fd = _create_and_open(path, uid)
        except UnsafeDirectory as e:
            fd, path = _fallback(uid)
            print(f"topdeck: {e.strerror}; publishing in {path} instead, where topdeck's readers look too",
                  file=sys.stderr)
    _set_sharing(fd, path, group)
    return fd, path


def _named_uid(path):
    """The uid ``/dev/shm/topdeck-<uid>[.<tag>]`` carries, else None."""
    parent, name = os.path.split(os.path.abspath(path))
    if parent != SHM_ROOT or not name.startswith("topdeck-"):
        return None
    uid, _, tag = name[len("topdeck-"):].partition(".")
    if not uid.isdigit() or (_ and not (tag.isascii() and tag.isalnum())):
        return None
    return int(uid)


def _fallback(uid):
    for name in sorted(os.listdir(SHM_ROOT)):
        if name.startswith(f"topdeck-{uid}.") and _named_uid(f"{SHM_ROOT}/{name}") == uid:
            try:
                return _open_checked(f"{SHM_ROOT}/{name}", uid), f"{SHM_ROOT}/{name}"
            except OSError:
                continue
    for _ in range(16):
        path = f"{SHM_ROOT}/topdeck-{uid}.{secrets.token_hex(6)}"
        try:
            os.mkdir(path, PRIVATE_DIR)
        except FileExistsError:
            continue
        return _open_checked(path, uid), path
    raise OSError(errno.EEXIST, f"cannot create a fallback directory under {SHM_ROOT}")


_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_renameat2 = getattr(_libc, "renameat2", None)
_RENAME_NOREPLACE = 1


def rename_noreplace(dir_fd, old, new):
    """Renames without replacing anything: ``renameat2(RENAME_NOREPLACE)``,
    else (an old libc, or a file system without it) a hard link, which never
    replaces either, and an unlink of the old name."""
    if _renameat2 is not None:
        rc = _renameat2(dir_fd, old.encode(), dir_fd, new.encode(), _RENAME_NOREPLACE)
        if rc == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOSYS):
            raise OSError(err, f"cannot publish the registry file {new}: {os.strerror(err)}")
    os.link(old, new, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    os.unlink(old, dir_fd=dir_fd)
