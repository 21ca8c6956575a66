// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Run-queue latency and preemption attribution per cgroup, aggregated in
 * the kernel.
 *
 * A task's wait starts when it becomes runnable: where the kernel keeps
 * sched_info (tp_btf), when the kernel stamped sched_info.last_queued,
 * read at the switch that ends it (see use_sched_info()); otherwise at
 * sched_wakeup / sched_wakeup_new, or at sched_switch when it is switched
 * out while still runnable (preempted, or TASK_RUNNING). It ends when sched_switch puts it on a CPU. The
 * wait goes into the task's cgroup histogram, and is charged to the cgroup
 * of the task that held the CPU just before (prev at the switch-in): that
 * is the cgroup it waited behind. Nothing is streamed to user space; the
 * agent reads these maps once per second.
 *
 * Every program exists twice: tp_btf (typed arguments, plain loads, task
 * storage) and raw_tp (for kernels where tp_btf does not attach; reads via
 * bpf_probe_read_kernel, timestamps in a pid-keyed LRU hash). The loader
 * tries tp_btf first and turns autoload off for the other flavour.
 */
#include "vmlinux/x86_64/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sched.h"
#include "core_fixes.bpf.h"

#define TD_EEXIST 17

/* Tunables, written by the loader between open and load. */

/* Read the cgroup id of the v1 cpu controller (hybrid hosts). */
const volatile bool cpu_v1 = false;
/* Id of the root cgroup of that hierarchy: its tasks count as "system". */
const volatile u64 root_cgroup = 1;
/* Timestamps from the run queue's clock instead of bpf_ktime_get_ns. */
const volatile bool clock_rq = false;
/*
 * Waits from the kernel's own sched_info (tp_btf only), set by the loader
 * where the kernel keeps it: no wakeup programs, no task storage, the run
 * queue's clock. See use_sched_info().
 */
const volatile bool sched_info = false;
/* Buckets in use, at most TD_MAX_BUCKETS. */
const volatile u32 nr_buckets = 1;
/* Waits of at most zero_ns nanoseconds go to the zero bucket. */
const volatile u64 zero_ns = 0;
/* bound_ns[k]: the longest wait, in whole ns, that falls in bucket k. */
const volatile u64 bound_ns[TD_MAX_BUCKETS] = {};
/* slice_bucket[s]: the bucket of the shortest wait in slice s. */
const volatile u16 slice_bucket[TD_SLICES] = {};
/*
 * The agent's process id as the kernel knows it (the initial pid
 * namespace's tgid, whatever namespace the agent runs in): its exit marks
 * thread_waits gone. Set by td_waits_start, run by the agent itself.
 */
u32 agent_tgid = 0;

static const struct td_cgroup_stats zero_stats;
static const struct td_pair_stats zero_pair;
static const struct td_task zero_task;

/*
 * Per-cgroup statistics, in slots of a per-CPU array: the verifier inlines
 * an array lookup, where a hash lookup walks a bucket and an element that
 * whatever ran since the last switch has evicted from the caches (a
 * quarter of a switch's cost under load, docs/PERFORMANCE.md). Each task
 * and each CPU's `running` keep their cgroup's slot, so a switch looks a
 * cgroup up only at a slot's first use on its CPU. The array is preallocated, so the loader sizes it to a
 * memory budget; cgroups beyond its slots go to the `cgroups` hash.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct td_cgroup_stats);
} stats SEC(".maps");

/* Cgroup id -> its slot in `stats`, or TD_NO_SLOT. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, u64);
	__type(value, u32);
} slots SEC(".maps");

/*
 * Free slots, zeroed on every CPU; the loader pushes them all, the agent
 * pushes back those of cgroups that are gone. A stack, so that the lowest
 * slots are used first.
 */
