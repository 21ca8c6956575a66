# SPDX-License-Identifier: Apache-2.0
"""The agent's thread-waits array (docs/FORMAT.md section 10), mapped
read-only: each thread's cumulative run-queue wait, kept by the agent's
scheduler probe and read here with plain loads. The Rust reference is
crates/topdeck/src/waits; this module follows it check for check.

Timers use it through :meth:`topdeck.Registry.timer`. Reading a slot
directly (host thread ids; differences only, while the state is LIVE):

>>> import topdeck.waits as w
>>> w.companions("http_request_seconds")
('http_request_cpu_wait_seconds', 'http_request_cpu_wait_unknown_seconds')
>>> w.open_if_pinned("/sys/fs/bpf/topdeck-doctest-nothing-here/thread_waits") is None
True
"""

import builtins
import ctypes
import os
import platform
import stat
import threading
from pathlib import PurePath

# --- the contract (topdeck_format::waits) ------------------------------

ENTRY_BYTES = 32
HEADER_ENTRIES = 2
MAGIC = int.from_bytes(b"TDWT", "little")
VERSION = 1
LIVE = 1
GONE = 2
DEFAULT_PIN = "/sys/fs/bpf/topdeck/thread_waits"
PIN_ENV = "TOPDECK_THREAD_WAITS"
WAIT_SUFFIX = "_cpu_wait_seconds"
UNKNOWN_SUFFIX = "_cpu_wait_unknown_seconds"

#: Index of the header's state word in the array's view of u64s.
STATE_WORD = 8 // 8
#: u64 words per entry: a slot's total is word (tid + HEADER_ENTRIES) * 4.
ENTRY_WORDS = ENTRY_BYTES // 8

# --- bpf(2) -------------------------------------------------------------

# The bpf system call's number; no libc wraps it. Architectures missing
# here simply get no CPU wait (the registry says why).
_SYS_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}
BPF_OBJ_GET = 7
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_MAP_TYPE_ARRAY = 2
BPF_F_MMAPABLE = 1 << 10

#: ``PROC_PID_INIT_INO``: the inode of the initial pid namespace.
INIT_PID_NS_INO = 0xEFFFFFFC


class ThreadWaitsError(OSError):
    """A pin exists but is not an array this library may use."""


class _ObjAttr(ctypes.Structure):
    """``bpf_attr`` for ``BPF_OBJ_GET``: the kernel zero-extends a shorter
    attribute, so only the fields used are spelled out."""
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32),
                ("file_flags", ctypes.c_uint32), ("path_fd", ctypes.c_int32), ("pad", ctypes.c_uint32)]


class _InfoAttr(ctypes.Structure):
    """``bpf_attr`` for ``BPF_OBJ_GET_INFO_BY_FD``."""
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]


class _MapInfo(ctypes.Structure):
    """The head of ``struct bpf_map_info``: what the checks need."""
    _fields_ = [("map_type", ctypes.c_uint32), ("id", ctypes.c_uint32), ("key_size", ctypes.c_uint32),
                ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32),
                ("map_flags", ctypes.c_uint32)]


_libc = None


def _bpf(cmd, attr):
    """``bpf(cmd, &attr, sizeof attr)``: the result, or OSError with errno."""
    global _libc
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise ThreadWaitsError(f"no bpf(2) system call number known for {platform.machine()}")
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    r = _libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), ctypes.byref(attr),
                      ctypes.c_uint(ctypes.sizeof(attr)))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r


def _obj_get(path):
    """``BPF_OBJ_GET`` with flags 0: a read-write descriptor (a read-only
    one cannot be mapped shared, FORMAT.md section 10)."""
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise ThreadWaitsError(f"{path}: the pin's path holds a NUL byte")
    buf = ctypes.create_string_buffer(raw)
    return _bpf(BPF_OBJ_GET, _ObjAttr(pathname=ctypes.addressof(buf)))


