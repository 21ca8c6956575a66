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
            tests.put("threads that end give their shard to the next thread", Tests::threadChurn);
            tests.put("virtual threads share the overflow shard", Tests::virtualThreads);
            tests.put("registration errors say what is wrong and what to do", Tests::registrationErrors);
            tests.put("the file is private and named <pid>-<start>-<seq>.topdeck", Tests::fileNameAndMode);
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
}