struct {
	__uint(type, BPF_MAP_TYPE_STACK);
	__uint(max_entries, 1);
	__type(value, u32);
} free_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 4096);
	__type(key, u64);
	__type(value, struct td_cgroup_stats);
} cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct td_pair);
	__type(value, struct td_pair_stats);
} pairs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TD_NR_DROPS);
	__type(key, u32);
	__type(value, u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct td_running);
} running SEC(".maps");

/* Timestamps for the tp_btf flavour: freed with the task. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct td_task);
} task_ts SEC(".maps");

/*
 * Timestamps for the raw_tp flavour, which has no typed task pointer to
 * give bpf_task_storage_get. LRU, so exited pids age out. The loader
 * shrinks it to one entry when tp_btf is used.
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, u32);
	__type(value, struct td_task);
} pid_ts SEC(".maps");

/*
 * Each thread's cumulative run-queue wait (docs/FORMAT.md "Thread waits"):
 * memory-mappable, so any process reads its own slot with plain loads.
 * The loader sizes it (pid_max slots, capped by a memory budget; the
 * header alone when thread waits are off), writes the header, freezes it
 * (no system call can write it after that) and pins it. A thread's slot
 * is written only by the switch that puts it on a CPU, so only one CPU
 * writes it at a time: plain adds suffice.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TD_WAITS_HEADER_ENTRIES);
	__type(key, u32);
	__type(value, struct td_thread_wait);
} thread_waits SEC(".maps");

/* Per CPU: cgroup id -> place, with sched_info (sched.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct td_place_cache);
} places SEC(".maps");

/*
 * Per thread id: run_delay after its last arrival, with sched_info
 * (sched.h). The loader shrinks it to one entry otherwise.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TD_ARRIVALS);
	__type(key, u32);
	__type(value, struct td_arrival);
} arrivals SEC(".maps");

static __always_inline void count_drop(u32 reason)
{
	u64 *n = bpf_map_lookup_elem(&drops, &reason);

	if (n)
		*n += 1;
}

/*
 * The value of `key` in hash `map`, inserted as `init` first if absent
 * (bcc's bpf_map_lookup_or_try_init); NULL, counted as drop `full`, when
 * the map has no room for it. Another CPU inserting the key first is no
 * failure (-EEXIST): its entry is used.
 */
static __always_inline void *lookup_or_init(void *map, const void *key,
					    const void *init, u32 full)
{
	void *v = bpf_map_lookup_elem(map, key);
	long err;

	if (v)
		return v;
	err = bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	if (err && err != -TD_EEXIST) {
		count_drop(full);
		return NULL;
	}
	return bpf_map_lookup_elem(map, key);
}

static __always_inline struct td_task *task_get(struct task_struct *t, u32 pid,
						bool btf)
{
	struct td_task *v;

	if (!btf)
		return lookup_or_init(&pid_ts, &pid, &zero_task,
				      TD_DROP_TIMESTAMP_FULL);
	v = bpf_task_storage_get(&task_ts, t, 0,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!v)
		count_drop(TD_DROP_TIMESTAMP_FULL);
	return v;
}

static __always_inline struct td_cgroup_stats *cgroup_stats(u64 id)
{
	return lookup_or_init(&cgroups, &id, &zero_stats, TD_DROP_CGROUP_FULL);
}

/* The slot of cgroup `id`: its own, else a free one, else TD_NO_SLOT. */
static __always_inline u32 slot_of(u64 id)
{
	u32 *v = bpf_map_lookup_elem(&slots, &id);
	u32 slot;

	if (v)
		return *v;
	if (bpf_map_pop_elem(&free_slots, &slot))
		slot = TD_NO_SLOT;
	if (!bpf_map_update_elem(&slots, &id, &slot, BPF_NOEXIST))
		return slot;
	/* Another CPU placed the cgroup first (or the map is full). */
	if (slot != TD_NO_SLOT)
		bpf_map_push_elem(&free_slots, &slot, 0);
	v = bpf_map_lookup_elem(&slots, &id);
	return v ? *v : TD_NO_SLOT;
}

