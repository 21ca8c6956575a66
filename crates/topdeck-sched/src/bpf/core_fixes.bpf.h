/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * CO-RE shims: every read of a kernel field whose name, type or path has
 * changed across kernel versions lives here, one function per field, each
 * naming the commit that forced it. Each takes `btf`: true in tp_btf
 * programs, whose task pointers are typed and may be dereferenced directly
 * (plain loads), false in raw_tp programs, which must use
 * bpf_probe_read_kernel via BPF_CORE_READ. Callers pass a literal, so the
 * compiler keeps only one of the two paths.
 */
#ifndef TOPDECK_CORE_FIXES_BPF_H
#define TOPDECK_CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

#define TD_PF_KTHREAD 0x00200000 /* include/linux/sched.h */
#define TD_TASK_RUNNING 0

/*
 * Commit 2f064a59a11f ("sched: Change task_struct::state", v5.14) renamed
 * task_struct::state to __state and made it an unsigned int.
 */
struct task_struct___o {
	volatile long state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *t, bool btf)
{
	if (bpf_core_field_exists(t->__state)) {
		if (btf)
			return t->__state;
		return BPF_CORE_READ(t, __state);
	}
	return BPF_CORE_READ((struct task_struct___o *)t, state);
}

static __always_inline u32 task_pid(struct task_struct *t, bool btf)
{
	if (btf)
		return t->pid;
	return BPF_CORE_READ(t, pid);
}

static __always_inline bool task_is_kthread(struct task_struct *t, bool btf)
{
	unsigned int flags = btf ? t->flags : BPF_CORE_READ(t, flags);

	return flags & TD_PF_KTHREAD;
}

/*
 * Commit bcf9033e5449 ("sched: move CPU field back into thread_info if
 * THREAD_INFO_IN_TASK", v5.16) moved task_struct::cpu into thread_info.
 */
struct task_struct___cpu {
	unsigned int cpu;
} __attribute__((preserve_access_index));

static __always_inline u32 task_cpu(struct task_struct *t)
{
	if (bpf_core_field_exists(t->thread_info.cpu))
		return t->thread_info.cpu;
	return BPF_CORE_READ((struct task_struct___cpu *)t, cpu);
}

/*
 * Commit 67c0496e87d1 ("kernfs: convert kernfs_node->id from union
 * kernfs_node_id to u64", v5.5) made the id a plain u64; before it, the id
 * was a union whose `id` member held the same 64 bits.
 */
union kernfs_node_id___o {
	struct {
		u32 ino;
		u32 generation;
	};
	u64 id;
} __attribute__((preserve_access_index));

struct kernfs_node___o {
	union kernfs_node_id___o id;
} __attribute__((preserve_access_index));

static __always_inline u64 kernfs_id(struct kernfs_node *kn, bool btf)
{
	if (bpf_core_type_exists(union kernfs_node_id___o))
		return BPF_CORE_READ((struct kernfs_node___o *)kn, id.id);
	if (btf)
		return kn->id;
	return BPF_CORE_READ(kn, id);
}

/*
 * The cgroup id that the host's cpu controller uses for a task. On a
 * cgroup v2 host that is the default hierarchy's cgroup. On a hybrid host
 * whose cpu controller is mounted as v1 (cpu_v1), the v2 cgroup of a task
 * is usually the root, so read the cpu controller's own cgroup:
 * task->cgroups->subsys[cpu_cgrp_id]->cgroup. Either way the id is the
 * cgroup directory's kernfs id, which is its inode number in cgroupfs.
 */
static __always_inline u64 task_cgroup_id(struct task_struct *t, bool cpu_v1,
					  bool btf)
{
	struct kernfs_node *kn;

	if (cpu_v1) {
		int i = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);

		if (i < 0 || i >= CGROUP_SUBSYS_COUNT)
			return 0;
		if (btf)
			kn = t->cgroups->subsys[i]->cgroup->kn;
		else
			kn = BPF_CORE_READ(t, cgroups, subsys[i], cgroup, kn);
	} else {
		if (btf)
			kn = t->cgroups->dfl_cgrp->kn;
		else
			kn = BPF_CORE_READ(t, cgroups, dfl_cgrp, kn);
	}
	if (!kn)
		return 0;
	return kernfs_id(kn, btf);
}

#endif /* TOPDECK_CORE_FIXES_BPF_H */
