/* SPDX-License-Identifier: Apache-2.0 */
/* What a C caller pays per update: 10^7 calls of td_counter_inc and of
 * td_histogram_record, timed with clock_gettime, repeated; median and
 * spread in ns per call. bench_rust_updates.rs is the same loop on the
 * Rust handles; `make -C bindings/c bench` runs both. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "topdeck.h"

enum { OPS = 10000000, REPEATS = 11 };

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void report(const char *what, double *ns)
{
	qsort(ns, REPEATS, sizeof *ns, by_value);
	printf("c    %-18s median %6.2f ns/op  min %6.2f  max %6.2f  (%d x %d ops)\n", what,
	       ns[REPEATS / 2], ns[0], ns[REPEATS - 1], REPEATS, OPS);
}

int main(void)
{
	char dir[] = "/tmp/topdeck-c-bench-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	td_registry *reg;
	td_counter *c;
	td_histogram *h;
	if (td_registry_open("bench", dir, &reg) != TD_OK ||
	    td_counter_new(reg, "ops_total", NULL, 0, "", "", &c) != TD_OK ||
	    td_histogram_new(reg, "op_seconds", NULL, 0, "", "seconds", &h) != TD_OK) {
		fprintf(stderr, "bench: %s\n", td_last_error());
		return 1;
	}
	double ns[REPEATS];
	for (int r = 0; r < REPEATS; r++) {
		double t0 = now_ns();
		for (int i = 0; i < OPS; i++)
			td_counter_inc(c);
		ns[r] = (now_ns() - t0) / OPS;
	}
	report("counter_inc", ns);
	for (int r = 0; r < REPEATS; r++) {
		/* The values the Rust loop records: a spread over ~60 buckets. */
		double v = 1e-6, t0 = now_ns();
		for (int i = 0; i < OPS; i++) {
			td_histogram_record(h, v);
			v = v < 1.0 ? v * 1.25 : 1e-6;
		}
		ns[r] = (now_ns() - t0) / OPS;
	}
	report("histogram_record", ns);
	if (td_counter_get(c) != (uint64_t)OPS * REPEATS || td_histogram_count(h) != (uint64_t)OPS * REPEATS) {
		fprintf(stderr, "bench: updates were lost\n");
		return 1;
	}
	td_counter_free(c);
	td_histogram_free(h);
	td_registry_close(reg);
	rmdir(dir);
	return 0;
}