/*
 * stats_of's slow path: a cgroup not yet placed, a slot's first use on
 * this CPU, or a place gone stale. A slot this CPU claims is zeroed here
 * first: `forget` zeroes every CPU's copy from user space, but a program
 * on another CPU may still have written into it afterwards. The owner is
 * set with an atomic add (a full barrier), then the slot checked to still
 * be the cgroup's: if `forget` freed it meanwhile, this CPU's copy is
 * left unowned and this one event is not counted, rather than counted
 * in a slot that is no longer the cgroup's.
 */
static __noinline struct td_cgroup_stats *place_again(struct td_place *at,
						      struct td_place *kept)
{
	struct td_cgroup_stats *s;
	u64 id = at->cgroup;
	u32 slot = slot_of(id);
	u32 *still;

	at->slot = slot;
	if (kept && kept->cgroup == id)
		kept->slot = slot;
	if (slot == TD_NO_SLOT)
		return cgroup_stats(id);
	s = bpf_map_lookup_elem(&stats, &slot);
	if (!s || s->owner == id)
		return s;
	if (bpf_map_update_elem(&stats, &slot, &zero_stats, BPF_ANY))
		return NULL;
	__sync_fetch_and_add(&s->owner, id);
	still = bpf_map_lookup_elem(&slots, &id);
	if (still && *still == slot)
		return s;
	s->owner = 0;
	return NULL;
}

/*
 * This CPU's value for `at`, checked against the slot's owner: a slot
 * freed (zeroed) or handed to another cgroup since `at` was found is not
 * written; the cgroup is placed again and the new slot stored in `at` and
 * in `kept` (a task's storage), so a cgroup the agent forgot while it
 * still had tasks is counted anew rather than in another cgroup's slot.
 * A place in the hash whose entry is gone (forgotten) is found again the
 * same way, so that a cgroup's statistics are not split between a
 * recreated hash entry and a slot its new tasks found free.
 */
static __always_inline struct td_cgroup_stats *
stats_of(struct td_place *at, struct td_place *kept)
{
	struct td_cgroup_stats *s;
	u32 slot = at->slot;

	if (slot == TD_NO_SLOT) {
		s = bpf_map_lookup_elem(&cgroups, &at->cgroup);
		if (s)
			return s;
		return place_again(at, kept);
	}
	s = bpf_map_lookup_elem(&stats, &slot);
	if (s && s->owner == at->cgroup)
		return s;
	return place_again(at, kept);
}

static __always_inline u64 css_of(struct task_struct *p, bool btf)
{
	if (btf)
		return (u64)p->cgroups;
	return (u64)BPF_CORE_READ(p, cgroups);
}

/* Finds where the statistics of `p`, in cgroup `id`, go. */
static __always_inline void find_place(struct task_struct *p, u64 id,
				       bool btf, struct td_place *at)
{
	at->cgroup = id;
	at->system = id == root_cgroup || task_is_kthread(p, btf);
	at->slot = slot_of(id);
}

static __always_inline void charge_pair(u64 victim, u64 culprit, u64 wait)
{
	struct td_pair key = { .victim = victim, .culprit = culprit };
	struct td_pair_stats *p;

	p = lookup_or_init(&pairs, &key, &zero_pair, TD_DROP_PAIR_FULL);
	if (!p)
		return;
	p->wait_ns += wait;
	p->count += 1;
}

/* Charges `wait` to `culprit`: in the victim's slots, else in `pairs`. */
static __always_inline void charge(struct td_cgroup_stats *s, u64 victim,
				   u64 culprit, u64 wait)
{
	u64 key = culprit + 1;
	int i;

	if (s) {
#pragma unroll
		for (i = 0; i < TD_CULPRIT_SLOTS; i++) {
			struct td_culprit *c = &s->culprits[i];

			if (c->key == key) {
				c->wait_ns += wait;
				c->count += 1;
				return;
			}
			if (!c->key) {
				c->key = key;
				c->wait_ns = wait;
				c->count = 1;
				return;
			}
		}
	}
	charge_pair(victim, culprit, wait);
}

