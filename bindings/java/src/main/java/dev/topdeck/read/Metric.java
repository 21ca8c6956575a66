// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.read;

import java.util.List;

/**
 * One series as a reader saw it. {@code kind}: {@code counter}, {@code gauge} (i64), {@code
 * gauge_f64} or {@code histogram}; {@code value}: a {@link Long} (a counter's is unsigned: print it
 * with {@link Long#toUnsignedString(long)}), a {@link Double}, or a {@link HistogramValue}.
 */
public record Metric(String kind, String name, List<Label> labels, String help, String unit, Object value) {
    /** One label, in registration order. */
    public record Label(String key, String value) {}
}