def _map_info(fd):
    info = _MapInfo()
    _bpf(BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(bpf_fd=fd, info_len=ctypes.sizeof(info),
                                           info=ctypes.addressof(info)))
    return info


# --- opening ------------------------------------------------------------

def pin_from_env():
    """The pin a writer looks at: ``TOPDECK_THREAD_WAITS`` if set (``off``:
    none), else the default."""
    v = os.environ.get(PIN_ENV, "")
    if v == "off":
        return None
    return v or DEFAULT_PIN


def companions(name):
    """The wait and unknown-wait histograms of a timer ``name``, named from
    it without a trailing ``_seconds``."""
    base = name[: -len("_seconds")] if name.endswith("_seconds") else name
    return base + WAIT_SUFFIX, base + UNKNOWN_SUFFIX


class ThreadWaits:
    """The array mapped ``PROT_READ, MAP_SHARED``. Reads are loads of a
    ``memoryview`` of u64s over the mapping: no system call after
    :func:`open`. ``q`` is that view (a timer indexes it directly)."""

    __slots__ = ("path", "id", "entries", "tids", "q", "_u32", "_mm")

    def __init__(self, path, mm, info):
        self.path, self._mm = path, mm
        self.id = info.id
        self.entries = info.max_entries
        #: Host thread ids below this have a slot.
        self.tids = self.entries - HEADER_ENTRIES
        mv = memoryview(mm)
        self.q, self._u32 = mv.cast("Q"), mv.cast("I")

    def state(self):
        """``LIVE``, ``GONE`` or 0 (not set up yet), read now."""
        return self.q[STATE_WORD]

    def started_ns(self):
        return self.q[2]

    def agent_pid(self):
        return self._u32[7]

    def slot_total(self, tid):
        """Host thread ``tid``'s cumulative wait in ns (one load), or None
        past the last slot. Slots only grow and a reused id carries on its
        predecessor's sum: take differences, while the state stays LIVE."""
        if 0 <= tid < self.tids:
            return self.q[(tid + HEADER_ENTRIES) * ENTRY_WORDS]
        return None

    def __repr__(self):
        return f"<ThreadWaits {self.path} id={self.id} tids={self.tids} state={self.state()}>"