/* floor(log2(v)) for v > 0, by halving the search range. */
static __always_inline u32 floor_log2(u64 v)
{
	u32 r = 0, s;

	s = (v > 0xffffffffULL) << 5;
	v >>= s;
	r |= s;
	s = (v > 0xffff) << 4;
	v >>= s;
	r |= s;
	s = (v > 0xff) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xf) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	return r | (u32)(v >> 1);
}

/*
 * The topdeck bucket of a wait of `ns` nanoseconds, or -1 for the zero
 * bucket. topdeck buckets are native exponential buckets of seconds, so
 * their bounds are not powers of two in nanoseconds; the loader computes
 * them (bound_ns) with topdeck's own bucket maths. A wait's power of two
 * and its next TD_SLICE_BITS mantissa bits select a slice of at most
 * 1/16 of an octave, narrower than a bucket (1/8 octave at schema 3), so
 * a slice holds at most one bucket bound: the slice's first bucket, plus
 * one if the wait lies above that bucket's bound.
 */
static __always_inline int bucket_of(u64 ns)
{
	u32 m, slice, k;

	if (ns <= zero_ns)
		return -1;
	m = floor_log2(ns);
	slice = m << TD_SLICE_BITS;
	if (m >= TD_SLICE_BITS)
		slice |= (ns >> (m - TD_SLICE_BITS)) &
			 ((1 << TD_SLICE_BITS) - 1);
	slice &= TD_SLICES - 1;
	k = slice_bucket[slice] & (TD_MAX_BUCKETS - 1);
	if (ns > bound_ns[k] && k + 1 < nr_buckets)
		k++;
	return k & (TD_MAX_BUCKETS - 1);
}

/*
 * The time now, for a task about to run on or waiting for the run queue of
 * `p`. By default bpf_ktime_get_ns. With clock_rq (tp_btf only), the run
 * queue's own clock, rq->clock, reached through p->se.cfs_rq->rq (set for
 * every task with group scheduling; per-CPU `runqueues` is not in kallsyms
 * everywhere): three loads, where the clock helper costs ~70 ns on some
 * virtual machines (see docs/PERFORMANCE.md). The price: the scheduler skips
 * the clock update of the switch that follows a wakeup preemption, so the
 * last stretch of a wait (from the last update, at most a tick) is not
 * seen; sched_info's own run_delay has the same blind spot.
 */
/*
 * Whether waits come from the kernel's sched_info: the loader asked for it
 * (tp_btf, and /proc/thread-self/schedstat shows the kernel keeps it) and
 * the fields exist (CONFIG_SCHED_INFO; cfs_rq->rq for the clock that
 * last_queued is stamped with). The loader runs td_uses_sched_info to learn
 * the answer, and loads without it when it is no.
 *
 * The kernel stamps sched_info.last_queued with rq_clock() when a task is
 * enqueued (sched_info_enqueue, from enqueue_task) and when it leaves a CPU
 * still TASK_RUNNING (sched_info_depart), and clears it in
 * sched_info_arrive, from prepare_task_switch: after trace_sched_switch in
 * __schedule. So at sched_switch, next's last_queued is when it was queued
 * on this run queue, and rq->clock (read as rq_clock_of does) is the
 * clock sched_info_arrive will close its wait with.
 */
static __always_inline bool use_sched_info(bool btf)
{
	return btf && sched_info &&
	       bpf_core_field_exists(
		       ((struct task_struct *)0)->sched_info.last_queued) &&
	       bpf_core_field_exists(((struct cfs_rq *)0)->rq);
}

