// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import dev.topdeck.read.HistogramValue;
import dev.topdeck.read.Listing;
import dev.topdeck.read.Metric;
import dev.topdeck.read.RegistryFile;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

/**
 * The Java binding's tests, a plain runner (no test framework to fetch): {@code bindings/java/test.sh}
 * runs them on JDK 22+ (everything) and on JDK 17 (reading, and the writer's refusal). Files are
 * read back with the Rust CLI ({@code -Dtopdeck.cli}) as well as with this package's reader.
 * Ends with "N passed, N failed".
 */
public final class Tests {
    private Tests() {}

    private interface Test {
        void run() throws Exception;
    }

    private static final Path ROOT = Path.of(System.getProperty("topdeck.root", "../..")).toAbsolutePath().normalize();
    private static final String CLI = System.getProperty("topdeck.cli", ROOT.resolve("target/debug/topdeck").toString());
    private static final String JAVA22 = System.getProperty("topdeck.java22", "");

    public static void main(String[] args) throws Exception {
        Map<String, Test> tests = new java.util.LinkedHashMap<>();
        tests.put("every bucket index matches the Rust library", Tests::bucketIndices);
        tests.put("every upper bound matches the Rust library", Tests::upperBounds);
        tests.put("ranges and zero thresholds match the Rust library", Tests::ranges);
        tests.put("ordered bits keep the order of doubles", Tests::orderedBits);
        tests.put("a Java writer in another process: alive, kept by gc, values as topdeck show; killed: dead, removed by gc",
                Tests::childWriterLifecycle);
        tests.put("damaged files are rejected, as topdeck ls rejects them", Tests::damagedFiles);
        if (Registry.writerAvailable()) {
            tests.put("an in-process registry is alive for topdeck, survives gc, and close removes it", Tests::inProcess);
            tests.put("counters and histograms stay exact across threads, overflow shard included", Tests::threads);
            tests.put("a counter past 2^64-1 stays there, in its shard, the overflow shard and every reader",
                    Tests::counterStopsAtTheTop);
            tests.put("threads that end give their shard to the next thread", Tests::threadChurn);
            tests.put("virtual threads share the overflow shard", Tests::virtualThreads);
            tests.put("registration errors say what is wrong and what to do", Tests::registrationErrors);
            tests.put("the file is private and named <pid>-<start>-<seq>.topdeck", Tests::fileNameAndMode);
            tests.put("a timer without the agent's thread-waits array is a histogram alone", Tests::timerWithoutWaits);
            tests.put("with the real agent a timer records CPU wait; killed: unknown latency; restarted: picked up",
                    Tests::timerWithAgent);
        } else {
            tests.put("on this JDK a writer is refused, naming the JDK it needs", Tests::refusedOnOldJdk);
        }
        int passed = 0, failed = 0;
        String jdk = "Java " + Runtime.version().feature();
        for (var t : tests.entrySet()) {
            try {
                t.getValue().run();
                passed++;
                System.out.println("ok   [" + jdk + "] " + t.getKey());
            } catch (Skipped e) {
                passed++;
                System.out.println("skip [" + jdk + "] " + t.getKey() + ": " + e.getMessage());
            } catch (Throwable e) {
                failed++;
                System.out.println("FAIL [" + jdk + "] " + t.getKey() + ": " + e);
                e.printStackTrace(System.out);
            }
        }
        System.out.println(passed + " passed, " + failed + " failed");
        System.exit(failed == 0 ? 0 : 1);
    }

    // --- helpers ---------------------------------------------------------------

    /** A test that cannot run here (not root, no bpffs); fails instead when the CI variable is set. */
    static final class Skipped extends Exception {
        Skipped(String why) {
            super(why);
        }
    }

    static void skip(String why) throws Skipped {
        String ci = System.getenv("CI");
        if (ci != null && !ci.isEmpty()) {
            throw new AssertionError(why + " (CI is set: this test must run here)");
        }
        throw new Skipped(why);
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void equal(Object got, Object want, String what) {
        if (!java.util.Objects.equals(got, want)) {
            throw new AssertionError(what + ": got " + got + ", want " + want);
        }
    }

    static Path tempDir() throws IOException {
        return Files.createTempDirectory("topdeck-java-", PosixFilePermissions.asFileAttribute(
                PosixFilePermissions.fromString("rwx------")));
    }

    static String cli(Path dir, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(CLI));
        cmd.addAll(List.of(args));
        var pb = new ProcessBuilder(cmd).redirectErrorStream(false);
        pb.environment().put("TOPDECK_DIR", dir.toString());
        Process p = pb.start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        String err = new String(p.getErrorStream().readAllBytes(), StandardCharsets.UTF_8);
        check(p.waitFor(60, TimeUnit.SECONDS), "topdeck " + String.join(" ", args) + " did not finish");
        if (p.exitValue() != 0 && !args[0].equals("ls")) {
            throw new AssertionError("topdeck " + String.join(" ", args) + " failed: " + err);
        }
        return out;
    }

