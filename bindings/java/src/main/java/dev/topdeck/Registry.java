// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import static dev.topdeck.format.Format.*;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One topdeck registry file, normally one per process (docs/FORMAT.md).
 *
 * <p>Creates {@code <pid>-<start>-<seq>.topdeck} in the namespace directory ({@code TOPDECK_DIR},
 * else {@code /dev/shm/topdeck-<euid>}), private to its owner (0600 in a 0700 directory) unless a
 * readers' group is named ({@link Builder#group}, or {@code TOPDECK_GROUP}: 0640 in 0750). The file
 * holds an exclusive {@code flock(2)} for the registry's life, which is how readers and {@code
 * topdeck gc} tell a live writer from a dead one; taking it needs JDK 22+ (see {@link
 * #builder()}). Registering takes a lock; updating through the handles takes none. {@link
 * #close()} (and a JVM shutdown, SIGTERM included) removes the file; after SIGKILL it stays,
 * dead, with its last values, until {@code topdeck gc} removes it.
 *
 * <pre>{@code
 * try (Registry registry = Registry.builder().name("main").build()) {
 *     Counter requests = registry.counter("http_requests_total", "Requests served.", "route", "/");
 *     Timer latency = registry.timer("http_request_duration_seconds", "Time to serve.");
 *     try (var t = latency.start()) {
 *         requests.inc();
 *     }
 * }
 * }</pre>
 */
public final class Registry implements AutoCloseable {
    private static final AtomicLong SEQ = new AtomicLong();
    private static final Set<Registry> LIVE = new HashSet<>();
    private static boolean hookInstalled;

    final ByteBuffer buf;
    final int shardsOffset, shardLen, shardCount, overflowOffset, sharedOffset;
    private final Layout layout;
    private final String name;
    private final Path path;
    private final NamespaceDir dir;
    private final String fileName;
    private final int fd;
    private final Object lock = new Object();
    private final Set<String> seen = new HashSet<>();
    private int count, stringsUsed, sharedUsed, shardUsed, shardsInUse;
    private boolean closed;
    /** The agent's thread-waits array for timers, or null; why a pin found could not be used, or null. */
    private final ThreadWaits.Source waits;
    private final String waitsProblem;

    /**
     * A registry builder. {@link Builder#build()} needs JDK 22+ run with {@code
     * --enable-native-access=ALL-UNNAMED} and throws {@link UnsupportedOperationException} naming
     * the JDK it needs on an older one (reading, {@code dev.topdeck.read}, works on JDK 17).
     */
    public static Builder builder() {
        return new Builder();
    }

    /** Whether this JVM can create writers (JDK 22+); {@link #writerUnavailableReason()} says why not. */
    public static boolean writerAvailable() {
        return Native.available();
    }

    public static String writerUnavailableReason() {
        return Native.unavailableReason();
    }

    /** Options of a new registry; the defaults are the Rust library's (FORMAT.md section 9). */
    public static final class Builder {
        private String name = "main";
        private Path directory;
        private String group;
        private int metrics = 4096;
        private long stringBytes = 256 << 10, gaugeBytes = 32 << 10, shardBytes = 1 << 20;
        private int shards = 16;
        private Path threadWaits;
        private boolean noThreadWaits;

        private Builder() {}

        /**
         * The agent's thread-waits array pinned at {@code pin}, instead of {@code
         * TOPDECK_THREAD_WAITS} or {@code /sys/fs/bpf/topdeck/thread_waits}: timers then record
         * each request's CPU wait ({@link Timer}). Nothing pinned there: timers without it,
         * silently; a pin that cannot be used: the same, the reason in {@link
         * Registry#threadWaitsProblem()}.
         */
        public Builder threadWaits(Path pin) {
            this.threadWaits = pin;
            this.noThreadWaits = false;
            return this;
        }

        /** Timers without CPU wait, whatever is pinned (as {@code TOPDECK_THREAD_WAITS=off}). */
        public Builder noThreadWaits() {
            this.threadWaits = null;
            this.noThreadWaits = true;
            return this;
        }

        /** The registry's name in the header (at most 63 bytes kept). */
        public Builder name(String name) {
            this.name = name;
            return this;
        }

        /** The namespace directory, instead of {@code TOPDECK_DIR} or {@code /dev/shm/topdeck-<euid>}. */
        public Builder directory(Path directory) {
            this.directory = directory;
            return this;
        }

        /** A readers' group (name or gid), instead of {@code TOPDECK_GROUP}. */
        public Builder group(String group) {
            this.group = group;
            return this;
        }

        public Builder metrics(int metrics) {
            this.metrics = metrics;
            return this;
        }

        public Builder stringBytes(long bytes) {
            this.stringBytes = bytes;
            return this;
        }

        public Builder gaugeBytes(long bytes) {
            this.gaugeBytes = bytes;
            return this;
        }

        public Builder shardBytes(long bytes) {
            this.shardBytes = bytes;
            return this;
        }

        /** Per-thread shards; threads past them share the overflow shard. */
        public Builder shards(int shards) {
            this.shards = shards;
            return this;
        }

        /** Creates the file. */
        public Registry build() {
            if (!Native.available()) {
                throw new UnsupportedOperationException(Native.unavailableReason());
            }
            Layout layout = new Layout(metrics, stringBytes, gaugeBytes, shardBytes, shards);
            String g = group != null ? group : System.getenv(NamespaceDir.ENV_GROUP);
            if (g != null && g.isEmpty()) {
                g = null;
            }
            Path pin = noThreadWaits ? null : threadWaits != null ? threadWaits : ThreadWaits.pinFromEnv();
            ThreadWaits.Source source = null;
            String problem = null;
            if (pin != null) {
                try {
                    ThreadWaits w = ThreadWaits.openIfPinned(pin);
                    source = w == null ? null : new ThreadWaits.Source(w);
                } catch (IOException | RuntimeException e) {
                    problem = e.getMessage();
                }
            }
            try {
                return new Registry(layout, name, directory, g, source, problem);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    private Registry(Layout layout, String name, Path directory, String group, ThreadWaits.Source waits,
            String waitsProblem) throws IOException {
        this.layout = layout;
        this.name = name;
        this.waits = waits;
        this.waitsProblem = waitsProblem;
        NamespaceDir d = NamespaceDir.prepare(directory, group);
        long pid = ProcessHandle.current().pid();
        long start = startTicks("self");
        int fileFd = -1;
        String temp = null, stem = null;
        for (int tries = 0; tries < 1000 && fileFd < 0; tries++) {
            stem = pid + "-" + start + "-" + SEQ.getAndIncrement();
            if (Files.exists(NamespaceDir.byFd(d.fd).resolve(stem + SUFFIX), LinkOption.NOFOLLOW_LINKS)) {
                continue;
            }
            temp = TEMP_PREFIX + stem;
            fileFd = Native.createExclusive(d.fd, temp, 0600);
            if (fileFd < 0 && fileFd != -17 /* EEXIST */) {
                Native.close(d.fd);
                throw new IOException(d.path.resolve(temp) + ": cannot create the registry file: " + Native.strerror(-fileFd)
                        + "; check the directory's permissions and free space in " + d.path);
            }
        }
        if (fileFd < 0) {
            Native.close(d.fd);
            throw new IOException(d.path + ": no free registry file name after 1000 tries; remove stale files with `topdeck gc`");
        }
        try {
            Path self = NamespaceDir.byFd(fileFd);
            if (group != null) {
                NamespaceDir.setGroup(self, group);
                Files.setPosixFilePermissions(self, PosixFilePermissions.fromString("rw-r-----"));
            }
            check(Native.flock(fileFd, 2 | 4 /* LOCK_EX | LOCK_NB */), "take the writer's lock on", d.path.resolve(temp));
            check(Native.ftruncate(fileFd, layout.fileLen), "set the length of", d.path.resolve(temp));
            try (FileChannel ch = FileChannel.open(self, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
                buf = ch.map(FileChannel.MapMode.READ_WRITE, 0, layout.fileLen).order(ByteOrder.LITTLE_ENDIAN);
            }
            layout.writeHeader(buf, pid, start, createdUnixNs(),
                    processName(), name);
            INT.setRelease(buf, VERSION_OFFSET, VERSION);
            check(Native.renameNoReplace(d.fd, temp, stem + SUFFIX), "publish", d.path.resolve(stem + SUFFIX));
        } catch (IOException | RuntimeException e) {
            Native.unlinkAt(d.fd, temp);
            Native.close(fileFd);
            Native.close(d.fd);
            throw e;
        }
        this.dir = d;
        this.fd = fileFd;
        this.fileName = stem + SUFFIX;
        this.path = d.path.resolve(fileName);
        this.shardsOffset = (int) layout.shardsOffset;
        this.shardLen = (int) layout.shardLen;
        this.shardCount = layout.shardCount;
        this.overflowOffset = (int) (layout.shardsOffset + layout.shardLen * layout.shardCount);
        this.sharedOffset = (int) layout.sharedOffset;
        Shards.register(this);
        synchronized (LIVE) {
            LIVE.add(this);
            if (!hookInstalled) {
                hookInstalled = true;
                Runtime.getRuntime().addShutdownHook(new Thread(Registry::closeAll, "topdeck-close"));
            }
        }
    }

    private static void check(int rc, String what, Path p) throws IOException {
        if (rc < 0) {
            throw new IOException(p + ": cannot " + what + " the registry file: " + Native.strerror(-rc));
        }
    }

    /** A clean JVM exit removes the files, as the format and the other writers do. */
    private static void closeAll() {
        List<Registry> all;
        synchronized (LIVE) {
            all = new ArrayList<>(LIVE);
        }
        all.forEach(Registry::close);
    }

    private static String processName() {
        String cmd = System.getProperty("sun.java.command", "");
        String first = cmd.isBlank() ? "java" : cmd.split(" ", 2)[0];
        String base = first.substring(first.lastIndexOf('/') + 1);
        return base.endsWith(".jar") ? base : base.substring(base.lastIndexOf('.') + 1);
    }

    private static long createdUnixNs() {
        java.time.Instant now = java.time.Instant.now();
        return now.getEpochSecond() * 1_000_000_000L + now.getNano();
    }

    /** The file this registry publishes. */
    public Path path() {
        return path;
    }

    /** The registry's name. */
    public String name() {
        return name;
    }

    /** Raises {@code shards_in_use} (release) to cover {@code n} shard indices. */
    void publishShardsInUse(int n) {
        synchronized (lock) {
            int v = Math.min(n, shardCount);
            if (v > shardsInUse) {
                shardsInUse = v;
                INT.setRelease(buf, SHARDS_IN_USE_OFFSET, v);
            }
        }
    }

    /** Shards a reader sums: those in use, then the overflow shard. */
    int[] shardStarts() {
        int n;
        synchronized (lock) {
            n = shardsInUse;
        }
        int[] out = new int[n + 1];
        for (int i = 0; i < n; i++) {
            out[i] = shardsOffset + i * shardLen;
        }
        out[n] = overflowOffset;
        return out;
    }

    /** Removes the file and releases its lock. Handles go on working on the unlinked mapping. */
    @Override
    public void close() {
        synchronized (lock) {
            if (closed) {
                return;
            }
            closed = true;
            Native.unlinkAt(dir.fd, fileName);
            Native.close(fd);
            Native.close(dir.fd);
        }
        synchronized (LIVE) {
            LIVE.remove(this);
        }
    }

    @Override
    public String toString() {
        return "Registry(" + path + ")";
    }

    // --- registration --------------------------------------------------------

    /** A counter: a whole number that only goes up. {@code labels}: key, value, key, value, ... */
    public Counter counter(String name, String help, String... labels) {
        return metric(name).help(help).labels(labels).counter();
    }

    /** An integer gauge (i64). */
    public Gauge gauge(String name, String help, String... labels) {
        return metric(name).help(help).labels(labels).gauge();
    }

    /** A floating-point gauge. */
    public DoubleGauge gaugeDouble(String name, String help, String... labels) {
        return metric(name).help(help).labels(labels).gaugeDouble();
    }

    /** A histogram with the library's default buckets (schema 3, 1e-9 to 1e6). */
    public Histogram histogram(String name, String help, String... labels) {
        return metric(name).help(help).labels(labels).histogram();
    }

    /**
     * A {@link Timer}: a histogram of seconds (unit {@code seconds}) timed with {@code
     * System.nanoTime()}. By Prometheus convention {@code name} ends in {@code _seconds}.
     *
     * <p>With the agent's thread-waits array, also registers the CPU-wait companions {@code
     * <base>_cpu_wait_seconds} and {@code <base>_cpu_wait_unknown_seconds} of the same labels (see
     * {@link Timer}): their names must be free too. A bad name or a duplicate registers nothing.
     */
    public Timer timer(String name, String help, String... labels) {
        MetricBuilder main = metric(name).help(help).unit("seconds").labels(labels);
        if (waits == null) {
            return new Timer(main.histogram(), null, null, null);
        }
        String base = name.endsWith("_seconds") ? name.substring(0, name.length() - "_seconds".length()) : name;
        MetricBuilder wait = metric(base + "_cpu_wait_seconds").unit("seconds").labels(labels)
                .help("CPU wait per request timed by " + name + ": time the timing thread was runnable but waiting "
                        + "for a CPU, from the topdeck agent's scheduler probe.");
        MetricBuilder unknown = metric(base + "_cpu_wait_unknown_seconds").unit("seconds").labels(labels)
                .help("Latency of requests timed by " + name + " whose CPU wait could not be known "
                        + "(the topdeck agent stopped during them).");
        // The companions' names are checked before anything is registered, the timer's own first
        // (by its registration): a bad name or a duplicate timer leaves no half a timer behind.
        checkSeries(name, main.labels, help, "seconds");
        for (MetricBuilder m : List.of(wait, unknown)) {
            checkSeries(m.name, m.labels, m.help, m.unit);
            synchronized (lock) {
                if (seen.contains(seriesKey(m.name, m.labels))) {
                    throw new IllegalArgumentException(path + ": cannot register timer '" + name + "': its companion '"
                            + m.name + "' with labels " + render(m.labels) + " is already registered");
                }
            }
        }
        Histogram h = main.histogram();
        return new Timer(h, wait.histogram(), unknown.histogram(), waits);
    }

    /**
     * Why the thread-waits array pinned where this registry looked could not be used (its timers
     * then record no CPU wait); null when it is mapped, or when nothing was pinned or it was
     * turned off.
     */
    public String threadWaitsProblem() {
        return waitsProblem;
    }

    /** The pin of the thread-waits array this registry's timers read, or null when none is mapped. */
    public Path threadWaitsPin() {
        return waits == null ? null : waits.pin;
    }

    /** The array in use now (after an agent restart, the new one), or null; for tests. */
    ThreadWaits threadWaits() {
        return waits == null ? null : waits.current();
    }

    ThreadWaits.Source waitsSource() {
        return waits;
    }

    /** A series with every option: help, unit, labels, and a histogram's buckets. */
    public MetricBuilder metric(String name) {
        return new MetricBuilder(this, name);
    }

    /** Options of one series; ends with the kind, which registers it. */
    public static final class MetricBuilder {
        private final Registry registry;
        private final String name;
        private String help = "", unit = "";
        private final List<String[]> labels = new ArrayList<>();
        private Exponential.Range range;

        private MetricBuilder(Registry registry, String name) {
            this.registry = registry;
            this.name = name;
        }

        public MetricBuilder help(String help) {
            this.help = help;
            return this;
        }

        public MetricBuilder unit(String unit) {
            this.unit = unit;
            return this;
        }

        /** Labels as key, value, key, value, ... in the order they are kept. */
        public MetricBuilder labels(String... pairs) {
            if (pairs.length % 2 != 0) {
                throw new IllegalArgumentException("cannot register '" + name + "': labels come in key, value pairs; got "
                        + pairs.length + " strings");
            }
            for (int i = 0; i < pairs.length; i += 2) {
                labels.add(new String[] {pairs[i], pairs[i + 1]});
            }
            return this;
        }

        public MetricBuilder label(String key, String value) {
            labels.add(new String[] {key, value});
            return this;
        }

        /** Histogram buckets at {@code schema} covering {@code (min, max]}. */
        public MetricBuilder buckets(int schema, double min, double max) {
            this.range = Exponential.Range.checked(schema, min, max);
            return this;
        }

        public Counter counter() {
            return new Counter(registry, registry.register(COUNTER, name, labels, help, unit, 8, null));
        }

        public Gauge gauge() {
            return new Gauge(registry, registry.register(GAUGE_I64, name, labels, help, unit, 8, null));
        }

        public DoubleGauge gaugeDouble() {
            return new DoubleGauge(registry, registry.register(GAUGE_F64, name, labels, help, unit, 8, null));
        }

        public Histogram histogram() {
            Exponential.Range r = range != null ? range : Exponential.Range.defaults();
            int off = registry.register(HISTOGRAM, name, labels, help, unit, 8 * (H_HEAD + r.bucketCount()), r);
            return new Histogram(registry, off, r);
        }
    }

    private int register(int kind, String name, List<String[]> labels, String help, String unit, int valueLen,
            Exponential.Range r) {
        checkSeries(name, labels, help, unit);
        synchronized (lock) {
            String key = seriesKey(name, labels);
            if (seen.contains(key)) {
                throw new IllegalArgumentException(path + ": metric '" + name + "' with labels " + render(labels)
                        + " is already registered; keep the first handle");
            }
            byte[][] raw = {utf8(name), encodeLabels(labels), utf8(help), utf8(unit)};
            int need = 0;
            for (byte[] s : raw) {
                need += s.length;
            }
            boolean sharded = kind == COUNTER || kind == HISTOGRAM;
            int used = sharded ? shardUsed : sharedUsed;
            room("descriptor table", count, 1, layout.descCapacity, "metrics", name);
            room("string area", stringsUsed, need, layout.stringsLen, "stringBytes", name);
            room(sharded ? "shards" : "gauge area", used, valueLen, sharded ? layout.shardLen : layout.sharedLen,
                    sharded ? "shardBytes" : "gaugeBytes", name);
            int[] refs = new int[8];
            for (int i = 0; i < 4; i++) {
                buf.put((int) layout.stringsOffset + stringsUsed, raw[i]);
                refs[2 * i] = stringsUsed;
                refs[2 * i + 1] = raw[i].length;
                stringsUsed += raw[i].length;
            }
            int at = (int) layout.descOffset + count * DESC_LEN;
            buf.put(at, (byte) kind);
            buf.put(at + 1, (byte) (r == null ? 0 : r.schema()));
            buf.putInt(at + 4, valueLen);
            buf.putLong(at + 8, used);
            for (int i = 0; i < 8; i++) {
                buf.putInt(at + 16 + 4 * i, refs[i]);
            }
            if (r != null) {
                buf.putInt(at + 48, r.minIndex());
                buf.putInt(at + 52, r.bucketCount());
                buf.putDouble(at + 56, r.zeroThreshold());
            }
            if (sharded) {
                shardUsed += valueLen;
            } else {
                sharedUsed += valueLen;
            }
            count++;
            // Publication: readers acquire-load the count before reading what it covers.
            INT.setRelease(buf, DESC_COUNT_OFFSET, count);
            seen.add(key);
            return used;
        }
    }

    private static String seriesKey(String name, List<String[]> labels) {
        StringBuilder key = new StringBuilder(name);
        labels.forEach(kv -> key.append('\0').append(kv[0]).append('\0').append(kv[1]));
        return key.toString();
    }

    private void room(String what, long used, long more, long cap, String option, String name) {
        if (used + more > cap) {
            throw new IllegalStateException(path + ": registry full: no room for '" + name + "' in the " + what + " (" + used
                    + " of " + cap + " used, " + more + " more needed); build the Registry with a larger " + option + "(...)");
        }
    }

    private static String render(List<String[]> labels) {
        StringBuilder b = new StringBuilder("{");
        labels.forEach(kv -> b.append(b.length() > 1 ? ", " : "").append(kv[0]).append('=').append(kv[1]));
        return b.append('}').toString();
    }
}