static __always_inline u64 rq_clock_of(struct task_struct *p, bool btf)
{
	struct cfs_rq *cfs;
	struct rq *rq;

	if (!(clock_rq || use_sched_info(btf)) || !btf ||
	    !bpf_core_field_exists(((struct cfs_rq *)0)->rq))
		return bpf_ktime_get_ns();
	cfs = p->se.cfs_rq;
	if (!cfs)
		return 0;
	rq = cfs->rq;
	return rq ? rq->clock : 0;
}

/* Thread `pid`'s entry in `arrivals` (sched_info only). */
static __always_inline struct td_arrival *arrival_of(u32 pid)
{
	u32 idx = pid & (TD_ARRIVALS - 1);

	return bpf_map_lookup_elem(&arrivals, &idx);
}

/*
 * When `p`'s wait began, on the rq clock, from sched_info and its entry
 * `e` in `arrivals` (which may be another thread's); 0 when unknown.
 * Queued: last_queued, less what migrations during the wait moved into
 * run_delay (all of run_delay for a task that never ran; nothing when the
 * entry is another thread's: the wait counts from the last migration).
 * Not queued by sched_info's account (preempted while not TASK_RUNNING):
 * the time on_switch stamped in its entry.
 */
static __always_inline u64 wait_start(struct task_struct *p,
				      struct td_arrival *e)
{
	u64 queued = p->sched_info.last_queued;
	u64 last = p->sched_info.last_arrival;
	u64 delay = p->sched_info.run_delay;
	bool mine = e && e->at == last;

	if (mine && e->since)
		return e->since;
	if (!queued)
		return 0;
	if (!last)
		return queued > delay ? queued - delay : 1;
	if (mine && delay >= e->run_delay && queued > delay - e->run_delay)
		return queued - (delay - e->run_delay);
	return queued;
}

/*
 * next's wait, ending `now`, by sched_info; false (counted as
 * no_timestamp) when it has none. Records the arrival sched_info_arrive is
 * about to make: its time and the run_delay it leaves.
 */
static __always_inline bool sched_info_wait(struct task_struct *p,
					    struct td_arrival *e, bool kthread,
					    u64 now, u64 *wait)
{
	u64 queued = p->sched_info.last_queued;
	u64 delay = p->sched_info.run_delay;
	u64 since = wait_start(p, e);

	if (e) {
		e->at = now;
		e->run_delay = delay + (queued && now > queued ? now - queued : 0);
		e->since = 0;
		e->kthread = kthread;
	}
	if (!since) {
		count_drop(TD_DROP_NO_TIMESTAMP);
		return false;
	}
	/* A task migrated after its wakeup may show a clock a hair ahead. */
	*wait = now > since ? now - since : 0;
	return true;
}

/*
 * prev, preempted while not TASK_RUNNING, stays queued, but
 * sched_info_depart does not stamp it: stamp it here, under the arrival
 * its next switch-in will still show.
 */
static __always_inline void sched_info_preempted(struct task_struct *p,
						 u32 pid, u64 now)
{
	struct td_arrival *e = arrival_of(pid);

	if (!e)
		return;
	e->at = p->sched_info.last_arrival;
	e->run_delay = p->sched_info.run_delay;
	e->since = now;
	e->kthread = task_is_kthread(p, true);
}

/* Who got the CPU that `prev` (of cgroup prev_cg) was still runnable for. */
static __always_inline u32 cause_of(u64 prev_cg, bool next_system,
				    u64 next_cg)
{
	if (next_system)
		return TD_CAUSE_SYSTEM;
	if (next_cg == prev_cg)
		return TD_CAUSE_SAME_CGROUP;
	return TD_CAUSE_OTHER_CGROUP;
}

/*
 * Adds a finished wait to thread `pid`'s slot, split as charge() splits
 * it: behind system (idle, kernel thread, root cgroup), else behind its
 * own cgroup or another. An inlined array lookup and two adds; a thread id
 * past the array's end has no slot.
 */
