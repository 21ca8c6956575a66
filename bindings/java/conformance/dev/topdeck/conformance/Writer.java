// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.conformance;

import dev.topdeck.Counter;
import dev.topdeck.DoubleGauge;
import dev.topdeck.Gauge;
import dev.topdeck.Histogram;
import dev.topdeck.Registry;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/** Writer driver of conformance/PROTOCOL.md: {@code writer.sh <dir> exit|crash|late}. */
public final class Writer {
    private Writer() {}

    public static void main(String[] args) throws Exception {
        if (args.length != 2 || !(args[1].equals("exit") || args[1].equals("crash") || args[1].equals("late"))) {
            System.err.println("usage: writer.sh <dir> exit|crash|late");
            System.exit(2);
        }
        String mode = args[1];
        Registry reg = Registry.builder().name("conformance").directory(Path.of(args[0])).build();
        Counter fast = reg.counter("jobs_total", "Jobs done.", "queue", "fast");
        Counter slow = reg.counter("jobs_total", "Jobs done.", "queue", "slow");
        Gauge depth = reg.gauge("queue_depth", "Jobs waiting — ünïcödé ✓");
        DoubleGauge temp = reg.metric("temperature_celsius").help("Temperature.").unit("celsius")
                .labels("room", "a\"b\\c").gaugeDouble();
        Histogram duration = reg.metric("request_duration_seconds").help("Time to serve.").unit("seconds")
                .labels("route", "/").histogram();
        Histogram payload = reg.metric("payload_bytes").help("Sizes.").unit("bytes").histogram();
        // A histogram of seconds rather than a Timer: with an agent running, a timer would add its
        // CPU-wait companions, and the conformance script expects exactly its own metrics.
        Histogram db = reg.metric("db_query_seconds").help("Time in the database.").unit("seconds").histogram();

        Thread[] threads = new Thread[4];
        for (int t = 0; t < threads.length; t++) {
            threads[t] = new Thread(() -> {
                for (int i = 0; i < 25_000; i++) {
                    fast.inc();
                }
            });
            threads[t].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        slow.add(7);
        depth.set(-42);
        temp.set(21.5);
        temp.set(-0.125);
        for (int i = 1; i <= 1000; i++) {
            duration.observe(i / 1000.0);
        }
        for (double v : new double[] {0, 0, 0, 1024, 1024, 1e9}) {
            payload.observe(v);
        }
        for (int i = 0; i < 10; i++) {
            try (var t = db.startTimer()) {
                Thread.onSpinWait();
            }
        }
        System.out.println("ready");
        System.out.flush();

        var in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            if (mode.equals("late") && line.strip().equals("more")) {
                reg.counter("late_total", "Registered late.").add(3);
                System.out.println("more-done");
                System.out.flush();
            }
        }
        if (mode.equals("crash")) {
            new ProcessBuilder("kill", "-KILL", Long.toString(ProcessHandle.current().pid())).inheritIO().start().waitFor();
            Thread.sleep(10_000);
        }
        reg.close();
    }
}
