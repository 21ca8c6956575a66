// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.LONG;

/**
 * A counter: one u64 word in every shard, summed by readers (docs/FORMAT.md section 5). An update
 * goes to the calling thread's own shard with a plain load and an aligned store, no atomic
 * instruction; threads without a shard of their own add atomically to the overflow shard.
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
            LONG.setOpaque(buf, at, (long) LONG.getOpaque(buf, at) + n);
        } else {
            LONG.getAndAdd(buf, overflow, n);
        }
    }

    /** This process's total (every shard), as a reader would sum it. */
    public long get() {
        return sum(0);
    }
}