static __always_inline void thread_wait(u32 pid, u64 wait, bool system,
					bool own)
{
	u32 idx = pid + TD_WAITS_HEADER_ENTRIES;
	struct td_thread_wait *w = bpf_map_lookup_elem(&thread_waits, &idx);

	if (!w)
		return;
	w->total += wait;
	if (system)
		w->system += wait;
	else if (own)
		w->own += wait;
	else
		w->other += wait;
}

/* Marks the thread-waits array gone: its figures stop advancing. */
static __always_inline void waits_gone(void)
{
	u32 zero = 0;
	struct td_waits_header *h = bpf_map_lookup_elem(&thread_waits, &zero);

	if (h)
		h->state = TD_WAITS_GONE;
}

/*
 * The agent's last thread exits, however it dies (SIGKILL included): in
 * do_exit the tracepoint fires after signal->live is decremented and
 * before exit_files() closes the links that attach these programs, so the
 * array reads gone before its writer stops.
 */
static __always_inline void on_exit(struct task_struct *p, bool btf)
{
	u32 tgid = btf ? p->tgid : BPF_CORE_READ(p, tgid);
	int live;

	if (!agent_tgid || tgid != agent_tgid)
		return;
	live = btf ? p->signal->live.counter : BPF_CORE_READ(p, signal, live.counter);
	if (!live)
		waits_gone();
}

static __always_inline void on_wakeup(struct task_struct *p, bool btf)
{
	u32 pid = task_pid(p, btf);
	struct td_task *t;

	if (!pid)
		return;
	t = task_get(p, pid, btf);
	if (t)
		t->runnable_since = rq_clock_of(p, btf);
}

/*
 * Cache lines an event touches (tp_btf, cgroup v2, the common path: prev
 * found in `running`, next's place known, its cgroup in a slot, culprit in
 * the first slots; offsets from vmlinux.h, Linux 6.18 x86_64; program
 * text, stack and the per-CPU offset not counted). Under load each one is
 * likely a miss: docs/PERFORMANCE.md "Scheduler probe: cache lines".
 *
 * Own timestamps (fallback), per sched_switch, 21 (24 when prev is still
 * runnable): prev's task_struct 3 (pid, cgroups, __state); next's 3 (pid,
 * cgroups, bpf_storage); next's task storage 2 (the storage's cache slot,
 * the element); the cgroup id 4 (css_set, cgroup level and kn, kernfs
 * node); `running` 1; the stats slot 3 (counters, culprits, bucket); the
 * bucket tables and tunables 3; thread_waits 1; the clock helper's
 * timekeeper 1. A preempted prev adds its task storage: 3. Per wakeup 5
 * (pid, bpf_storage, the storage's 2, the clock), and per wakeup_new an
 * allocation of task storage.
 *
 * With sched_info, per sched_switch 24, and nothing at wakeups: prev 3;
 * next's task_struct 5 (pid, cgroups, se.cfs_rq, and sched_info's two:
 * run_delay, then last_arrival and last_queued); the run queue's clock 2
 * (cfs_rq, rq); the cgroup id 4; the place cache 1; the arrivals entry 1;
 * `running` 1; the stats slot 3; tables 3; thread_waits 1. Per wakeup plus
 * switch, 24 where it was 26 (29 with a preempted prev), with two program
 * runs fewer and no clock helper.
 */
static __always_inline void on_switch(bool preempt, struct task_struct *prev,
				      struct task_struct *next, bool btf)
{
	u32 prev_pid = task_pid(prev, btf), next_pid = task_pid(next, btf);
	/* next is on this CPU's run queue, whose clock was just updated. */
	u64 now = rq_clock_of(next, btf);
	/* Idle (pid 0) counts as system and has no statistics. */
	struct td_place prev_at = { .slot = TD_NO_SLOT, .system = 1 };
	struct td_place next_at = prev_at;
	struct td_cgroup_stats *s = NULL;
	struct td_running *cpu;
	struct td_task *t = NULL, *pt;
	struct td_place *kept = NULL;
	struct td_place_cache *pc;
	struct td_arrival *arr = NULL;
	bool kthread = false;
	u64 last;
	bool si = use_sched_info(btf);
	u64 oncpu = 0, since, wait, css = 0, id;
	u32 zero = 0;
	int k;

