/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * Kernel stacks (record --kernel; part of pyperf.bpf.c, after common.bpf.h): the kernel addresses of a record,
 * taken where the program runs or, for an off-CPU interval in a system call, where the thread blocked (off_kstack,
 * taken by the sched_switch program of offcpu.bpf.h, read when the call returns).
 */

/* record --kernel: the kernel stack in each record (of a sample in kernel mode, of an off-CPU interval where it left
 * the CPU). */
const volatile __u8 kernel = 0;

/* Where the kernel addresses of a record come from (record --kernel). */
enum kstack_source {
	KSTACK_NONE = 0,
	KSTACK_HERE = 1,  /* bpf_get_stack() of the program's context: the sample's, or the current task's */
	KSTACK_BLOCK = 2, /* the off_kstack entry taken when the interval's thread blocked */
};

/* record --off-cpu --kernel: the kernel stack of each followed thread that blocked in a system call, where it
 * blocked, for the record its return writes (struct off_kstack). LRU: a thread that never returns makes room. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384); /* 1 unless --off-cpu --kernel, set by user space before load */
	__type(key, __u64);
	__type(value, struct off_kstack);
} off_kstack SEC(".maps");

/* Where pyperf_switch builds an off_kstack value: 264 bytes do not fit its BPF stack. Its own, not the off-CPU
 * scratch slot: a sys_exit program preempted while it writes a record there may be switched out right here. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct off_kstack);
} kstack_buf SEC(".maps");

/*
 * record --kernel: the kernel addresses of the record, at byte `at` of the event (right after its frames); returns
 * where the record ends now. `src`: see enum kstack_source; `key`, `off`: the interval of a KSTACK_BLOCK.
 */
static __always_inline __u64 add_kernel_stack(void *ctx, struct pyperf_scratch *s, __u64 at, int src, __u64 key,
					      const struct off_cpu_entry *off)
{
	struct off_kstack *k;
	__u64 *dst;
	long len = 0;
	__u32 i;

	if (at > PYPERF_KOFF_MAX)
		return at;
	dst = (__u64 *)((__u8 *)&s->ev + at);
	if (src == KSTACK_HERE) {
		len = bpf_get_stack(ctx, dst, PYPERF_KSTACK_MAX * 8, 0);
	} else if (src == KSTACK_BLOCK && off) {
		k = bpf_map_lookup_elem(&off_kstack, &key);
		/* Taken at this interval's block (not an older one's: the thread may have blocked since without it
		 * being taken, e.g. its capture failed). */
		if (!k || k->start != off->start) {
			s->counters.off_kstack_lost++;
			return at;
		}
		/* All of them (a constant copy, no helper), of which n are the stack's. */
		for (i = 0; i < PYPERF_OFF_KSTACK_MAX; i++)
			dst[i] = k->ips[i];
		len = k->n <= PYPERF_OFF_KSTACK_MAX ? k->n * 8 : PYPERF_OFF_KSTACK_MAX * 8;
	}
	if (len <= 0)
		return at;
	if (len > PYPERF_KSTACK_MAX * 8)
		len = PYPERF_KSTACK_MAX * 8;
	len &= ~7L;
	s->ev.hdr.nkernel = len / 8;
	s->counters.kernel_stacks++;
	return at + len;
}

/*
 * record --kernel: the kernel stack of the current task (prev, switched out in a system call: schedule <-
 * futex_wait <- ... <- entry_SYSCALL_64), kept for the record of the interval that begins at `start`, written when
 * the call returns (off_kstack), where only the return path is on the stack. Taken now, for every such interval,
 * though most short ones are dropped at their end: bpf_get_stack costs ~2 us whatever its depth, but later, at a
 * switch-in, only bpf_get_task_stack could take it, and that leaves out every scheduling function (schedule,
 * mutex_lock, down_read, io_schedule, do_nanosleep, ...), which are what tells one wait from another.
 */
static __always_inline void take_block_kstack(void *ctx, __u64 key, __u64 start)
{
	struct off_kstack *k;
	__u32 zero = 0;
	long len;

	k = bpf_map_lookup_elem(&kstack_buf, &zero);
	if (!k)
		return;
	len = bpf_get_stack(ctx, k->ips, sizeof(k->ips), 0);
	if (len <= 0)
		return; /* counted when the call returns, as off_kstack_lost */
	k->start = start;
	k->n = (__u64)len / 8;
	bpf_map_update_elem(&off_kstack, &key, k, BPF_ANY);
}
