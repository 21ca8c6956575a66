// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.read;

import dev.topdeck.Exponential;

/**
 * A histogram's totals over the shards: {@code counts[k]} observations in bucket {@code minIndex +
 * k} (upper bound {@link #upperBound(int)}), {@code zeroCount} at or below {@code zeroThreshold},
 * {@code count} = zero + buckets, {@code sum}, and {@code max} (NaN when empty).
 */
public record HistogramValue(int schema, double zeroThreshold, long zeroCount, int minIndex, long[] counts, long count,
        double sum, double max) {
    /** Upper bound of {@code counts[k]}'s bucket. */
    public double upperBound(int k) {
        return Exponential.upperBound(schema, minIndex + k);
    }
}
