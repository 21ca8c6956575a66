// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The agent's thread-waits array (docs/FORMAT.md section 10, crates/topdeck/src/waits): each
 * thread's cumulative run-queue wait, kept by the agent's BPF probe in a frozen, memory-mappable
 * BPF array pinned on bpffs, mapped here {@code PROT_READ, MAP_SHARED} and read with plain loads.
 * Opened as the Rust library opens it: {@code BPF_OBJ_GET} with flags 0, the kernel's own account
 * of the map ({@code BPF_OBJ_GET_INFO_BY_FD}) checked, then the header. One instance is one array;
 * {@link Source} is a registry's current one, replaced when a restarted agent pins another.
 */
final class ThreadWaits {
    static final String PIN_ENV = "TOPDECK_THREAD_WAITS";
    static final String DEFAULT_PIN = "/sys/fs/bpf/topdeck/thread_waits";
    static final int ENTRY_BYTES = 32, HEADER_ENTRIES = 2;
    static final int MAGIC = 0x54574454; // "TDWT" as a little-endian u32
    static final int VERSION = 1;
    static final long LIVE = 1, GONE = 2;
    static final long STATE_OFFSET = 8;
    /** A thread whose host id this process cannot learn (or a virtual thread): no slot. */
    static final int NO_TID = -1;

    private static final int BPF_MAP_TYPE_ARRAY = 2, BPF_F_MMAPABLE = 1 << 10;
    private static final int ENOENT = 2, EPERM = 1, EACCES = 13;
    /** {@code PROC_PID_INIT_INO}: the inode of the initial pid namespace. */
    private static final long INIT_PID_NS_INO = 0xEFFFFFFCL;

    final WaitArray array;
    final Path pin;
    /** The kernel's id of the map: tells a new array from the same one. */
    final int id;
    /** Thread ids with a slot: {@code 0 .. tids - 1}. */
    final int tids;

    private ThreadWaits(WaitArray array, Path pin, int id, int tids) {
        this.array = array;
        this.pin = pin;
        this.id = id;
        this.tids = tids;
    }

    /** The pin a writer looks at: {@code TOPDECK_THREAD_WAITS} ({@code off}: none), else the default. */
    static Path pinFromEnv() {
        String v = System.getenv(PIN_ENV);
        if (v != null && v.equals("off")) {
            return null;
        }
        return Path.of(v == null || v.isEmpty() ? DEFAULT_PIN : v);
    }

    /** Thrown when nothing is pinned at the path (or its directory does not exist). */
    static final class NotPinned extends IOException {
        NotPinned(String message) {
            super(message);
        }
    }

