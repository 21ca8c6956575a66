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
 * {@code ftruncate(2)}, {@code renameat2(2)} with {@code RENAME_NOREPLACE}, {@code unlinkat(2)}.
 * Calls return 0 (or a descriptor) on success and {@code -errno} on failure.
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
    private static final MethodHandle STRERROR = LINKER.downcallHandle(
            LIBC.find("strerror").orElseThrow(), FunctionDescriptor.of(PTR, INT));

    private static final boolean ARM = System.getProperty("os.arch").equals("aarch64");
    static final int O_RDONLY = 0, O_RDWR = 2, O_CREAT = 0100, O_EXCL = 0200, O_CLOEXEC = 02000000;
    static final int O_NOFOLLOW = ARM ? 0100000 : 0400000;
    static final int O_DIRECTORY = ARM ? 040000 : 0200000;
    private static final int EINVAL = 22, ENOSYS = 38, EPERM = 1;

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

    static String strerror(int errno) {
        try {
            MemorySegment p = (MemorySegment) STRERROR.invokeExact(errno);
            return p.reinterpret(256).getString(0);
        } catch (Throwable t) {
            return "errno " + errno;
        }
    }
}
