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
 * Set in an id read from the default (v2, unified) hierarchy on a hybrid
 * host, so that it cannot be mistaken for a v1 cpu id: kernfs ids are per
 * hierarchy, and both count from 1. Mirrored by cgroupfs::UNIFIED_TAG in
 * Rust. A kernfs id is ino | gen << 32 (kernel commit 67c0496e87d1); gen
 * only grows when the 31-bit inode allocator wraps, so reaching 2^31 would
 * take 2^62 cgroups made: bit 63 is never set in a real id.
 */
#define TD_CGROUP_UNIFIED_TAG (1ULL << 63)

/* The kernfs id of cgroup `cg`, and whether `cg` is its hierarchy's root. */
static __always_inline u64 cgroup_kn_id(struct cgroup *cg, bool *root,
					bool btf)
{
	struct kernfs_node *kn;

	if (!cg)
		return 0;
	if (btf) {
		*root = cg->level == 0;
		kn = cg->kn;
	} else {
		*root = BPF_CORE_READ(cg, level) == 0;
		kn = BPF_CORE_READ(cg, kn);
	}
	return kn ? kernfs_id(kn, btf) : 0;
}

/*
 * The cgroup id a task is keyed by. On a cgroup v2 host, its default
 * hierarchy cgroup (task->cgroups->dfl_cgrp), where the cpu controller is.
 *
 * On a hybrid host (cpu_v1: the cpu controller is a v1 hierarchy), the v1
 * cpu cgroup (task->cgroups->subsys[cpu_cgrp_id]->cgroup) when it is not
 * that hierarchy's root: it is what the scheduler groups the task by and
 * where its quota lives. When it is the root, the cpu hierarchy does not
 * distinguish the task (e.g. a systemd service without CPU accounting), so
 * it is keyed by its v2 cgroup, tagged with TD_CGROUP_UNIFIED_TAG, unless
 * that is the v2 root too: then the v1 root's id, which counts as system.
 * A root is recognised by cgroup::level == 0, which needs no id from user
 * space. Either way the id is the cgroup directory's kernfs id, which is
 * its inode number in cgroupfs.
 */
static __always_inline u64 task_cgroup_id(struct task_struct *t, bool cpu_v1,
					  bool btf)
{
	struct cgroup *cg;
	bool root = false;
	u64 id, v1_root;
	int i;

	if (!cpu_v1) {
		if (btf)
			cg = t->cgroups->dfl_cgrp;
		else
			cg = BPF_CORE_READ(t, cgroups, dfl_cgrp);
		return cgroup_kn_id(cg, &root, btf);
	}

	i = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);
	if (i < 0 || i >= CGROUP_SUBSYS_COUNT)
		return 0;
	if (btf)
		cg = t->cgroups->subsys[i]->cgroup;
	else
		cg = BPF_CORE_READ(t, cgroups, subsys[i], cgroup);
	id = cgroup_kn_id(cg, &root, btf);
	if (!root)
		return id;

	v1_root = id;
	if (btf)
		cg = t->cgroups->dfl_cgrp;
	else
		cg = BPF_CORE_READ(t, cgroups, dfl_cgrp);
	id = cgroup_kn_id(cg, &root, btf);
	if (root || !id)
		return v1_root;
	return id | TD_CGROUP_UNIFIED_TAG;
}

#endif /* TOPDECK_CORE_FIXES_BPF_H */