def open(path):
    """Maps the array pinned at ``path``. FileNotFoundError when nothing is
    pinned there; ThreadWaitsError for a pin in a directory others could
    write, a map of the wrong shape, or a header of another magic or
    version (all as the Rust library refuses them)."""
    import mmap

    path = os.fspath(path)
    _check_dir(path)
    try:
        fd = _obj_get(path)
    except ThreadWaitsError:
        raise
    except OSError as e:
        raise _open_error(path, e) from None
    try:
        try:
            info = _map_info(fd)
        except OSError as e:
            raise ThreadWaitsError(f"{path}: cannot ask the kernel what this BPF object is: "
                                   f"{e.strerror}") from None
        _check_info(path, info)
        try:
            mm = mmap.mmap(fd, info.max_entries * ENTRY_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        except OSError as e:
            raise ThreadWaitsError(f"{path}: cannot map the thread-waits array: {e.strerror}") from None
    finally:
        # The mapping holds the map; this descriptor is not needed any more.
        os.close(fd)
    waits = ThreadWaits(path, mm, info)
    _check_header(waits)
    return waits


def open_if_pinned(path):
    """As :func:`open`, None when nothing is pinned there."""
    try:
        return open(path)
    except FileNotFoundError:
        return None


def from_env():
    """``(array or None, problem or None)`` for the pin the environment
    names: no array and no problem for ``off`` or no pin; no array and
    why when a pin exists but cannot be used."""
    pin = pin_from_env()
    if pin is None:
        return None, None
    return open_checked(pin)


def open_checked(pin):
    """``(array or None, problem or None)`` for ``pin``, as :func:`from_env`."""
    try:
        return open_if_pinned(pin), None
    except OSError as e:
        return None, str(e)


def _check_dir(path):
    """The pin's directory must be root's and writable by root only: in any
    other, another user could have pinned an array of their own there (and
    fed every timer invented waits). Ancestors must be root's too, or
    sticky (as bpffs's root is), so the directory cannot be swapped."""
    d = PurePath(os.path.dirname(path) or ".")
    strict = True
    for a in (d, *d.parents):
        try:
            st = os.stat(a)
        except FileNotFoundError:
            if strict:
                raise FileNotFoundError(f"{path}: no thread-waits array: its directory does not exist") \
                    from None
            raise ThreadWaitsError(f"{path}: cannot check the thread-waits pin's directory: {a} is missing") \
                from None
        except OSError as e:
            raise ThreadWaitsError(f"{path}: cannot check the thread-waits pin's directory {a}: "
                                   f"{e.strerror}") from None
        writable_by_others = st.st_mode & 0o022
        sticky = st.st_mode & stat.S_ISVTX
        if st.st_uid != 0 or (writable_by_others and (strict or not sticky)):
            raise ThreadWaitsError(
                f"{path}: refusing the thread-waits array: {a} is owned by uid {st.st_uid} with mode "
                f"{stat.S_IMODE(st.st_mode):o}, so another user could have pinned it; the agent pins "
                f"it in a root-owned 0755 directory: fix the directory or point {PIN_ENV} elsewhere")
        strict = False


def _open_error(path, e):
    if isinstance(e, FileNotFoundError) or e.errno == 2:
        return FileNotFoundError(e.errno, f"{path}: cannot open the pinned thread-waits array: "
                                 f"{e.strerror}; is the agent running (`topdeck agent`)?")
    if e.errno in (1, 13):  # EPERM, EACCES
        hint = "the agent pins it with mode 0666: check the pin's mode and any LSM policy"
    else:
        hint = "is it a pin on a bpffs mount, made by `topdeck agent`?"
    return ThreadWaitsError(e.errno, f"{path}: cannot open the pinned thread-waits array: "
                            f"{e.strerror}; {hint}")


def _check_info(path, info):
    if info.map_type != BPF_MAP_TYPE_ARRAY:
        problem = f"map type {info.map_type}, not an array"
    elif info.value_size != ENTRY_BYTES:
        problem = f"value size {info.value_size} bytes, not {ENTRY_BYTES}"
    elif not info.map_flags & BPF_F_MMAPABLE:
        problem = "created without BPF_F_MMAPABLE, so it cannot be mapped"
    elif info.max_entries <= HEADER_ENTRIES:
        problem = f"{info.max_entries} entries, too few for the header"
    else:
        return
    raise ThreadWaitsError(f"{path}: not a topdeck thread-waits array: {problem}; point {PIN_ENV} "
                           "at the agent's pin (`topdeck agent --thread-waits`)")


def _check_header(w):
    """A header not written yet (all zero) is accepted as not set up; one
    of another magic or version is refused."""
    magic, version = w._u32[0], w._u32[1]
    if magic == 0 and version == 0 and w.state() == 0:
        return
    if magic != MAGIC:
        raise ThreadWaitsError(f"{w.path}: not a topdeck thread-waits array (magic {magic:#010x}, want "
                               f"{MAGIC:#010x}); point {PIN_ENV} at the agent's pin "
                               "(`topdeck agent --thread-waits`)")
    if version != VERSION:
        raise ThreadWaitsError(f"{w.path}: thread-waits array version {version}, this library reads "
                               f"{VERSION}; run an agent and a library of the same release")


# --- the calling thread's host thread id --------------------------------

#: Returned for a thread with no host id this process can learn: past
#: every array's last slot, so it simply has none.
NO_TID = 1 << 32


class _Tids:
    """Per-thread cache of the host id (``local.tid``), and whether the
    process is in the initial pid namespace. Both are forgotten in a
    forked child, whose one thread has a new id (and whose namespace
    ``unshare`` may have changed)."""

    __slots__ = ("local", "in_initial_ns")

    def __init__(self):
        self.forget()

    def forget(self):
        self.local = threading.local()
        self.in_initial_ns = None


TIDS = _Tids()
os.register_at_fork(after_in_child=TIDS.forget)


def host_tid():
    """The calling thread's host thread id, or :data:`NO_TID`: looked up
    once per thread (a system call or a /proc read), then one attribute
    load."""
    try:
        return TIDS.local.tid
    except AttributeError:
        t = _find_tid()
        TIDS.local.tid = t
        return t


def slot_word():
    """The index in an array's u64 view of the calling thread's slot's total
    (past every array for a thread without a host id): computed once per
    thread and kept in ``TIDS.local.word``, which timers read directly."""
    try:
        return TIDS.local.word
    except AttributeError:
        w = (host_tid() + HEADER_ENTRIES) * ENTRY_WORDS
        TIDS.local.word = w
        return w


def _find_tid():
    """``gettid()`` in the initial pid namespace; else the first field of
    ``NSpid`` when the kernel lists more than one (the outermost namespace
    /proc shows); else none."""
    if TIDS.in_initial_ns is None:
        try:
            TIDS.in_initial_ns = os.stat("/proc/self/ns/pid").st_ino == INIT_PID_NS_INO
        except OSError:
            TIDS.in_initial_ns = False
    if TIDS.in_initial_ns:
        return threading.get_native_id()
    try:
        with builtins.open("/proc/thread-self/status") as f:
            t = nspid_outermost(f.read())
    except OSError:
        t = None
    return NO_TID if t is None else t


def nspid_outermost(status):
    """The first id on the ``NSpid:`` line of a status file, when it has
    more than one (one id means /proc shows only the thread's own
    namespace).

    >>> nspid_outermost("Name:\\tx\\nNSpid:\\t4242\\t7\\n"), nspid_outermost("NSpid:\\t4242\\n")
    (4242, None)
    >>> nspid_outermost("Pid:\\t1\\n"), nspid_outermost("NSpid:\\tx\\t7\\n")
    (None, None)
    """
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            ids = line[len("NSpid:"):].split()
            if len(ids) < 2:
                return None
            try:
                return int(ids[0])
            except ValueError:
                return None
    return None



# --- a registry's array, shared by its timers ---------------------------

class WaitSource:
    """The array a registry's timers read (``current``), replaced by the
    one a restarted agent pins: looked for at most once a second, from a
    timer's end that found the agent gone. No thread, no periodic work,
    no system call otherwise. A replaced array stays mapped while a timer
    begun on it still holds its view."""

    __slots__ = ("current", "view", "pin", "_last_look", "_lock")

    def __init__(self, waits):
        self.pin = waits.path
        self._use(waits)
        self._last_look = None
        self._lock = threading.Lock()

    def _use(self, waits):
        self.current = waits
        #: ``(u64 view, first word past the last slot)``, read by timers
        #: in one load, compared with :func:`slot_word`'s index.
        self.view = (waits.q, (waits.tids + HEADER_ENTRIES) * ENTRY_WORDS)

    def look_again(self):
        """The agent is not live: opens the pin again if a second has
        passed since the last look, and uses what it finds if that is
        another array."""
        import time

        now = time.monotonic()
        last = self._last_look
        if last is not None and now - last < 1.0:
            return
        # One thread looks; the others carry on without waiting.
        if not self._lock.acquire(blocking=False):
            return
        try:
            if self._last_look is not last:
                return  # another thread looked meanwhile
            self._last_look = now
            try:
                new = open_if_pinned(self.pin)
            except OSError:
                return
            if new is not None and new.id != self.current.id:
                self._use(new)
        finally:
            self._lock.release()

    def after_fork_in_child(self):
        # A lock held by a thread that does not exist in the child would
        # stop every later look.
        self._lock = threading.Lock()
