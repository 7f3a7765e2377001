/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * Off-CPU intervals (record --off-cpu; part of pyperf.bpf.c, included last: its programs write records with
 * record.bpf.h's record_stack): the sched_switch, sched_wakeup and sys_exit programs, the off_cpu map of the
 * followed threads that are off CPU now, and the short intervals' sampling.
 */

/*
 * record --off-cpu. Tracepoints only (no kprobe, no fentry: kernels built without kprobes or locked down have
 * neither), so the stack of an interval is walked where the thread's own memory is current:
 *  - off CPU in a system call (blocked in sleep, I/O, a lock, the GIL: nearly every wait; or preempted in the
 *    kernel): when the call returns (sys_exit), the thread's stack unchanged since it left; short ones are
 *    sampled first, so an interval that is dropped costs a few map operations;
 *  - off CPU outside a system call (preempted in user space, or a page fault): when it leaves (sched_switch,
 *    prev is current), since it returns to user space without a tracepoint; its end comes at its switch-in.
 * The CPU's off-CPU scratch slot (cpu + nr_cpus) serves both: a perf_event program (an NMI with -e cycles) may
 * interrupt these, and sys_exit programs may be preempted (`busy`).
 */

/* x86-64 enters a system call with -ENOSYS in pt_regs->ax, which holds the call's return value once it returns:
 * a task switched out on its way back to user space (preempted after sys_exit) still has orig_ax set, but no
 * longer this. */
#define PYPERF_ENOSYS 38

/* Task states (include/linux/sched.h), as sched_switch's prev_state gives them. */
#define PYPERF_TASK_RUNNING 0x0000
#define PYPERF_TASK_UNINTERRUPTIBLE 0x0002
#define PYPERF_TASK_DEAD 0x0080

/* record --off-cpu: intervals shorter than this are kept with probability length / off_cpu_min_ns and then
 * weigh off_cpu_min_ns (an unbiased estimate of the time at a bounded cost); longer ones weigh their length. */
const volatile __u64 off_cpu_min_ns = 1000000;
/* Possible CPUs: the scratch array holds one slot per CPU for samples, then one per CPU for off-CPU records. */
const volatile __u32 nr_cpus = 1;

/* record --off-cpu: the followed threads that are off CPU now, from their switch-out to their switch-in. Keyed
 * by pid_tgid, not by CPU: a thread may come back on another CPU. LRU: an entry whose thread never came back
 * (it exited while blocked, or the entry outlived a lost switch-in) makes room for live ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct off_cpu_entry);
} off_cpu SEC(".maps");

/* Kept with probability dur / off_cpu_min_ns below the minimum, then weighing the minimum: the expected weight
 * is dur. Returns the weight, 0 = dropped (counted). */
static __always_inline __u64 off_cpu_weight(struct pyperf_scratch *s, __u64 dur)
{
	s->counters.off_cpu_ended++;
	if (dur >= off_cpu_min_ns)
		return dur ? dur : 1;
	if ((((__u64)bpf_get_prandom_u32() * off_cpu_min_ns) >> 32) >= dur) {
		s->counters.off_cpu_short++;
		s->counters.off_cpu_short_ns += dur;
		return 0;
	}
	s->counters.off_cpu_sampled++;
	return off_cpu_min_ns;
}

static __always_inline struct pyperf_scratch *off_cpu_slot(__u32 *cpu)
{
	__u32 slot;

	*cpu = bpf_get_smp_processor_id();
	slot = *cpu + nr_cpus;
	return bpf_map_lookup_elem(&scratch, &slot);
}

/* The thread's run_delay as off_cpu_entry.run_delay keeps it (+ 1; 0 = not known). */
static __always_inline __u64 off_cpu_run_delay(struct task_struct *task)
{
	return kl.task_run_delay ? KFIELD(__u64, task, kl.task_run_delay) + 1 : 0;
}

/*
 * When `task`, off CPU by `cur` since its last switch-out, came back on CPU though no switch-in was shown (the
 * tracepoint skips some switches: seen on a VM, never after its guest agent's threads); `now`: a moment when it
 * is on CPU, `ran`: its CPU time since it was last picked to run. It waited in a run queue from its preemption
 * (or its wakeup) for as long as its run_delay grew: the kernel's clock of the wait, which counts a hypervisor's
 * steal as the guest's clock does. Without run_delay: `ran` before `now`, late by whatever the host stole from it
 * since (CPU time leaves steal out: a runnable interval then looks longer than the kernel's by that much).
 */
static __always_inline __u64 off_cpu_unseen_in(struct task_struct *task, const struct off_cpu_entry *cur, __u64 now,
					       __u64 ran)
{
	__u64 queued = cur->out_runnable ? cur->out : cur->wake >= cur->out ? cur->wake : 0, delay, waited;

	delay = off_cpu_run_delay(task);
	if (queued && cur->run_delay && delay >= cur->run_delay) {
		waited = delay - cur->run_delay;
		if (queued + waited <= now)
			return queued + waited;
	}
	return now > ran ? now - ran : 0;
}

/* Adds up the time off CPU of `cur` from its switch-out to its switch-in at `in` (runnable from its wakeup, or
 * all of it after a preemption), and marks it back on CPU. */
static __always_inline void off_cpu_back(struct off_cpu_entry *cur, __u64 in)
{
	if (in > cur->out) {
		cur->off_ns += in - cur->out;
		if (cur->out_runnable)
			cur->runnable_ns += in - cur->out;
		else if (cur->wake >= cur->out && in > cur->wake)
			cur->runnable_ns += in - cur->wake;
	}
	cur->out = 0;
	cur->wake = 0;
}

/* The end of an interval whose stack went out at its start (PYPERF_EVENT_OFF_CPU_START). Written in place in the
 * ring, not built on the stack: inlined into pyperf_switch, a header there left too little of the 512 bytes for the
 * frame-walk callbacks it calls (kernel 6.18 refused the program: "combined stack size of 2 calls is 560"). */
static __always_inline void off_cpu_end(__u64 key, const struct off_cpu_entry *e, __u64 now)
{
	struct pyperf_event_header *h;
	struct pyperf_scratch *s;
	__u64 weight;
	__u32 cpu;

	s = off_cpu_slot(&cpu);
	if (!s)
		return;
	weight = off_cpu_weight(s, e->off_ns);
	h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
	if (!h) {
		s->counters.off_cpu_rb_full++;
		return;
	}
	__builtin_memset(h, 0, sizeof(*h));
	h->ktime = now;
	h->pid = key >> 32;
	h->tid = (__u32)key;
	h->cpu = cpu;
	h->kind = PYPERF_EVENT_OFF_CPU_END;
	h->off_kind = e->kind;
	h->off_flags = e->flags;
	h->off_start = e->start;
	h->off_duration = e->off_ns;
	h->off_runnable = e->runnable_ns;
	h->off_syscall = e->syscall;
	h->off_weight = weight;
	bpf_ringbuf_submit(h, BPF_RB_NO_WAKEUP);
}

/* A followed thread is switched in (`next`), or leaves the CPU (`prev`, the current task). An unrelated switch
 * costs two task field loads and two hash lookups. */
SEC("tp_btf/sched_switch")
int pyperf_switch(__u64 *ctx)
{
	/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state) */
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	unsigned int prev_state = (unsigned int)ctx[3];
	struct off_cpu_entry *cur, e = {};
	struct pyperf_pt_regs *regs;
	struct user_regs ur = {};
	struct pyperf_scratch *s;
	struct py_proc *proc;
	__u32 tgid = KFIELD(int, next, kl.task_tgid), cpu;
	__u64 key, now = 0;
	bool blocked;
	long nr = -1;

	/* Switch-in of a followed thread that is off CPU: the time off CPU since its last switch-out is added up
	 * (runnable from its wakeup, or all of it after a preemption). A thread whose stack went out when it left
	 * ends its interval here; one blocked in a system call ends it when the call returns. */
	if (is_followed(tgid)) {
		key = ((__u64)tgid << 32) | (__u32)KFIELD(int, next, kl.task_pid);
		cur = bpf_map_lookup_elem(&off_cpu, &key);
		if (cur && cur->out) {
			now = bpf_ktime_get_ns();
			off_cpu_back(cur, now);
			if (cur->walked) {
				e = *cur;
				bpf_map_delete_elem(&off_cpu, &key);
				off_cpu_end(key, &e, now);
			}
		}
	}

	tgid = KFIELD(int, prev, kl.task_tgid);
	if (!is_followed(tgid))
		return 0;
	proc = bpf_map_lookup_elem(&procs, &tgid);
	if (!proc)
		return 0;
	key = ((__u64)tgid << 32) | (__u32)KFIELD(int, prev, kl.task_pid);
	if (prev_state & PYPERF_TASK_DEAD) {
		/* Exiting: it does not come back, and a thread that reuses its tid must not inherit its entry. */
		bpf_map_delete_elem(&off_cpu, &key);
		return 0;
	}
	cur = bpf_map_lookup_elem(&off_cpu, &key);
	if (!now)
		now = bpf_ktime_get_ns();
	/* Back on CPU, yet its switch-in was never shown: the tracepoint skips some switches (seen on a VM: never
	 * after its guest agent's threads). It came back when it was last picked to run, its CPU time since then
	 * ago (the scheduler updated both before this tracepoint). A mark made by user space that this puts before
	 * the mark was of a thread that had woken meanwhile: dropped. */
	if (cur && cur->out) {
		__u64 ran = KFIELD(__u64, prev, kl.task_runtime) - KFIELD(__u64, prev, kl.task_runtime_at_pick);
		__u64 in = off_cpu_unseen_in(prev, cur, now, ran);
		__u32 c;

		s = off_cpu_slot(&c);
		if (in <= cur->out && (cur->flags & 1)) {
			if (s)
				s->counters.off_cpu_stale++;
			bpf_map_delete_elem(&off_cpu, &key);
			cur = NULL;
		} else {
			if (s)
				s->counters.off_cpu_in_unseen++;
			off_cpu_back(cur, in > cur->out ? in : cur->out);
			if (cur->walked) {
				e = *cur;
				bpf_map_delete_elem(&off_cpu, &key);
				off_cpu_end(key, &e, in);
				cur = NULL;
			}
		}
	}
	/* Still in the system call whose block began its interval (woken, then switched out again before the
	 * call returned): the interval goes on until sys_exit. */
	blocked = !(__u8)ctx[0] && prev_state != PYPERF_TASK_RUNNING;
	/* orig_ax: the system call the task is in; -1 (or an interrupt's ~vector) outside one. */
	regs = (struct pyperf_pt_regs *)bpf_task_pt_regs(prev);
	if (regs && (long)regs->ax == -PYPERF_ENOSYS)
		nr = (long)regs->orig_ax;
	/* The same wait goes on: still in the call it began in, or returned from it but switched out before its
	 * sys_exit (which ends the interval; dropping the entry here would lose what it counted). A mark made by user
	 * space is continued only while in the call: its thread may have left the call before the mark. */
	if (cur && !cur->walked && cur->syscall >= 0 && regs && (long)regs->orig_ax == cur->syscall &&
	    (nr >= 0 ? cur->uaddr == regs->di : !(cur->flags & 1))) {
		cur->out = now;
		cur->wake = 0;
		cur->out_runnable = !blocked;
		cur->run_delay = off_cpu_run_delay(prev);
		return 0;
	}
	__builtin_memset(&e, 0, sizeof(e));
	e.start = now;
	e.out = now;
	e.out_runnable = !blocked;
	e.run_delay = off_cpu_run_delay(prev);
	e.syscall = -1;
	e.kind = !blocked ? OFF_KIND_RUNNABLE :
		 prev_state & PYPERF_TASK_UNINTERRUPTIBLE ? OFF_KIND_DISK : OFF_KIND_BLOCKED;
	/* In a system call (blocked, or preempted in the kernel, e.g. by the thread its write woke): the interval
	 * ends when the call returns, where its stack is read. */
	if (nr >= 0 && nr < 4096) {
		e.syscall = (__s32)nr;
		e.uaddr = regs->di;
		bpf_map_update_elem(&off_cpu, &key, &e, BPF_ANY);
		if (kernel)
			take_block_kstack(ctx, key, now);
		return 0;
	}
	/* Preempted in user space, or blocked outside a system call (a page fault): it will not pass a tracepoint on
	 * its way back to user space, so its stack is taken now. */
	s = off_cpu_slot(&cpu);
	if (!s)
		return 0;
	if (s->busy) {
		s->counters.off_cpu_busy++;
		return 0;
	}
	s->busy = 1;
	e.walked = 1;
	/* prev is the current task: bpf_get_stack() gives its kernel stack, its pt_regs its user registers. */
	if (native && regs) {
		ur.ip = regs->ip;
		ur.sp = regs->sp;
		ur.bp = regs->bp;
	}
	record_stack(ctx, proc, s, key, cpu, now, &e, 0, native ? &ur : NULL, KSTACK_HERE);
	s->busy = 0;
	bpf_map_update_elem(&off_cpu, &key, &e, BPF_ANY);
	return 0;
}

