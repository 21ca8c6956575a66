/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Types and constants shared by sched.bpf.c and the Rust loader (which
 * sees them through the skeleton's generated `types` module). Types and
 * constants only: no code.
 */
#ifndef TOPDECK_SCHED_H
#define TOPDECK_SCHED_H

/*
 * Histogram buckets per cgroup. The loader fills in how many are used (the
 * topdeck bucket range it publishes) and checks that they fit.
 */
#define TD_MAX_BUCKETS 256

/*
 * Bucket lookup table: one entry per (power of two, next 4 mantissa bits)
 * of a wait in nanoseconds. See bucket_of() in sched.bpf.c.
 */
#define TD_SLICE_BITS 4
#define TD_SLICES (64 << TD_SLICE_BITS)

/* Who took the CPU from a task that was still runnable. */
enum td_cause {
	TD_CAUSE_SAME_CGROUP = 0,
	TD_CAUSE_OTHER_CGROUP = 1,
	/* the idle task, a kernel thread, or a task in the root cgroup */
	TD_CAUSE_SYSTEM = 2,
	TD_NR_CAUSES = 3,
};

/* Why a sample was not counted; every one of them is counted here. */
enum td_drop {
	/* bpf_task_storage_get / timestamp map could not store a timestamp */
	TD_DROP_TIMESTAMP_FULL = 0,
	/* the per-cgroup maps were full: a new cgroup could not be added */
	TD_DROP_CGROUP_FULL = 1,
	/* the victim x culprit map was full */
	TD_DROP_PAIR_FULL = 2,
	/*
	 * a task went on CPU with no timestamp: runnable since before the probe
	 * was attached (expected in the first second), or a timestamp lost
	 */
	TD_DROP_NO_TIMESTAMP = 3,
	TD_NR_DROPS = 4,
};

/*
 * Culprits kept inside each cgroup's own value, searched linearly: a
 * cgroup usually waits behind a few others, and this spares a hash lookup
 * per switch. Further culprits go to the `pairs` hash map.
 */
#define TD_CULPRIT_SLOTS 8

/* Culprit id charged when the CPU was idle or held by a kernel thread. */
#define TD_CGROUP_SYSTEM 0ULL

/* Wait charged to one culprit, in a cgroup's own value. */
struct td_culprit {
	/* culprit cgroup id + 1; 0 marks a free slot */
	unsigned long long key;
	unsigned long long wait_ns;
	unsigned long long count;
};

/*
 * Per cgroup, per CPU: a slot of the `stats` PERCPU_ARRAY, or for cgroups
 * beyond its slots a value of the `cgroups` PERCPU_HASH keyed by cgroup id.
 */
struct td_cgroup_stats {
	/*
	 * The fields every switch touches come first, so that they share
	 * the value's first cache lines with the first culprit slots.
	 */
	/*
	 * In a slot: the cgroup id it holds, written on this CPU at the
	 * slot's first use here; 0 in a freed (zeroed) slot. Unused in the
	 * hash.
	 */
	unsigned long long owner;
	/* number of waits, and their exact sum in nanoseconds */
	unsigned long long count;
	unsigned long long wait_ns;
	/* time on CPU, charged at each switch-out */
	unsigned long long oncpu_ns;
	/* switch-outs while still runnable, by who ran next */
	unsigned long long switch_out[TD_NR_CAUSES];
	/* waits at or below the zero threshold */
	unsigned long long zero;
	/* wait charged to the first culprits this CPU saw for this cgroup */
	struct td_culprit culprits[TD_CULPRIT_SLOTS];
	/* run-queue waits per bucket; bucket i is topdeck's min_index + i */
	unsigned long long buckets[TD_MAX_BUCKETS];
};

/* Key of the victim x culprit matrix. */
struct td_pair {
	/* cgroup of the task that waited */
	unsigned long long victim;
	/* cgroup that held the CPU just before the victim ran */
	unsigned long long culprit;
};

/* Value of the matrix, per CPU. */
struct td_pair_stats {
	unsigned long long wait_ns;
	unsigned long long count;
};

/* A cgroup whose statistics are in the `cgroups` hash, not in a slot. */
#define TD_NO_SLOT 0xffffffffU

/* Where a task's statistics go. */
struct td_place {
	unsigned long long cgroup;
	/* the cgroup's slot in `stats`, or TD_NO_SLOT */
	unsigned int slot;
	/* its cgroup counts as system (root cgroup or kernel thread) */
	unsigned int system;
};

/* Per task (task storage, or a pid-keyed hash for raw_tp). */
struct td_task {
	/* when the task became runnable; 0 when it is not waiting */
	unsigned long long runnable_since;
	/*
	 * where its waits went last time: still right while its cgroup id
	 * is the same (ids are never reused); cgroup 0 until found
	 */
	struct td_place place;
};

/*
 * Per CPU, with the kernel's sched_info: cgroup id -> its place, direct
 * mapped (entry id % TD_PLACE_CACHE), so that a switch finds next's slot in
 * one cache line where task storage took three. A miss (first use of the
 * cgroup on this CPU, or two cgroups sharing an entry) finds the place in
 * the `slots` hash and stores it here. An entry's `system` is not used: it
 * depends on the task (kernel threads), and is worked out per switch.
 */
#define TD_PLACE_CACHE 64

struct td_place_cache {
	struct td_place e[TD_PLACE_CACHE];
};

/*
 * With the kernel's sched_info, per thread id (direct mapped, entry
 * tid % TD_ARRIVALS), written at each switch-in: sched_info.run_delay just
 * after the thread's arrival on the CPU, tagged with the time of that
 * arrival (what sched_info.last_arrival then shows, so an entry another
 * thread overwrote is told apart). A task migrated while it waits has the
 * wait so far added to run_delay and last_queued restarted on the new run
 * queue (sched_info_dequeue, then sched_info_enqueue), so its whole wait is
 * run_delay - run_delay_after + (now - last_queued).
 */
#define TD_ARRIVALS 65536

struct td_arrival {
	/* rq clock ns of the thread's last arrival on a CPU */
	unsigned long long at;
	/* sched_info.run_delay after that arrival */
	unsigned long long run_delay;
	/*
	 * when it was preempted while not TASK_RUNNING (it stays queued, but
	 * sched_info_depart does not stamp it); 0 otherwise
	 */
	unsigned long long since;
	/* PF_KTHREAD, so that a switch need not read its flags' line */
	unsigned int kthread;
	unsigned int pad;
};

/*
 * Per CPU: the task that went on this CPU at the last switch, with where
 * its statistics went then. At the next switch it is prev, so its place
 * need not be found again and its time on CPU needs no per-task timestamp.
 */
struct td_running {
	struct td_place place;
	/*
	 * address of its css_set then: a task that changed cgroup while on
	 * the CPU has changed css_set (the one it holds cannot be freed)
	 */
	unsigned long long css;
	unsigned long long since;
	unsigned int pid;
	unsigned int pad;
};

/*
 * A wait still in progress, as the task iterator td_waiting writes it at a
 * read: a task queued on a run queue, not on a CPU, with a timestamp. The
 * agent adds the part of it that fell in the window it closes.
 */
struct td_waiting {
	/* cgroup of the waiting task (the victim) */
	unsigned long long cgroup;
	/*
	 * when it became runnable (td_task.runnable_since, or with sched_info
	 * last_queued less the wait before a migration, on the rq clock)
	 */
	unsigned long long since;
	/* the time of the read, on the same clock */
	unsigned long long now;
	unsigned int pid;
	/* the CPU whose run queue it waits on */
	unsigned int cpu;
};

/*
 * The thread-waits array (docs/FORMAT.md "Thread waits",
 * topdeck_format::waits): entries of 32 bytes, entries 0-1 the header, the
 * slot of host thread id t entry t + TD_WAITS_HEADER_ENTRIES.
 */
#define TD_WAITS_HEADER_ENTRIES 2
#define TD_WAITS_MAGIC 0x54574454U /* "TDWT" as a little-endian u32 */
#define TD_WAITS_VERSION 1
#define TD_WAITS_LIVE 1ULL
#define TD_WAITS_GONE 2ULL

/* One thread's cumulative run-queue wait, ns. */
struct td_thread_wait {
	unsigned long long total;
	/* behind a task of its own cgroup */
	unsigned long long own;
	/* behind a task of another cgroup */
	unsigned long long other;
	/* behind idle, a kernel thread or the root cgroup */
	unsigned long long system;
};

/* Entry 0 of the array; entry 1 is reserved (zero). */
struct td_waits_header {
	unsigned int magic;
	unsigned int version;
	/* TD_WAITS_LIVE, then TD_WAITS_GONE when the agent goes */
	unsigned long long state;
	/* CLOCK_MONOTONIC ns when the array was created */
	unsigned long long started_ns;
	/* entries, header included */
	unsigned int entries;
	unsigned int agent_pid;
};

#endif /* TOPDECK_SCHED_H */
