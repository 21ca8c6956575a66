// SPDX-License-Identifier: Apache-2.0
package dev.topdeck.examples;

import dev.topdeck.Counter;
import dev.topdeck.Gauge;
import dev.topdeck.Histogram;
import dev.topdeck.Registry;
import dev.topdeck.Timer;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A small service that publishes its metrics through topdeck until SIGTERM: worker threads serve
 * simulated requests on two routes. Watch it with {@code topdeck top} or {@code topdeck show
 * Service}; SIGTERM (or Ctrl-C) runs the JVM's shutdown hooks, which remove its file.
 *
 * <pre>
 * bindings/java/examples/service.sh [workers]
 * </pre>
 */
public final class Service {
    private Service() {}

    public static void main(String[] args) throws Exception {
        int workers = args.length > 0 ? Integer.parseInt(args[0]) : 4;
        Registry registry = Registry.builder().name("java-example").build();
        Counter home = registry.counter("http_requests_total", "Requests served.", "route", "/");
        Counter search = registry.counter("http_requests_total", "Requests served.", "route", "/search");
        Counter errors = registry.counter("http_errors_total", "Requests that failed.");
        Gauge busy = registry.gauge("workers_busy", "Workers serving a request now.");
        Timer latency = registry.timer("http_request_duration_seconds", "Time to serve a request.");
        Histogram sizes = registry.metric("http_response_bytes").help("Response sizes.").unit("bytes")
                .buckets(2, 1, 1e7).histogram();

        AtomicBoolean running = new AtomicBoolean(true);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> running.set(false)));
        System.out.println("publishing in " + registry.path() + " (pid " + ProcessHandle.current().pid()
                + "); stop with SIGTERM or Ctrl-C");
        Thread[] threads = new Thread[workers];
        for (int w = 0; w < workers; w++) {
            threads[w] = new Thread(() -> {
                var rnd = ThreadLocalRandom.current();
                while (running.get()) {
                    boolean isSearch = rnd.nextInt(4) == 0;
                    busy.inc();
                    try (var t = latency.start()) {
                        // Search is slower and heavier: a little real work, then a pause.
                        long spin = isSearch ? 20_000 : 2_000;
                        long acc = 0;
                        for (long i = 0; i < spin; i++) {
                            acc += i ^ rnd.nextInt();
                        }
                        if (acc == 42) {
                            errors.inc();
                        }
                        Thread.sleep(rnd.nextInt(isSearch ? 20 : 5));
                    } catch (InterruptedException e) {
                        return;
                    } finally {
                        busy.dec();
                    }
                    (isSearch ? search : home).inc();
                    if (rnd.nextInt(100) == 0) {
                        errors.inc();
                    }
                    sizes.observe(isSearch ? rnd.nextInt(1 << 20) : rnd.nextInt(4096));
                }
            }, "worker-" + w);
            threads[w].setDaemon(true);
            threads[w].start();
        }
        for (Thread t : threads) {
            t.join();
        }
    }
}
