/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * One record (part of pyperf.bpf.c, after the parts it assembles): record_stack writes a sample or an off-CPU
 * interval's record from the thread state and GIL (thread.bpf.h), the frames (walk.bpf.h), the kernel and user
 * stacks (kernel.bpf.h, native.bpf.h) and, for a new stack, the code object snapshots (code.bpf.h), and decides
 * whether the ring's reader is woken (also for a task it may not know yet, tasks.bpf.h). The programs that call
 * it: pyperf_sample (pyperf.bpf.c), the off-CPU ones (offcpu.bpf.h).
 */

/* The leaf frame of the thread state in s->tbuf: tstate->frame / ->current_frame, or tstate->cframe->current_frame. */
static __always_inline __u64 leaf_frame(const struct py_proc *proc, struct pyperf_scratch *s)
{
	__u64 frame = 0, cframe;

	if (proc->off.tstate_frame >= 0)
		return get_u64(s->tbuf, proc->off.tstate_frame, PYPERF_TSTATE_BUF);
	cframe = get_u64(s->tbuf, proc->off.tstate_cframe, PYPERF_TSTATE_BUF);
	if (cframe && proc->off.cframe_current_frame >= 0 && read_ptr(cframe + proc->off.cframe_current_frame, &frame))
		s->counters.read_errors++;
	return frame;
}

/*
 * PYPERF_INTERP_STITCHED: after the frames of the thread state the thread runs (c->w, a whole walk), the frames of
 * its thread state in the interpreter that called Interpreter.exec (`outer`, swapped out: its frames cannot change
 * while the thread is here, in this program). Only when that thread state is still the thread's and not attached,
 * and its walk is whole (reached its base frame on 3.15+, the root elsewhere) and fits: else the record keeps the
 * running interpreter's frames alone (counted in interp_unstitched). Returns 1 stitched, 2 nothing to stitch (the
 * calling thread state has no frame), 0 not stitched. Inlined: its context holds pointers, which a
 * global function's argument memory cannot.
 */
static __always_inline int walk_outer(struct walk_ctx *c, __u64 outer, __u32 tid, __u64 fsbase)
{
	const struct py_proc *proc;
	struct pyperf_scratch *s;
	__u32 split;

	if (!c || !c->proc || !c->s)
		return 0;
	proc = c->proc;
	s = c->s;
	split = c->w->n;
	if (!outer || split >= PYPERF_MAX_FRAMES || c->w->status != STACK_STATUS_COMPLETE ||
	    read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, outer) || !tstate_is_ours(proc, s, tid, fsbase) ||
	    tstate_attached(proc, s))
		return 0;
	c->w->cur = leaf_frame(proc, s);
	if (!c->w->cur)
		return 2; /* no frames to add (its thread's start, or the process's end) */
	c->w->base = proc->off.tstate_base_frame >= 0 ? get_u64(s->tbuf, proc->off.tstate_base_frame, PYPERF_TSTATE_BUF) : 0;
	c->w->chunk = proc->off.tstate_datastack_chunk >= 0 ?
		get_u64(s->tbuf, proc->off.tstate_datastack_chunk, PYPERF_TSTATE_BUF) : 0;
	c->w->chunk_prev = 0;
	c->w->wlo = 0;
	c->w->whi = 0;
	/* Check words read, not cached: the cache's count is the main interpreter's thread's sample's. */
	c->w->tag = 0;
	c->w->fast = 0;
	c->w->last_code = 0;
	c->w->reached_base = 0;
	bpf_loop(PYPERF_MAX_WALK, frame_walk_step, c, 0);
	end_run(c->w, s);
	if (c->w->status == STACK_STATUS_COMPLETE && (c->w->base ? c->w->reached_base : !c->w->cur) && c->w->n > split)
		return 1;
	/* Not whole: the running interpreter's frames alone. */
	c->w->n = split;
	c->w->status = STACK_STATUS_COMPLETE;
	return 0;
}

/*
 * Walks the current thread's Python stack and writes one record to the ring buffer: a CPU sample (off == NULL)
 * or the off-CPU interval `off` that the thread ends by coming back on CPU now (its stack cannot have changed
 * while it was off CPU). `weight`: what the record counts for, an interval's ns or a sample's sampling periods
 * (pyperf_event_header.periods). `s` is the CPU's scratch slot of that kind. `ctx`: the program's (for bpf_get_stack);
 * `ur`: the thread's user registers with record --native (NULL: none); `ksrc`: enum kstack_source, with
 * record --kernel.
 */
