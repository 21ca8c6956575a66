// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

/**
 * The system calls a writer needs and Java does not offer: {@code flock(2)} (the JDK's
 * {@code FileChannel.lock} is a POSIX record lock, which topdeck readers do not see) and
 * {@code renameat2(RENAME_NOREPLACE)}. This is the JDK 17 build, which has no foreign function
 * API: it refuses, and a writer cannot be created. {@code META-INF/versions/22} of the jar holds
 * the real one. Calls return 0 (or a descriptor) on success and {@code -errno} on failure.
 */
final class Native {
    private Native() {}

    static boolean available() {
        return false;
    }

    static String unavailableReason() {
        return "a topdeck writer needs JDK 22 or newer (this is Java " + Runtime.version() + "): "
                + "it must hold a flock(2) on its file, which Java reaches only through the foreign "
                + "function API (java.lang.foreign, final in JDK 22); FileChannel.lock takes a POSIX "
                + "record lock that topdeck readers cannot see, so they would call this process dead "
                + "and `topdeck gc` would delete its live file. Run on JDK 22+ with "
                + "--enable-native-access=ALL-UNNAMED; reading works on JDK 17";
    }

    static int openDir(String path) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int createExclusive(int dfd, String name, int mode) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int flock(int fd, int op) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int ftruncate(int fd, long length) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int renameNoReplace(int dfd, String from, String to) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int unlinkAt(int dfd, String name) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int close(int fd) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int bpfObjGet(String path) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int bpfMapInfo(int fd, int[] out) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static long mmapReadShared(int fd, long len) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int munmap(long address, long len) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int gettid() {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static byte[] getAffinity() {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static int setAffinity(byte[] mask) {
        throw new UnsupportedOperationException(unavailableReason());
    }

    static String strerror(int errno) {
        return "errno " + errno;
    }
}
