// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.LONG;

/**
 * A histogram with exponential buckets (docs/FORMAT.md section 5): in every shard its count, sum,
 * max, zero bucket and buckets. An observation goes to the calling thread's own shard with plain
 * loads and stores; threads without a shard of their own update the overflow shard atomically.
 *
 * <pre>{@code
 * Histogram latency = registry.metric("request_duration_seconds").unit("seconds").labels("route", "/").histogram();
 * latency.observe(0.25);
 * try (Histogram.Timer t = latency.startTimer()) {
 *     serve();
 * }
 * }</pre>
 */
public final class Histogram extends ShardedMetric {
    private static final int SUM = 8, MAX = 16, ZERO = 24, HEAD = 32;

    private final Exponential indexer;
    private final int minIndex, last;
    private final double zeroThreshold;
    private final Exponential.Range range;

    Histogram(Registry r, int valueOffset, Exponential.Range range) {
        super(r, valueOffset);
        indexer = Exponential.of(range.schema());
        minIndex = range.minIndex();
        last = range.bucketCount() - 1;
        zeroThreshold = range.zeroThreshold();
        this.range = range;
    }

    /** The bucket range this histogram was registered with. */
    public Exponential.Range range() {
        return range;
    }

    /** Records {@code v}: counted in its bucket (values above the range in the last one), NaN ignored. */
    public void observe(double v) {
        int slot;
        if (v > zeroThreshold) {
            int k = indexer.index(v) - minIndex;
            slot = HEAD + 8 * (k < 0 ? 0 : Math.min(k, last));
        } else if (v != v) {
            return;
        } else {
            slot = ZERO;
        }
        int i = Shards.index();
        if (i < shardCount) {
            int at = base + i * shardLen;
            LONG.setOpaque(buf, at + slot, (long) LONG.getOpaque(buf, at + slot) + 1);
            double sum = Double.longBitsToDouble((long) LONG.getOpaque(buf, at + SUM)) + v;
            LONG.setOpaque(buf, at + SUM, Double.doubleToRawLongBits(sum));
            long o = Exponential.orderedBits(v);
            if (Long.compareUnsigned(o, (long) LONG.getOpaque(buf, at + MAX)) > 0) {
                LONG.setOpaque(buf, at + MAX, o);
            }
            LONG.setOpaque(buf, at, (long) LONG.getOpaque(buf, at) + 1);
        } else {
            observeShared(v, slot);
        }
    }

    /** The overflow shard is written by many threads: read-modify-writes are atomic. */
    private void observeShared(double v, int slot) {
        int at = overflow;
        LONG.getAndAdd(buf, at + slot, 1L);
        long old;
        do {
            old = (long) LONG.getVolatile(buf, at + SUM);
        } while (!LONG.compareAndSet(buf, at + SUM, old, Double.doubleToRawLongBits(Double.longBitsToDouble(old) + v)));
        long o = Exponential.orderedBits(v);
        do {
            old = (long) LONG.getVolatile(buf, at + MAX);
        } while (Long.compareUnsigned(o, old) > 0 && !LONG.compareAndSet(buf, at + MAX, old, o));
        LONG.getAndAdd(buf, at, 1L);
    }

    /** Starts timing; closing the timer records the elapsed seconds. */
    public Timer startTimer() {
        return new Timer(this, System.nanoTime());
    }

    /** Observations recorded in this process (every shard's zero bucket and buckets). */
    public long count() {
        long n = 0;
        for (int w = ZERO; w < HEAD + 8 * (last + 1); w += 8) {
            n += sum(w);
        }
        return n;
    }

    /** A timed section: {@code try (var t = histogram.startTimer()) { ... }}. */
    public static final class Timer implements AutoCloseable {
        private final Histogram histogram;
        private final long start;

        Timer(Histogram h, long start) {
            histogram = h;
            this.start = start;
        }

        /** Records the seconds since {@link Histogram#startTimer()}; returns them. */
        public double observeDuration() {
            double seconds = (System.nanoTime() - start) / 1e9;
            histogram.observe(seconds);
            return seconds;
        }

        @Override
        public void close() {
            observeDuration();
        }
    }
}
