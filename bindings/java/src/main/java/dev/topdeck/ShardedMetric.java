// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.LONG;
import static dev.topdeck.format.Format.addU64Saturating;

import java.nio.ByteBuffer;

/**
 * A metric with a value block in every shard (counters, histograms): where the calling thread
 * writes, and the block's words summed as a reader sums them.
 */
abstract class ShardedMetric {
    final Registry registry;
    final ByteBuffer buf;
    /** The block's offset in shard 0; shard {@code i}'s is {@code base + i * shardLen}. */
    final int base, shardLen, shardCount;
    /** The block in the overflow shard, shared by threads without a shard of their own. */
    final int overflow;

    ShardedMetric(Registry r, int valueOffset) {
        registry = r;
        buf = r.buf;
        base = r.shardsOffset + valueOffset;
        shardLen = r.shardLen;
        shardCount = r.shardCount;
        overflow = r.overflowOffset + valueOffset;
    }

    /**
     * Word {@code byteOffset} of the block summed over the shards in use and the overflow shard,
     * as unsigned words saturating at 2^64-1.
     */
    final long sum(int byteOffset) {
        long n = 0;
        int off = base - registry.shardsOffset + byteOffset;
        for (int s : registry.shardStarts()) {
            n = addU64Saturating(n, (long) LONG.getOpaque(buf, s + off));
        }
        return n;
    }
}
