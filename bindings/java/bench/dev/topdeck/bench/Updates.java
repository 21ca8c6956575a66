// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.bench;

import dev.topdeck.Counter;
import dev.topdeck.Histogram;
import dev.topdeck.Registry;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CyclicBarrier;

/**
 * Cost of one update, topdeck beside the Prometheus Java client (io.prometheus:prometheus-metrics-core),
 * in one JVM: counter inc and histogram observe, 1 and 2 threads. A plain timed loop: each round
 * runs OPS updates per thread (all threads start together); after warm-up rounds, the median of
 * ROUNDS rounds of the slowest thread's CPU time per update, with min and max.
 */
public final class Updates {
    private Updates() {}

    static final int OPS = 5_000_000, WARMUP = 5, ROUNDS = 15;
    /** Thread CPU time, not wall time: other work on the machine then costs the loop little. */
    static final java.lang.management.ThreadMXBean CPU = java.lang.management.ManagementFactory.getThreadMXBean();
    static final double[] VALUES = new double[1024];

    /** One loop of {@code n} updates; each op has its own loop, so every call site stays monomorphic. */
    interface Op {
        void loop(int n);
    }

    public static void main(String[] args) throws Exception {
        var rnd = new java.util.Random(42);
        for (int i = 0; i < VALUES.length; i++) {
            VALUES[i] = Math.exp(rnd.nextGaussian() * 2 - 7); // seconds, around 1 ms, wide
        }
        var dir = Files.createTempDirectory("topdeck-bench");
        try (Registry reg = Registry.builder().directory(dir).build()) {
            Counter tdCounter = reg.counter("bench_total", "Bench.");
            Histogram tdHist = reg.metric("bench_seconds").help("Bench.").unit("seconds").histogram();
            var pCounter = io.prometheus.metrics.core.metrics.Counter.builder().name("p_bench_total").build();
            var pHist = io.prometheus.metrics.core.metrics.Histogram.builder().name("p_bench_seconds").build();
            var pNative = io.prometheus.metrics.core.metrics.Histogram.builder().name("p_native_seconds").nativeOnly().build();
            Map<String, Op> ops = new LinkedHashMap<>();
            ops.put("topdeck Counter.inc", n -> {
                for (int i = 0; i < n; i++) {
                    tdCounter.inc();
                }
            });
            ops.put("prometheus Counter.inc", n -> {
                for (int i = 0; i < n; i++) {
                    pCounter.inc();
                }
            });
            ops.put("topdeck Histogram.observe", n -> {
                for (int i = 0; i < n; i++) {
                    tdHist.observe(VALUES[i & 1023]);
                }
            });
            ops.put("prometheus Histogram.observe (classic+native)", n -> {
                for (int i = 0; i < n; i++) {
                    pHist.observe(VALUES[i & 1023]);
                }
            });
            ops.put("prometheus Histogram.observe (nativeOnly)", n -> {
                for (int i = 0; i < n; i++) {
                    pNative.observe(VALUES[i & 1023]);
                }
            });
            System.out.printf("%-48s %7s %9s %9s %9s%n", "update", "threads", "median", "min", "max");
            for (int threads : new int[] {1, 2}) {
                for (var e : ops.entrySet()) {
                    double[] ns = measure(e.getValue(), threads);
                    System.out.printf("%-48s %7d %7.2fns %7.2fns %7.2fns%n", e.getKey(), threads, ns[0], ns[1], ns[2]);
                }
            }
        }
        Files.deleteIfExists(dir);
    }

    /** Median, min and max ns per update per thread over ROUNDS rounds. */
    static double[] measure(Op op, int threads) throws Exception {
        List<Double> perRound = new ArrayList<>();
        for (int round = 0; round < WARMUP + ROUNDS; round++) {
            var barrier = new CyclicBarrier(threads + 1);
            long[] elapsed = new long[threads];
            List<Thread> all = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                int me = t;
                Thread th = new Thread(() -> {
                    try {
                        barrier.await();
                        long start = CPU.getCurrentThreadCpuTime();
                        op.loop(OPS);
                        elapsed[me] = CPU.getCurrentThreadCpuTime() - start;
                    } catch (Exception ex) {
                        throw new RuntimeException(ex);
                    }
                });
                th.start();
                all.add(th);
            }
            barrier.await();
            for (Thread th : all) {
                th.join();
            }
            if (round >= WARMUP) {
                perRound.add(Arrays.stream(elapsed).max().getAsLong() / (double) OPS);
            }
        }
        perRound.sort(null);
        return new double[] {perRound.get(perRound.size() / 2), perRound.get(0), perRound.get(perRound.size() - 1)};
    }
}
