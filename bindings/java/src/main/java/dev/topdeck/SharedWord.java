// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import java.nio.ByteBuffer;

/** A metric held in one word of the shared area (gauges), updated atomically. */
abstract class SharedWord {
    final ByteBuffer buf;
    final int at;

    SharedWord(Registry r, int valueOffset) {
        buf = r.buf;
        at = r.sharedOffset + valueOffset;
    }
}
