// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only)
/*
 * pyperf dump --native: the user registers of each thread of one process, as its last entry into the kernel saved
 * them (struct pt_regs at the top of its kernel stack), from a task iterator: nothing is stopped. For a thread
 * blocked in a system call they are where it is in user space; /proc/PID/task/TID/syscall gives its stack pointer
 * and program counter only, and a function built with frame pointers finds its caller through rbp.
 *
 * One record per thread of `target_tgid`: struct pyperf_task_regs (bpf/pyperf.h), written to the iterator's
 * seq_file.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "pyperf.h"

char LICENSE[] SEC("license") = "GPL";

/* The process whose threads are read (set before loading). */
const volatile __u32 target_tgid = 0;
/* Makes the record type appear in BTF, hence in the Rust skeleton's `types`. */
const volatile struct pyperf_task_regs pyperf_task_regs_anchor = {};

struct pt_regs___regs {
	unsigned long bp;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long sp;
} __attribute__((preserve_access_index));

SEC("iter/task")
int pyperf_task_regs(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct pt_regs___regs *regs;
	struct pyperf_task_regs out = {};

	if (!task || task->tgid != target_tgid)
		return 0;
	regs = (struct pt_regs___regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	out.tid = task->pid;
	out.ip = BPF_CORE_READ(regs, ip);
	out.sp = BPF_CORE_READ(regs, sp);
	out.bp = BPF_CORE_READ(regs, bp);
	out.orig_ax = (__s64)BPF_CORE_READ(regs, orig_ax);
	bpf_seq_write(seq, &out, sizeof(out));
	return 0;
}
