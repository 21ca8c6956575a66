// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;

/**
 * The system calls a writer needs and Java does not offer, through the foreign function API
 * (JDK 22+; no JNI, no native library of our own): {@code flock(2)}, {@code openat(2)},
 * {@code ftruncate(2)}, {@code renameat2(2)} with {@code RENAME_NOREPLACE}, {@code unlinkat(2)};
 * and for the agent's thread-waits array (docs/FORMAT.md section 10) {@code bpf(2)} through
 * {@code syscall(2)}, {@code mmap(2)}, {@code gettid(2)}. Calls return 0 (or a descriptor) on
 * success and {@code -errno} on failure.
 */
@SuppressWarnings("restricted") // the point of this class: every call is checked above
final class Native {
    private Native() {}

    private static final Linker LINKER = Linker.nativeLinker();
    private static final SymbolLookup LIBC = LINKER.defaultLookup();
    private static final StructLayout STATE = Linker.Option.captureStateLayout();
    private static final VarHandle ERRNO = STATE.varHandle(MemoryLayout.PathElement.groupElement("errno"));
    private static final Linker.Option ERRNO_OPT = Linker.Option.captureCallState("errno");
    private static final ValueLayout.OfInt INT = ValueLayout.JAVA_INT;
    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG;
    private static final ValueLayout PTR = ValueLayout.ADDRESS;

    private static final MethodHandle OPEN = handle("open", FunctionDescriptor.of(INT, PTR, INT, INT),
            Linker.Option.firstVariadicArg(2));
    private static final MethodHandle OPENAT = handle("openat", FunctionDescriptor.of(INT, INT, PTR, INT, INT),
            Linker.Option.firstVariadicArg(3));
    private static final MethodHandle FLOCK = handle("flock", FunctionDescriptor.of(INT, INT, INT));
    private static final MethodHandle FTRUNCATE = handle("ftruncate", FunctionDescriptor.of(INT, INT, LONG));
    private static final MethodHandle RENAMEAT2 = optional("renameat2", FunctionDescriptor.of(INT, INT, PTR, INT, PTR, INT));
    private static final MethodHandle LINKAT = handle("linkat", FunctionDescriptor.of(INT, INT, PTR, INT, PTR, INT));
    private static final MethodHandle UNLINKAT = handle("unlinkat", FunctionDescriptor.of(INT, INT, PTR, INT));
    private static final MethodHandle CLOSE = handle("close", FunctionDescriptor.of(INT, INT));
    // syscall(long number, ...): the variadic arguments passed as longs, as C promotes nothing
    // smaller than int and the kernel reads registers.
    private static final MethodHandle SYSCALL3 = handle("syscall", FunctionDescriptor.of(LONG, LONG, LONG, PTR, LONG),
            Linker.Option.firstVariadicArg(1));
    private static final MethodHandle MMAP = handle("mmap", FunctionDescriptor.of(PTR, PTR, LONG, INT, INT, INT, LONG));
    private static final MethodHandle MUNMAP = handle("munmap", FunctionDescriptor.of(INT, PTR, LONG));
    private static final MethodHandle GETTID = optional("gettid", FunctionDescriptor.of(INT));
    private static final MethodHandle SETAFFINITY = handle("sched_setaffinity", FunctionDescriptor.of(INT, INT, LONG, PTR));
    private static final MethodHandle GETAFFINITY = handle("sched_getaffinity", FunctionDescriptor.of(INT, INT, LONG, PTR));
    private static final MethodHandle STRERROR = LINKER.downcallHandle(
            LIBC.find("strerror").orElseThrow(), FunctionDescriptor.of(PTR, INT));

    private static final boolean ARM = System.getProperty("os.arch").equals("aarch64");
    static final int O_RDONLY = 0, O_RDWR = 2, O_CREAT = 0100, O_EXCL = 0200, O_CLOEXEC = 02000000;
    static final int O_NOFOLLOW = ARM ? 0100000 : 0400000;
    static final int O_DIRECTORY = ARM ? 040000 : 0200000;
    private static final int EINVAL = 22, ENOSYS = 38, EPERM = 1;
    private static final long SYS_BPF = ARM ? 280 : 321, SYS_GETTID = ARM ? 178 : 186;
    private static final long BPF_OBJ_GET = 7, BPF_OBJ_GET_INFO_BY_FD = 15;

    private static MethodHandle handle(String name, FunctionDescriptor d, Linker.Option... more) {
        var opts = new Linker.Option[more.length + 1];
        opts[0] = ERRNO_OPT;
        System.arraycopy(more, 0, opts, 1, more.length);
        return LINKER.downcallHandle(LIBC.find(name).orElseThrow(), d, opts);
    }

    private static MethodHandle optional(String name, FunctionDescriptor d) {
        return LIBC.find(name).map(s -> LINKER.downcallHandle(s, d, ERRNO_OPT)).orElse(null);
    }

    static boolean available() {
        return true;
    }

    static String unavailableReason() {
        return "";
    }

    /** Runs one call; {@code -errno} when it returned -1. */
    private interface Call {
        int run(MemorySegment state, Arena a) throws Throwable;
    }

