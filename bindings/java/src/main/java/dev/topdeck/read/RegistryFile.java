// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.read;

import static dev.topdeck.format.Format.*;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.SecureDirectoryStream;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * One registry file as read at one moment: who wrote it, whether the writer lives, its metrics.
 * Read with {@code pread} into private buffers (FORMAT.md section 8 allows this instead of a
 * guarded mapping: a file truncated under the reader is an error, never a SIGBUS), every field
 * validated before use; works on JDK 17.
 *
 * <pre>{@code
 * RegistryFile f = RegistryFile.read(Path.of("/dev/shm/topdeck-1000/4242-99-0.topdeck"));
 * for (Metric m : f.metrics()) System.out.println(m.name() + " " + m.value());
 * }</pre>
 */
public record RegistryFile(Path path, long pid, long startTicks, String process, String registry, boolean alive,
        List<Metric> metrics) {
    private static final int DESC_CHUNK = 256;

    /** {@code alive} or {@code dead}. */
    public String state() {
        return alive ? "alive" : "dead";
    }

    /** Reads the file again. */
    public RegistryFile snapshot() throws IOException, BadFileException {
        return read(path);
    }

    /** Reads one file given by path (its directory's owner is not checked: a bare path names none). */
    public static RegistryFile read(Path path) throws IOException, BadFileException {
        Path abs = path.toAbsolutePath();
        Map<String, Object> st = java.nio.file.Files.readAttributes(abs, "unix:mode,uid,ino,dev", LinkOption.NOFOLLOW_LINKS);
        try (FileChannel ch = FileChannel.open(abs, StandardOpenOption.READ, LinkOption.NOFOLLOW_LINKS)) {
            return parse(abs, ch, st, -1);
        }
    }

    /** Reads {@code name} through its directory's descriptor, owned by {@code owner}. */
    static RegistryFile read(SecureDirectoryStream<Path> dir, Path dirPath, String name, int owner)
            throws IOException, BadFileException {
        Path p = dirPath.resolve(name);
        Map<String, Object> st = java.nio.file.Files.readAttributes(p, "unix:mode,uid,ino,dev", LinkOption.NOFOLLOW_LINKS);
        if (((Integer) st.get("mode") & 0170000) != 0100000) {
            throw new BadFileException("not a regular file; topdeck did not make it");
        }
        try (FileChannel ch = (FileChannel) dir.newByteChannel(Path.of(name), Set.of(StandardOpenOption.READ,
                LinkOption.NOFOLLOW_LINKS))) {
            return parse(p, ch, st, owner);
        }
    }

    private static RegistryFile parse(Path p, FileChannel ch, Map<String, Object> st, int owner)
            throws IOException, BadFileException {
        int mode = (Integer) st.get("mode");
        int uid = (Integer) st.get("uid");
        if ((mode & 0170000) != 0100000) {
            throw new BadFileException("not a regular file; topdeck did not make it");
        }
        if (owner >= 0 && uid != owner) {
            throw new BadFileException("owned by uid " + uid + ", not the directory's owner " + owner);
        }
        var f = new Source(ch);
        Header h = Header.parse(f);
        boolean alive = Liveness.alive((Long) st.get("dev"), (Long) st.get("ino"), mode, uid, h.pid, h.startTicks);
        List<Desc> descs = descriptors(f, h);
        return new RegistryFile(p, h.pid, h.startTicks, h.process, h.registry, alive, values(f, h, descs));
    }

    /** pread into private buffers; a short read means the file shrank. */
    private record Source(FileChannel ch) {
        ByteBuffer read(long offset, long length) throws IOException, BadFileException {
            if (length > Integer.MAX_VALUE) {
                throw new BadFileException("a read of " + length + " bytes is too large");
            }
            ByteBuffer b = ByteBuffer.allocate((int) length).order(ByteOrder.LITTLE_ENDIAN);
            while (b.hasRemaining()) {
                if (ch.read(b, offset + b.position()) < 0) {
                    throw new BadFileException("file shrank: wanted " + length + " bytes at " + offset + ", got " + b.position());
                }
            }
            return b.clear();
        }
    }

    private record Header(long pid, long startTicks, String process, String registry, long descOffset, long descCapacity,
            long descLen, long descCount, long shardCount, long stringsOffset, long stringsLen, long sharedOffset,
            long sharedLen, long shardsOffset, long shardLen, long shardsInUse) {
        static Header parse(Source f) throws IOException, BadFileException {
            ByteBuffer b = f.read(0, HEADER_FIELDS_END);
            for (int i = 0; i < 8; i++) {
                if (b.get(i) != MAGIC[i]) {
                    throw new BadFileException("not a topdeck file (bad magic)");
                }
            }
            long version = u32(b, 8);
            if (version == 0) {
                throw new BadFileException("not ready (version 0)");
            }
            if (version >>> 16 != MAJOR) {
                throw new BadFileException("unsupported major version " + (version >>> 16));
            }
            long headerLen = u32(b, 12), fileLen = b.getLong(16);
            var h = new Header(u32(b, 24), b.getLong(32), cString(b, 128), cString(b, 192), b.getLong(48), u32(b, 56),
                    u32(b, 60), u32(b, 64), u32(b, 68), b.getLong(72), b.getLong(80), b.getLong(88), b.getLong(96),
                    b.getLong(104), b.getLong(112), u32(b, 120));
            long actual = f.ch.size();
            if (actual > MAX_FILE_LEN) {
                throw new BadFileException("the file is " + actual + " bytes, above the format's limit of " + MAX_FILE_LEN);
            }
            if (headerLen < HEADER_FIELDS_END || Long.compareUnsigned(headerLen, h.descOffset) > 0) {
                throw new BadFileException("header_len " + headerLen + " out of range");
            }
            long[][] limits = {{fileLen, MAX_FILE_LEN}, {h.descCapacity, MAX_DESC_CAPACITY}, {h.descLen, MAX_DESC_LEN},
                {h.shardCount, MAX_SHARD_COUNT}, {h.shardLen, MAX_SHARD_LEN}, {h.stringsLen, MAX_STRINGS_LEN},
                {h.sharedLen, MAX_SHARED_LEN}};
            String[] names = {"file_len", "desc_capacity", "desc_len", "shard_count", "shard_len", "strings_len", "shared_len"};
            for (int i = 0; i < limits.length; i++) {
                if (Long.compareUnsigned(limits[i][0], limits[i][1]) > 0) {
                    throw new BadFileException(names[i] + " is " + Long.toUnsignedString(limits[i][0])
                            + ", above the format's limit of " + limits[i][1]);
                }
            }
            if (actual < fileLen) {
                throw new BadFileException("file is " + actual + " bytes, header says " + fileLen);
            }
            if (h.descLen < DESC_LEN || h.descLen % 8 != 0) {
                throw new BadFileException("desc_len " + h.descLen + " invalid");
            }
            if (h.shardLen % 8 != 0 || h.sharedLen % 8 != 0) {
                throw new BadFileException("shard_len or shared_len not a multiple of 8");
            }
            // Every length is bounded above, so these sums cannot overflow; offsets are checked unsigned.
            long[][] sections = {{h.descOffset, h.descCapacity * h.descLen}, {h.stringsOffset, h.stringsLen},
                {h.sharedOffset, h.sharedLen}, {h.shardsOffset, (h.shardCount + 1) * h.shardLen}};
            long end = headerLen;
            for (long[] s : sections) {
                if (Long.compareUnsigned(s[0], end) < 0 || Long.compareUnsigned(s[0], fileLen) > 0 || s[0] + s[1] > fileLen) {
                    throw new BadFileException("sections overlap or lie outside the file");
                }
                end = s[0] + s[1];
            }
            if (h.descCount > h.descCapacity) {
                throw new BadFileException("desc_count above desc_capacity");
            }
            if (h.shardsInUse > h.shardCount) {
                throw new BadFileException("shards_in_use above shard_count");
            }
            return h;
        }
    }

    private static long u32(ByteBuffer b, int at) {
        return b.getInt(at) & 0xffffffffL;
    }

    private static String cString(ByteBuffer b, int at) throws BadFileException {
        int n = 0;
        while (n < NAME_FIELD_LEN && b.get(at + n) != 0) {
            n++;
        }
        byte[] raw = new byte[n];
        b.get(at, raw);
        return decode(raw, "a name in the header");
    }

    private static String decode(byte[] raw, String what) throws BadFileException {
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(raw)).toString();
        } catch (CharacterCodingException e) {
            throw new BadFileException(what + " is not UTF-8");
        }
    }

    private record Desc(int kind, int schema, long valueLen, long valueOffset, String name, List<Metric.Label> labels,
            String help, String unit, int minIndex, int bucketCount, double zeroThreshold) {}

    /** Sections 4 and 8: descriptors a chunk at a time, each validated before the next chunk is read. */
    private static List<Desc> descriptors(Source f, Header h) throws IOException, BadFileException {
        List<Desc> out = new ArrayList<>();
        long[] used = new long[2]; // shard, shared
        for (long first = 0; first < h.descCount; first += DESC_CHUNK) {
            int n = (int) Math.min(DESC_CHUNK, h.descCount - first);
            ByteBuffer table = f.read(h.descOffset + first * h.descLen, n * h.descLen);
            Strings text = Strings.of(f, h, table, n);
            for (int k = 0; k < n; k++) {
                out.add(descriptor(h, table, (int) (k * h.descLen), first + k, text, used));
            }
        }
        return out;
    }

    /** Section 8: the strings one chunk references, in one read when they lie together. */
    private record Strings(Source f, Header h, ByteBuffer block, long lo) {
        static Strings of(Source f, Header h, ByteBuffer table, int n) throws IOException, BadFileException {
            long lo = Long.MAX_VALUE, hi = 0, total = 0;
            for (int k = 0; k < n; k++) {
                for (int j = 0; j < 4; j++) {
                    long off = u32(table, (int) (k * h.descLen) + 16 + 8 * j);
                    long len = u32(table, (int) (k * h.descLen) + 20 + 8 * j);
                    lo = Math.min(lo, off);
                    hi = Math.max(hi, off + len);
                    total += len;
                }
            }
            ByteBuffer block = null;
            if (hi <= h.stringsLen && hi - lo <= total + 4096) {
                block = f.read(h.stringsOffset + lo, hi - lo);
            }
            return new Strings(f, h, block, lo);
        }

        byte[] get(long i, long off, long len, int limit, String what) throws IOException, BadFileException {
            if (off + len > h.stringsLen) {
                throw new BadFileException("descriptor " + i + ": string reference outside the string area");
            }
            if (len > limit) {
                throw new BadFileException("descriptor " + i + ": " + what + " is " + len + " bytes, above the format's limit of " + limit);
            }
            byte[] out = new byte[(int) len];
            if (block != null) {
                block.get((int) (off - lo), out);
            } else {
                f.read(h.stringsOffset + off, len).get(out);
            }
            return out;
        }
    }

    private static Desc descriptor(Header h, ByteBuffer t, int at, long i, Strings text, long[] used)
            throws IOException, BadFileException {
        int kind = t.get(at) & 0xff;
        int schema = t.get(at + 1);
        long valueLen = u32(t, at + 4), valueOffset = t.getLong(at + 8);
        if (kind < COUNTER || kind > HISTOGRAM) {
            throw new BadFileException("descriptor " + i + ": unknown kind " + kind);
        }
        String name = decode(text.get(i, u32(t, at + 16), u32(t, at + 20), MAX_NAME_LEN, "the name"), "descriptor " + i + ": the name");
        byte[] labels = text.get(i, u32(t, at + 24), u32(t, at + 28), MAX_LABELS_LEN, "the label set");
        String help = decode(text.get(i, u32(t, at + 32), u32(t, at + 36), MAX_HELP_LEN, "the help"), "descriptor " + i + ": the help");
        String unit = decode(text.get(i, u32(t, at + 40), u32(t, at + 44), MAX_UNIT_LEN, "the unit"), "descriptor " + i + ": the unit");
        if (!METRIC_NAME.matcher(name).matches()) {
            throw new BadFileException("descriptor " + i + ": invalid metric name '" + name + "'");
        }
        int minIndex = t.getInt(at + 48);
        long bucketCount = u32(t, at + 52);
        double zero = t.getDouble(at + 56);
        long expected = 8;
        if (kind == HISTOGRAM) {
            if (schema < -4 || schema > 8 || bucketCount < 1 || bucketCount > MAX_BUCKETS) {
                throw new BadFileException("descriptor " + i + ": invalid histogram shape");
            }
            if (Math.abs((long) minIndex) > MAX_ABS_INDEX || Math.abs(minIndex + bucketCount - 1) > MAX_ABS_INDEX) {
                throw new BadFileException("descriptor " + i + ": bucket index out of range");
            }
            if (!(zero >= 0)) {
                throw new BadFileException("descriptor " + i + ": negative zero_threshold");
            }
            expected = 8 * (4 + bucketCount);
        }
        boolean sharded = kind == COUNTER || kind == HISTOGRAM;
        long size = sharded ? h.shardLen : h.sharedLen;
        if (valueLen != expected || valueOffset % 8 != 0 || Long.compareUnsigned(valueOffset, size) > 0
                || valueOffset + valueLen > size) {
            throw new BadFileException("descriptor " + i + ": value block out of place");
        }
        // Section 6: blocks are never shared, so together they fit their area.
        used[sharded ? 0 : 1] += valueLen;
        if (used[sharded ? 0 : 1] > size) {
            throw new BadFileException("descriptor " + i + ": value blocks overlap");
        }
        return new Desc(kind, schema, valueLen, valueOffset, name, parseLabels(labels, i), help, unit, minIndex,
                (int) bucketCount, zero);
    }

    private static List<Metric.Label> parseLabels(byte[] raw, long d) throws BadFileException {
        List<Metric.Label> out = new ArrayList<>();
        var seen = new java.util.HashSet<String>();
        int i = 0;
        while (i < raw.length) {
            String[] pair = new String[2];
            for (int j = 0; j < 2; j++) {
                if (i + 2 > raw.length) {
                    throw new BadFileException("descriptor " + d + ": label set truncated");
                }
                int n = (raw[i] & 0xff) | (raw[i + 1] & 0xff) << 8;
                i += 2;
                if (i + n > raw.length) {
                    throw new BadFileException("descriptor " + d + ": label set truncated");
                }
                pair[j] = decode(java.util.Arrays.copyOfRange(raw, i, i + n), "descriptor " + d + ": a label");
                i += n;
            }
            if (!LABEL_NAME.matcher(pair[0]).matches() || pair[0].startsWith("__") || !seen.add(pair[0])) {
                throw new BadFileException("descriptor " + d + ": invalid label name '" + pair[0] + "'");
            }
            if (utf8(pair[1]).length > MAX_LABEL_VALUE_LEN) {
                throw new BadFileException("descriptor " + d + ": label value of '" + pair[0] + "' too long");
            }
            out.add(new Metric.Label(pair[0], pair[1]));
        }
        return out;
    }

    /** Section 5: sum the shards in use and the overflow shard; read only where descriptors point. */
    private static List<Metric> values(Source f, Header h, List<Desc> descs) throws IOException, BadFileException {
        long lo = Long.MAX_VALUE, hi = 0, sharedEnd = 0;
        for (Desc d : descs) {
            if (d.kind == COUNTER || d.kind == HISTOGRAM) {
                lo = Math.min(lo, d.valueOffset);
                hi = Math.max(hi, d.valueOffset + d.valueLen);
            } else {
                sharedEnd = Math.max(sharedEnd, d.valueOffset + 8);
            }
        }
        List<ByteBuffer> blocks = new ArrayList<>();
        if (hi > 0) {
            for (long s = 0; s <= h.shardsInUse; s++) {
                long shard = s == h.shardsInUse ? h.shardCount : s;
                blocks.add(f.read(h.shardsOffset + shard * h.shardLen + lo, hi - lo));
            }
        }
        ByteBuffer shared = f.read(h.sharedOffset, sharedEnd);
        List<Metric> out = new ArrayList<>();
        for (Desc d : descs) {
            Object value;
            String kind;
            switch (d.kind) {
                case COUNTER -> {
                    long sum = 0;
                    for (ByteBuffer b : blocks) {
                        sum = addU64Saturating(sum, b.getLong((int) (d.valueOffset - lo)));
                    }
                    kind = "counter";
                    value = sum;
                }
                case GAUGE_I64 -> {
                    kind = "gauge";
                    value = shared.getLong((int) d.valueOffset);
                }
                case GAUGE_F64 -> {
                    kind = "gauge_f64";
                    value = shared.getDouble((int) d.valueOffset);
                }
                default -> {
                    kind = "histogram";
                    value = histogram(d, blocks, (int) (d.valueOffset - lo));
                }
            }
            out.add(new Metric(kind, d.name, List.copyOf(d.labels), d.help, d.unit, value));
        }
        return out;
    }

    private static HistogramValue histogram(Desc d, List<ByteBuffer> blocks, int at) {
        long zero = 0, maxBits = 0;
        double sum = 0;
        long[] counts = new long[d.bucketCount];
        for (ByteBuffer b : blocks) {
            sum += b.getDouble(at + 8);
            long m = b.getLong(at + 16);
            if (Long.compareUnsigned(m, maxBits) > 0) {
                maxBits = m;
            }
            zero += b.getLong(at + 24);
            for (int k = 0; k < counts.length; k++) {
                counts[k] += b.getLong(at + 32 + 8 * k);
            }
        }
        long count = zero;
        for (long c : counts) {
            count += c;
        }
        return new HistogramValue(d.schema, d.zeroThreshold, zero, d.minIndex, counts, count, sum,
                dev.topdeck.Exponential.fromOrderedBits(maxBits));
    }
}