/* A followed thread that is off CPU is woken: runnable from now on. */
SEC("tp_btf/sched_wakeup")
int pyperf_wakeup(__u64 *ctx)
{
	/* TP_PROTO(struct task_struct *p) */
	struct task_struct *p = (struct task_struct *)ctx[0];
	struct off_cpu_entry *e;
	__u32 tgid = KFIELD(int, p, kl.task_tgid);
	__u64 key;

	if (!is_followed(tgid))
		return 0;
	key = ((__u64)tgid << 32) | (__u32)KFIELD(int, p, kl.task_pid);
	e = bpf_map_lookup_elem(&off_cpu, &key);
	if (e && e->out && !e->wake)
		e->wake = bpf_ktime_get_ns();
	return 0;
}

/* A system call returns: if a followed thread blocked in it, its interval ends, with its stack (the current
 * task's, unchanged since it blocked). Runs on every system call return of the host: one hash lookup for the
 * others. */
SEC("tp_btf/sys_exit")
int pyperf_sys_exit(__u64 *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), now, weight;
	__u32 pid = pid_tgid >> 32, cpu;
	struct off_cpu_entry *e, off;
	struct pyperf_scratch *s;
	struct py_proc *proc;
	struct user_regs ur = {};
	struct pyperf_pt_regs *regs;

	if (!is_followed(pid))
		return 0;
	e = bpf_map_lookup_elem(&off_cpu, &pid_tgid);
	if (!e || e->walked)
		return 0;
	off = *e;
	bpf_map_delete_elem(&off_cpu, &pid_tgid);
	/* TP_PROTO(struct pt_regs *regs, long ret): the interval began in this very call (never one from before). */
	regs = (struct pyperf_pt_regs *)ctx[0];
	if (!regs || (long)regs->orig_ax != off.syscall)
		return 0;
	proc = bpf_map_lookup_elem(&procs, &pid);
	if (!proc)
		return 0;
	now = bpf_ktime_get_ns();
	s = off_cpu_slot(&cpu);
	if (!s)
		return 0;
	/* No switch-in seen since the switch-out. A mark made by user space: its thread had woken meanwhile; how long
	 * it waited is unknown (it may have run since). Dropped, counted. One made here: the tracepoint skipped the
	 * switch-in (see pyperf_switch); the thread came back a moment ago, on its way out of this call. */
	if (off.out) {
		if (off.flags & 1) {
			s->counters.off_cpu_stale++;
			return 0;
		}
		s->counters.off_cpu_in_unseen++;
		/* (Its CPU time since it was picked is not known here: 0, so `now` without run_delay.) */
		off_cpu_back(&off, off_cpu_unseen_in(bpf_get_current_task_btf(), &off, now, 0));
	}
	weight = off_cpu_weight(s, off.off_ns);
	if (!weight)
		return 0;
	if (s->busy) {
		s->counters.off_cpu_busy++;
		return 0;
	}
	s->busy = 1;
	/* The user stack as it was at the block (the thread has not run user code since); the kernel stack of the
	 * block, taken then. */
	if (native) {
		ur.ip = regs->ip;
		ur.sp = regs->sp;
		ur.bp = regs->bp;
	}
	record_stack(ctx, proc, s, pid_tgid, cpu, now, &off, weight, native ? &ur : NULL, KSTACK_BLOCK);
	s->busy = 0;
	return 0;
}
