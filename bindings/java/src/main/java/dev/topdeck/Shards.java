// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.ref.WeakReference;
import java.util.ArrayList;
import java.util.List;
import java.util.PriorityQueue;

/**
 * Per-thread shard indices, shared by every registry of the process (docs/FORMAT.md section 7,
 * as crates/topdeck/src/writer/shard.rs does it).
 *
 * <p>A thread takes the lowest free index the first time it updates a sharded metric; only it
 * writes that shard, with a plain (opaque) load and an aligned 8-byte store. Java has no
 * thread-exit hook, so the pool keeps each index's owning {@link Thread} and takes the index back
 * when it finds the owner dead ({@code !isAlive()}) while looking for a free one. {@code
 * isAlive()} returning false orders every action of the dead thread before what follows (JLS
 * 17.4.4), and the pool's lock orders that before the new owner's first load: sums stay exact and
 * never go backwards. Holding at most {@link #MAX_INDICES} dead {@code Thread} objects until their
 * index is wanted is the price of not depending on the garbage collector. Virtual threads, and
 * threads past the limit, share the overflow shard.
 */
final class Shards {
    private Shards() {}

    /** Beyond any registry's shard count (the format's limit): use the overflow shard. */
    static final int OVERFLOW = Integer.MAX_VALUE;
    static final int MAX_INDICES = 1024;

    /** A thread's shard index, fixed for the thread's life. */
    static final class Lease {
        final int index;

        Lease(int index) {
            this.index = index;
        }
    }

    private static final Lease OVERFLOW_LEASE = new Lease(OVERFLOW);
    private static final ThreadLocal<Lease> LEASE = ThreadLocal.withInitial(Shards::claim);
    private static final Object LOCK = new Object();
    private static final Thread[] OWNERS = new Thread[MAX_INDICES];
    private static final PriorityQueue<Integer> FREE = new PriorityQueue<>();
    private static final List<WeakReference<Registry>> REGISTRIES = new ArrayList<>();
    private static int next;
    private static final MethodHandle IS_VIRTUAL = isVirtualHandle();

    /** The calling thread's shard index, or {@link #OVERFLOW}. */
    static int index() {
        return LEASE.get().index;
    }

    private static Lease claim() {
        Thread me = Thread.currentThread();
        if (isVirtual(me)) {
            return OVERFLOW_LEASE;
        }
        synchronized (LOCK) {
            if (FREE.isEmpty()) {
                for (int i = 0; i < next; i++) {
                    if (OWNERS[i] != null && !OWNERS[i].isAlive()) {
                        OWNERS[i] = null;
                        FREE.add(i);
                    }
                }
            }
            int i;
            if (!FREE.isEmpty()) {
                i = FREE.poll();
            } else if (next < MAX_INDICES) {
                i = next++;
                // Readers must look at the new shard before this thread writes to it.
                REGISTRIES.removeIf(r -> {
                    Registry reg = r.get();
                    if (reg != null) {
                        reg.publishShardsInUse(next);
                    }
                    return reg == null;
                });
            } else {
                return OVERFLOW_LEASE;
            }
            OWNERS[i] = me;
            return new Lease(i);
        }
    }

    /** Announces a new registry: its readers must look at every index handed out so far. */
    static void register(Registry r) {
        synchronized (LOCK) {
            r.publishShardsInUse(next);
            REGISTRIES.add(new WeakReference<>(r));
        }
    }

    static boolean isVirtual(Thread t) {
        try {
            return IS_VIRTUAL != null && (boolean) IS_VIRTUAL.invokeExact(t);
        } catch (Throwable e) {
            return false;
        }
    }

    /** {@code Thread.isVirtual} (JDK 21+); null on JDKs without virtual threads. */
    private static MethodHandle isVirtualHandle() {
        try {
            return MethodHandles.publicLookup().findVirtual(Thread.class, "isVirtual", MethodType.methodType(boolean.class));
        } catch (ReflectiveOperationException e) {
            return null;
        }
    }
}
