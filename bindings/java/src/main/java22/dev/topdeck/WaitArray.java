// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;

/**
 * The mapped thread-waits array's memory (docs/FORMAT.md section 10): native-endian words the
 * agent's BPF probe writes and this process only loads. {@link ThreadWaits} opens and checks it;
 * this class is the part that needs the foreign memory API (JDK 22+).
 *
 * <p>The mapping is owned by an automatic arena whose cleanup unmaps it once nothing reaches it:
 * a timing begun on an array holds it, so an array replaced after an agent restart stays mapped
 * until its last timing ends (the Rust library leaks it instead; the garbage collector gives Java
 * the reference count Rust lacks there).
 */
@SuppressWarnings("restricted") // a mapping of the length the kernel reported, made just before
final class WaitArray {
    private static final ValueLayout.OfLong WORD = ValueLayout.JAVA_LONG;
    private static final VarHandle WORDS = WORD.varHandle();

    private final MemorySegment mem;

    private WaitArray(MemorySegment mem) {
        this.mem = mem;
    }

    /** Takes ownership of a {@code PROT_READ, MAP_SHARED} mapping of {@code len} bytes at {@code address}. */
    static WaitArray adopt(long address, long len) {
        MemorySegment mem = MemorySegment.ofAddress(address)
                .reinterpret(len, Arena.ofAuto(), ignored -> Native.munmap(address, len));
        return new WaitArray(mem);
    }

    /** The 64-bit word at byte {@code offset} (8-aligned, inside the mapping), opaque: a plain load. */
    long word(long offset) {
        return (long) WORDS.getOpaque(mem, offset);
    }

    /**
     * As {@link #word}, with acquire: loads after it (the header's state) are not done before it,
     * as FORMAT.md asks of a stop (the state must read LIVE after the slot's second load).
     */
    long wordAcquire(long offset) {
        return (long) WORDS.getAcquire(mem, offset);
    }

    /** The 32-bit word at byte {@code offset}. */
    int word32(long offset) {
        return mem.get(ValueLayout.JAVA_INT, offset);
    }
}
