// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The floor for the overhead benchmark: programs on the same tracepoints
 * that do nothing, so the cost of running any BPF program there can be
 * told from the cost of ours. Not used by the agent.
 */
#include "vmlinux/x86_64/vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

SEC("tp_btf/sched_wakeup")
int BPF_PROG(floor_wakeup, struct task_struct *p)
{
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(floor_wakeup_new, struct task_struct *p)
{
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} last SEC(".maps");

SEC("tp_btf/sched_switch")
int BPF_PROG(floor_clock, bool preempt, struct task_struct *prev,
	     struct task_struct *next)
{
	u32 zero = 0;
	u64 *v = bpf_map_lookup_elem(&last, &zero);

	if (v)
		*v = bpf_ktime_get_ns();
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
