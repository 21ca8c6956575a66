/* SPDX-License-Identifier: Apache-2.0 */
/* An example C service publishing into topdeck: it "serves requests" (a
 * little hashing work each) and counts them and their latency, until
 * SIGTERM or SIGINT; then it closes its registry, which removes the file.
 *
 *   topdeck-c-example [--limit N] [--rate N]
 *
 * Prints "pid <pid> registry <path>" first; with --limit, stops serving
 * after N requests, prints "served N" and idles until the signal. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "topdeck.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static double seconds_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The "work" of one request: FNV-1a over a few KiB. */
static uint64_t serve(uint64_t seed)
{
	uint64_t h = 1469598103934665603ull ^ seed;
	for (int i = 0; i < 4096; i++)
		h = (h ^ (uint64_t)(i & 0xff)) * 1099511628211ull;
	return h;
}

static int fail(const char *what)
{
	fprintf(stderr, "topdeck-c-example: %s: %s\n", what, td_last_error());
	return 1;
}

int main(int argc, char **argv)
{
	long limit = -1, rate = 1000;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--limit") == 0)
			limit = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--rate") == 0)
			rate = atol(argv[i + 1]);
	}
	if (rate < 1 || rate > 1000000) {
		fprintf(stderr, "topdeck-c-example: --rate must be 1..1000000 requests per second\n");
		return 2;
	}
	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	td_registry *reg;
	td_counter *requests;
	td_histogram *latency;
	td_label route = {"route", "/hash"};
	if (td_registry_open("c-example", NULL, &reg) != TD_OK)
		return fail("cannot open the registry");
	if (td_counter_new(reg, "requests_total", &route, 1, "Requests served.", "", &requests) != TD_OK ||
	    td_histogram_new(reg, "request_duration_seconds", &route, 1, "Time to serve a request.",
			     "seconds", &latency) != TD_OK)
		return fail("cannot register the metrics");
	printf("pid %d registry %s\n", (int)getpid(), td_registry_path(reg));
	fflush(stdout);

	volatile uint64_t sink = 0; /* keeps the work from being optimised away */
	long served = 0;
	struct timespec pause = {0, 1000000000L / rate};
	while (!stop) {
		if (limit >= 0 && served == limit) {
			printf("served %ld\n", served);
			fflush(stdout);
			limit = -2; /* said once; idle from now on */
		}
		if (limit == -2) {
			pause.tv_nsec = 50000000L;
			nanosleep(&pause, NULL);
			continue;
		}
		double t0 = seconds_now();
		sink += serve((uint64_t)served);
		td_histogram_record(latency, seconds_now() - t0);
		td_counter_inc(requests);
		served++;
		nanosleep(&pause, NULL);
	}
	td_counter_free(requests);
	td_histogram_free(latency);
	td_registry_close(reg);
	return 0;
}
