# SPDX-License-Identifier: Apache-2.0
"""Byte-range locks between the processes that share one registry file: a
parent and the workers it forked (bindings/python/README.md, "Files, fork
and exit").

Open-file-description locks (``F_OFD_SETLK``, Linux 3.15): owned by the
open file description they were taken through, so each process takes them
through a description of its own (:func:`reopen`), and the kernel drops
them when the last descriptor of it closes, which a process's end does
however it ends (``os._exit``, SIGKILL). Unlike ``lockf``'s process
locks, closing another descriptor of the same file (a reader in the same
process) leaves them alone. A lock covers one byte, at the offset of what
it guards: a shard's first byte claims the shard, a gauge's first byte
guards its read-modify-write, ``desc_count``'s byte guards registration.
These are ``fcntl`` locks, apart from the ``flock`` readers probe for
liveness; readers look only at ``flock`` lines of /proc/locks.
"""

import errno
import fcntl
import os
import struct

# Python 3.9 names them; Linux's values (asm-generic/fcntl.h) otherwise.
SETLK = getattr(fcntl, "F_OFD_SETLK", 37)
SETLKW = getattr(fcntl, "F_OFD_SETLKW", 38)
_FLOCK = struct.Struct("@hhqqi")
_PAD = bytes(-_FLOCK.size % 8)


def _flock(kind, offset):
    # l_pid must be 0 for OFD locks; the padding makes sizeof(struct flock).
    return _FLOCK.pack(kind, os.SEEK_SET, offset, 1, 0) + _PAD


def reopen(fd):
    """A new open file description of the file ``fd`` is open on (even
    unlinked), close-on-exec, for this process's locks alone."""
    return os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)


def try_lock(fd, offset):
    """Takes the byte at ``offset`` if no other description holds it."""
    try:
        fcntl.fcntl(fd, SETLK, _flock(fcntl.F_WRLCK, offset))
        return True
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise


def lock(fd, offset):
    """Takes the byte at ``offset``, waiting for whoever holds it."""
    fcntl.fcntl(fd, SETLKW, _flock(fcntl.F_WRLCK, offset))


def unlock(fd, offset):
    fcntl.fcntl(fd, SETLK, _flock(fcntl.F_UNLCK, offset))