    static int cliStatus(Path dir, String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(CLI));
        cmd.addAll(List.of(args));
        var pb = new ProcessBuilder(cmd).redirectOutput(ProcessBuilder.Redirect.DISCARD)
                .redirectError(ProcessBuilder.Redirect.DISCARD);
        pb.environment().put("TOPDECK_DIR", dir.toString());
        return pb.start().waitFor();
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> lsEntry(Path dir, Path file) throws Exception {
        var ls = (Map<String, Object>) Json.parse(cli(dir, "ls", "--json"));
        for (Object r : (List<Object>) ls.get("registries")) {
            var m = (Map<String, Object>) r;
            if (Path.of((String) m.get("path")).getFileName().equals(file.getFileName())) {
                return m;
            }
        }
        throw new AssertionError("topdeck ls does not list " + file + ": " + ls);
    }

    static List<String> lines(String path) throws IOException {
        return Files.readAllLines(ROOT.resolve(path));
    }

    static double bits(String hex) {
        return Double.longBitsToDouble(Long.parseUnsignedLong(hex, 16));
    }

    static String hex(double v) {
        return String.format("%016x", Double.doubleToRawLongBits(v));
    }

    static final String VECTORS = "bindings/python/tests/bucket_vectors.txt";

    // --- bucket maths ----------------------------------------------------------

    static void bucketIndices() throws IOException {
        int n = 0;
        List<String> wrong = new ArrayList<>();
        for (String line : lines(VECTORS)) {
            String[] f = line.split(" ");
            if (f[0].equals("index")) {
                n++;
                int got = Exponential.bucketIndex(Integer.parseInt(f[1]), bits(f[2]));
                if (got != Integer.parseInt(f[3])) {
                    wrong.add(line + " got " + got);
                }
            }
        }
        check(n > 5000, "the vector file lost its cases: " + n);
        check(wrong.isEmpty(), wrong.size() + " of " + n + " differ, e.g. " + wrong.subList(0, Math.min(5, wrong.size())));
    }

    static void upperBounds() throws IOException {
        int n = 0;
        for (String line : lines(VECTORS)) {
            String[] f = line.split(" ");
            if (f[0].equals("bound")) {
                n++;
                equal(hex(Exponential.upperBound(Integer.parseInt(f[1]), Integer.parseInt(f[2]))), f[3], line);
            }
        }
        check(n > 300, "too few bound cases: " + n);
    }

    static void ranges() throws IOException {
        int n = 0;
        for (String line : lines(VECTORS)) {
            String[] f = line.split(" ");
            if (f[0].equals("range")) {
                n++;
                var r = Exponential.Range.covering(Integer.parseInt(f[1]), bits(f[2]), bits(f[3]));
                equal(r.minIndex() + " " + r.bucketCount() + " " + hex(r.zeroThreshold()), f[4] + " " + f[5] + " " + f[6], line);
            }
        }
        equal(n, 4 * 13, "range cases");
    }

    static void orderedBits() {
        double[] vals = {Double.NEGATIVE_INFINITY, -3.0, -0.5, -0.0, 0.0, 1e-300, 0.5, 3.0, Double.POSITIVE_INFINITY};
        for (int i = 0; i + 1 < vals.length; i++) {
            check(Long.compareUnsigned(Exponential.orderedBits(vals[i]), Exponential.orderedBits(vals[i + 1])) <= 0,
                    vals[i] + " before " + vals[i + 1]);
            check(Exponential.orderedBits(vals[i]) != 0, "0 is no value");
            check(Double.compare(Exponential.fromOrderedBits(Exponential.orderedBits(vals[i])), vals[i]) == 0, "round trip");
        }
    }

    // --- another process writes ------------------------------------------------

    /** The conformance writer in a JDK 22+ child, in crash mode: it dies by SIGKILL when stdin closes. */
    static Process startChild(Path dir) throws Exception {
        check(!JAVA22.isEmpty(), "-Dtopdeck.java22 names no JDK 22+ java");
        Process p = new ProcessBuilder(JAVA22, "--enable-native-access=ALL-UNNAMED", "-cp",
                System.getProperty("java.class.path"), "dev.topdeck.conformance.Writer", dir.toString(), "crash")
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        var out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        equal(out.readLine(), "ready", "the child writer's first line");
        return p;
    }

