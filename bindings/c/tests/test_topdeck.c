/* SPDX-License-Identifier: Apache-2.0 */
/* The C API end to end: write through every handle kind, read it back
 * through the reader API, and check every error path returns its code and
 * message instead of crashing. Built with -Wall -Wextra -Werror and run
 * under AddressSanitizer and UndefinedBehaviorSanitizer (Makefile). */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <linux/bpf.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "topdeck.h"
#include "check.h"

/* A fresh private namespace directory (mkdtemp makes it 0700, as topdeck asks). */
static char *temp_dir(void)
{
	char *d = strdup("/tmp/topdeck-c-test-XXXXXX");
	if (!d || !mkdtemp(d)) {
		perror("mkdtemp");
		exit(2);
	}
	return d;
}

static int files_in(const char *dir)
{
	int n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static void remove_dir(char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		for (struct dirent *e; (e = readdir(d));)
			if (e->d_name[0] != '.')
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	rmdir(dir);
	free(dir);
}

static const td_metric *find(const td_snapshot *s, const char *name)
{
	for (size_t i = 0; i < td_snapshot_count(s); i++) {
		const td_metric *m = td_snapshot_metric(s, i);
		if (strcmp(m->name, name) == 0)
			return m;
	}
	return NULL;
}

static void every_kind_reads_back_as_written(void)
{
	char *dir = temp_dir();
	td_registry *reg = NULL;
	CHECK_OK(td_registry_open("ctest", dir, &reg));
	CHECK(reg != NULL);
	CHECK(strncmp(td_registry_path(reg), dir, strlen(dir)) == 0);

	td_label labels[] = {{"route", "/"}, {"method", "GET"}};
	td_counter *c = NULL;
	td_gauge *g = NULL;
	td_gauge_f64 *gf = NULL;
	td_histogram *h = NULL;
	td_timer *t = NULL;
	CHECK_OK(td_counter_new(reg, "requests_total", labels, 2, "Requests served.", "", &c));
	CHECK_OK(td_gauge_new(reg, "queue_depth", NULL, 0, "Waiting.", NULL, &g));
	CHECK_OK(td_gauge_f64_new(reg, "temperature_celsius", NULL, 0, NULL, "celsius", &gf));
	CHECK_OK(td_histogram_new(reg, "payload_bytes", NULL, 0, "Sizes.", "bytes", &h));
	CHECK_OK(td_timer_new(reg, "work_seconds", NULL, 0, "Work.", &t));

	td_counter_inc(c);
	td_counter_add(c, 41);
	td_gauge_set(g, -5);
	td_gauge_add(g, 2);
	td_gauge_f64_set(gf, 20.0);
	td_gauge_f64_add(gf, 1.5);
	td_histogram_record(h, 0.0);
	td_histogram_record(h, 1024.0);
	td_histogram_record(h, 1024.0);
	td_histogram_record(h, NAN); /* ignored */
	uint64_t start = td_timer_start(t);
	usleep(2000);
	uint64_t ns = td_timer_stop(t, start);
	CHECK(ns >= 2000000 && ns < 10000000000ull);
	td_timer_record_ns(t, 500);

	CHECK(td_counter_get(c) == 42);
	CHECK(td_gauge_get(g) == -3);
	CHECK(td_gauge_f64_get(gf) == 21.5);
	CHECK(td_histogram_count(h) == 3);
	CHECK(td_timer_count(t) == 2);

	td_listing *l = NULL;
	CHECK_OK(td_list(dir, &l));
	CHECK(td_listing_count(l) == 1);
	CHECK(td_listing_rejected_count(l) == 0);
	const td_entry *e = td_listing_entry(l, 0);
	CHECK(e != NULL && td_listing_entry(l, 1) == NULL);
	if (e) {
		CHECK(e->alive);
		CHECK(e->pid == (uint32_t)getpid());
		CHECK(strcmp(e->registry_name, "ctest") == 0);
		CHECK(e->metrics == 5);
		CHECK(strcmp(e->path, td_registry_path(reg)) == 0);
		CHECK(strstr(e->path, e->file_name) != NULL);
	}
	td_reader *r = NULL;
	td_snapshot *s = NULL;
	CHECK_OK(td_reader_open(l, 0, &r));
	td_listing_free(l);
	CHECK(td_reader_alive(r));
	CHECK_OK(td_reader_snapshot(r, &s));
	CHECK(td_snapshot_count(s) == 5);
	CHECK(td_snapshot_metric(s, 5) == NULL);

	const td_metric *m = td_snapshot_metric(s, 0);
	CHECK(m && m->kind == TD_KIND_COUNTER && m->counter == 42);
	CHECK(m && strcmp(m->name, "requests_total") == 0 && strcmp(m->help, "Requests served.") == 0);
	CHECK(m && m->label_count == 2 && strcmp(m->labels[1].key, "method") == 0 &&
	      strcmp(m->labels[1].value, "GET") == 0);
	m = find(s, "queue_depth");
	CHECK(m && m->kind == TD_KIND_GAUGE && m->gauge == -3 && m->labels == NULL);
	m = find(s, "temperature_celsius");
	CHECK(m && m->kind == TD_KIND_GAUGE_F64 && m->gauge_f64 == 21.5);
	CHECK(m && strcmp(m->unit, "celsius") == 0 && strcmp(m->help, "") == 0);
	m = find(s, "payload_bytes");
	CHECK(m && m->kind == TD_KIND_HISTOGRAM);
	if (m) {
		const td_histogram_value *hv = &m->histogram;
		uint64_t in_buckets = 0;
		for (size_t i = 0; i < hv->bucket_count; i++)
			in_buckets += hv->buckets[i];
		CHECK(hv->count == 3 && hv->zero_count == 1 && in_buckets == 2);
		CHECK(hv->sum == 2048.0 && hv->has_max && hv->max == 1024.0);
		CHECK(hv->schema == 3);
	}
	m = find(s, "work_seconds");
	CHECK(m && m->kind == TD_KIND_HISTOGRAM && m->histogram.count == 2);
	CHECK(m && strcmp(m->unit, "seconds") == 0);
	CHECK(m && m->histogram.sum >= 0.002);

	/* Snapshots outlive their reader; handles outlive their registry. */
	td_reader_close(r);
	CHECK(find(s, "queue_depth") != NULL);
	td_snapshot_free(s);
	td_registry_close(reg);
	CHECK(files_in(dir) == 0);
	td_counter_inc(c);
	CHECK(td_counter_get(c) == 43);

	td_counter_free(c);
	td_gauge_free(g);
	td_gauge_f64_free(gf);
	td_histogram_free(h);
	td_timer_free(t);
	remove_dir(dir);
}

static void registration_errors_return_their_code_and_message(void)
{
	char *dir = temp_dir();
	td_registry *reg = NULL;
	CHECK_OK(td_registry_open(NULL, dir, &reg));
	td_counter *c = NULL, *again = (td_counter *)1;
	td_label l = {"k", "v"};
	CHECK_OK(td_counter_new(reg, "jobs_total", &l, 1, "", "", &c));

	CHECK(td_counter_new(reg, "jobs_total", &l, 1, "", "", &again) == TD_ERR_DUPLICATE);
	CHECK(again == NULL);
	CHECK(strstr(td_last_error(), "jobs_total") != NULL);
	CHECK(strstr(td_last_error(), "already registered") != NULL);

	td_gauge *g = NULL;
	CHECK(td_gauge_new(reg, "bad-name", NULL, 0, "", "", &g) == TD_ERR_INVALID_NAME);
	CHECK(g == NULL && strstr(td_last_error(), "bad-name") != NULL);
	td_label reserved = {"__x", "1"};
	CHECK(td_gauge_new(reg, "ok", &reserved, 1, "", "", &g) == TD_ERR_INVALID_NAME);

	CHECK(td_gauge_new(reg, NULL, NULL, 0, "", "", &g) == TD_ERR_INVALID_ARGUMENT);
	CHECK(strstr(td_last_error(), "name is NULL") != NULL);
	CHECK(td_gauge_new(reg, "x", NULL, 1, "", "", &g) == TD_ERR_INVALID_ARGUMENT);
	CHECK(strstr(td_last_error(), "labels is NULL") != NULL);
	td_label null_value = {"k", NULL};
	CHECK(td_gauge_new(reg, "x", &null_value, 1, "", "", &g) == TD_ERR_INVALID_ARGUMENT);
	CHECK(strstr(td_last_error(), "labels[0].value") != NULL);
	CHECK(td_gauge_new(reg, "x", NULL, 0, "\xff\xfe", "", &g) == TD_ERR_INVALID_ARGUMENT);
	CHECK(strstr(td_last_error(), "UTF-8") != NULL);
	CHECK(td_gauge_new(NULL, "x", NULL, 0, "", "", &g) == TD_ERR_INVALID_ARGUMENT);
	CHECK(td_gauge_new(reg, "x", NULL, 0, "", "", NULL) == TD_ERR_INVALID_ARGUMENT);
	CHECK(strcmp(td_status_name(TD_ERR_DUPLICATE), "TD_ERR_DUPLICATE") == 0);

	/* Updates and reads on NULL handles do nothing. */
	td_counter_inc(NULL);
	td_counter_add(NULL, 1);
	td_gauge_set(NULL, 1);
	td_gauge_f64_set(NULL, 1.0);
	td_histogram_record(NULL, 1.0);
	td_timer_record_ns(NULL, 1);
	CHECK(td_timer_stop(NULL, td_timer_start(NULL)) < 1000000000ull);
	CHECK(td_counter_get(NULL) == 0 && td_histogram_count(NULL) == 0);
	td_counter_free(NULL);
	td_registry_close(NULL);

	td_counter_free(c);
	td_registry_close(reg);
	remove_dir(dir);
}

static void a_registry_that_cannot_be_made_says_why(void)
{
	td_registry *reg = (td_registry *)1;
	/* A directory writable by everyone is refused. */
	char *dir = temp_dir();
	chmod(dir, 0777);
	td_status st = td_registry_open("x", dir, &reg);
	CHECK(st == TD_ERR_UNSAFE_DIRECTORY);
	CHECK(reg == NULL);
	CHECK(strstr(td_last_error(), dir) != NULL);
	remove_dir(dir);
}

static void the_reader_rejects_a_file_that_is_not_a_registry(void)
{
	char *dir = temp_dir();
	char path[512];
	snprintf(path, sizeof path, "%s/1-2-3.topdeck", dir);
	int fd = open(path, O_CREAT | O_WRONLY | O_EXCL, 0600);
	CHECK(fd >= 0);
	char junk[4096];
	memset(junk, 'x', sizeof junk);
	CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
	close(fd);

	td_listing *l = NULL;
	CHECK_OK(td_list(dir, &l));
	CHECK(td_listing_count(l) == 0);
	CHECK(td_listing_rejected_count(l) == 1);
	const td_rejected *rj = td_listing_rejected(l, 0);
	CHECK(rj && strcmp(rj->path, path) == 0 && strlen(rj->message) > strlen(path));
	CHECK(td_listing_rejected(l, 1) == NULL);
	td_reader *r = (td_reader *)1;
	CHECK(td_reader_open(l, 0, &r) == TD_ERR_INVALID_ARGUMENT && r == NULL);
	td_listing_free(l);

	CHECK(td_reader_open_path(path, &r) == TD_ERR_CORRUPT);
	CHECK(r == NULL && strstr(td_last_error(), path) != NULL);

	char missing[600];
	snprintf(missing, sizeof missing, "%s/missing", dir);
	l = (td_listing *)1;
	CHECK(td_list(missing, &l) != TD_OK);
	CHECK(l == NULL && strstr(td_last_error(), missing) != NULL);
	remove_dir(dir);
}

enum { THREADS = 4, PER_THREAD = 100000 };

struct shared {
	td_counter *c;
	td_histogram *h;
};

static void *hammer(void *arg)
{
	struct shared *s = arg;
	for (int i = 0; i < PER_THREAD; i++) {
		td_counter_inc(s->c);
		td_histogram_record(s->h, 0.001 * (i % 10 + 1));
	}
	return NULL;
}

static void threads_lose_no_updates(void)
{
	char *dir = temp_dir();
	td_registry *reg = NULL;
	struct shared s = {0};
	CHECK_OK(td_registry_open("threads", dir, &reg));
	CHECK_OK(td_counter_new(reg, "hits_total", NULL, 0, "", "", &s.c));
	CHECK_OK(td_histogram_new(reg, "wait_seconds", NULL, 0, "", "seconds", &s.h));
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		CHECK(pthread_create(&th[i], NULL, hammer, &s) == 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	CHECK(td_counter_get(s.c) == THREADS * PER_THREAD);
	CHECK(td_histogram_count(s.h) == THREADS * PER_THREAD);

	td_reader *r = NULL;
	td_snapshot *snap = NULL;
	CHECK_OK(td_reader_open_path(td_registry_path(reg), &r));
	CHECK_OK(td_reader_snapshot(r, &snap));
	const td_metric *m = find(snap, "hits_total");
	CHECK(m && m->counter == THREADS * PER_THREAD);
	td_snapshot_free(snap);
	td_reader_close(r);
	td_counter_free(s.c);
	td_histogram_free(s.h);
	td_registry_close(reg);
	remove_dir(dir);
}

/* A real thread-waits array (docs/FORMAT.md section 10), made as root
 * without the agent: an mmapable BPF array pinned in a fresh root-owned
 * directory of bpffs, written through a writable mapping this test keeps
 * (the agent's is frozen; readers cannot tell). */
struct waits_array {
	char dir[128];
	char pin[160];
	volatile uint64_t *words;
	size_t len;
	int fd;
};

static long bpf_call(int cmd, union bpf_attr *attr)
{
	return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

static int make_waits_array(struct waits_array *a, uint32_t tids)
{
	struct statfs fs;
	if (geteuid() != 0)
		return -1;
	if (statfs("/sys/fs/bpf", &fs) != 0 || fs.f_type != 0xcafe4a11 /* BPF_FS_MAGIC */) {
		mkdir("/sys/fs/bpf", 0700);
		if (mount("bpf", "/sys/fs/bpf", "bpf", 0, NULL) != 0)
			return -1;
	}
	union bpf_attr attr;
	memset(&attr, 0, sizeof attr);
	attr.map_type = BPF_MAP_TYPE_ARRAY;
	attr.key_size = 4;
	attr.value_size = 32;
	attr.max_entries = tids + 2;
	attr.map_flags = BPF_F_MMAPABLE;
	a->fd = (int)bpf_call(BPF_MAP_CREATE, &attr);
	if (a->fd < 0)
		return -1;
	snprintf(a->dir, sizeof a->dir, "/sys/fs/bpf/topdeck-ctest-%d", (int)getpid());
	snprintf(a->pin, sizeof a->pin, "%s/thread_waits", a->dir);
	if (mkdir(a->dir, 0755) != 0)
		return -1;
	memset(&attr, 0, sizeof attr);
	attr.pathname = (uint64_t)(uintptr_t)a->pin;
	attr.bpf_fd = (uint32_t)a->fd;
	if (bpf_call(BPF_OBJ_PIN, &attr) != 0)
		return -1;
	a->len = (size_t)(tids + 2) * 32;
	void *p = mmap(NULL, a->len, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
	if (p == MAP_FAILED)
		return -1;
	a->words = p;
	a->words[0] = 0x54574454ull | (1ull << 32); /* "TDWT", version 1 */
	a->words[1] = 1;                              /* state: live */
	a->words[3] = (uint64_t)(tids + 2) | ((uint64_t)getpid() << 32);
	return 0;
}

static void drop_waits_array(struct waits_array *a)
{
	munmap((void *)a->words, a->len);
	close(a->fd);
	unlink(a->pin);
	rmdir(a->dir);
}

static void timings_record_the_cpu_wait_with_the_agents_array(void)
{
	/* Without the array: begin/end time as start/stop, no companions. */
	char *dir = temp_dir();
	td_registry *reg = NULL;
	td_timer *t = NULL;
	CHECK_OK(td_registry_open("ctest", dir, &reg));
	CHECK_OK(td_timer_new(reg, "plain_seconds", NULL, 0, "Plain.", &t));
	CHECK(!td_timer_has_cpu_wait(t));
	struct td_timing tm = td_timer_begin(t);
	CHECK(tm.slot == NULL);
	usleep(1000);
	CHECK(td_timer_end(t, tm) >= 1000000);
	CHECK(td_timer_count(t) == 1 && td_timer_cpu_wait_count(t) == 0);
	CHECK(td_timer_end(NULL, td_timer_begin(NULL)) < 1000000000ull);
	td_timer_free(t);
	td_registry_close(reg);

	struct waits_array a;
	memset(&a, 0, sizeof a);
	if (make_waits_array(&a, (uint32_t)gettid() + 1) != 0) {
		fprintf(stderr, "  (CPU wait part skipped: needs root and bpffs)\n");
		remove_dir(dir);
		return;
	}
	setenv("TOPDECK_THREAD_WAITS", a.pin, 1);
	CHECK_OK(td_registry_open("ctest", dir, &reg));
	setenv("TOPDECK_THREAD_WAITS", "off", 1);
	td_label route = {"route", "/"};
	CHECK_OK(td_timer_new(reg, "serve_seconds", &route, 1, "Serving.", &t));
	CHECK(td_timer_has_cpu_wait(t));
	volatile uint64_t *total = &a.words[((size_t)gettid() + 2) * 4];

	tm = td_timer_begin(t);
	CHECK(tm.slot != NULL); /* in the registry's own read-only mapping */
	*total += 2000000; /* the probe saw 2 ms on the run queue */
	td_timer_end(t, tm);
	td_timer_end(t, td_timer_begin(t)); /* no wait: counted as 0 */
	uint64_t t0 = td_timer_start(t);   /* latency only */
	td_timer_stop(t, t0);
	CHECK(td_timer_count(t) == 3);
	CHECK(td_timer_cpu_wait_count(t) == 2 && td_timer_cpu_wait_unknown_count(t) == 0);

	tm = td_timer_begin(t);
	a.words[1] = 2; /* the agent has gone */
	td_timer_end(t, tm);
	CHECK(td_timer_cpu_wait_count(t) == 2 && td_timer_cpu_wait_unknown_count(t) == 1);

	td_listing *l = NULL;
	td_reader *r = NULL;
	td_snapshot *s = NULL;
	CHECK_OK(td_list(dir, &l));
	CHECK_OK(td_reader_open(l, 0, &r));
	CHECK_OK(td_reader_snapshot(r, &s));
	const td_metric *m = find(s, "serve_cpu_wait_seconds");
	CHECK(m && m->kind == TD_KIND_HISTOGRAM && m->label_count == 1);
	CHECK(m && m->histogram.count == 2 && m->histogram.zero_count == 1);
	CHECK(m && m->histogram.sum == 0.002);
	m = find(s, "serve_cpu_wait_unknown_seconds");
	CHECK(m && m->histogram.count == 1);
	td_snapshot_free(s);
	td_reader_close(r);
	td_listing_free(l);
	td_timer_free(t);
	td_registry_close(reg);
	drop_waits_array(&a);
	remove_dir(dir);
}

int main(void)
{
	/* The other cases count metrics: no CPU-wait companions, whatever
	 * agent runs on this machine. */
	setenv("TOPDECK_THREAD_WAITS", "off", 1);
	static const struct check_case cases[] = {
		{"every_kind_reads_back_as_written", every_kind_reads_back_as_written},
		{"registration_errors_return_their_code_and_message",
		 registration_errors_return_their_code_and_message},
		{"a_registry_that_cannot_be_made_says_why", a_registry_that_cannot_be_made_says_why},
		{"the_reader_rejects_a_file_that_is_not_a_registry",
		 the_reader_rejects_a_file_that_is_not_a_registry},
		{"threads_lose_no_updates", threads_lose_no_updates},
		{"timings_record_the_cpu_wait_with_the_agents_array",
		 timings_record_the_cpu_wait_with_the_agents_array},
	};
	return check_run(cases, (int)(sizeof cases / sizeof cases[0]));
}
