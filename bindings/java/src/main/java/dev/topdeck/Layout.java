// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.*;

import java.nio.ByteBuffer;

/** Where the sections of a new file go (the Rust {@code Header::new}). */
final class Layout {
    final long descOffset = HEADER_LEN;
    final int descCapacity;
    final long stringsOffset, stringsLen, sharedOffset, sharedLen, shardsOffset, shardLen, fileLen;
    final int shardCount;

    Layout(int metrics, long stringBytes, long gaugeBytes, long shardBytes, int shards) {
        descCapacity = metrics;
        stringsOffset = alignUp(HEADER_LEN + (long) metrics * DESC_LEN);
        sharedOffset = alignUp(stringsOffset + stringBytes);
        shardsOffset = alignUp(sharedOffset + gaugeBytes);
        shardLen = alignUp(shardBytes);
        shardCount = shards;
        stringsLen = sharedOffset - stringsOffset;
        sharedLen = shardsOffset - sharedOffset;
        fileLen = shardsOffset + shardLen * (shards + 1L);
        // A file past the readers' limits must never be created; this writer maps the file as one
        // ByteBuffer, so it also stays below 2 GiB.
        limit("metrics", metrics, 1, MAX_DESC_CAPACITY);
        limit("shards", shards, 0, MAX_SHARD_COUNT);
        limit("shardBytes", shardLen, 8, MAX_SHARD_LEN);
        limit("stringBytes", stringsLen, 0, MAX_STRINGS_LEN);
        limit("gaugeBytes", sharedLen, 0, MAX_SHARED_LEN);
        limit("the file (all areas together)", fileLen, 0, Math.min(MAX_FILE_LEN, Integer.MAX_VALUE));
    }

    private static void limit(String what, long value, long low, long high) {
        if (value < low || value > high) {
            throw new IllegalArgumentException("cannot create a registry this large: " + what + " is " + value + ", outside "
                    + low + "..=" + high + " (docs/FORMAT.md section 8; a Java writer maps at most 2 GiB); lower the "
                    + "builder's metrics, stringBytes, gaugeBytes, shardBytes or shards");
        }
    }

    /** Every header field except {@code version}, {@code desc_count} and {@code shards_in_use}. */
    void writeHeader(ByteBuffer b, long pid, long startTicks, long createdUnixNs, String process, String registry) {
        b.put(0, MAGIC);
        b.putInt(12, HEADER_LEN);
        b.putLong(16, fileLen);
        b.putInt(24, (int) pid);
        b.putLong(32, startTicks);
        b.putLong(40, createdUnixNs);
        b.putLong(48, descOffset);
        b.putInt(56, descCapacity);
        b.putInt(60, DESC_LEN);
        b.putInt(68, shardCount);
        b.putLong(72, stringsOffset);
        b.putLong(80, stringsLen);
        b.putLong(88, sharedOffset);
        b.putLong(96, sharedLen);
        b.putLong(104, shardsOffset);
        b.putLong(112, shardLen);
        b.put(128, truncatedName(process));
        b.put(192, truncatedName(registry));
    }
}