    static Path onlyFile(Path dir) throws IOException {
        try (var s = Files.list(dir)) {
            List<Path> all = s.toList();
            equal(all.size(), 1, "files in " + dir + " " + all);
            return all.get(0);
        }
    }

    @SuppressWarnings("unchecked")
    static void childWriterLifecycle() throws Exception {
        Path dir = tempDir();
        Process child = startChild(dir);
        Path file = onlyFile(dir);
        check(file.getFileName().toString().startsWith(child.pid() + "-"), "named after the child's pid: " + file);

        equal(lsEntry(dir, file).get("state"), "alive", "topdeck ls, live writer");
        Listing live = Listing.of(dir);
        equal(live.registries().size(), 1, "registries read");
        equal(live.registries().get(0).state(), "alive", "this reader, live writer");
        cli(dir, "gc");
        check(Files.exists(file), "topdeck gc removed a live Java writer's file");

        // Every value as topdeck show --json reports it.
        var shown = (Map<String, Object>) Json.parse(cli(dir, "show", "--json", file.toString()));
        var theirs = (List<Object>) shown.get("metrics");
        List<Metric> ours = live.registries().get(0).metrics();
        equal(ours.size(), theirs.size(), "metric count");
        equal(ours.size(), 7, "metrics of the conformance script");
        for (int i = 0; i < ours.size(); i++) {
            Metric m = ours.get(i);
            var t = (Map<String, Object>) theirs.get(i);
            equal(m.name(), t.get("name"), "name " + i);
            Map<String, Object> labels = new java.util.LinkedHashMap<>();
            m.labels().forEach(l -> labels.put(l.key(), l.value()));
            equal(labels, t.get("labels"), m.name() + " labels");
            equal(m.help(), t.get("help"), m.name() + " help");
            equal(m.unit(), t.get("unit"), m.name() + " unit");
            if (m.value() instanceof HistogramValue h) {
                var tv = (Map<String, Object>) t.get("value");
                equal(h.count(), tv.get("count"), m.name() + " count");
                equal(h.sum(), ((Number) tv.get("sum")).doubleValue(), m.name() + " sum");
                equal(h.max(), ((Number) tv.get("max")).doubleValue(), m.name() + " max");
                List<Object> buckets = new ArrayList<>();
                if (h.zeroCount() > 0) {
                    buckets.add(List.of(h.zeroThreshold(), h.zeroCount()));
                }
                for (int k = 0; k < h.counts().length; k++) {
                    if (h.counts()[k] > 0) {
                        buckets.add(List.of(h.upperBound(k), h.counts()[k]));
                    }
                }
                equal(buckets.toString(), tv.get("buckets").toString(), m.name() + " buckets");
            } else if (m.value() instanceof Double d) {
                equal(d, ((Number) t.get("value")).doubleValue(), m.name());
            } else {
                equal(m.value(), t.get("value"), m.name());
            }
        }
        equal(ours.get(0).value(), 100_000L, "jobs_total{queue=fast}");

        child.getOutputStream().close(); // the driver then kills itself with SIGKILL
        check(child.waitFor(30, TimeUnit.SECONDS), "the child did not die");
        equal(child.exitValue(), 128 + 9, "the child's exit (SIGKILL)");
        equal(lsEntry(dir, file).get("state"), "dead", "topdeck ls, killed writer");
        equal(Listing.of(dir).registries().get(0).state(), "dead", "this reader, killed writer");
        equal(Listing.of(dir).registries().get(0).metrics().get(0).value(), 100_000L, "last values kept after a crash");
        cli(dir, "gc");
        check(!Files.exists(file), "topdeck gc kept a dead writer's file");
        Files.delete(dir);
    }

