# SPDX-License-Identifier: Apache-2.0
"""The writer: a registry file created as docs/FORMAT.md section 1 says,
metrics registered in it, and handles that update it in place."""

import atexit
import errno
import fcntl
import mmap
import os
import signal
import struct
import sys
import threading
import time
import weakref
from bisect import bisect_left
from time import perf_counter

from . import _dir, _format as F, _ofd, _shards, waits as _waits
from .exponential import buckets as make_buckets, ordered_bits, upper_bound

MASK = (1 << 64) - 1
_MISSING = object()
_seq = 0
_seq_lock = threading.Lock()
_live = weakref.WeakSet()
#: Registries made lazily (the default one) and not yet opened: opened
#: before a fork, so that the workers count into one file.
_lazy_registries = weakref.WeakSet()


def _start_ticks():
    """Field 22 of /proc/self/stat: this process's start, in ticks since boot."""
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2:].split()[19])


def _process_name():
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if name.startswith("-"):  # python -c / -m
        name = ""
    if not name:
        try:
            with open("/proc/self/comm") as f:
                name = f.read().strip()
        except OSError:
            name = "python"
    return name


def _whole(amount):
    """A counter's increment: a whole number from 0 to 2^64-1, the format's
    counter word; anything else is refused as ``inc(-1)`` is."""
    if isinstance(amount, float) and amount.is_integer():
        amount = int(amount)
    if not isinstance(amount, int):
        raise TypeError(f"a counter counts whole events; got {amount!r}")
    if amount < 0:
        raise ValueError(f"counters only go up; got {amount}: use a Gauge for values that go down")
    if amount > MASK:
        raise ValueError(f"a counter's increment must be below 2**64; got {amount}: "
                         "count in a larger unit, or split the amount")
    return amount


def _saturating(total):
    """A count word past 2^64-1 stays at 2^64-1 (docs/FORMAT.md section 7):
    a counter stops rather than wrapping to a small value, backwards."""
    return total if total <= MASK else MASK


class _Views:
    """Where updates go: the file's word views and this registry's
    per-thread shard bases. Closures hold this object, not the views, so
    that after fork every handle (and every ``inc`` a caller kept) finds
    the child's own shard bases (or, where the child cannot share the
    parent's file, its private memory)."""

    __slots__ = ("q", "d", "local")


