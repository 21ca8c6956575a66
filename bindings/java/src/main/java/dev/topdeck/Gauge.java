// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.LONG;

/**
 * An integer gauge: one i64 word in the shared area, updated atomically.
 *
 * <pre>{@code
 * Gauge depth = registry.gauge("queue_depth", "Jobs waiting.");
 * depth.set(3);
 * depth.inc();
 * }</pre>
 */
public final class Gauge extends SharedWord {
    Gauge(Registry r, int valueOffset) {
        super(r, valueOffset);
    }

    public void set(long v) {
        LONG.setOpaque(buf, at, v);
    }

    public void add(long n) {
        LONG.getAndAdd(buf, at, n);
    }

    public void inc() {
        add(1);
    }

    public void dec() {
        add(-1);
    }

    public long get() {
        return (long) LONG.getOpaque(buf, at);
    }
}