    private static int call(Call c) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment state = a.allocate(STATE);
            int rc = c.run(state, a);
            return rc == -1 ? -(int) ERRNO.get(state, 0L) : rc;
        } catch (Throwable t) {
            throw new IllegalStateException("native call failed: " + t, t);
        }
    }

    static int openDir(String path) {
        return call((s, a) -> (int) OPEN.invokeExact(s, a.allocateFrom(path),
                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0));
    }

    /** A new file: {@code openat(O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)}. */
    static int createExclusive(int dfd, String name, int mode) {
        int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
        return call((s, a) -> (int) OPENAT.invokeExact(s, dfd, a.allocateFrom(name), flags, mode));
    }

    static int flock(int fd, int op) {
        return call((s, a) -> (int) FLOCK.invokeExact(s, fd, op));
    }

    static int ftruncate(int fd, long length) {
        return call((s, a) -> (int) FTRUNCATE.invokeExact(s, fd, length));
    }

    /**
     * Renames without replacing anything: {@code renameat2(RENAME_NOREPLACE)}, else (an old libc,
     * or a file system without it) a hard link, which never replaces either, and an unlink.
     */
    static int renameNoReplace(int dfd, String from, String to) {
        if (RENAMEAT2 != null) {
            int rc = call((s, a) -> (int) RENAMEAT2.invokeExact(s, dfd, a.allocateFrom(from), dfd, a.allocateFrom(to), 1));
            if (rc != -EINVAL && rc != -ENOSYS && rc != -EPERM) {
                return rc;
            }
        }
        int rc = call((s, a) -> (int) LINKAT.invokeExact(s, dfd, a.allocateFrom(from), dfd, a.allocateFrom(to), 0));
        return rc < 0 ? rc : unlinkAt(dfd, from);
    }

    static int unlinkAt(int dfd, String name) {
        return call((s, a) -> (int) UNLINKAT.invokeExact(s, dfd, a.allocateFrom(name), 0));
    }

    static int close(int fd) {
        return call((s, a) -> (int) CLOSE.invokeExact(s, fd));
    }

    /** Runs one call returning a long; {@code -errno} when it returned -1. */
    private interface LongCall {
        long run(MemorySegment state, Arena a) throws Throwable;
    }

    private static long callLong(LongCall c) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment state = a.allocate(STATE);
            long rc = c.run(state, a);
            return rc == -1 ? -(int) ERRNO.get(state, 0L) : rc;
        } catch (Throwable t) {
            throw new IllegalStateException("native call failed: " + t, t);
        }
    }

    /**
     * {@code BPF_OBJ_GET} of the pin at {@code path} with file flags 0: a read-write descriptor,
     * since a read-only one cannot be mapped shared (FORMAT.md section 10). The attribute is the
     * command's prefix of {@code union bpf_attr} (pathname u64, bpf_fd, file_flags, path_fd, pad).
     */
    static int bpfObjGet(String path) {
        return (int) callLong((s, a) -> {
            MemorySegment attr = a.allocate(24, 8);
            attr.set(LONG, 0, a.allocateFrom(path).address());
            return (long) SYSCALL3.invokeExact(s, SYS_BPF, BPF_OBJ_GET, attr, 24L);
        });
    }

    /**
     * {@code BPF_OBJ_GET_INFO_BY_FD}: the head of {@code struct bpf_map_info} (type, id, key_size,
     * value_size, max_entries, map_flags) into {@code out}; 0 or {@code -errno}.
     */
    static int bpfMapInfo(int fd, int[] out) {
        return (int) callLong((s, a) -> {
            MemorySegment info = a.allocate(4L * out.length, 8);
            MemorySegment attr = a.allocate(16, 8);
            attr.set(INT, 0, fd);
            attr.set(INT, 4, (int) info.byteSize());
            attr.set(LONG, 8, info.address());
            long rc = (long) SYSCALL3.invokeExact(s, SYS_BPF, BPF_OBJ_GET_INFO_BY_FD, attr, 16L);
            for (int i = 0; i < out.length; i++) {
                out[i] = info.getAtIndex(INT, i);
            }
            return rc;
        });
    }

    /** {@code mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0)}: the address, or {@code -errno}. */
    static long mmapReadShared(int fd, long len) {
        return callLong((s, a) -> {
            MemorySegment p = (MemorySegment) MMAP.invokeExact(s, MemorySegment.NULL, len, 1 /* PROT_READ */,
                    1 /* MAP_SHARED */, fd, 0L);
            return p.address();
        });
    }

    static int munmap(long address, long len) {
        return call((s, a) -> (int) MUNMAP.invokeExact(s, MemorySegment.ofAddress(address), len));
    }

    /** The calling OS thread's id in this process's pid namespace. */
    static int gettid() {
        if (GETTID != null) {
            return call((s, a) -> (int) GETTID.invokeExact(s));
        }
        return (int) callLong((s, a) -> (long) SYSCALL3.invokeExact(s, SYS_GETTID, 0L, MemorySegment.NULL, 0L));
    }

    /** The calling thread's CPU mask (bytes of {@code cpu_set_t}); tests restore it after pinning. */
    static byte[] getAffinity() {
        byte[] mask = new byte[128];
        int rc = call((s, a) -> {
            MemorySegment m = a.allocate(mask.length);
            int r = (int) GETAFFINITY.invokeExact(s, 0, (long) mask.length, m);
            MemorySegment.copy(m, ValueLayout.JAVA_BYTE, 0, mask, 0, mask.length);
            return r;
        });
        if (rc < 0) {
            throw new IllegalStateException("sched_getaffinity: " + strerror(-rc));
        }
        return mask;
    }

    /** Sets the calling thread's CPU mask; 0 or {@code -errno}. */
    static int setAffinity(byte[] mask) {
        return call((s, a) -> (int) SETAFFINITY.invokeExact(s, 0, (long) mask.length, a.allocateFrom(ValueLayout.JAVA_BYTE, mask)));
    }

    static String strerror(int errno) {
        try {
            MemorySegment p = (MemorySegment) STRERROR.invokeExact(errno);
            return p.reinterpret(256).getString(0);
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }
}