	/* prev is who went on this CPU at the last switch, usually. */
	cpu = bpf_map_lookup_elem(&running, &zero);
	if (prev_pid) {
		if (cpu && cpu->pid == prev_pid && cpu->since &&
		    cpu->css == css_of(prev, btf)) {
			prev_at = cpu->place;
			oncpu = now - cpu->since;
		} else {
			id = task_cgroup_id(prev, cpu_v1, btf);
			find_place(prev, id, btf, &prev_at);
		}
	}
	/*
	 * The slot lookup is what the task's storage (or with sched_info the
	 * per-CPU place cache) saves, not the id.
	 */
	if (next_pid) {
		css = css_of(next, btf);
		id = task_cgroup_id(next, cpu_v1, btf);
		if (si) {
			pc = bpf_map_lookup_elem(&places, &zero);
			if (pc)
				kept = &pc->e[id & (TD_PLACE_CACHE - 1)];
			/*
			 * Whether it is a kernel thread, kept in its arrivals
			 * entry: its flags' line is one more miss.
			 */
			arr = arrival_of(next_pid);
			last = next->sched_info.last_arrival;
			if (arr && last && arr->at == last)
				kthread = arr->kthread;
			else
				kthread = task_is_kthread(next, btf);
		} else {
			t = task_get(next, next_pid, btf);
			if (t)
				kept = &t->place;
		}
		if (kept && id && kept->cgroup == id) {
			next_at = *kept;
			if (si)
				next_at.system = id == root_cgroup || kthread;
		} else {
			find_place(next, id, btf, &next_at);
			if (kept)
				*kept = next_at;
		}
	}
	if (cpu) {
		cpu->pid = next_pid;
		cpu->place = next_at;
		cpu->css = css;
		cpu->since = now;
	}

	/* prev leaves the CPU: charge its time on CPU; if still runnable, it
	 * was preempted and starts waiting now. A task preempted between
	 * setting a sleeping state and calling schedule() stays on the run
	 * queue although its state says otherwise: `preempt` tells. */
	if (prev_pid) {
		s = stats_of(&prev_at, NULL);
		if (s)
			s->oncpu_ns += oncpu;
		if (preempt || task_state(prev, btf) == TD_TASK_RUNNING) {
			if (!si) {
				pt = task_get(prev, prev_pid, btf);
				if (pt)
					pt->runnable_since = now;
			} else if (task_state(prev, btf) != TD_TASK_RUNNING) {
				sched_info_preempted(prev, prev_pid, now);
			}
			if (s)
				s->switch_out[cause_of(prev_at.cgroup,
						       next_at.system,
						       next_at.cgroup)] += 1;
		}
	}

