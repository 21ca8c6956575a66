// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

/**
 * The mapped thread-waits array's memory. This is the JDK 17 build: without the foreign memory
 * API nothing maps the array, and a writer (hence a timer) cannot be created on JDK 17 anyway.
 * {@code META-INF/versions/22} of the jar holds the real one.
 */
final class WaitArray {
    private WaitArray() {}

    static WaitArray adopt(long address, long len) {
        throw new UnsupportedOperationException(Native.unavailableReason());
    }

    long word(long offset) {
        throw new UnsupportedOperationException(Native.unavailableReason());
    }

    long wordAcquire(long offset) {
        throw new UnsupportedOperationException(Native.unavailableReason());
    }

    int word32(long offset) {
        throw new UnsupportedOperationException(Native.unavailableReason());
    }
}