    @SuppressWarnings("unchecked")
    static void damagedFiles() throws Exception {
        Path dir = tempDir();
        Process child = startChild(dir);
        Path file = onlyFile(dir);
        child.getOutputStream().close();
        child.waitFor(30, TimeUnit.SECONDS);
        byte[] good = Files.readAllBytes(file);
        Map<String, java.util.function.UnaryOperator<byte[]>> damage = new java.util.LinkedHashMap<>();
        damage.put("bad-magic", b -> { b[0] = 'X'; return b; });
        damage.put("major-2", b -> { ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putInt(8, 2 << 16); return b; });
        damage.put("not-ready", b -> { ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putInt(8, 0); return b; });
        damage.put("truncated", b -> java.util.Arrays.copyOf(b, 100));
        damage.put("short", b -> java.util.Arrays.copyOf(b, b.length - 4096));
        damage.put("count-above-capacity", b -> { ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putInt(64, 1 << 30); return b; });
        damage.put("bad-kind", b -> { b[4096] = 9; return b; });
        damage.put("value-outside", b -> { ByteBuffer.wrap(b).order(ByteOrder.LITTLE_ENDIAN).putLong(4096 + 8, 1L << 40); return b; });
        Set<String> want = new HashSet<>();
        for (var d : damage.entrySet()) {
            String name = "1-1-" + d.getKey() + ".topdeck";
            Files.write(dir.resolve(name), d.getValue().apply(good.clone()));
            want.add(name);
        }
        Set<String> ours = new HashSet<>();
        Listing found = Listing.of(dir);
        found.errors().forEach(p -> ours.add(p.path().getFileName().toString()));
        equal(ours, want, "files this reader rejects");
        equal(found.registries().size(), 1, "the intact file is still read");
        Set<String> theirs = new HashSet<>();
        var ls = (Map<String, Object>) Json.parse(cli(dir, "ls", "--json"));
        for (Object e : (List<Object>) ls.get("errors")) {
            String line = (String) e; // "<path>: <what is wrong>"
            theirs.add(Path.of(line.substring(0, line.indexOf(": "))).getFileName().toString());
        }
        // ls reads headers; show reads the descriptors too.
        Set<String> headerDamage = new HashSet<>(want);
        headerDamage.removeAll(Set.of("1-1-bad-kind.topdeck", "1-1-value-outside.topdeck"));
        equal(theirs, headerDamage, "files topdeck ls rejects");
        for (String n : Set.of("1-1-bad-kind.topdeck", "1-1-value-outside.topdeck")) {
            check(cliStatus(dir, "show", "--json", dir.resolve(n).toString()) != 0, "topdeck show accepted " + n);
        }
        try (var s = Files.list(dir)) {
            for (Path p : s.toList()) {
                Files.delete(p);
            }
        }
        Files.delete(dir);
    }

    // --- this process writes (JDK 22+) ------------------------------------------

    static void inProcess() throws Exception {
        Path dir = tempDir();
        Path file;
        try (Registry r = Registry.builder().name("tests").directory(dir).build()) {
            file = r.path();
            r.counter("hits_total", "Hits.").add(5);
            equal(lsEntry(dir, file).get("state"), "alive", "topdeck ls");
            equal(lsEntry(dir, file).get("registry"), "tests", "registry name");
            cli(dir, "gc");
            check(Files.exists(file), "gc removed a live file");
            RegistryFile f = RegistryFile.read(file);
            equal(f.pid(), ProcessHandle.current().pid(), "pid in the header");
            equal(f.metrics().get(0).value(), 5L, "hits_total");
        }
        check(!Files.exists(file), "close() left the file");
        Files.delete(dir);
    }

    static long valueOf(Path file, int metric) throws Exception {
        return (Long) RegistryFile.read(file).metrics().get(metric).value();
    }

