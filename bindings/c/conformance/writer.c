/* SPDX-License-Identifier: Apache-2.0 */
/* The C writer driver of the conformance protocol (conformance/PROTOCOL.md):
 *
 *   conformance-writer <dir> exit|crash|late
 *
 * Registers the fixed script in registry "conformance" in <dir>, prints
 * "ready", then waits for stdin to close: exit closes the registry (its
 * file is removed), crash SIGKILLs itself (the file stays), late also
 * registers the phase-2 counter when a line "more" arrives. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "topdeck.h"

static td_registry *reg;

static void die(const char *what)
{
	fprintf(stderr, "conformance-writer: %s: %s\n", what, td_last_error());
	_exit(1);
}

static void *inc_25000(void *c)
{
	for (int i = 0; i < 25000; i++)
		td_counter_inc(c);
	return NULL;
}

static void phase_1(void)
{
	td_counter *fast, *slow;
	td_gauge *depth;
	td_gauge_f64 *temp;
	td_histogram *duration, *payload;
	td_timer *db;
	td_label l_fast = {"queue", "fast"}, l_slow = {"queue", "slow"};
	td_label l_room = {"room", "a\"b\\c"}, l_route = {"route", "/"};

	if (td_counter_new(reg, "jobs_total", &l_fast, 1, "Jobs done.", "", &fast) != TD_OK)
		die("jobs_total{queue=fast}");
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		if (pthread_create(&th[i], NULL, inc_25000, fast) != 0)
			die("pthread_create");
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);

	if (td_counter_new(reg, "jobs_total", &l_slow, 1, "Jobs done.", "", &slow) != TD_OK)
		die("jobs_total{queue=slow}");
	td_counter_add(slow, 7);

	if (td_gauge_new(reg, "queue_depth", NULL, 0, "Jobs waiting \u2014 \u00fcn\u00efc\u00f6d\u00e9 \u2713", "",
			 &depth) != TD_OK)
		die("queue_depth");
	td_gauge_set(depth, -42);

	if (td_gauge_f64_new(reg, "temperature_celsius", &l_room, 1, "Temperature.", "celsius", &temp) !=
	    TD_OK)
		die("temperature_celsius");
	td_gauge_f64_set(temp, 21.5);
	td_gauge_f64_set(temp, -0.125);

	if (td_histogram_new(reg, "request_duration_seconds", &l_route, 1, "Time to serve.", "seconds",
			     &duration) != TD_OK)
		die("request_duration_seconds");
	for (int i = 1; i <= 1000; i++)
		td_histogram_record(duration, (double)i / 1000.0);

	if (td_histogram_new(reg, "payload_bytes", NULL, 0, "Sizes.", "bytes", &payload) != TD_OK)
		die("payload_bytes");
	for (int i = 0; i < 3; i++)
		td_histogram_record(payload, 0);
	for (int i = 0; i < 2; i++)
		td_histogram_record(payload, 1024);
	td_histogram_record(payload, 1e9);

	if (td_timer_new(reg, "db_query_seconds", NULL, 0, "Time in the database.", &db) != TD_OK)
		die("db_query_seconds");
	for (int i = 0; i < 10; i++)
		td_timer_stop(db, td_timer_start(db));

	/* The metrics stay in the file; only the handles go. */
	td_counter_free(fast);
	td_counter_free(slow);
	td_gauge_free(depth);
	td_gauge_f64_free(temp);
	td_histogram_free(duration);
	td_histogram_free(payload);
	td_timer_free(db);
}

static void phase_2(void)
{
	td_counter *late;
	if (td_counter_new(reg, "late_total", NULL, 0, "Registered late.", "", &late) != TD_OK)
		die("late_total");
	td_counter_add(late, 3);
	td_counter_free(late);
}

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[2], "exit") && strcmp(argv[2], "crash") && strcmp(argv[2], "late"))) {
		fprintf(stderr, "usage: conformance-writer <dir> exit|crash|late\n");
		return 2;
	}
	const char *mode = argv[2];
	if (td_registry_open("conformance", argv[1], &reg) != TD_OK)
		die("cannot open the registry");
	phase_1();
	printf("ready\n");
	fflush(stdout);

	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		if (strcmp(mode, "late") == 0 && strcmp(line, "more\n") == 0) {
			phase_2();
			printf("more-done\n");
			fflush(stdout);
		}
	}
	if (strcmp(mode, "crash") == 0) {
		kill(getpid(), SIGKILL);
		pause();
	}
	td_registry_close(reg);
	return 0;
}
