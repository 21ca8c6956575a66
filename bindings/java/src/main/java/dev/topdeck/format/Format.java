// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.format;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The file format's constants, limits and small encodings (docs/FORMAT.md), shared by the writer
 * and the reader of this package. Not an API: it follows the format, not semver.
 */
public final class Format {
    private Format() {}

    public static final byte[] MAGIC = "TOPDECK\0".getBytes(StandardCharsets.US_ASCII);
    public static final int MAJOR = 1;
    /** v1.1: the clock area exists; this writer leaves it zero (it records seconds, never ticks). */
    public static final int VERSION = (1 << 16) | 1;
    public static final int HEADER_LEN = 4096;
    public static final int HEADER_FIELDS_END = 384;
    public static final int DESC_LEN = 64;
    public static final int PAGE = 4096;
    public static final String SUFFIX = ".topdeck";
    public static final String TEMP_PREFIX = ".creating-";
    public static final int NAME_FIELD_LEN = 64;

    public static final int VERSION_OFFSET = 8;
    public static final int DESC_COUNT_OFFSET = 64;
    public static final int SHARDS_IN_USE_OFFSET = 120;

    public static final int COUNTER = 1, GAUGE_I64 = 2, GAUGE_F64 = 3, HISTOGRAM = 4;
    /** Histogram words before the buckets: count, sum, max, zero. */
    public static final int H_COUNT = 0, H_SUM = 1, H_MAX = 2, H_ZERO = 3, H_HEAD = 4;

    // Section 8, "Limits a reader enforces" (a writer stays within them too).
    public static final long MAX_FILE_LEN = 1L << 32;
    public static final long MAX_DESC_CAPACITY = 1 << 20;
    public static final long MAX_DESC_LEN = 256;
    public static final long MAX_SHARD_COUNT = 1024;
    public static final long MAX_SHARD_LEN = 256L << 20;
    public static final long MAX_STRINGS_LEN = 256L << 20;
    public static final long MAX_SHARED_LEN = 64L << 20;
    public static final int MAX_BUCKETS = 1024;
    public static final int MAX_ABS_INDEX = 1 << 19;
    // Section 4: names.
    public static final int MAX_NAME_LEN = 200;
    public static final int MAX_LABEL_NAME_LEN = 100;
    public static final int MAX_LABEL_VALUE_LEN = 1024;
    public static final int MAX_LABELS = 32;
    public static final int MAX_LABELS_LEN = MAX_LABELS * (2 + MAX_LABEL_NAME_LEN + 2 + MAX_LABEL_VALUE_LEN);
    public static final int MAX_HELP_LEN = 1024;
    public static final int MAX_UNIT_LEN = 64;
    public static final Pattern METRIC_NAME = Pattern.compile("[a-zA-Z_:][a-zA-Z0-9_:]*");
    public static final Pattern LABEL_NAME = Pattern.compile("[a-zA-Z_][a-zA-Z0-9_]*");

    /** Aligned little-endian words of a byte buffer: one access is one aligned load or store. */
    public static final VarHandle LONG = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    public static final VarHandle INT = MethodHandles.byteBufferViewVarHandle(int[].class, ByteOrder.LITTLE_ENDIAN);

    /**
     * {@code a + b} as unsigned 64-bit words, or 2^64-1 (-1L) where that does not fit: a counter
     * stops at the top rather than wrapping to a small value, which readers would take for a
     * reset (docs/FORMAT.md section 5).
     */
    public static long addU64Saturating(long a, long b) {
        long s = a + b;
        return Long.compareUnsigned(s, a) < 0 ? -1L : s;
    }

    public static long alignUp(long n) {
        return (n + PAGE - 1) / PAGE * PAGE;
    }

    public static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** At most {@code NAME_FIELD_LEN - 1} bytes of {@code text}, cut at a character boundary. */
    public static byte[] truncatedName(String text) {
        byte[] raw = utf8(text);
        int n = Math.min(raw.length, NAME_FIELD_LEN - 1);
        while (n > 0 && n < raw.length && (raw[n] & 0xC0) == 0x80) {
            n--;
        }
        return java.util.Arrays.copyOf(raw, n);
    }

    /** The label set encoding of section 4: u16 length and bytes, key then value, in order. */
    public static byte[] encodeLabels(List<String[]> labels) {
        var out = new java.io.ByteArrayOutputStream();
        for (String[] kv : labels) {
            for (String s : kv) {
                byte[] raw = utf8(s);
                out.write(raw.length & 0xff);
                out.write(raw.length >>> 8);
                out.write(raw, 0, raw.length);
            }
        }
        return out.toByteArray();
    }

    /** Section 4's rules, with what to change when one is broken. */
    public static void checkSeries(String name, List<String[]> labels, String help, String unit) {
        if (name == null || !METRIC_NAME.matcher(name).matches()) {
            throw bad(name, "a metric name matches [a-zA-Z_:][a-zA-Z0-9_:]*");
        }
        if (utf8(name).length > MAX_NAME_LEN) {
            throw bad(name, "the name is longer than " + MAX_NAME_LEN + " bytes");
        }
        if (labels.size() > MAX_LABELS) {
            throw bad(name, labels.size() + " labels, more than " + MAX_LABELS);
        }
        var seen = new java.util.HashSet<String>();
        for (String[] kv : labels) {
            String k = kv[0];
            if (k == null || !LABEL_NAME.matcher(k).matches() || k.startsWith("__")) {
                throw bad(name, "label name '" + k + "' must match [a-zA-Z_][a-zA-Z0-9_]* and not start with __");
            }
            if (k.length() > MAX_LABEL_NAME_LEN) {
                throw bad(name, "label name '" + k + "' is longer than " + MAX_LABEL_NAME_LEN + " bytes");
            }
            if (!seen.add(k)) {
                throw bad(name, "label '" + k + "' given twice");
            }
            if (kv[1] == null || utf8(kv[1]).length > MAX_LABEL_VALUE_LEN) {
                throw bad(name, "the value of label '" + k + "' is missing or longer than " + MAX_LABEL_VALUE_LEN + " bytes");
            }
        }
        if (help == null || utf8(help).length > MAX_HELP_LEN) {
            throw bad(name, "the help is missing or longer than " + MAX_HELP_LEN + " bytes");
        }
        if (unit == null || utf8(unit).length > MAX_UNIT_LEN) {
            throw bad(name, "the unit is missing or longer than " + MAX_UNIT_LEN + " bytes");
        }
    }

    private static IllegalArgumentException bad(String name, String why) {
        return new IllegalArgumentException("cannot register '" + name + "': " + why);
    }

    /** Field 22 of /proc/[pid]/stat: the process's start, in clock ticks since boot; -1 if unknown. */
    public static long startTicks(String pid) {
        try {
            String stat = Files.readString(Path.of("/proc", pid, "stat"), StandardCharsets.ISO_8859_1);
            String[] rest = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return Long.parseLong(rest[19]);
        } catch (IOException | RuntimeException e) {
            return -1;
        }
    }
}