    static void threads() throws Exception {
        Path dir = tempDir();
        try (Registry r = Registry.builder().directory(dir).shards(2).build()) {
            Counter c = r.counter("ops_total", "Ops.");
            Histogram h = r.histogram("sizes", "Sizes.");
            int threads = 8, each = 200_000;
            var start = new java.util.concurrent.CountDownLatch(1);
            List<Thread> all = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                Thread th = new Thread(() -> {
                    try {
                        start.await();
                    } catch (InterruptedException e) {
                        return;
                    }
                    for (int i = 0; i < each; i++) {
                        c.inc();
                        if (i % 4 == 0) {
                            h.observe(i);
                        }
                    }
                });
                th.start();
                all.add(th);
            }
            start.countDown();
            for (Thread th : all) {
                th.join();
            }
            equal(c.get(), (long) threads * each, "counter total");
            equal(valueOf(r.path(), 0), (long) threads * each, "counter as a reader sums it");
            var hv = (HistogramValue) RegistryFile.read(r.path()).metrics().get(1).value();
            equal(hv.count(), (long) threads * each / 4, "histogram count");
            equal(hv.zeroCount(), (long) threads, "zeros (i = 0 once per thread)");
            equal(hv.max(), (double) (each - 4), "histogram max");
            equal(h.count(), hv.count(), "count() as the reader");
        }
        Files.delete(dir);
    }

    static void counterStopsAtTheTop() throws Exception {
        Path dir = tempDir();
        try (Registry r = Registry.builder().directory(dir).shards(1).build()) {
            Counter own = r.counter("own_total", "In this thread's shard.");
            Counter spill = r.counter("spill_total", "In the overflow shard.");
            Counter both = r.counter("both_total", "Each word below the top, their sum past it.");
            own.add(Long.MAX_VALUE);
            own.add(Long.MAX_VALUE);
            equal(own.get(), -2L, "2^64-2, not yet at the top");
            own.add(5);
            both.add(Long.MAX_VALUE);
            // The one shard is this thread's: another thread writes the overflow shard.
            Thread other = new Thread(() -> {
                spill.add(Long.MAX_VALUE);
                spill.add(Long.MAX_VALUE);
                spill.add(Long.MAX_VALUE);
                both.add(Long.MAX_VALUE);
                both.add(3);
            });
            other.start();
            other.join();
            own.inc();
            for (String name : new String[] {"own_total", "spill_total", "both_total"}) {
                Counter c = name.equals("own_total") ? own : name.equals("spill_total") ? spill : both;
                equal(Long.toUnsignedString(c.get()), "18446744073709551615", name + " in this process");
            }
            for (int m = 0; m < 3; m++) {
                equal(Long.toUnsignedString(valueOf(r.path(), m)), "18446744073709551615",
                        "metric " + m + " as the Java reader sums it");
            }
            String shown = cli(dir, "show", "--json", r.path().toString());
            // Each metric's value once: three counters at 2^64-1.
            check(shown.split("18446744073709551615", -1).length == 4,
                    "topdeck show: every counter at 2^64-1: " + shown);
        }
        Files.delete(dir);
    }

    static int shardsInUse(Path file) throws IOException {
        byte[] head = new byte[128];
        try (var ch = java.nio.channels.FileChannel.open(file)) {
            ch.read(ByteBuffer.wrap(head), 0);
        }
        return ByteBuffer.wrap(head).order(ByteOrder.LITTLE_ENDIAN).getInt(120);
    }

    static void threadChurn() throws Exception {
        Path dir = tempDir();
        try (Registry r = Registry.builder().directory(dir).build()) {
            Counter c = r.counter("churn_total", "Churn.");
            int before = shardsInUse(r.path());
            for (int t = 0; t < 200; t++) {
                Thread th = new Thread(() -> {
                    for (int i = 0; i < 1000; i++) {
                        c.inc();
                    }
                });
                th.start();
                th.join();
            }
            equal(valueOf(r.path(), 0), 200_000L, "total over 200 threads");
            // One at a time, so at most one new index beyond those held when the test began.
            check(shardsInUse(r.path()) <= before + 1, "shards_in_use grew from " + before + " to " + shardsInUse(r.path()));
        }
        Files.delete(dir);
    }

    static void virtualThreads() throws Exception {
        java.lang.reflect.Method start;
        try {
            start = Thread.class.getMethod("startVirtualThread", Runnable.class);
        } catch (NoSuchMethodException e) {
            return; // a JDK without virtual threads: nothing to test
        }
        Path dir = tempDir();
        try (Registry r = Registry.builder().directory(dir).build()) {
            Counter c = r.counter("v_total", "Virtual.");
            int before = shardsInUse(r.path());
            List<Thread> all = new ArrayList<>();
            for (int t = 0; t < 100; t++) {
                all.add((Thread) start.invoke(null, (Runnable) () -> {
                    for (int i = 0; i < 1000; i++) {
                        c.inc();
                    }
                }));
            }
            for (Thread th : all) {
                th.join();
            }
            equal(valueOf(r.path(), 0), 100_000L, "total over 100 virtual threads");
            // No virtual thread took a shard index: their counts are in the overflow shard.
            equal(shardsInUse(r.path()), before, "shards_in_use after 100 virtual threads");
        }
        Files.delete(dir);
    }

    static void expectThrows(Class<? extends Throwable> type, String fragment, Test t) throws Exception {
        try {
            t.run();
        } catch (Throwable e) {
            check(type.isInstance(e), "threw " + e + ", want " + type.getSimpleName());
            check(e.getMessage().contains(fragment), "message '" + e.getMessage() + "' lacks '" + fragment + "'");
            return;
        }
        throw new AssertionError("no " + type.getSimpleName() + " thrown");
    }

    static void registrationErrors() throws Exception {
        Path dir = tempDir();
        try (Registry r = Registry.builder().directory(dir).metrics(2).build()) {
            expectThrows(IllegalArgumentException.class, "[a-zA-Z_:]", () -> r.counter("1bad", ""));
            expectThrows(IllegalArgumentException.class, "pairs", () -> r.counter("ok_total", "", "lonely"));
            expectThrows(IllegalArgumentException.class, "__", () -> r.counter("ok_total", "", "__x", "y"));
            Counter a = r.counter("a_total", "A.");
            expectThrows(IllegalArgumentException.class, "counters only go up", () -> a.add(-1));
            expectThrows(IllegalArgumentException.class, "already registered", () -> r.counter("a_total", "A."));
            r.counter("b_total", "B.");
            expectThrows(IllegalStateException.class, "metrics(", () -> r.counter("c_total", "C."));
            expectThrows(IllegalArgumentException.class, "1024", () -> r.metric("h").buckets(8, 1e-9, 1e9).histogram());
        }
        expectThrows(IllegalArgumentException.class, "shards", () -> Registry.builder().directory(dir).shards(5000).build());
        Files.delete(dir);
    }

    static void fileNameAndMode() throws Exception {
        Path dir = tempDir();
        try (Registry a = Registry.builder().directory(dir).build(); Registry b = Registry.builder().directory(dir).build()) {
            String pid = Long.toString(ProcessHandle.current().pid());
            for (Registry r : List.of(a, b)) {
                String n = r.path().getFileName().toString();
                check(n.matches(pid + "-[0-9]+-[0-9]+\\.topdeck"), "name " + n);
                equal(PosixFilePermissions.toString(Files.getPosixFilePermissions(r.path())), "rw-------", "file mode");
            }
            check(!a.path().equals(b.path()), "two registries, two files");
            equal(PosixFilePermissions.toString(Files.getPosixFilePermissions(dir)), "rwx------", "directory mode");
            try (var s = Files.list(dir)) {
                check(s.noneMatch(p -> p.getFileName().toString().startsWith(".creating-")), "a temporary file was left");
            }
        }
        // A readers' group: 0640 in 0750, both given to the group.
        String gid = Files.getAttribute(Path.of("/proc/self"), "unix:gid").toString();
        try (Registry g = Registry.builder().directory(dir).group(gid).build()) {
            equal(PosixFilePermissions.toString(Files.getPosixFilePermissions(g.path())), "rw-r-----", "group file mode");
            equal(PosixFilePermissions.toString(Files.getPosixFilePermissions(dir)), "rwxr-x---", "group directory mode");
            equal(Files.getAttribute(g.path(), "unix:gid").toString(), gid, "file's group");
        }
        Files.delete(dir);
    }

    static void refusedOnOldJdk() throws Exception {
        expectThrows(UnsupportedOperationException.class, "JDK 22 or newer", () -> Registry.builder().build());
    }

    // --- timers and the agent's thread-waits array (JDK 22+) ---------------------------

    /** The histogram {@code name} as this package's reader sees it in the registry's file, or null. */
    static HistogramValue histogramOf(Registry r, String name) throws Exception {
        for (Metric m : RegistryFile.read(r.path()).metrics()) {
            if (m.name().equals(name)) {
                return (HistogramValue) m.value();
            }
        }
        return null;
    }

    static void timerWithoutWaits() throws Exception {
        Path dir = tempDir();
        Path absent = Path.of("/sys/fs/bpf/topdeck-jtest-absent-" + ProcessHandle.current().pid() + "/thread_waits");
        for (Registry.Builder b : List.of(Registry.builder().threadWaits(absent), Registry.builder().noThreadWaits())) {
            try (Registry r = b.directory(dir).build()) {
                equal(r.threadWaitsPin(), null, "no array mapped");
                equal(r.threadWaitsProblem(), null, "nothing pinned is no problem");
                Timer t = r.timer("serve_seconds", "Serving.", "route", "/");
                equal(t.time(() -> 42), 42, "time(Supplier) returns the result");
                t.time(() -> {});
                try (Timer.Timing g = t.start()) {
                    g.cancel();
                }
                equal(t.cpuWaitHistogram(), null, "companion");
                equal(t.cpuWaitUnknownHistogram(), null, "unknown companion");
                List<Metric> ms = RegistryFile.read(r.path()).metrics();
                equal(ms.size(), 1, "metrics registered");
                equal(ms.get(0).unit(), "seconds", "unit");
                equal(((HistogramValue) ms.get(0).value()).count(), 2L, "timings recorded");
            }
        }
        Files.delete(dir);
    }

    /** Burns {@code ns} of this platform thread's CPU time (a virtual thread has no CPU time to read). */
    static void spinCpu(long ns) {
        var mx = java.lang.management.ManagementFactory.getThreadMXBean();
        long now = mx.getCurrentThreadCpuTime(), until = now + ns;
        check(now >= 0, "no CPU time for this thread");
        while (mx.getCurrentThreadCpuTime() < until) {
            Thread.onSpinWait();
        }
    }

    static Process startAgent(Path dir, Path pin, Path log) throws Exception {
        var pb = new ProcessBuilder(CLI, "agent", "--interval", "500ms", "--thread-waits", pin.toString())
                .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
        pb.environment().put("TOPDECK_DIR", dir.toString());
        return pb.start();
    }

    /** Waits for a live array at {@code pin} other than {@code notId}; returns it. */
    static ThreadWaits waitForLiveArray(Path pin, int notId, Process agent, Path log) throws Exception {
        long deadline = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (!agent.isAlive()) {
                throw new AssertionError("the agent exited (" + agent.exitValue() + "): " + Files.readString(log));
            }
            ThreadWaits w = null;
            try {
                w = ThreadWaits.openIfPinned(pin);
            } catch (IOException e) {
                // half made: try again
            }
            if (w != null && w.id != notId && w.state() == ThreadWaits.LIVE) {
                return w;
            }
            Thread.sleep(100);
        }
        throw new AssertionError("no live thread-waits array at " + pin + " after 30 s: " + Files.readString(log));
    }

    static void deleteTree(Path p) throws IOException {
        if (!Files.exists(p, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
            return;
        }
        try (var s = Files.walk(p)) {
            for (Path q : s.sorted(java.util.Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(q);
            }
        }
    }

    /**
     * The real agent pins an array at a private pin; a registry pointed there (the builder's
     * option: the environment cannot be set in-process) gets companions; a section that spins ~50
     * ms of CPU while a hog spins on the same CPU records a non-zero wait, the slot's difference;
     * once the agent is SIGKILLed, sections record their latency as unknown, never a zero wait;
     * a new agent's array at the same pin is picked up, looked for at most once a second.
     */
    static void timerWithAgent() throws Exception {
        if (!System.getProperty("user.name").equals("root")
                && !Files.getAttribute(Path.of("/proc/self"), "unix:uid").equals(0)) {
            skip("needs root: the test runs the real agent (eBPF) and pins in /sys/fs/bpf");
        }
        if (!Files.isDirectory(Path.of("/sys/fs/bpf"))) {
            skip("no /sys/fs/bpf: bpffs is not mounted");
        }
        long pid = ProcessHandle.current().pid();
        Path pinDir = Path.of("/sys/fs/bpf/topdeck-jtest-" + pid), pin = pinDir.resolve("thread_waits");
        Path agentDir = tempDir(), dir = tempDir(), log = agentDir.resolve("agent.log");
        Process agent = null, hog = null;
        byte[] mask = Native.getAffinity();
        try {
            agent = startAgent(agentDir, pin, log);
            ThreadWaits first = waitForLiveArray(pin, -1, agent, log);

            // A pin in a directory another user owns is refused, with the reason.
            Files.setAttribute(pinDir, "unix:uid", 65534);
            try (Registry r = Registry.builder().directory(dir).threadWaits(pin).build()) {
                check(r.threadWaitsProblem() != null && r.threadWaitsProblem().contains("uid 65534"),
                        "reason: " + r.threadWaitsProblem());
                equal(r.threadWaitsPin(), null, "an unusable pin is not mapped");
                r.timer("serve_seconds", "");
                equal(RegistryFile.read(r.path()).metrics().size(), 1, "no companions");
            } finally {
                Files.setAttribute(pinDir, "unix:uid", 0);
            }

            try (Registry r = Registry.builder().directory(dir).threadWaits(pin).build()) {
                equal(r.threadWaitsProblem(), null, "problem");
                equal(r.threadWaitsPin(), pin, "pin mapped");
                Timer t = r.timer("serve_seconds", "Serving.", "route", "/");
                check(t.cpuWaitHistogram() != null && t.cpuWaitUnknownHistogram() != null, "companions");
                List<Metric> ms = RegistryFile.read(r.path()).metrics();
                equal(ms.size(), 3, "a timer and its two companions");
                equal(ms.get(1).name(), "serve_cpu_wait_seconds", "companion name");
                equal(ms.get(2).name(), "serve_cpu_wait_unknown_seconds", "unknown companion name");
                equal(ms.get(1).labels().toString(), ms.get(0).labels().toString(), "companion labels");
                check(ms.get(1).help().contains("serve_seconds"), "help: " + ms.get(1).help());
                expectThrows(IllegalArgumentException.class, "already registered", () -> r.timer("serve_seconds", "", "route", "/"));
                r.histogram("other_cpu_wait_seconds", "Taken.", "route", "/");
                expectThrows(IllegalArgumentException.class, "companion", () -> r.timer("other_seconds", "", "route", "/"));
                equal(RegistryFile.read(r.path()).metrics().size(), 4, "a duplicate or clashing timer registers nothing");

                // The test thread and a hog on one CPU: the section waits behind the hog.
                int cpu = 0;
                while ((mask[cpu / 8] & (1 << (cpu % 8))) == 0) {
                    cpu++;
                }
                byte[] one = new byte[mask.length];
                one[cpu / 8] = (byte) (1 << (cpu % 8));
                equal(Native.setAffinity(one), 0, "sched_setaffinity to CPU " + cpu);
                hog = new ProcessBuilder("taskset", "-c", Integer.toString(cpu), "sh", "-c", "while :; do :; done")
                        .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
                Thread.sleep(100);
                long slot = first.slotOffset(Native.gettid());
                check(slot > 0, "this thread has a slot");
                long a = first.array.word(slot);
                double latency;
                try (Timer.Timing g = t.start()) {
                    spinCpu(50_000_000L);
                    latency = g.stop();
                }
                long b = first.array.word(slot);
                hog.destroyForcibly().waitFor();
                equal(Native.setAffinity(mask), 0, "sched_setaffinity back");
                HistogramValue w = histogramOf(r, "serve_cpu_wait_seconds");
                double slotDiff = (b - a) / 1e9;
                System.out.printf("     section %.1f ms, CPU wait %.1f ms (slot %.1f ms around it)%n", latency * 1e3,
                        w.sum() * 1e3, slotDiff * 1e3);
                equal(w.count(), 1L, "waits recorded");
                equal(w.zeroCount(), 0L, "not a zero wait");
                check(w.sum() >= 0.010, "a section behind a hog on its CPU waited " + w.sum() + " s");
                // The slot's difference over the section: the timer's loads are between ours, and
                // only a preemption in the instants between them (a slice, a few ms) adds to ours.
                check(w.sum() <= slotDiff + 1e-9 && slotDiff - w.sum() < 0.010,
                        "recorded " + w.sum() + " s, the slot advanced " + slotDiff + " s around it");
                check(w.sum() < latency, "a wait within its section");
                equal(histogramOf(r, "serve_cpu_wait_unknown_seconds").count(), 0L, "unknown while live");

                // A virtual thread has no slot of its own: its timing records in neither companion.
                Thread vt = (Thread) Thread.class.getMethod("startVirtualThread", Runnable.class)
                        .invoke(null, (Runnable) () -> t.time(() -> Thread.onSpinWait()));
                vt.join();
                equal(histogramOf(r, "serve_seconds").count(), 2L, "the virtual thread's latency");
                equal(histogramOf(r, "serve_cpu_wait_seconds").count(), 1L, "no wait for a virtual thread");
                equal(histogramOf(r, "serve_cpu_wait_unknown_seconds").count(), 0L, "nor an unknown one");

                // Killed: the probe marks the array gone as the agent's last thread exits.
                agent.destroyForcibly().waitFor();
                long deadline = System.nanoTime() + 10_000_000_000L;
                while (first.state() != ThreadWaits.GONE && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                }
                equal(first.state(), ThreadWaits.GONE, "the state after SIGKILL");
                double unknownSum = 0;
                ThreadWaits.Source src = r.waitsSource();
                long looks = src.looks();
                for (int i = 0; i < 20; i++) {
                    try (Timer.Timing g = t.start()) {
                        spinCpu(1_000_000L);
                        unknownSum += g.stop();
                    }
                }
                check(src.looks() - looks <= 1, "20 sections in well under 2 s looked " + (src.looks() - looks) + " times");
                HistogramValue u = histogramOf(r, "serve_cpu_wait_unknown_seconds");
                equal(u.count(), 20L, "unknown latencies");
                check(Math.abs(u.sum() - unknownSum) < 1e-9, "unknown sum " + u.sum() + " = latencies " + unknownSum);
                equal(histogramOf(r, "serve_cpu_wait_seconds").count(), 1L, "no wait recorded, not even 0, once gone");

                // A new agent pins a new array at the same path; the next look (a second after the
                // last) takes it, and sections record waits again.
                agent = startAgent(agentDir, pin, log);
                ThreadWaits second = waitForLiveArray(pin, first.id, agent, log);
                Thread.sleep(1100);
                t.time(() -> {}); // unknown: begun on the old array; its stop looks
                equal(r.threadWaits().id, second.id, "the registry's array after the agent's restart");
                t.time(() -> spinCpu(1_000_000L));
                equal(histogramOf(r, "serve_cpu_wait_seconds").count(), 2L, "a wait from the new array");
                equal(histogramOf(r, "serve_cpu_wait_unknown_seconds").count(), 21L, "unknown latencies");
            }
        } finally {
            if (hog != null) {
                hog.destroyForcibly().waitFor();
            }
            Native.setAffinity(mask);
            if (agent != null) {
                agent.destroyForcibly().waitFor();
            }
            Files.deleteIfExists(pin);
            Files.deleteIfExists(pinDir);
            deleteTree(agentDir);
            deleteTree(dir);
        }
    }
}
