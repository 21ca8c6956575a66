// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The per-event baseline for the overhead benchmark, in the style of
 * Netflix's run-queue monitor: the same timestamps as sched.bpf.c, but each
 * wait is sent to user space as one ring-buffer event (cgroup ids and the
 * wait), to be aggregated there. Not used by the agent.
 */
#include "vmlinux/x86_64/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sched.h"
#include "core_fixes.bpf.h"

const volatile bool cpu_v1 = false;

struct td_event {
	u64 victim;
	u64 culprit;
	u64 wait_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, u64);
} runnable_since SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} lost SEC(".maps");

static __always_inline void stamp(struct task_struct *p)
{
	u64 *ts;

	if (!p->pid)
		return;
	ts = bpf_task_storage_get(&runnable_since, p, 0,
				  BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (ts)
		*ts = bpf_ktime_get_ns();
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(rb_wakeup, struct task_struct *p)
{
	stamp(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(rb_wakeup_new, struct task_struct *p)
{
	stamp(p);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(rb_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	struct td_event *e;
	u64 *ts, now;
	u32 zero = 0;

	if (prev->pid && (preempt || task_state(prev, true) == TD_TASK_RUNNING))
		stamp(prev);
	if (!next->pid)
		return 0;
	ts = bpf_task_storage_get(&runnable_since, next, 0, 0);
	if (!ts || !*ts)
		return 0;
	now = bpf_ktime_get_ns();
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		u64 *n = bpf_map_lookup_elem(&lost, &zero);

		if (n)
			*n += 1;
		return 0;
	}
	e->victim = task_cgroup_id(next, cpu_v1, true);
	e->culprit = prev->pid ? task_cgroup_id(prev, cpu_v1, true) : 0;
	e->wait_ns = now - *ts;
	*ts = 0;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
