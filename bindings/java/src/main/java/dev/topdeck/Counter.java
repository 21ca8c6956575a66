// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.LONG;
import static dev.topdeck.format.Format.addU64Saturating;

/**
 * A counter: one u64 word in every shard, summed by readers (docs/FORMAT.md section 5). An update
 * goes to the calling thread's own shard with a plain load and an aligned store, no atomic
 * instruction; threads without a shard of their own add atomically to the overflow shard. A total
 * that would pass 2^64-1 stays at 2^64-1 (read unsigned, as {@link Long#toUnsignedString}).
 *
 * <pre>{@code
 * Counter jobs = registry.counter("jobs_total", "Jobs done.", "queue", "fast");
 * jobs.inc();
 * jobs.add(7);
 * }</pre>
 */
public final class Counter extends ShardedMetric {
    Counter(Registry r, int valueOffset) {
        super(r, valueOffset);
    }

    /** Adds one. */
    public void inc() {
        add0(1);
    }

    /** Adds {@code n >= 0} (a counter only goes up: use a {@link Gauge} for values that go down). */
    public void add(long n) {
        if (n < 0) {
            throw new IllegalArgumentException("counters only go up; got " + n + ": use a Gauge for values that go down");
        }
        add0(n);
    }

    private void add0(long n) {
        int i = Shards.index();
        if (i < shardCount) {
            int at = base + i * shardLen;
            LONG.setOpaque(buf, at, addU64Saturating((long) LONG.getOpaque(buf, at), n));
        } else if (n < 1L << 56 && (long) LONG.getOpaque(buf, overflow) >= 0) {
            // Below 2^63, an atomic add of less than 2^56 cannot pass the top unless 2^7 such
            // adds are in flight at once: the common case keeps its one instruction.
            LONG.getAndAdd(buf, overflow, n);
        } else {
            long old;
            do {
                old = (long) LONG.getOpaque(buf, overflow);
            } while (!LONG.compareAndSet(buf, overflow, old, addU64Saturating(old, n)));
        }
    }

    /** This process's total (every shard), as a reader would sum it: unsigned, at most 2^64-1. */
    public long get() {
        return sum(0);
    }
}