	/* next takes the CPU: its wait ends. */
	if (si) {
		if (!next_pid ||
		    !sched_info_wait(next, arr, kthread, now, &wait))
			return;
	} else {
		if (!t)
			return;
		since = t->runnable_since;
		if (!since) {
			count_drop(TD_DROP_NO_TIMESTAMP);
			return;
		}
		t->runnable_since = 0;
		/* A task migrated after its wakeup may show a clock a hair
		 * ahead. */
		wait = now > since ? now - since : 0;
	}
	if (!s || next_at.cgroup != prev_at.cgroup || !prev_pid) {
		s = stats_of(&next_at, kept);
		/* If placed again, the next switch here starts from there. */
		if (cpu)
			cpu->place.slot = next_at.slot;
	}
	if (s) {
		k = bucket_of(wait);
		if (k < 0)
			s->zero += 1;
		else
			s->buckets[k & (TD_MAX_BUCKETS - 1)] += 1;
		s->count += 1;
		s->wait_ns += wait;
	}
	charge(s, next_at.cgroup,
	       prev_at.system ? TD_CGROUP_SYSTEM : prev_at.cgroup, wait);
	thread_wait(next_pid, wait, prev_at.system,
		    prev_at.cgroup == next_at.cgroup);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(td_wakeup_btf, struct task_struct *p)
{
	on_wakeup(p, true);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(td_wakeup_new_btf, struct task_struct *p)
{
	on_wakeup(p, true);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(td_switch_btf, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	on_switch(preempt, prev, next, true);
	return 0;
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(td_wakeup_raw, struct task_struct *p)
{
	on_wakeup(p, false);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(td_wakeup_new_raw, struct task_struct *p)
{
	on_wakeup(p, false);
	return 0;
}

SEC("raw_tp/sched_switch")
int BPF_PROG(td_switch_raw, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	on_switch(preempt, prev, next, false);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(td_exit_btf, struct task_struct *p)
{
	on_exit(p, true);
	return 0;
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(td_exit_raw, struct task_struct *p)
{
	on_exit(p, false);
	return 0;
}

/*
 * Run by the loader (BPF_PROG_RUN) in the agent's own thread before it
 * publishes the array: records whose exit marks it gone, and returns that
 * tgid for the header (a pid namespace's getpid() would not match).
 */
SEC("syscall")
int td_waits_start(void *ctx)
{
	agent_tgid = bpf_get_current_pid_tgid() >> 32;
	return agent_tgid;
}

/*
 * Run by the loader (BPF_PROG_RUN) after load: 1 when the programs take
 * waits from sched_info, 0 when they fell back to their own timestamps
 * (the kernel lacks a field), so that the loader loads again without it.
 */
SEC("syscall")
int td_uses_sched_info(void *ctx)
{
	return use_sched_info(true);
}

/*
 * Run by the loader (BPF_PROG_RUN) when the probe stops cleanly, before
 * its links detach: the array is frozen, so no system call can write it.
 */
SEC("syscall")
int td_waits_gone(void *ctx)
{
	waits_gone();
	return 0;
}

/*
 * Waits still in progress, for the agent to read at the end of each window
 * (a task starved for the whole window has no finished wait to show). It
 * runs only when user space reads the iterator, walking the tasks once, so
 * the event programs above cost what they did. tp_btf flavour only: it
 * reads sched_info or task storage with plain loads.
 *
 * A timestamp alone does not prove a wait: a task woken while still on its
 * CPU (between setting a sleeping state and calling schedule()) is stamped
 * at that wakeup and keeps the stamp if it then sleeps. So only tasks that
 * are queued and not on a CPU count.
 */
SEC("iter/task")
int td_waiting(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *t = ctx->task;
	struct td_waiting w = {};
	struct td_task *v;

	if (!t || !t->on_rq)
		return 0;
	if (bpf_core_field_exists(t->on_cpu) && t->on_cpu)
		return 0;
	/* EEVDF's delayed dequeue (v6.12) keeps a sleeping task queued. */
	if (bpf_core_field_exists(t->se.sched_delayed) && t->se.sched_delayed)
		return 0;
	if (use_sched_info(true)) {
		w.since = wait_start(t, arrival_of(t->pid));
	} else {
		v = bpf_task_storage_get(&task_ts, t, 0, 0);
		if (v)
			w.since = v->runnable_since;
	}
	if (!w.since)
		return 0;
	w.cgroup = task_cgroup_id(t, cpu_v1, true);
	w.now = rq_clock_of(t, true);
	w.pid = t->pid;
	w.cpu = task_cpu(t);
	bpf_seq_write(seq, &w, sizeof(w));
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
