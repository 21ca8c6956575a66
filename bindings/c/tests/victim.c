/* SPDX-License-Identifier: Apache-2.0 */
/* A C service for tests/explain.py: requests of 300 µs of CPU time back to
 * back on one thread, each timed with td_timer_begin/td_timer_end so that
 * its CPU wait is recorded too (when the agent's thread-waits array is
 * there). Prints "tid <tid>" once its timer exists; runs until killed. */
#define _GNU_SOURCE
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "topdeck.h"

static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
	struct td_registry *reg;
	struct td_timer *timer;
	if (td_registry_open("c-victim", NULL, &reg) != TD_OK ||
	    td_timer_new(reg, "victim_request_seconds", NULL, 0, "Requests served.", &timer) != TD_OK) {
		fprintf(stderr, "c-victim: cannot make its registry and timer\n");
		return 1;
	}
	printf("tid %d cpu_wait %d\n", gettid(), td_timer_has_cpu_wait(timer));
	fflush(stdout);
	for (;;) {
		struct td_timing t = td_timer_begin(timer);
		double start = cpu_now();
		while (cpu_now() - start < 300e-6)
			;
		td_timer_end(timer, t);
	}
}
