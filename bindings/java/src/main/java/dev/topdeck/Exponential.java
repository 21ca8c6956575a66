// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

/**
 * Exponential bucket maths (docs/FORMAT.md section 5), the scheme of Prometheus native histograms
 * and OpenTelemetry exponential histograms: with schema {@code s} the base is {@code 2^(2^-s)} and
 * bucket {@code i} holds {@code (base^(i-1), base^i]}.
 *
 * <p>A port of {@code crates/topdeck-format/src/exponential.rs}, table lookup on the mantissa
 * included, held bit for bit to the vectors the Rust library prints
 * ({@code bindings/python/tests/bucket_vectors.txt}).
 *
 * <pre>{@code
 * Exponential.bucketIndex(3, 1.0)  == 0   // (2^-1/8, 1]
 * Exponential.bucketIndex(0, 3.0)  == 2   // (2, 4]
 * Exponential.upperBound(3, 8)     == 2.0
 * }</pre>
 */
public final class Exponential {
    public static final int MIN_SCHEMA = -4;
    public static final int MAX_SCHEMA = 8;
    public static final int DEFAULT_SCHEMA = 3;
    /** The library's default range for seconds: 1 ns to 10^6 s. */
    public static final double DEFAULT_MIN = 1e-9, DEFAULT_MAX = 1e6;

    // Mantissa bits looked up: 2^12 cells, each narrower than the closest pair of bounds at
    // schema 8, so a cell holds at most one bound.
    private static final int CELL_BITS = 12;
    private static final int MANTISSA_BITS = 52;
    private static final long MANTISSA_MASK = (1L << MANTISSA_BITS) - 1;
    private static final int MANTISSA_SLOTS = 512;
    private static final Exponential[] INDEXERS = new Exponential[MAX_SCHEMA - MIN_SCHEMA + 1];

    static {
        for (int s = MIN_SCHEMA; s <= MAX_SCHEMA; s++) {
            INDEXERS[s - MIN_SCHEMA] = new Exponential(s);
        }
    }

    private final int schema;
    private final int perOctave;
    /** Mantissa bits of {@code 2^(k/perOctave)}, padded with a value above every mantissa. */
    private final long[] mantissas;
    /** For each cell, how many of {@code mantissas[1..perOctave]} lie strictly below its start. */
    private final short[] below;

    private Exponential(int schema) {
        this.schema = schema;
        if (schema > 0) {
            perOctave = 1 << schema;
            mantissas = new long[MANTISSA_SLOTS];
            java.util.Arrays.fill(mantissas, Long.MAX_VALUE);
            octave = new double[perOctave];
            for (int k = 0; k < perOctave; k++) {
                octave[k] = octaveBound(k, perOctave);
                mantissas[k] = Double.doubleToRawLongBits(octave[k]) & MANTISSA_MASK;
            }
            below = new short[1 << CELL_BITS];
            for (int cell = 0; cell < below.length; cell++) {
                long start = (long) cell << (MANTISSA_BITS - CELL_BITS);
                int n = 0;
                for (int k = 1; k < perOctave; k++) {
                    if (mantissas[k] < start) {
                        n++;
                    }
                }
                below[cell] = (short) n;
            }
        } else {
            perOctave = 0;
            mantissas = null;
            below = null;
        }
    }

    /** The indexer for {@code schema}, its tables built once per process. */
    public static Exponential of(int schema) {
        checkSchema(schema);
        return INDEXERS[schema - MIN_SCHEMA];
    }

    public static boolean isValidSchema(int schema) {
        return schema >= MIN_SCHEMA && schema <= MAX_SCHEMA;
    }

    static void checkSchema(int schema) {
        if (!isValidSchema(schema)) {
            throw new IllegalArgumentException(
                    "histogram schema " + schema + " is outside " + MIN_SCHEMA + "..=" + MAX_SCHEMA);
        }
    }

    public int schema() {
        return schema;
    }

    /** {@code 2^(k/perOctave)} for each {@code k}: the octave's bounds, correctly rounded. */
    private double[] octave;

    /**
     * {@code 2^(k/n)} in {@code [1, 2)}, correctly rounded, as the format requires (and glibc's
     * exp2, which the Rust library calls, gives). Java's pow is only within one ulp, so its result
     * is moved to the double nearest the true value: {@code 2^(k/n)} lies above the midpoint
     * {@code m} of two neighbours exactly when {@code m^n < 2^k}, compared in exact arithmetic.
     */
    private static double octaveBound(int k, int n) {
        double c = StrictMath.pow(2.0, (double) k / n);
        if (k == 0) {
            return c;
        }
        java.math.BigDecimal target = java.math.BigDecimal.valueOf(2).pow(k);
        while (mid(c, Math.nextUp(c)).pow(n).compareTo(target) < 0) {
            c = Math.nextUp(c);
        }
        while (mid(Math.nextDown(c), c).pow(n).compareTo(target) > 0) {
            c = Math.nextDown(c);
        }
        return c;
    }

