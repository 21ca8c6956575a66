/* SPDX-License-Identifier: Apache-2.0 */
/* The C reader driver of the conformance protocol (conformance/PROTOCOL.md):
 *
 *   conformance-reader <dir>
 *
 * Lists every registry in <dir> and prints the canonical JSON document:
 * registries sorted by file name with their metrics in registration
 * order, histograms with leading and trailing zero buckets trimmed, and
 * the files that are not readable registries. Exits 1 only if <dir>
 * itself cannot be read. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "topdeck.h"
#include "json.h"

struct registry {
	const char *file;
	const char *name;
	bool alive;
	td_snapshot *snap;
};

static int by_file(const void *a, const void *b)
{
	return strcmp(((const struct registry *)a)->file, ((const struct registry *)b)->file);
}

static int by_string(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *base_name(const char *path)
{
	const char *slash = strrchr(path, '/');
	return slash ? slash + 1 : path;
}

static void print_histogram(const td_histogram_value *h)
{
	size_t lo = 0, hi = h->bucket_count;
	while (lo < hi && h->buckets[lo] == 0)
		lo++;
	while (hi > lo && h->buckets[hi - 1] == 0)
		hi--;
	printf("{\"schema\": %d, \"zero_threshold\": ", h->schema);
	json_double(stdout, h->zero_threshold);
	/* An empty histogram has no first bucket: its min_index is 0. */
	printf(", \"zero_count\": %llu, \"min_index\": %lld, \"buckets\": [",
	       (unsigned long long)h->zero_count, lo < hi ? (long long)h->min_index + (long long)lo : 0LL);
	for (size_t i = lo; i < hi; i++)
		printf("%s%llu", i == lo ? "" : ", ", (unsigned long long)h->buckets[i]);
	printf("], \"count\": %llu, \"sum\": ", (unsigned long long)h->count);
	json_double(stdout, h->sum);
	printf(", \"max\": ");
	if (h->has_max)
		json_double(stdout, h->max);
	else
		printf("null");
	printf("}");
}

static void print_metric(const td_metric *m)
{
	static const char *const kinds[] = {"counter", "gauge", "gauge_f64", "histogram"};
	printf("        {\"kind\": \"%s\", \"name\": ", kinds[m->kind]);
	json_string(stdout, m->name);
	printf(", \"labels\": [");
	for (size_t i = 0; i < m->label_count; i++) {
		printf("%s[", i ? ", " : "");
		json_string(stdout, m->labels[i].key);
		printf(", ");
		json_string(stdout, m->labels[i].value);
		printf("]");
	}
	printf("], \"help\": ");
	json_string(stdout, m->help);
	printf(", \"unit\": ");
	json_string(stdout, m->unit);
	printf(", \"value\": ");
	switch (m->kind) {
	case TD_KIND_COUNTER: printf("%llu", (unsigned long long)m->counter); break;
	case TD_KIND_GAUGE: printf("%lld", (long long)m->gauge); break;
	case TD_KIND_GAUGE_F64: json_double(stdout, m->gauge_f64); break;
	case TD_KIND_HISTOGRAM: print_histogram(&m->histogram); break;
	}
	printf("}");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: conformance-reader <dir>\n");
		return 2;
	}
	td_listing *l;
	if (td_list(argv[1], &l) != TD_OK) {
		fprintf(stderr, "conformance-reader: %s\n", td_last_error());
		return 1;
	}
	size_t n = td_listing_count(l), nrej = td_listing_rejected_count(l);
	struct registry *regs = calloc(n + 1, sizeof *regs);
	const char **rejected = calloc(n + nrej + 1, sizeof *rejected);
	if (!regs || !rejected) {
		fprintf(stderr, "conformance-reader: out of memory\n");
		return 1;
	}
	size_t nregs = 0, nrejected = 0;
	for (size_t i = 0; i < nrej; i++) {
		const char *path = td_listing_rejected(l, i)->path;
		/* Errors about no one file (the directory's) are not files. */
		if (path[0])
			rejected[nrejected++] = base_name(path);
	}
	for (size_t i = 0; i < n; i++) {
		const td_entry *e = td_listing_entry(l, i);
		td_reader *r;
		td_snapshot *s = NULL;
		if (td_reader_open(l, i, &r) == TD_OK) {
			if (td_reader_snapshot(r, &s) != TD_OK)
				s = NULL;
			td_reader_close(r);
		}
		if (!s) {
			rejected[nrejected++] = e->file_name;
			continue;
		}
		regs[nregs++] = (struct registry){e->file_name, e->registry_name, e->alive, s};
	}
	qsort(regs, nregs, sizeof *regs, by_file);
	qsort(rejected, nrejected, sizeof *rejected, by_string);

	printf("{\n  \"registries\": [");
	for (size_t i = 0; i < nregs; i++) {
		printf("%s\n    {\"file\": ", i ? "," : "");
		json_string(stdout, regs[i].file);
		printf(", \"registry\": ");
		json_string(stdout, regs[i].name);
		printf(", \"state\": \"%s\",\n      \"metrics\": [", regs[i].alive ? "alive" : "dead");
		for (size_t j = 0; j < td_snapshot_count(regs[i].snap); j++) {
			printf("%s\n", j ? "," : "");
			print_metric(td_snapshot_metric(regs[i].snap, j));
		}
		printf("]}");
		td_snapshot_free(regs[i].snap);
	}
	printf("],\n  \"rejected\": [");
	for (size_t i = 0; i < nrejected; i++) {
		printf("%s", i ? ", " : "");
		json_string(stdout, rejected[i]);
	}
	printf("]\n}\n");
	free(regs);
	free(rejected);
	td_listing_free(l);
	return 0;
}