    /**
     * Maps the array pinned at {@code pin}. Refuses a pin whose directory is not root-owned or is
     * writable by group or others (anyone could have pinned an array there and fed every timer
     * invented waits), a map that is not a memory-mappable array of 32-byte entries, and a
     * header of another magic or version; {@link NotPinned} when nothing is pinned there.
     */
    static ThreadWaits open(Path pin) throws IOException {
        pin = pin.toAbsolutePath();
        checkDir(pin);
        int fd = Native.bpfObjGet(pin.toString());
        if (fd < 0) {
            String why = Native.strerror(-fd);
            if (-fd == ENOENT) {
                throw new NotPinned(pin + ": cannot open the pinned thread-waits array: " + why
                        + "; is the agent running (`topdeck agent`)?");
            }
            throw new IOException(pin + ": cannot open the pinned thread-waits array: " + why + "; "
                    + (-fd == EPERM || -fd == EACCES
                            ? "the agent pins it with mode 0666: check the pin's mode and any LSM policy"
                            : "is it a pin on a bpffs mount, made by `topdeck agent`?"));
        }
        try {
            int[] info = new int[6]; // type, id, key_size, value_size, max_entries, map_flags
            int rc = Native.bpfMapInfo(fd, info);
            if (rc < 0) {
                throw new IOException(pin + ": cannot ask the kernel what this BPF object is: " + Native.strerror(-rc));
            }
            String problem = info[0] != BPF_MAP_TYPE_ARRAY ? "map type " + info[0] + ", not an array"
                    : info[3] != ENTRY_BYTES ? "value size " + info[3] + " bytes, not " + ENTRY_BYTES
                    : (info[5] & BPF_F_MMAPABLE) == 0 ? "created without BPF_F_MMAPABLE, so it cannot be mapped"
                    : Integer.toUnsignedLong(info[4]) <= HEADER_ENTRIES ? info[4] + " entries, too few for the header"
                    : null;
            if (problem != null) {
                throw new IOException(pin + ": not a topdeck thread-waits array: " + problem + "; point " + PIN_ENV
                        + " at the agent's pin (`topdeck agent --thread-waits`)");
            }
            long entries = Integer.toUnsignedLong(info[4]);
            long address = Native.mmapReadShared(fd, entries * ENTRY_BYTES);
            if (address < 0 && address > -4096) {
                throw new IOException(pin + ": cannot map the thread-waits array: " + Native.strerror((int) -address));
            }
            // Owned from here: unmapped when unreachable, the header refused or not.
            WaitArray array = WaitArray.adopt(address, entries * ENTRY_BYTES);
            ThreadWaits w = new ThreadWaits(array, pin, info[1], (int) Math.min(entries - HEADER_ENTRIES, Integer.MAX_VALUE));
            w.checkHeader();
            return w;
        } finally {
            Native.close(fd); // the mapping holds the map
        }
    }

    /** As {@link #open}, {@code null} when nothing is pinned there. */
    static ThreadWaits openIfPinned(Path pin) throws IOException {
        try {
            return open(pin);
        } catch (NotPinned e) {
            return null;
        }
    }

    /** A header not written yet (all zero) is accepted as not set up; another magic or version is refused. */
    private void checkHeader() throws IOException {
        int magic = array.word32(0), version = array.word32(4);
        if (magic == 0 && version == 0 && state() == 0) {
            return;
        }
        if (magic != MAGIC) {
            throw new IOException(String.format("%s: not a topdeck thread-waits array (magic %#010x, want %#010x); "
                    + "point %s at the agent's pin (`topdeck agent --thread-waits`)", pin, magic, MAGIC, PIN_ENV));
        }
        if (version != VERSION) {
            throw new IOException(pin + ": thread-waits array version " + version + ", this library reads " + VERSION
                    + "; run an agent and a library of the same release");
        }
    }

    /** The header's state: {@link #LIVE}, {@link #GONE}, 0 before the agent set it up. */
    long state() {
        return array.word(STATE_OFFSET);
    }

    /** Byte offset of host thread {@code tid}'s total wait, or -1 when it has no slot. */
    long slotOffset(int tid) {
        return tid >= 0 && tid < tids ? (long) (tid + HEADER_ENTRIES) * ENTRY_BYTES : -1;
    }

    /**
     * The pin's directory must be root's and writable by root only; its ancestors root's too, or
     * sticky (as bpffs's root is), so the directory cannot be swapped (as the Rust library checks).
     */
    private static void checkDir(Path pin) throws IOException {
        boolean strict = true;
        for (Path d = pin.getParent(); d != null; d = d.getParent()) {
            Map<String, Object> a;
            try {
                a = Files.readAttributes(d, "unix:uid,mode");
            } catch (NoSuchFileException e) {
                if (strict) {
                    throw new NotPinned(pin + ": no thread-waits array: its directory does not exist");
                }
                throw e;
            }
            int uid = (Integer) a.get("uid"), mode = (Integer) a.get("mode");
            boolean writableByOthers = (mode & 022) != 0, sticky = (mode & 01000) != 0;
            if (uid != 0 || (writableByOthers && (strict || !sticky))) {
                throw new IOException(String.format("%s: refusing the thread-waits array: %s is owned by uid %d with mode %o, "
                        + "so another user could have pinned it; the agent pins it in a root-owned 0755 directory: "
                        + "fix the directory or point %s elsewhere", pin, d, uid, mode & 07777, PIN_ENV));
            }
            strict = false;
        }
    }