    private static java.math.BigDecimal mid(double a, double b) {
        return new java.math.BigDecimal(a).add(new java.math.BigDecimal(b)).divide(java.math.BigDecimal.valueOf(2));
    }

    /** The bucket index of a finite {@code v > 0}, exactly as Prometheus computes it. */
    public int index(double v) {
        long bits = Double.doubleToRawLongBits(v);
        int biased = (int) ((bits >>> MANTISSA_BITS) & 0x7ff);
        if (biased == 0) {
            return subnormalIndex(v);
        }
        int exp = biased - 1023; // v = 1.mantissa * 2^exp
        long mantissa = bits & MANTISSA_MASK;
        if (schema > 0) {
            int b = below[(int) (mantissa >>> (MANTISSA_BITS - CELL_BITS))];
            int rank = (mantissa != 0 ? 1 : 0) + b + (mantissas[(b + 1) & (MANTISSA_SLOTS - 1)] < mantissa ? 1 : 0);
            return rank + exp * perOctave;
        }
        int key = exp + 1 - (mantissa == 0 ? 1 : 0);
        int shift = -schema;
        return (key + (1 << shift) - 1) >> shift;
    }

    private int subnormalIndex(double v) {
        // Scaling by 2^64 is exact and spans a whole number of buckets at every schema.
        int octaves = 64 << Math.max(schema, 0) >> Math.max(-schema, 0);
        return index(v * 0x1p64) - octaves;
    }

    /** The bucket index of a finite {@code v > 0} at {@code schema}. */
    public static int bucketIndex(int schema, double v) {
        return of(schema).index(v);
    }

    /** Upper bound {@code base^index} of bucket {@code index}, saturating as Prometheus does. */
    public static double upperBound(int schema, int index) {
        checkSchema(schema);
        double frac;
        int exp;
        if (schema > 0) {
            int n = 1 << schema;
            int k = Math.floorMod(index, n);
            frac = of(schema).octave[k];
            exp = Math.floorDiv(index, n);
        } else {
            frac = 1.0;
            long e = (long) index * (1L << -schema);
            exp = (int) Math.max(Integer.MIN_VALUE, Math.min(Integer.MAX_VALUE, e));
        }
        if (exp >= 1024) {
            return Double.MAX_VALUE;
        }
        // Two steps keep each factor representable down to the subnormals.
        int half = exp / 2;
        return frac * (Math.scalb(1.0, half) * Math.scalb(1.0, exp - half));
    }

    /** Maps a double to a long with the same unsigned order, never 0 for a non-NaN value. */
    public static long orderedBits(double v) {
        long b = Double.doubleToRawLongBits(v);
        return b >= 0 ? b | Long.MIN_VALUE : ~b;
    }

    /** Inverse of {@link #orderedBits}; NaN for 0 ("no value"). */
    public static double fromOrderedBits(long o) {
        if (o == 0) {
            return Double.NaN;
        }
        return Double.longBitsToDouble(o < 0 ? o & Long.MAX_VALUE : ~o);
    }

    /**
     * The bucket range of one histogram: {@code bucketCount} buckets from {@code minIndex}, and a
     * zero bucket up to {@code zeroThreshold} (the lower bound of the first bucket).
     */
    public record Range(int schema, int minIndex, int bucketCount, double zeroThreshold) {
        /** The range at {@code schema} covering {@code (min, max]} with whole buckets. */
        public static Range covering(int schema, double min, double max) {
            Exponential ix = of(schema);
            int first = ix.index(min);
            int last = Math.max(ix.index(max), first);
            return new Range(schema, first, last - first + 1, upperBound(schema, first - 1));
        }

        /** Like {@link #covering}, refused as the Rust library's {@code Buckets::exponential} refuses. */
        public static Range checked(int schema, double min, double max) {
            checkSchema(schema);
            if (!(min > 0 && min < max && max < Double.POSITIVE_INFINITY)) {
                throw new IllegalArgumentException(
                        "histogram range (" + min + ", " + max + "] must satisfy 0 < min < max < infinity");
            }
            Range r = covering(schema, min, max);
            if (r.bucketCount > dev.topdeck.format.Format.MAX_BUCKETS) {
                throw new IllegalArgumentException("histogram range (" + min + ", " + max + "] at schema " + schema
                        + " needs " + r.bucketCount + " buckets, more than " + dev.topdeck.format.Format.MAX_BUCKETS
                        + "; narrow the range or lower the schema");
            }
            return r;
        }

        /** The library's default: schema 3, 1 ns to 10^6 s. */
        public static Range defaults() {
            return checked(DEFAULT_SCHEMA, DEFAULT_MIN, DEFAULT_MAX);
        }
    }
}