static __always_inline void record_stack(void *ctx, struct py_proc *proc, struct pyperf_scratch *s, __u64 pid_tgid,
					 __u32 cpu, __u64 now, const struct off_cpu_entry *off, __u64 weight,
					 const struct user_regs *ur, int ksrc)
{
	__u32 pid = pid_tgid >> 32, n, tid;
	struct pyperf_event_header *h;
	struct task_struct *task;
	__u64 fsbase = 0, ts, global_ts = 0, frame = 0, size, flags, wait_base = 0, lo;
	__u32 gen_owner, track, split;
	int stitched;
	struct walk_ctx c = {};
	int gil_state;

	h = &s->ev.hdr;
	c.w = &s->walk;
	__builtin_memset(c.w, 0, sizeof(*c.w));
	h->ktime = now;
	PROF_START(h->ktime);
	h->pid = pid;
	h->tid = (__u32)pid_tgid;
	h->cpu = cpu;
	h->nframes = 0;
	bpf_get_current_comm(h->comm, sizeof(h->comm));
	h->kind = !off ? PYPERF_EVENT_SAMPLE : off->walked ? PYPERF_EVENT_OFF_CPU_START : PYPERF_EVENT_OFF_CPU;
	h->off_kind = 0;
	h->off_flags = 0;
	h->has_locals = 0;
	h->off_start = 0;
	h->off_duration = 0;
	h->off_runnable = 0;
	h->off_weight = 0;
	h->off_syscall = -1;
	h->periods = off ? 0 : (__u32)weight;
	h->nkernel = 0;
	h->user_flags = 0;
	h->ustack_len = 0;
	h->user_ip = 0;
	h->user_sp = 0;
	h->user_bp = 0;
	__builtin_memset(h->coro_frame, 0, sizeof(h->coro_frame));
	__builtin_memset(h->coro_index, 0, sizeof(h->coro_index));
	h->ncoro = 0;
	h->in_gc = 0;
	h->interp_flags = 0;
	h->interp_id = -1;
	h->outer_interp_id = -1;
	h->outer_start = 0;

	task = bpf_get_current_task_btf();
	/* pthread_self() on glibc x86-64 is the thread pointer = fs base. */
#if defined(__TARGET_ARCH_x86)
	fsbase = KFIELD(unsigned long, task, kl.task_fsbase);
#endif
	/* In another PID namespace the interpreter knows its threads by that namespace's tids. */
	tid = proc->ns_tid ? namespace_tid(task) : (__u32)pid_tgid;

	PROF(0); /* header, comm, task */
	/* A namespace tid that could not be read must not match a thread state whose tid is still 0. */
	ts = tid ? find_tstate(proc, s, pid_tgid, tid, fsbase, KFIELD(__u64, task, kl.task_start_time)) : 0;
	PROF(1); /* thread state (cache + read) */
	if (ts) {
		h->interp_flags = (__u8)s->interp_flags;
		h->interp_id = s->last.interp_id;
	} else if (tid) {
		/* Fresh from find_tstate's miss: only AMBIGUOUS (with NESTED) can be set. */
		h->interp_flags = (__u8)s->interp_flags;
	}

	gil_state = pyperf_gil_state(proc, s, ts, &global_ts, &wait_base);
	h->gil_state = gil_state;
	h->thread_state_match = proc->tstate_current_addr || proc->off.global_from_gil ?
		thread_state_match(ts, global_ts) : THREAD_STATE_UNKNOWN;
	h->pthread_id_match = pthread_id_match(proc, s, ts, fsbase);
	/* 3.15+: a thread that asked for the GIL and does not hold it is waiting for it. */
	if (ts && proc->off.tstate_gil_requested >= 0 && h->gil_state != GIL_STATE_THIS_THREAD &&
	    get_s32(s->tbuf, proc->off.tstate_gil_requested, PYPERF_TSTATE_BUF))
		h->gil_state = GIL_STATE_WAITING;
	if (off) {
		h->off_kind = off->kind;
		h->off_flags = off->flags;
		h->off_start = off->start;
		h->off_duration = off->off_ns;
		h->off_runnable = off->runnable_ns;
		h->off_weight = weight;
		h->off_syscall = off->syscall;
		/* Blocked in futex(2) on the GIL's condition variable or mutex: waiting for the GIL. */
		lo = proc->gil_wait_addr ? proc->gil_wait_addr : wait_base;
		if (off->syscall == PYPERF_NR_FUTEX && lo && proc->gil_wait_len && off->uaddr >= lo &&
		    off->uaddr - lo < proc->gil_wait_len)
			h->off_kind = OFF_KIND_GIL;
		if (h->gil_state == GIL_STATE_WAITING && off->kind != OFF_KIND_RUNNABLE)
			h->off_kind = OFF_KIND_GIL;
		if (h->off_kind == OFF_KIND_GIL)
			h->gil_state = GIL_STATE_WAITING;
	}
	h->in_gc = thread_in_gc(proc, s, ts, h->gil_state);
	s->counters.in_gc += h->in_gc;
	read_trace(proc, s, pid, ts, h);
	PROF(2); /* GIL block, states */

	/* Leaf frame: tstate->frame / ->current_frame, or tstate->cframe->current_frame. */
	if (ts)
		frame = leaf_frame(proc, s);

	PROF(3); /* leaf frame pointer */
	c.w->status = STACK_STATUS_COMPLETE;
	if (h->interp_flags & PYPERF_INTERP_AMBIGUOUS)
		c.w->status = STACK_STATUS_ERROR; /* which thread state runs is not known: no frames, never a guess */
	c.proc = proc;
	c.s = s;
	/* Run roots: the generator owner value when tracked, else 256, which no frame's u8 owner equals.
	 * Without a branch (a mask of all ones when tracked), so the verifier does not follow the rest twice. */
	gen_owner = (__u16)proc->off.owner_generator;
	track = ((gen_owner >> 15) ^ 1) & (proc->track_tasks != 0);
	track = -track;
	barrier_var(track);
	c.w->gen_owner = (gen_owner & 0xff & track) | (256 & ~track);
	if (frame) {
		c.w->cur = frame;
		/* 3.12+: wait_base is the GIL block read (interp->ceval.gil). */
		c.w->tag = check_tag(proc, s, ts, proc->off.interp_gil_ptr >= 0 ? wait_base : 0, gil_state);
		if (proc->off.tstate_base_frame >= 0)
			c.w->base = get_u64(s->tbuf, proc->off.tstate_base_frame, PYPERF_TSTATE_BUF);
		if (proc->off.tstate_datastack_chunk >= 0)
			c.w->chunk = get_u64(s->tbuf, proc->off.tstate_datastack_chunk, PYPERF_TSTATE_BUF);
		/* 3.11+ with the cache: frames the fast way (pyperf_walk_fast), which needs no first local. */
		c.w->fast = proc->frame_window && c.w->tag && proc->off.instr_kind == INSTR_PTR_MINUS_CODE &&
			   proc->off.frame_localsplus < 0;
		bpf_loop(PYPERF_MAX_WALK, frame_walk_step, &c, 0);
		end_run(c.w, s); /* the end of the walk ends a run */
		if (c.w->status == STACK_STATUS_COMPLETE && c.w->cur && !c.w->reached_base)
			c.w->status = STACK_STATUS_TRUNCATED; /* bpf_loop bound (many skipped shims) */
		if (c.w->reached_base)
			s->counters.base_reached++;
		if (c.w->status == STACK_STATUS_COMPLETE && c.w->base && !c.w->reached_base) {
			/* Ended on a NULL link above the base frame: a torn or unfinished chain. */
			c.w->status = STACK_STATUS_INCOMPLETE;
			s->counters.incomplete++;
		}
	}
	/* A thread in an interpreter it entered from another: that one's frames follow, rootward (also below no
	 * frame of this one: a thread creating an interpreter runs its start-up there). */
	if (ts && (h->interp_flags & PYPERF_INTERP_NESTED)) {
		s->counters.interp_nested++;
		split = c.w->n;
		stitched = walk_outer(&c, s->last.outer, tid, fsbase);
		if (stitched == 1) {
			h->interp_flags |= PYPERF_INTERP_STITCHED;
			h->outer_start = split;
			h->outer_interp_id = s->last.outer_interp_id;
		} else if (!stitched) {
			s->counters.interp_unstitched++;
		} else {
			/* No calling frames: no boundary to mark. */
			h->interp_flags &= ~PYPERF_INTERP_NESTED;
		}
	}
	h->ncoro = c.w->nruns < 256 ? c.w->nruns : 252 + (c.w->nruns & (PYPERF_TASK_ROOTS - 1));
	PROF(4); /* frame walk */
	n = c.w->n;
	if (n > PYPERF_MAX_FRAMES)
		n = PYPERF_MAX_FRAMES;
	if (c.w->status == STACK_STATUS_TRUNCATED)
		s->counters.truncated++;
	if (c.w->status == STACK_STATUS_COMPLETE && n == 0) {
		c.w->status = STACK_STATUS_IDLE;
		s->counters.idle++;
	}
	h->nframes = n;
	h->stack_status = c.w->status;

	size = sizeof(struct pyperf_event_header) + (__u64)n * sizeof(struct pyperf_frame);
	/* <= 3.10: the frames' first locals next (one copy; 3.11+ records have none). */
	if (n && proc && proc->off.frame_localsplus >= 0 && size <= PYPERF_LOFF_MAX &&
	    !bpf_probe_read_kernel((__u8 *)&s->ev + size, n * sizeof(struct pyperf_frame_local), s->locals)) {
		h->has_locals = 1;
		size += n * sizeof(struct pyperf_frame_local);
	}
	/* The rest of the record right after the frames: kernel addresses, then user stack. (Constants: the verifier
	 * drops this code when they are off.) */
	if (kernel && ksrc != KSTACK_NONE)
		size = add_kernel_stack(ctx, s, size, ksrc, pid_tgid, off);
	if (native && ur)
		size = add_user_stack(s, task, fsbase, ur, size);
	/* A stack never seen: wake user space now (PYPERF_WAKEUP_NS), rate-limited per CPU (a suppressed one
	 * wakes it at the next sample past the limit). */
	if (n) {
		__u64 key = c.w->hash ^ ((__u64)pid * 0xff51afd7ed558ccdULL);

		if (!bpf_map_lookup_elem(&seen_stacks, &key)) {
			__u8 one = 1;
			struct snap_ctx sc = { .proc = proc, .s = s };

			bpf_map_update_elem(&seen_stacks, &key, &one, BPF_ANY);
			/* Its code objects user space may not have: their snapshots go first. Then user space need not
			 * hurry (a wakeup is an interrupt on this CPU): only without snapshots is it woken now. */
			if (proc->off.snap_code_size)
				bpf_loop(n, snap_step, &sc, 0);
			else
				s->new_stack = 1;
		}
	}
	/* A task's record: user space names the task only if it reads it before the task ends. */
	if (h->ncoro && !s->new_stack && h->ktime - s->last_wakeup >= PYPERF_WAKEUP_NS && task_sample(proc, s, pid, n)) {
		s->new_stack = 1;
		s->counters.task_wakeups++;
	}
	flags = BPF_RB_NO_WAKEUP;
	if (!wakeup_bytes ||
	    ((!consumer_polling || s->new_stack) && h->ktime - s->last_wakeup >= PYPERF_WAKEUP_NS) ||
	    bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes) {
		/* Forced: an adaptive wakeup (0) is not delivered after records that
		 * were written with NO_WAKEUP, so the consumer would sleep until its
		 * poll timeout (tests/faults.rs measured 74% loss on a small ring). */
		flags = BPF_RB_FORCE_WAKEUP;
		s->last_wakeup = h->ktime;
		s->new_stack = 0;
	}
	if (bpf_ringbuf_output(&events, &s->ev, size, flags)) {
		if (off)
			s->counters.off_cpu_rb_full++;
		else
			/* As the samples it stood for (a late one stands for several): the file's samples plus
			 * these are the periods sampled. */
			s->counters.rb_full += h->periods;
	} else {
		if (off)
			s->counters.off_cpu_events++;
		else
			s->counters.events++;
	}
	PROF(5); /* ring buffer output */
}