    // --- the calling thread's slot ---------------------------------------------

    private static final class Tid {
        final int id;

        Tid(int id) {
            this.id = id;
        }
    }

    /** Looked up once per thread (two or three system calls), then one ThreadLocal read. */
    private static final ThreadLocal<Tid> HOST_TID = ThreadLocal.withInitial(() -> new Tid(findHostTid()));
    private static volatile int inInitialPidNs; // 0 unknown, 1 yes, 2 no

    /** The calling thread's host thread id (the index of its slot), or {@link #NO_TID}. */
    static int hostTid() {
        return HOST_TID.get().id;
    }

    /**
     * {@code gettid()} in the initial pid namespace; else the first {@code NSpid} field when the
     * kernel lists several (the outermost namespace {@code /proc} shows); else none. A virtual
     * thread has none: it runs on whichever carrier thread is free, so {@code gettid} names a
     * carrier that may change at every blocking call, and another virtual thread's waits would be
     * counted as its own.
     */
    private static int findHostTid() {
        if (Shards.isVirtual(Thread.currentThread())) {
            return NO_TID;
        }
        if (initialPidNs()) {
            return Native.gettid();
        }
        try {
            for (String line : Files.readAllLines(Path.of("/proc/thread-self/status"))) {
                if (line.startsWith("NSpid:")) {
                    String[] ids = line.substring(6).trim().split("\\s+");
                    return ids.length > 1 ? Integer.parseInt(ids[0]) : NO_TID;
                }
            }
        } catch (IOException | NumberFormatException e) {
            // no host id to be had: no slot
        }
        return NO_TID;
    }

    private static boolean initialPidNs() {
        int known = inInitialPidNs;
        if (known == 0) {
            boolean yes;
            try {
                yes = ((Number) Files.getAttribute(Path.of("/proc/self/ns/pid"), "unix:ino")).longValue() == INIT_PID_NS_INO;
            } catch (IOException | UnsupportedOperationException e) {
                yes = false;
            }
            known = yes ? 1 : 2;
            inInitialPidNs = known;
        }
        return known == 1;
    }

    // --- a registry's array, replaced after an agent restart ------------------------------

    /**
     * The array a registry's timers read. An array whose agent has gone is replaced by the one a
     * restarted agent pins, looked for at most once a second, by a stop that found it gone: no
     * background thread, and no system call otherwise.
     */
    static final class Source {
        private static final long SECOND = 1_000_000_000L;

        final Path pin;
        private volatile ThreadWaits current;
        /** {@code System.nanoTime()} of the last look (0: none yet). */
        private final AtomicLong lastLook = new AtomicLong();
        /** Looks made (pin opened again): the tests' evidence of the rate limit. */
        private final AtomicLong looks = new AtomicLong();

        Source(ThreadWaits waits) {
            this.pin = waits.pin;
            this.current = waits;
        }

        ThreadWaits current() {
            return current;
        }

        long looks() {
            return looks.get();
        }

        /** The array's agent is not live: opens the pin again if a second has passed since the last look. */
        void lookAgain() {
            long now = System.nanoTime(), last = lastLook.get();
            if (last != 0 && now - last < SECOND) {
                return;
            }
            // One thread looks; the others carry on.
            if (!lastLook.compareAndSet(last, now == 0 ? 1 : now)) {
                return;
            }
            looks.incrementAndGet();
            try {
                ThreadWaits fresh = openIfPinned(pin);
                if (fresh != null && fresh.id != current.id) {
                    current = fresh;
                }
            } catch (IOException | RuntimeException e) {
                // still gone, or unusable: timings stay unknown until a later look finds one
            }
        }
    }
}