class Registry:
    """One registry file, normally one per process.

    Creates ``<pid>-<start>-<seq>.topdeck`` in ``dir`` (default:
    ``TOPDECK_DIR``, else ``/dev/shm/topdeck-<euid>``), private to its owner
    (0600 in a 0700 directory) unless ``group`` (or ``TOPDECK_GROUP``)
    names a readers' group (0640 in 0750). Registering takes a lock;
    updating through the handles takes none (gauge increments and threads
    past ``shards`` excepted).

    After ``os.fork`` the child keeps writing into this file, as
    prometheus_client's multiprocess users expect of their workers: its
    threads write shards of their own (claimed with locks the kernel drops
    when the process ends), a series it registers that the parent or
    another worker already registered is the same series, and what it
    counted stays in the totals however it ends (a clean exit,
    ``os._exit``, SIGKILL), with no file of its own. A gauge is one value
    for the parent and its workers: ``set`` from any of them is the value
    until the next, ``inc``/``dec`` add to it, and what an ended worker
    added stays (prometheus_client's ``mostrecent`` and ``sum``, not
    ``livesum``). ``close()``, a clean exit (``atexit``) and SIGTERM
    where it has its default action remove the file once no other process
    of the family holds it; if the last of them ends by ``os._exit`` or
    SIGKILL the one file stays, dead, until ``topdeck gc``
    (``tests/test_fork_model.py``).

    ``thread_waits``: where the agent's thread-waits array is pinned, for
    the CPU wait of :meth:`timer`'s requests; ``None`` (the default) reads
    ``TOPDECK_THREAD_WAITS``, else ``/sys/fs/bpf/topdeck/thread_waits``;
    ``"off"`` for none. Mapped here, once; a pin that exists but cannot be
    used leaves timers as they are, and ``thread_waits_problem`` says why.

    >>> import tempfile
    >>> r = Registry(dir=tempfile.mkdtemp())
    >>> hits = r.counter("cache_hits_total", help="Cache hits.")
    >>> hits.inc()
    >>> r.close()
    """

    def __init__(self, name="main", dir=None, *, group=None, metrics=4096, string_bytes=256 << 10,
                 gauge_bytes=32 << 10, shard_bytes=1 << 20, shards=16, thread_waits=None, _lazy=False):
        self._layout = F.Layout(metrics, string_bytes, gauge_bytes, shard_bytes, shards)
        self._name = name
        self._dir_arg = dir
        self._group = group
        self._lock = threading.Lock()
        self._glock = threading.Lock()
        self._handles = []
        self._seen = set()
        self._count = self._strings_used = self._shared_used = self._shard_used = 0
        self._mm = None
        self._path = None
        self._views = _Views()
        # Forked processes share the file: `_shared` once this one has (or
        # was) forked, `_lfd` the description its locks are taken through,
        # `_slots` this process's shards (pool index -> shard), `_index` the
        # series other processes registered, `_synced` descriptors known.
        self._shared = False
        self._lfd = None
        self._slots = {}
        self._index = {}
        self._synced = 0
        self._unshareable = None
        self._waits, self._waits_problem = _open_waits(thread_waits)
        if _lazy:
            _lazy_registries.add(self)
        else:
            self._ensure_open()

    # --- the file -------------------------------------------------------

    @property
    def path(self):
        """The file this registry publishes (created now if still lazy)."""
        self._ensure_open()
        return self._path

    def _ensure_open(self):
        if self._mm is None:
            with self._lock:
                if self._mm is None:
                    self._create()

    def _create(self):
        global _seq
        group = self._group if self._group is not None else _dir.env_group()
        dfd, dpath = _dir.prepare(self._dir_arg, group)
        try:
            self._publish(dfd, dpath, group)
        except BaseException:
            os.close(dfd)
            raise
        _live.add(self)
        _remove_on_sigterm()

    def _publish(self, dfd, dpath, group):
        global _seq
        lay = self._layout
        pid, start = os.getpid(), _start_ticks()
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(1000):
            with _seq_lock:
                stem = f"{pid}-{start}-{_seq}"
                _seq += 1
            temp, final = F.TEMP_PREFIX + stem, stem + F.SUFFIX
            if _exists(final, dfd):
                continue
            try:
                fd = os.open(temp, flags, _dir.PRIVATE_FILE, dir_fd=dfd)
                break
            except FileExistsError:
                continue
        else:
            raise OSError(f"{dpath}: no free registry file name after 1000 tries")
        try:
            if group is not None:
                os.fchown(fd, -1, group)
                os.fchmod(fd, _dir.GROUP_FILE)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(fd, lay.file_len)
            # Mapped through a description of its own: the mmap object keeps
            # a duplicate of the descriptor it is given, and one of ``fd``
            # would hold the liveness lock for as long as the mapping lives
            # (close() must be able to let it go, see _remove_if_last).
            mfd = _ofd.reopen(fd)
            try:
                mm = mmap.mmap(mfd, lay.file_len, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            finally:
                os.close(mfd)
            mm[0:F.HEADER_FIELDS_END] = lay.encode_header(
                pid, start, time.time_ns(), _process_name(), self._name)
            self._map(mm)
            self._u32[F.VERSION_OFFSET // 4] = F.VERSION
            _dir.rename_noreplace(dfd, temp, final)
        except BaseException:
            os.unlink(temp, dir_fd=dfd)
            os.close(fd)
            raise
        st = os.fstat(fd)
        self._fd, self._dfd, self._file, self._inode = fd, dfd, final, (st.st_dev, st.st_ino)
        self._path = os.path.join(dpath, final)

    def _map(self, mm):
        """Views of the whole file, one per word type: an element store is
        one aligned 8-byte store (4 for ``_u32``)."""
        lay = self._layout
        self._mm = mm
        mv = memoryview(mm)
        self._q, self._i, self._d, self._u32 = mv.cast("Q"), mv.cast("q"), mv.cast("d"), mv.cast("I")
        self._local = threading.local()
        self._views.q, self._views.d, self._views.local = self._q, self._d, self._local
        self._shard0 = lay.shards_offset // 8
        self._stride = lay.shard_len // 8
        self._overflow = self._shard0 + lay.shard_count * self._stride
        self._shared0 = lay.shared_offset // 8

    def close(self):
        """Removes the file, or, in a process sharing it with its parent
        or forked workers, gives up this process's part in keeping it
        alive and removes it only if no other process holds it. Handles go
        on working on the mapping."""
        with self._lock:
            if self._mm is None or self._file is None:
                return
            if self._shared:
                os.close(self._fd)
                self._remove_if_last()
            else:
                try:
                    os.unlink(self._file, dir_fd=self._dfd)
                except FileNotFoundError:
                    pass
                os.close(self._fd)
            os.close(self._dfd)
            self._file = None
        _live.discard(self)

    def _remove_if_last(self):
        """Unlinks the file if no other process holds its liveness lock
        (inherited at fork, so the parent and every live worker hold it):
        the last process to close it removes it."""
        try:
            fd = os.open(self._file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dfd)
        except FileNotFoundError:
            return
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != self._inode:
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another process of the family lives, and keeps it
            st = os.stat(self._file, dir_fd=self._dfd, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == self._inode:
                os.unlink(self._file, dir_fd=self._dfd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<topdeck.Registry {self._path or '(not created yet)'}>"

    @property
    def thread_waits(self):
        """The thread-waits array this registry's timers read
        (:class:`topdeck.waits.ThreadWaits`; after an agent restart, the
        new one), or None."""
        return self._waits.current if self._waits is not None else None

    @property
    def thread_waits_problem(self):
        """Why the array pinned where this registry looked could not be
        used (its timers then record no CPU wait); None when it is mapped,
        when nothing was pinned, or when it was turned off."""
        return self._waits_problem

    # --- fork -----------------------------------------------------------

    def _prepare_fork(self):
        """Before the first fork: this process's shards claimed through a
        lock description of its own, so that a worker claims others. Runs
        holding ``_lock`` and ``_glock``; a failure is kept for the child."""
        if self._shared or self._file is None:
            return
        try:
            self._lfd = _ofd.reopen(self._fd)
            for index in self._slots.values():
                if not _ofd.try_lock(self._lfd, self._shard_lock(index)):
                    raise OSError(errno.EAGAIN, f"shard {index} is locked by another process")
            self._unshareable = None
        except OSError as e:
            if self._lfd is not None:
                os.close(self._lfd)
                self._lfd = None
            self._unshareable = e

    def _after_fork_parent(self):
        if self._lfd is not None:
            self._shared = True

    def _after_fork_child(self):
        """The child keeps the parent's file and mapping, and the share of
        its liveness lock that fork gave it; it gives up the parent's
        shards (its threads claim shards no live process holds, through a
        lock description of its own) and every in-flight lock."""
        self._lock, self._glock = threading.Lock(), threading.Lock()
        if self._waits is not None:
            self._waits.after_fork_in_child()
        if self._file is None:
            return
        inherited, self._lfd = self._lfd, None
        self._slots = {}
        self._local = threading.local()
        self._views.local = self._local
        try:
            if self._unshareable is not None:
                raise self._unshareable
            self._lfd = _ofd.reopen(self._fd)
            self._shared = True
        except OSError as e:  # an at-fork hook cannot raise
            print(f"topdeck: this forked process ({os.getpid()}) cannot share its parent's registry "
                  f"file {self._path} ({e}); its metrics are not published", file=sys.stderr)
            os.close(self._fd)
            os.close(self._dfd)
            self._map(mmap.mmap(-1, self._layout.file_len))
            self._file, self._shared = None, False
        if inherited is not None:
            os.close(inherited)  # the parent's locks stay the parent's
        for h in self._handles:
            h._bind(self)

    def _shard_lock(self, index):
        """The byte whose lock claims shard ``index``: its first."""
        return (self._shard0 + index * self._stride) * F.WORD

    def _xlock(self, offset):
        """Takes the lock on the byte at ``offset`` across the processes
        sharing the file (only while ``_shared``)."""
        try:
            _ofd.lock(self._lfd, offset)
        except OSError as e:
            raise OSError(e.errno, f"{self._path}: cannot take the lock shared with this registry's "
                          f"forked processes at byte {offset} ({e.strerror})") from None

    def _xunlock(self, offset):
        _ofd.unlock(self._lfd, offset)

    # --- registration ---------------------------------------------------

    def _register(self, kind, name, labels, help_text, unit, words, buckets=None):
        labels = tuple((str(k), str(v)) for k, v in labels)
        unit = unit or unit_of_name(name)
        F.check_series(name, labels, help_text, unit)
        self._ensure_open()
        with self._lock:
            key = (name, labels)
            if key in self._seen:
                raise ValueError(f"{self._path}: metric {name!r} with labels {dict(labels)} is already "
                                 "registered; keep the first handle")
            if not self._shared:
                return self._allocate(key, kind, help_text, unit, words, buckets)
            # Shared with the parent or forked workers: one registration at
            # a time across them, and a series one of them registered is
            # the same series here (its shards add up).
            self._xlock(F.DESC_COUNT_OFFSET)
            try:
                self._sync()
                found = self._index.get(key)
                if found is not None:
                    return self._adopt_series(key, found, kind, words, buckets)
                return self._allocate(key, kind, help_text, unit, words, buckets)
            finally:
                self._xunlock(F.DESC_COUNT_OFFSET)

    def _allocate(self, key, kind, help_text, unit, words, buckets):
        """A new descriptor, its strings and its value block (``_lock``
        held, and across processes the registration lock when shared)."""
        lay = self._layout
        name, labels = key
        raw = [name.encode(), F.encode_labels(labels), help_text.encode(), unit.encode()]
        need = sum(map(len, raw))
        value_len = words * F.WORD
        sharded = kind in (F.COUNTER, F.HISTOGRAM)
        used, cap, area, option = ((self._shard_used, lay.shard_len, "shards", "shard_bytes") if sharded
                                   else (self._shared_used, lay.shared_len, "gauge area", "gauge_bytes"))
        for what, u, n, c, opt in (("descriptor table", self._count, 1, lay.desc_capacity, "metrics"),
                                   ("string area", self._strings_used, need, lay.strings_len, "string_bytes"),
                                   (area, used, value_len, cap, option)):
            if u + n > c:
                raise MemoryError(
                    f"{self._path}: registry full: no room for {name!r} in the {what} ({u} of {c} used, "
                    f"{n} more needed); create the Registry with a larger {opt}")
        refs = []
        for s in raw:
            at = lay.strings_offset + self._strings_used
            self._mm[at:at + len(s)] = s
            refs.append((self._strings_used, len(s)))
            self._strings_used += len(s)
        desc = F.encode_descriptor(kind, value_len, used, refs, buckets)
        at = lay.desc_offset + self._count * F.DESC_LEN
        self._mm[at:at + len(desc)] = desc
        if sharded:
            self._shard_used += value_len
        else:
            self._shared_used += value_len
        self._count += 1
        # Publication: an aligned 4-byte store after the plain stores above.
        self._u32[F.DESC_COUNT_OFFSET // 4] = self._count
        self._synced = self._count
        self._seen.add(key)
        return used

    def _sync(self):
        """Learns the descriptors other processes sharing the file
        published since this one last looked: their series (for
        :meth:`_adopt_series`) and the areas they used."""
        lay, mm = self._layout, self._mm
        count = self._u32[F.DESC_COUNT_OFFSET // 4]
        if count > lay.desc_capacity:
            raise OSError(errno.EIO, f"{self._path}: desc_count {count} is past the table's "
                          f"{lay.desc_capacity} slots: another process sharing the file damaged it")
        for i in range(self._synced, count):
            at = lay.desc_offset + i * F.DESC_LEN
            kind, schema, _, value_len, value_offset = struct.unpack_from("<BbHIQ", mm, at)
            refs = struct.unpack_from("<8I", mm, at + 16)
            shape = (schema,) + struct.unpack_from("<iId", mm, at + 48)
            ends = [refs[j] + refs[j + 1] for j in (0, 2, 4, 6)]
            sharded = kind in (F.COUNTER, F.HISTOGRAM)
            area = lay.shard_len if sharded else lay.shared_len
            if kind not in (F.COUNTER, F.GAUGE_I64, F.GAUGE_F64, F.HISTOGRAM) or max(ends) > lay.strings_len \
                    or value_offset + value_len > area:
                raise OSError(errno.EIO, f"{self._path}: descriptor {i}, published by another process "
                              "sharing the file, is out of place: that process damaged the file")
            so = lay.strings_offset
            name = bytes(mm[so + refs[0]:so + ends[0]]).decode("utf-8", "replace")
            labels = F.decode_labels(mm[so + refs[2]:so + ends[1]])
            self._index[(name, labels)] = (kind, value_offset, value_len, shape)
            self._strings_used = max(self._strings_used, max(ends))
            if sharded:
                self._shard_used = max(self._shard_used, value_offset + value_len)
            else:
                self._shared_used = max(self._shared_used, value_offset + value_len)
        self._synced = self._count = count

    def _adopt_series(self, key, found, kind, words, buckets):
        """A series another process sharing the file registered: this
        process's handle writes the same words (in its own shards, or the
        same gauge word), if it is registered the same way."""
        name, labels = key
        have, offset, value_len, shape = found
        want = ((buckets.schema, buckets.min_index, buckets.bucket_count, buckets.zero_threshold)
                if buckets is not None else (0, 0, 0, 0.0))
        if (have, value_len, shape) != (kind, words * F.WORD, want):
            raise ValueError(
                f"{self._path}: metric {name!r} with labels {dict(labels)} is registered by another "
                f"process sharing this file (the parent or a forked worker) as {_KIND_NAMES.get(have, have)}"
                f"{_shape_text(have, shape)}, not as {_KIND_NAMES[kind]}{_shape_text(kind, want)}; "
                "register it the same way in every process")
        self._seen.add(key)
        return offset

    def _adopt(self, handle):
        self._handles.append(handle)
        handle._bind(self)
        return handle

    def counter(self, name, labels=(), help="", unit=""):
        """Registers a counter (``labels``: pairs or a dict, in order)."""
        off = self._register(F.COUNTER, name, _pairs(labels), help, unit, 1)
        return self._adopt(CounterHandle(off))

    def gauge(self, name, labels=(), help="", unit=""):
        """Registers an integer gauge (i64)."""
        off = self._register(F.GAUGE_I64, name, _pairs(labels), help, unit, 1)
        return self._adopt(IntGaugeHandle(off))

    def gauge_f64(self, name, labels=(), help="", unit=""):
        """Registers a floating-point gauge."""
        off = self._register(F.GAUGE_F64, name, _pairs(labels), help, unit, 1)
        return self._adopt(GaugeHandle(off))

    def histogram(self, name, labels=(), help="", unit="", *, schema=3, min=1e-9, max=1e6):
        """Registers a histogram: exponential buckets at ``schema`` covering
        ``(min, max]`` (default: the Rust library's, 1 ns to 10^6 s)."""
        rng = make_buckets(schema, min, max)
        off = self._register(F.HISTOGRAM, name, _pairs(labels), help, unit, F.H_HEAD + rng.bucket_count, rng)
        return self._adopt(HistogramHandle(off, rng))

    def timer(self, name, labels=(), help=""):
        """A histogram of seconds (unit ``seconds``, default buckets).

        With the agent's thread-waits array mapped, also registers, with the
        same labels, ``<base>_cpu_wait_seconds`` (per request, how long the
        timing thread waited for a CPU) and
        ``<base>_cpu_wait_unknown_seconds`` (the latency of requests whose
        wait could not be known: the agent stopped meanwhile), ``<base>``
        being ``name`` without ``_seconds``; ``time()`` records them."""
        if self._waits is None:
            return self.histogram(name, labels, help, "seconds")
        labels = _pairs(labels)
        wait_name, unknown_name = _waits.companions(name)
        wait_help = (f"CPU wait per request timed by {name}: time the timing thread was runnable "
                     "but waiting for a CPU, from the topdeck agent's scheduler probe.")
        unknown_help = (f"Latency of requests timed by {name} whose CPU wait could not be known "
                        "(the topdeck agent stopped during them).")
        # Names checked before anything is registered: a bad name or a
        # duplicate timer registers nothing.
        keyed = tuple((str(k), str(v)) for k, v in labels)
        for n, h in ((wait_name, wait_help), (unknown_name, unknown_help)):
            F.check_series(n, keyed, h, "seconds")
            if (n, keyed) in self._seen:
                raise ValueError(f"{self._path}: metric {n!r} with labels {dict(keyed)} is already "
                                 f"registered, so timer {name!r} cannot have it as its CPU wait")
        timer = self.histogram(name, labels, help, "seconds")
        wait = self.histogram(wait_name, labels, wait_help, "seconds")
        unknown = self.histogram(unknown_name, labels, unknown_help, "seconds")
        zero = _histogram_zero(self._views, wait._off, lambda v: self._record(wait, v))
        return _WaitTimerHandle(timer, wait, zero, unknown, self._waits)

    # --- the slow paths of the handles ----------------------------------

    def _base(self):
        """This thread's first word in this registry's shards, or None when
        it has no shard of its own (it then shares the overflow shard)."""
        base = getattr(self._local, "base", _MISSING)
        if base is not _MISSING:
            return base
        k = _shards.claim()
        with self._lock:
            index = self._slots.get(k)
            if index is None:
                index = self._claim_shard()
                if index is not None:
                    self._slots[k] = index
        base = None if index is None else self._shard0 + index * self._stride
        self._local.base = base
        return base

    def _claim_shard(self):
        """The lowest shard that neither this process nor (while the file
        is shared) a live process of its family holds, raising
        ``shards_in_use`` before this thread's first store to it; None
        when every shard is taken. ``_lock`` held."""
        mine = set(self._slots.values())
        for index in range(self._layout.shard_count):
            if index in mine:
                continue
            # A shard claimed by a process that ended is free again: its
            # values stay, and its next owner continues from them.
            if not self._shared or _ofd.try_lock(self._lfd, self._shard_lock(index)):
                break
        else:
            return None
        at = F.SHARDS_IN_USE_OFFSET // 4
        if self._u32[at] <= index:
            if self._shared:
                # The header word only grows: raised under the lock that
                # registration takes, so two processes never lower it.
                self._xlock(F.DESC_COUNT_OFFSET)
                try:
                    if self._u32[at] <= index:
                        self._u32[at] = index + 1
                finally:
                    self._xunlock(F.DESC_COUNT_OFFSET)
            else:
                self._u32[at] = index + 1
        return index

    def _overflow_locked(self, update):
        """Runs ``update`` with the overflow shard to itself: every writer
        of it, in this process and (while the file is shared) in the others
        of the family, takes the same locks."""
        with self._glock:
            if not self._shared:
                return update()
            at = self._overflow * F.WORD
            self._xlock(at)
            try:
                return update()
            finally:
                self._xunlock(at)

    def _counter_add(self, off, amount):
        amount = _whole(amount)
        base = self._base()
        q = self._q
        if base is None:
            i = self._overflow + off

            def add():
                q[i] = _saturating(q[i] + amount)
            self._overflow_locked(add)
        else:
            i = base + off
            q[i] = _saturating(q[i] + amount)

    def _record(self, h, v):
        slot = h._range.slot(v)
        if slot is None:
            return
        base = self._base()
        if base is None:
            self._overflow_locked(lambda: self._record_at(self._overflow + h._off, slot, v))
        else:
            self._record_at(base + h._off, slot, v)

    def _record_at(self, i, slot, v):
        q, d = self._q, self._d
        j = i + F.H_ZERO if slot < 0 else i + F.H_HEAD + slot
        q[j] = (q[j] + 1) & MASK
        d[i + F.H_SUM] += v
        o = ordered_bits(v)
        if o > q[i + F.H_MAX]:
            q[i + F.H_MAX] = o
        q[i + F.H_COUNT] = (q[i + F.H_COUNT] + 1) & MASK


_KIND_NAMES = {F.COUNTER: "a counter", F.GAUGE_I64: "an integer gauge", F.GAUGE_F64: "a float gauge",
               F.HISTOGRAM: "a histogram"}


def _shape_text(kind, shape):
    if kind != F.HISTOGRAM:
        return ""
    schema, min_index, count, _ = shape
    return f" (schema {schema}, buckets {min_index}..{min_index + count - 1})"


def _open_waits(pin):
    """``(WaitSource or None, problem or None)`` for the ``thread_waits``
    argument of a Registry."""
    if pin is None:
        waits, problem = _waits.from_env()
    elif pin == "off" or pin is False:
        waits, problem = None, None
    else:
        waits, problem = _waits.open_checked(pin)
    return (_waits.WaitSource(waits) if waits is not None else None), problem


def _exists(name, dfd):
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


def unit_of_name(name):
    """The base unit a Prometheus name ends in (before any ``_total``), as
    prometheus_client users name their metrics: a metric registered without
    a unit gets it, so every view shows a ``_seconds`` metric as a duration.

    >>> unit_of_name("request_duration_seconds"), unit_of_name("cpu_seconds_total")
    ('seconds', 'seconds')
    >>> unit_of_name("body_bytes"), unit_of_name("requests_total")
    ('bytes', '')
    """
    base = name[:-len("_total")] if name.endswith("_total") else name
    for unit in ("seconds", "bytes"):
        if base.endswith("_" + unit):
            return unit
    return ""


def _pairs(labels):
    return tuple(labels.items()) if isinstance(labels, dict) else tuple(labels)


class _Handle:
    __slots__ = ("_reg", "_q", "_d", "_local", "_off")

    def __init__(self, off):
        self._off = off // F.WORD

    def _bind(self, reg):
        self._reg, self._q, self._d, self._local = reg, reg._q, reg._d, reg._local


class CounterHandle(_Handle):
    """A counter: a u64 word in every shard, summed by readers.
    ``inc(n=1)`` (alias ``add``) adds a whole, non-negative ``n``."""

    __slots__ = ("inc", "add")

    def _bind(self, reg):
        super()._bind(reg)
        if not hasattr(self, "inc"):
            self.inc = self.add = _counter_inc(reg._views, self._off, reg._counter_add)

    def get(self):
        """The total in the file: this process's and, once it forked (or
        was forked), its family's (all shards in use)."""
        r = self._reg
        shards = list(range(r._u32[F.SHARDS_IN_USE_OFFSET // 4])) + [r._layout.shard_count]
        return _saturating(sum(r._q[r._shard0 + s * r._stride + self._off] for s in shards))


def _counter_inc(views, off, slow):
    # A closure: its state is in fast locals and one slotted object, not
    # in attributes of the handle. The fast path is this thread's own shard.
    def inc(amount=1):
        if amount < 0:
            raise ValueError(f"counters only go up; got {amount}: use a Gauge for values that go down")
        # A word past 2^64-1 raises ValueError here, and the slow path
        # refuses the amount or stops the word at 2^64-1.
        try:
            i = views.local.base + off
            q = views.q
            q[i] = q[i] + amount
        except (AttributeError, TypeError, ValueError):
            slow(off, amount)
    return inc


class _SharedHandle(_Handle):
    __slots__ = ("_w",)

    def _bind(self, reg):
        super()._bind(reg)
        self._w = reg._shared0 + self._off


class GaugeHandle(_SharedHandle):
    """A floating-point gauge: one word in the shared area."""

    __slots__ = ()

    def set(self, value):
        self._d[self._w] = value

    def inc(self, amount=1.0):
        r = self._reg
        with r._glock:
            if not r._shared:
                self._d[self._w] += amount
                return
            # One word for the whole family: a read-modify-write under the
            # lock on its first byte, across the processes sharing it.
            at = self._w * F.WORD
            r._xlock(at)
            try:
                self._d[self._w] += amount
            finally:
                r._xunlock(at)

    add = inc

    def dec(self, amount=1.0):
        self.inc(-amount)

    def get(self):
        return self._d[self._w]


class IntGaugeHandle(GaugeHandle):
    """An integer gauge (i64): one word in the shared area."""

    __slots__ = ()

    def _bind(self, reg):
        super()._bind(reg)
        self._d = reg._i

    def set(self, value):
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"an integer gauge holds whole numbers; got {value}")
            value = int(value)
        self._d[self._w] = value

    def inc(self, amount=1):
        super().inc(amount)

    add = inc

    def dec(self, amount=1):
        self.inc(-amount)


class HistogramHandle(_Handle):
    """A histogram: count, sum, max, zero bucket and buckets in every shard.
    ``observe(v)`` (alias ``record``) records one value; ``time()`` times a
    block or a function, in seconds."""

    __slots__ = ("_range", "observe", "record")

    def __init__(self, off, rng):
        super().__init__(off)
        self._range = rng

    def _bind(self, reg):
        super()._bind(reg)
        if not hasattr(self, "observe"):
            self.observe = self.record = _histogram_observe(
                reg._views, self._off, self._range, lambda v: reg._record(self, v))

    def time(self):
        return _Timer(self.observe)

    def count(self):
        r = self._reg
        shards = list(range(r._u32[F.SHARDS_IN_USE_OFFSET // 4])) + [r._layout.shard_count]
        return sum(r._q[r._shard0 + s * r._stride + self._off] for s in shards)


def _bucket_bounds(rng):
    """The upper bounds of the range's buckets, exactly the doubles of the
    format's formulation: the number of them below ``v`` is ``v``'s bucket
    offset (one bisect instead of frexp and arithmetic). Exact only while
    scaling the bounds by powers of two is, i.e. above the subnormals."""
    if rng.zero_threshold < sys.float_info.min:
        return None
    return tuple(upper_bound(rng.schema, rng.min_index + k) for k in range(rng.bucket_count))


def _histogram_observe(views, off, rng, slow):
    bounds = _bucket_bounds(rng)
    if bounds is None:
        return slow
    zt, last = rng.zero_threshold, rng.bucket_count - 1

    def observe(v):
        try:
            i = views.local.base + off
            if v > zt:
                q, d = views.q, views.d
                k = bisect_left(bounds, v)
                j = i + 4 + (k if k < last else last)
                q[j] = q[j] + 1
                d[i + 1] += v
                # The max word holds order-preserving bits; for v > 0 they
                # are the bits of -v, so the comparison stays in floats (a
                # word holding a negative max, or none, reads as m with
                # -m < v or NaN: replaced either way).
                m = d[i + 2]
                if not v <= -m:
                    d[i + 2] = -v
                q[i] = q[i] + 1
                return
        except (AttributeError, TypeError):
            pass
        slow(v)
    return observe


#: ``ordered_bits(0.0)``: a histogram's max word once it has seen a zero.
_ZERO_MAX = 1 << 63


def _histogram_zero(views, off, slow):
    """``observe(0.0)`` without the general path's checks: most requests
    wait for no CPU at all, and the general path takes zeros slowly."""
    def zero():
        try:
            i = views.local.base + off
            q = views.q
            q[i + 3] = q[i + 3] + 1
            # Below 0.0's bits: no max yet (0) or a negative one.
            if q[i + 2] < _ZERO_MAX:
                q[i + 2] = _ZERO_MAX
            q[i] = q[i] + 1
            return
        except (AttributeError, TypeError):
            pass
        slow(0.0)
    return zero


class _Timer:
    """``with h.time():`` or ``@h.time()``: records the elapsed seconds."""

    __slots__ = ("_record", "_start")

    def __init__(self, record):
        self._record = record

    def __enter__(self):
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self._record(time.perf_counter() - self._start)

    def __call__(self, f):
        import functools

        @functools.wraps(f)
        def timed(*args, **kwargs):
            with _Timer(self._record):
                return f(*args, **kwargs)
        return timed


class _CpuWait:
    """A timer's CPU-wait histograms (their ``observe`` closures, which
    follow the child's file after fork) and the array they read."""

    __slots__ = ("source", "wait", "zero", "unknown")

    def __init__(self, source, wait, zero, unknown):
        self.source, self.wait, self.zero, self.unknown = source, wait.observe, zero, unknown.observe


class _WaitTimerHandle:
    """What :meth:`Registry.timer` returns when the array is mapped: the
    timer's histogram (``observe``, ``record``, ``count`` as before), with
    a ``time()`` that also records each section's CPU wait.
    ``cpu_wait`` and ``cpu_wait_unknown`` are the companion histograms."""

    __slots__ = ("histogram", "observe", "record", "cpu_wait", "cpu_wait_unknown", "_cpu")

    def __init__(self, histogram, wait, wait_zero, unknown, source):
        self.histogram, self.cpu_wait, self.cpu_wait_unknown = histogram, wait, unknown
        self._cpu = _CpuWait(source, wait, wait_zero, unknown)
        # The histogram's own closure: it follows the child's file after fork.
        self.observe = self.record = histogram.observe

    def time(self):
        return _WaitTimer(self.observe, self._cpu)

    def count(self):
        return self.histogram.count()


_tids = _waits.TIDS


class _WaitTimer:
    """``with t.time():`` or ``@t.time()``: records the elapsed seconds, and
    the CPU wait during them: the thread's slot read at the start and at
    the end (one plain load each), recorded while the header says the
    agent is live, the latency recorded as unknown otherwise (never a zero
    wait for a wait nobody measured). A thread with no slot records
    latency only. End the section on the thread that began it."""

    __slots__ = ("_record", "_cpu", "_start", "_q", "_i", "_w")

    def __init__(self, record, cpu):
        self._record, self._cpu = record, cpu

    def __enter__(self):
        try:
            i = _tids.local.word
        except AttributeError:
            i = _waits.slot_word()
        # One attribute holds the view and its bound together: a restarted
        # agent's array may replace both meanwhile. The view is kept, so
        # the difference is of one array.
        q, end = self._cpu.source.view
        if i < end:
            self._q, self._i, self._w = q, i, q[i]
        else:
            self._q = None
        self._start = perf_counter()
        return self

    def __exit__(self, *exc):
        elapsed = perf_counter() - self._start
        self._record(elapsed)
        q = self._q
        if q is None:
            return
        now = q[self._i]
        # The state is loaded after the slot (FORMAT.md section 10: a
        # difference is trusted only if the state reads LIVE after it);
        # CPython keeps the two loads in program order, and x86-64 does not
        # reorder loads with loads. Slots only grow.
        if q[1] == 1:  # waits.STATE_WORD, waits.LIVE
            ns = now - self._w
            if ns:
                self._cpu.wait(ns * 1e-9)
            else:
                self._cpu.zero()
        else:
            self._cpu.unknown(elapsed)
            self._cpu.source.look_again()

    def __call__(self, f):
        import functools

        @functools.wraps(f)
        def timed(*args, **kwargs):
            with _WaitTimer(self._record, self._cpu):
                return f(*args, **kwargs)
        return timed


def _before_fork():
    # The default registry, if made and still lazy, is opened now: the
    # workers then count into its file rather than each into one of its own.
    for r in list(_lazy_registries):
        try:
            r._ensure_open()
        except Exception as e:  # an at-fork hook cannot raise
            print(f"topdeck: the default registry could not be opened before fork ({e}); each forked "
                  "process that uses it makes a file of its own", file=sys.stderr)
        _lazy_registries.discard(r)
    _shards.before_fork()
    for r in list(_live):
        r._lock.acquire()
        r._glock.acquire()
        r._prepare_fork()


def _after_fork_parent():
    for r in list(_live):
        r._after_fork_parent()
        r._glock.release()
        r._lock.release()
    _shards.after_fork_parent()


def _after_fork_child():
    _shards.after_fork_child()
    for r in list(_live):
        r._after_fork_child()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                    after_in_child=_after_fork_child)


@atexit.register
def _close_at_exit():
    """A clean exit removes the files, as the format and the other writers
    do; `os._exit` and SIGKILL leave them, dead, for `topdeck gc`."""
    for r in list(_live):
        r.close()


_sigterm_installed = False


def _remove_on_sigterm():
    """SIGTERM (how systemd, Docker and Kubernetes stop a service) removes
    the files too, as the Go and Java writers' do: a handler is installed
    at the first registry, but only where SIGTERM still has its default
    action and only from the main thread (the only one Python lets set
    one). It removes the files, puts the default action back and sends
    SIGTERM again, so the process still dies of it, with the same status.
    An application's own handler is never replaced: it calls
    `Registry.close()` (or exits, which runs `atexit`)."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_installed = True
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError):
        pass


def _on_sigterm(signum, frame):
    _close_at_exit()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
