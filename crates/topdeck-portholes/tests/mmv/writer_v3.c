// SPDX-License-Identifier: Apache-2.0
// A real MMV writer on libpcp_mmv's registry API: names of 64 characters
// and more (format version 2) and labels (version 3), every value type,
// units, semantics, an indom with instances, help texts, a timing in
// progress and, with the SENTINEL flag, values that mean "no value".
// Prints "ready" once the file is published and keeps it until stdin
// closes. Build: cc writer_v3.c -o writer_v3 -lpcp_mmv -lpcp
// Usage: writer_v3 /abs/path/file
#include <pcp/pmapi.h>
#include <pcp/mmv_stats.h>
#include <stdio.h>
#include <string.h>
#include <math.h>

#define LONG_NAME "connections.accepted.by_listener_socket.including_the_ones_closed_at_once"
#define QUEUES 9

int
main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s /abs/path/file\n", argv[0]);
		return 2;
	}
	mmv_registry_t *reg = mmv_stats_registry(argv[1], 77,
		MMV_FLAG_PROCESS | MMV_FLAG_SENTINEL);
	if (reg == NULL) {
		perror("mmv_stats_registry");
		return 1;
	}
	pmUnits count = MMV_UNITS(0, 0, 1, 0, 0, PM_COUNT_ONE);
	pmUnits kcount = MMV_UNITS(0, 0, 1, 0, 0, 3);
	pmUnits kib = MMV_UNITS(1, 0, 0, PM_SPACE_KBYTE, 0, 0);
	pmUnits msec = MMV_UNITS(0, 1, 0, 0, PM_TIME_MSEC, 0);
	pmUnits usec = MMV_UNITS(0, 1, 0, 0, PM_TIME_USEC, 0);
	pmUnits per_sec = MMV_UNITS(0, -1, 1, 0, PM_TIME_SEC, PM_COUNT_ONE);
	pmUnits none = MMV_UNITS(0, 0, 0, 0, 0, 0);

	mmv_stats_add_indom(reg, QUEUES, "queues", "the writer's work queues, by priority");
	mmv_stats_add_instance(reg, QUEUES, 1, "high");
	mmv_stats_add_instance(reg, QUEUES, 2, "low");
	mmv_stats_add_instance(reg, QUEUES,
		3, "an instance name that is much longer than the sixty-four bytes of version one");

	mmv_stats_add_metric(reg, LONG_NAME, 1, MMV_TYPE_U64, MMV_SEM_COUNTER, count,
		QUEUES, "accepted connections", "every connection accepted, per queue");
	mmv_stats_add_metric(reg, "memory.rss", 2, MMV_TYPE_U64, MMV_SEM_INSTANT, kib,
		PM_INDOM_NULL, "resident set size", "resident memory, in KiB");
	mmv_stats_add_metric(reg, "gc.pause", 3, MMV_TYPE_DOUBLE, MMV_SEM_COUNTER, msec,
		PM_INDOM_NULL, "time in GC pauses", "");
	mmv_stats_add_metric(reg, "threads", 4, MMV_TYPE_I32, MMV_SEM_INSTANT, count,
		PM_INDOM_NULL, "threads", "");
	mmv_stats_add_metric(reg, "generation", 5, MMV_TYPE_U32, MMV_SEM_DISCRETE, none,
		PM_INDOM_NULL, "configuration generation", "");
	mmv_stats_add_metric(reg, "balance", 6, MMV_TYPE_I64, MMV_SEM_INSTANT, none,
		PM_INDOM_NULL, "a signed 64-bit value", "");
	mmv_stats_add_metric(reg, "load", 7, MMV_TYPE_FLOAT, MMV_SEM_INSTANT, per_sec,
		PM_INDOM_NULL, "requests per second", "");
	mmv_stats_add_metric(reg, "build.version", 8, MMV_TYPE_STRING, MMV_SEM_DISCRETE, none,
		PM_INDOM_NULL, "version string", "");
	mmv_stats_add_metric(reg, "request.time", 9, MMV_TYPE_ELAPSED, MMV_SEM_COUNTER, usec,
		PM_INDOM_NULL, "time in requests", "");
	mmv_stats_add_metric(reg, "batch.time", 10, MMV_TYPE_ELAPSED, MMV_SEM_COUNTER, usec,
		PM_INDOM_NULL, "time in the batch running now", "");
	mmv_stats_add_metric(reg, "events.kilo", 11, MMV_TYPE_U64, MMV_SEM_COUNTER, kcount,
		PM_INDOM_NULL, "thousands of events", "");
	mmv_stats_add_metric(reg, "unknown.count", 12, MMV_TYPE_U64, MMV_SEM_COUNTER, count,
		PM_INDOM_NULL, "not known yet (sentinel)", "");
	mmv_stats_add_metric(reg, "unknown.ratio", 13, MMV_TYPE_DOUBLE, MMV_SEM_INSTANT, none,
		PM_INDOM_NULL, "not known yet (sentinel)", "");
	mmv_stats_add_metric(reg, "unknown.name", 14, MMV_TYPE_STRING, MMV_SEM_DISCRETE, none,
		PM_INDOM_NULL, "not known yet (sentinel)", "");

	mmv_stats_add_registry_label(reg, "service", "checkout", MMV_STRING_TYPE, 0);
	mmv_stats_add_registry_label(reg, "replicas", "3", MMV_NUMBER_TYPE, 1);
	mmv_stats_add_metric_label(reg, 2, "source", "procfs", MMV_STRING_TYPE, 0);
	mmv_stats_add_indom_label(reg, QUEUES, "kind", "queue", MMV_STRING_TYPE, 0);
	mmv_stats_add_instance_label(reg, QUEUES, 1, "priority", "10", MMV_NUMBER_TYPE, 0);

	void *map = mmv_stats_start(reg);
	if (map == NULL) {
		perror("mmv_stats_start");
		return 1;
	}
	mmv_stats_set(map, LONG_NAME, "high", 41);
	mmv_stats_inc(map, LONG_NAME, "high");
	mmv_stats_set(map, LONG_NAME, "low", 7);
	mmv_stats_set(map, LONG_NAME,
		"an instance name that is much longer than the sixty-four bytes of version one",
		1e15);
	mmv_stats_set(map, "memory.rss", NULL, 123456);
	mmv_stats_set(map, "gc.pause", NULL, 1234.5);
	mmv_stats_set(map, "generation", NULL, 4000000000.0);
	mmv_stats_set(map, "load", NULL, 0.25);
	mmv_stats_set(map, "events.kilo", NULL, 12);
	mmv_stats_set_string(map, "build.version", NULL, "6.0.3 (c)");
	// mmv_stats_set goes through a double; the signed values are stored
	// straight into their pmAtomValue.
	pmAtomValue *v = mmv_lookup_value_desc(map, "threads", NULL);
	v->l = -12;
	v = mmv_lookup_value_desc(map, "balance", NULL);
	v->ll = -9000000000000000000LL;
	v = mmv_lookup_value_desc(map, "request.time", NULL);
	v->ll = 2500000;
	// A batch started and still running: extra holds -start (µs).
	v = mmv_lookup_value_desc(map, "batch.time", NULL);
	mmv_stats_interval_start(map, v, "batch.time", NULL);
	// SENTINEL: all ones for integers, NaN for floats, "" for strings.
	v = mmv_lookup_value_desc(map, "unknown.count", NULL);
	memset(v, 0xff, sizeof(*v));
	v = mmv_lookup_value_desc(map, "unknown.ratio", NULL);
	v->d = NAN;
	mmv_stats_set_string(map, "unknown.name", NULL, "");

	printf("ready\n");
	fflush(stdout);
	while (getchar() != EOF)
		;
	mmv_stats_free(reg);
	return 0;
}
