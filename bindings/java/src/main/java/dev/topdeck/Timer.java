// SPDX-License-Identifier: Apache-2.0
package dev.topdeck;

import java.util.function.Supplier;

/**
 * Records elapsed times, in seconds, into a histogram (unit {@code seconds}); from {@link
 * Registry#timer}.
 *
 * <pre>{@code
 * Timer latency = registry.timer("http_request_duration_seconds", "Time to serve.", "route", "/");
 * try (Timer.Timing t = latency.start()) {
 *     serve();
 * }
 * String page = latency.time(() -> render());
 * }</pre>
 *
 * <h2>CPU wait per request</h2>
 *
 * When the topdeck agent runs, its scheduler probe keeps every thread's cumulative run-queue wait
 * (time runnable but not running) in a memory-mapped BPF array (docs/FORMAT.md section 10), which
 * the registry maps when it is built. A timer of such a registry also registers, with the same
 * labels, {@code <base>_cpu_wait_seconds} (per request, how long the timing thread waited for a
 * CPU during the section) and {@code <base>_cpu_wait_unknown_seconds} (the latency of requests
 * whose wait could not be known, because the agent stopped during them), {@code <base>} being the
 * name without its {@code _seconds}. A timing reads the thread's slot at start and at stop: two
 * plain loads, no system call. The wait histogram counts exactly the requests whose wait is
 * known; a thread without a slot records in neither: a virtual thread (it moves between carrier
 * threads, so no OS thread's slot is its own), a thread id past the array, or a pid namespace that
 * hides the host's id. Without the array (no agent, {@code TOPDECK_THREAD_WAITS=off}, {@link
 * Registry.Builder#noThreadWaits()}) the timer registers no companions. The wait counts only what
 * the timing thread spent on run queues: work handed to other threads is not seen.
 */
public final class Timer {
    private final Histogram histogram;
    /** The companions and the array they read; all null without the array. */
    private final Histogram wait, unknown;
    private final ThreadWaits.Source source;

    Timer(Histogram histogram, Histogram wait, Histogram unknown, ThreadWaits.Source source) {
        this.histogram = histogram;
        this.wait = wait;
        this.unknown = unknown;
        this.source = source;
    }

    /** Starts timing; {@link Timing#close()} (or {@link Timing#stop()}) records. */
    public Timing start() {
        if (source == null) {
            return new Timing(this, null, -1, 0, System.nanoTime());
        }
        ThreadWaits w = source.current();
        long slot = w.slotOffset(ThreadWaits.hostTid());
        long before = slot < 0 ? 0 : w.array.word(slot);
        return new Timing(this, slot < 0 ? null : w, slot, before, System.nanoTime());
    }

    /** Runs {@code r} and records how long it took (also when it throws). */
    public void time(Runnable r) {
        try (Timing t = start()) {
            r.run();
        }
    }

    /** Runs {@code s}, records how long it took (also when it throws), and returns its result. */
    public <T> T time(Supplier<T> s) {
        try (Timing t = start()) {
            return s.get();
        }
    }

    /** Records a duration measured elsewhere, in seconds (no CPU wait: it was not watched). */
    public void observe(double seconds) {
        histogram.observe(seconds);
    }

    /** The histogram behind the timer. */
    public Histogram histogram() {
        return histogram;
    }

    /** The per-request CPU wait ({@code <base>_cpu_wait_seconds}), or null without the agent's array. */
    public Histogram cpuWaitHistogram() {
        return wait;
    }

    /** Latencies whose CPU wait could not be known ({@code <base>_cpu_wait_unknown_seconds}), or null. */
    public Histogram cpuWaitUnknownHistogram() {
        return unknown;
    }

    private double end(Timing t) {
        long ns = System.nanoTime() - t.start;
        double seconds = (ns < 0 ? 0 : ns) / 1e9;
        histogram.observe(seconds);
        if (t.waits != null) {
            // Acquire: the state is loaded after the slot (FORMAT.md section 10: a difference is
            // trusted only if the state reads LIVE after the second load).
            long after = t.waits.array.wordAcquire(t.slot);
            if (t.waits.state() == ThreadWaits.LIVE) {
                long d = after - t.before; // slots only grow; unsigned, as counters wrap
                wait.observe(d >= 0 ? d / 1e9 : (d >>> 1) / 0.5e9);
            } else {
                unknown(seconds);
            }
        }
        return seconds;
    }

    /** Never a zero wait for an unknown one: the latency goes to its own histogram. */
    private void unknown(double seconds) {
        unknown.observe(seconds);
        source.lookAgain();
    }

    /**
     * A running timing: {@code try (Timer.Timing t = timer.start()) { ... }}. Records once, at
     * the first {@link #stop()} or {@link #close()}; {@link #cancel()} records nothing. It may be
     * stopped on another thread; its wait is then the starting thread's.
     */
    public static final class Timing implements AutoCloseable {
        private final Timer timer;
        /** The array and slot read at start; null when nothing is recorded as a wait. */
        private final ThreadWaits waits;
        private final long slot, before, start;
        private boolean done;

        private Timing(Timer timer, ThreadWaits waits, long slot, long before, long start) {
            this.timer = timer;
            this.waits = waits;
            this.slot = slot;
            this.before = before;
            this.start = start;
        }

        /** Stops now, records, and returns the elapsed seconds (0 when already stopped or cancelled). */
        public double stop() {
            if (done) {
                return 0;
            }
            done = true;
            return timer.end(this);
        }

        /** Stops without recording. */
        public void cancel() {
            done = true;
        }

        @Override
        public void close() {
            stop();
        }
    }
}
