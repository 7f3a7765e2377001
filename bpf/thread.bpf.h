/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * The sampled thread in its interpreter (part of pyperf.bpf.c, after common.bpf.h): its PyThreadState (cached per
 * thread in tstate_cache, else found in the interpreter's thread list), its tid in its own PID namespace, and the
 * GIL's state, the global current thread state and the pthread id compared with it. What lies below the thread
 * state (its frames) is walk.bpf.h's.
 */

/* pid_tgid -> the thread state found for that thread (struct pyperf_thread_found). Keyed by pid_tgid (not tid
 * alone) so a recycled tid in another process cannot hit a stale entry unnoticed; every hit is validated anyway.
 * The start time catches a tid reused inside the process: the dead thread's freed thread state may still hold the
 * same tid and pthread id (glibc reuses the thread block), and would pass the validation with stale frames. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pyperf_thread_found);
} tstate_cache SEC(".maps");

/* Is the PyThreadState block in s->tbuf the one of the sampled thread? */
static __always_inline bool tstate_is_ours(const struct py_proc *proc,
					   const struct pyperf_scratch *s,
					   __u32 tid, __u64 fsbase)
{
	if (proc->off.match_kind == MATCH_PTHREAD)
		return fsbase &&
		       get_u64(s->tbuf, proc->off.tstate_thread_id, PYPERF_TSTATE_BUF) == fsbase;
	return get_u64(s->tbuf, proc->off.tstate_native_thread_id, PYPERF_TSTATE_BUF) == tid;
}

/* 3.13+: is the thread state in s->tbuf attached (current on its thread, holding its interpreter's GIL)? At most
 * one thread state of an OS thread is. */
static __always_inline bool tstate_attached(const struct py_proc *proc, const struct pyperf_scratch *s)
{
	return get_s32(s->tbuf, proc->off.tstate_state, PYPERF_TSTATE_BUF) == proc->off.state_attached;
}

/*
 * A thread state found earlier for this thread (its block in s->tbuf, checked to be the thread's): is it still
 * the one the thread runs? Always where subinterpreters are not handled (interps_addr 0: the first found stays,
 * as it did). 3.13+: yes if attached (only the running one can be); if not (the GIL released, or swapped out by
 * Interpreter.exec, which look the same), yes only while the process has one interpreter (head == main: one
 * 16-byte read), else the lists are walked again. Before 3.13 (no state to read) only while it has one
 * interpreter: with more, another interpreter's thread state may claim this thread (3.12's run_string runs an
 * interpreter's first thread state, bound to the thread that created it, on any thread).
 */
static __always_inline bool tstate_still_runs(const struct py_proc *proc, struct pyperf_scratch *s)
{
	if (!proc->interps_addr)
		return true;
	if (proc->off.tstate_state >= 0 && tstate_attached(proc, s))
		return true;
	/* Into the GIL block's buffer, which pyperf_gil_state fills later (the stack is full). */
	if (bpf_probe_read_user(s->gbuf, 16, (const void *)proc->interps_addr))
		return false;
	return *(__u64 *)s->gbuf == *(__u64 *)(s->gbuf + 8);
}

/* Plain data: see struct frame_walk. The walk goes through every interpreter's thread list, newest interpreter
 * first (_PyRuntime.interpreters.head, then each `next`), and keeps the sampled thread's thread states. */
struct thread_walk {
	__u64 cur;      /* thread state to read next; 0: the list of `interp` ended */
	__u64 interp;   /* whose list is walked */
	__u64 fsbase;
	__u32 tid;
	__u32 n;        /* matches so far, kept in s->found (more than PYPERF_THREAD_MATCHES: counted only) */
	__s8 attached;  /* index of the attached match, -1 none */
	__s8 exec;      /* index of the match made by Interpreter.exec, -1 none, -2 several */
	__u8 multi;     /* every match is wanted (else the first ends the walk): where interpreters are walked */
	__u8 err;
	__u8 across;    /* the matches are in more than one interpreter */
	__u64 first_interp; /* the interpreter of the first match */
};

struct thread_walk_ctx {
	const struct py_proc *proc;
	struct pyperf_scratch *s;
	struct thread_walk w;
};

/* One thread state of the interpreters' lists (or the step to the next interpreter): 0 = go on, 1 = stop.
 * Global: verified once (see pyperf_walk_frame). */
__noinline int pyperf_thread_step(struct thread_walk *w, const struct py_proc *proc, struct pyperf_scratch *s)
{
	__u64 next;
	__u32 k;

	if (!w || !proc || !s)
		return 1;
	if (!w->cur) {
		/* This interpreter's list ended: the next (older) interpreter's, if any. */
		if (!w->interp)
			return 1;
		if (read_ptr(w->interp + proc->off.interp_next, &next)) {
			w->err = 1;
			return 1;
		}
		w->interp = next;
		if (!next)
			return 1;
		if (read_ptr(w->interp + proc->off.interp_tstate_head, &w->cur)) {
			w->err = 1;
			return 1;
		}
		return 0;
	}
	if (read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, w->cur)) {
		w->err = 1;
		return 1;
	}
	if (tstate_is_ours(proc, s, w->tid, w->fsbase)) {
		k = w->n;
		if (!k)
			w->first_interp = w->interp;
		else if (w->interp != w->first_interp)
			w->across = 1;
		if (k < PYPERF_THREAD_MATCHES) {
			s->found[k & (PYPERF_THREAD_MATCHES - 1)] = w->cur;
			if (w->multi && proc->off.tstate_state >= 0 && tstate_attached(proc, s))
				w->attached = (__s8)k;
			if (w->multi && proc->off.tstate_whence >= 0 &&
			    get_s32(s->tbuf, proc->off.tstate_whence, PYPERF_TSTATE_BUF) == proc->off.whence_exec)
				w->exec = w->exec == -1 ? (__s8)k : -2;
		}
		w->n++;
		if (!w->multi)
			return 1;
	}
	w->cur = get_u64(s->tbuf, proc->off.tstate_next, PYPERF_TSTATE_BUF);
	return 0;
}

static long thread_walk_step(__u32 i, void *arg)
{
	struct thread_walk_ctx *c = arg;

	return pyperf_thread_step(&c->w, c->proc, c->s) ? 1 : 0;
}

/* PyInterpreterState.id of the interpreter of the thread state at `ts` (its `interp`), -1 unknown. */
static __always_inline __s64 interp_id_of(const struct py_proc *proc, __u64 ts)
{
	__u64 interp, id;

	if (!ts || proc->off.interp_id < 0 || read_ptr(ts + proc->off.tstate_interp, &interp) || !interp ||
	    read_ptr(interp + proc->off.interp_id, &id))
		return -1;
	return (__s64)id;
}

/*
 * Returns the PyThreadState address the sampled thread runs (its first tstate_size bytes are then in s->tbuf), or
 * 0; s->last says what else was found with it (interpreter ids, the calling interpreter's thread state) and
 * s->interp_flags how (enum pyperf_interp_flags). `tid` is the thread's id as the interpreter knows it (in its own
 * PID namespace); pid_tgid, the host's, keys the caches.
 *
 * A thread that entered a subinterpreter through Interpreter.exec (3.13+) has a thread state in each interpreter
 * (the same tid): the one it runs is attached, or, with the GIL released, made by exec; the other, swapped out, is
 * the calling interpreter's, whose frames the record appends (record_stack). More than two: none appended.
 */
static __noinline __u64 walk_threads(const struct py_proc *proc, struct pyperf_scratch *s, __u32 tid, __u64 fsbase);

static __always_inline __u64 find_tstate(const struct py_proc *proc,
					 struct pyperf_scratch *s, __u64 pid_tgid,
					 __u32 tid, __u64 fsbase, __u64 start)
{
	struct pyperf_thread_found *cached, *f = &s->last;
	__u64 ts;

	/* The thread of this CPU's previous sample: no hash lookup. */
	if (s->last_pid_tgid == pid_tgid && f->start == start && f->ts &&
	    !read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, f->ts) &&
	    tstate_is_ours(proc, s, tid, fsbase) && tstate_still_runs(proc, s)) {
		s->interp_flags = f->flags;
		return f->ts;
	}
	s->last_pid_tgid = pid_tgid;
	f->ts = 0;
	f->start = start;
	f->interp_id = -1;
	f->outer_interp_id = -1;
	f->outer = 0;
	f->flags = 0;
	s->interp_flags = 0;

	cached = bpf_map_lookup_elem(&tstate_cache, &pid_tgid);
	if (cached && cached->start == start) {
		ts = cached->ts;

		/* Validation is the read we need anyway. */
		if (ts && !read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, ts) &&
		    tstate_is_ours(proc, s, tid, fsbase) && tstate_still_runs(proc, s)) {
			f->interp_id = cached->interp_id;
			f->outer_interp_id = cached->outer_interp_id;
			f->outer = cached->outer;
			f->flags = cached->flags;
			f->ts = ts;
			s->interp_flags = f->flags;
			return ts;
		}
	}
	ts = walk_threads(proc, s, tid, fsbase);
	if (ts) {
		bpf_map_update_elem(&tstate_cache, &pid_tgid, f, BPF_ANY);
		return ts;
	}
	if (cached)
		bpf_map_delete_elem(&tstate_cache, &pid_tgid);
	return 0;
}

/* find_tstate's cache miss: the walk of the interpreters' thread lists, and the choice among the thread's thread
 * states (s->last, s->interp_flags; its block in s->tbuf). A subprogram of its own (static: its pointers keep their
 * types): the walk's context stays off the callers' stack frames, which are full. */
static __noinline __u64 walk_threads(const struct py_proc *proc, struct pyperf_scratch *s, __u32 tid, __u64 fsbase)
{
	struct pyperf_thread_found *f;
	struct thread_walk_ctx c = {};
	struct thread_walk *w = &c.w;
	__u64 head = 0, ts;
	__u32 pick = 0;

	if (!proc || !s)
		return 0;
	f = &s->last;
	s->counters.thread_walks++;
	if (read_ptr(proc->interp_head_addr, &w->interp) || !w->interp) {
		/* Not initialised yet (or finalising): no thread state. */
		return 0;
	}
	if (proc->off.interp_tstate_head < 0 ||
	    read_ptr(w->interp + proc->off.interp_tstate_head, &head)) {
		s->counters.read_errors++;
		return 0;
	}

	c.proc = proc;
	c.s = s;
	w->cur = head;
	w->tid = tid;
	w->fsbase = fsbase;
	w->attached = -1;
	w->exec = -1;
	/* Every match, wherever interpreters are walked: two thread states claiming the thread and nothing to tell which
	 * runs (before 3.13: no state, no whence) is ambiguous below, never a guess. */
	w->multi = proc->interps_addr != 0;
	bpf_loop(PYPERF_MAX_THREADS, thread_walk_step, &c, 0);
	if (w->err)
		s->counters.read_errors++;
	if ((w->cur || w->interp) && !w->err && (!w->n || w->multi))
		s->counters.thread_walk_bound++;
	if (!w->n)
		return 0;
	/* Before 3.13 (no state to tell which runs), several in one interpreter (a thread state a thread left behind,
	 * whose thread id was reused; before 3.12 a new thread's state preallocated by its parent until the new thread
	 * binds it): the first found, newest first, as before every interpreter was walked; nothing to stitch. Only
	 * thread states of several interpreters are ambiguous there. */
	if (w->n > 1 && !w->across && proc->off.tstate_state < 0)
		w->n = 1;
	if (w->n > 1) {
		/* The thread runs one of them; the others wait for calls into other interpreters to return. */
		f->flags = PYPERF_INTERP_NESTED;
		if (w->attached >= 0) {
			pick = w->attached;
		} else if (w->exec >= 0) {
			pick = w->exec;
		} else {
			s->interp_flags = PYPERF_INTERP_NESTED | PYPERF_INTERP_AMBIGUOUS;
			s->counters.interp_ambiguous++;
			f->flags = 0;
			return 0;
		}
		if (w->n == 2) {
			f->outer = s->found[(pick ^ 1) & 1];
			f->outer_interp_id = interp_id_of(proc, f->outer);
		}
	}
	pick &= PYPERF_THREAD_MATCHES - 1;
	ts = s->found[pick];
	f->interp_id = interp_id_of(proc, ts);
	/* The caller wants the block of the thread state it runs in s->tbuf: the walk's last read may be another's. */
	if (read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, ts)) {
		s->counters.read_errors++;
		f->flags = 0;
		f->outer = 0;
		return 0;
	}
	f->ts = ts;
	s->interp_flags = f->flags;
	return ts;
}

/*
 * The thread's id in its own PID namespace (what gettid() returned to the interpreter, so what
 * PyThreadState.native_thread_id holds): numbers[level] of the task's struct pid. Two kernel reads;
 * only for processes in another namespace than pyperf (py_proc.ns_tid). 0 if unreadable.
 */
static __always_inline __u32 namespace_tid(struct task_struct *task)
{
	void *pid = KFIELD(void *, task, kl.task_thread_pid);
	unsigned int level;
	int nr = 0;

	if (!pid)
		return 0;
	level = KFIELD(unsigned int, pid, kl.pid_level);
	if (level > 32) /* the kernel's MAX_PID_NS_LEVEL */
		return 0;
	/* numbers[level]: a variable offset, which a BTF pointer does not take; a checked read instead. */
	if (bpf_probe_read_kernel(&nr, sizeof(nr), pid + kl.pid_numbers + level * kl.upid_size + kl.upid_nr))
		return 0;
	return (__u32)nr;
}

static __always_inline __u8 thread_state_match(__u64 this_ts, __u64 global_ts)
{
	if (!this_ts && !global_ts)
		return THREAD_STATE_BOTH_NULL;
	if (!this_ts)
		return THREAD_STATE_THIS_THREAD_NULL;
	if (!global_ts)
		return THREAD_STATE_GLOBAL_CURRENT_THREAD_NULL;
	return this_ts == global_ts ? THREAD_STATE_MATCH : THREAD_STATE_MISMATCH;
}

/*
 * Reads the GIL block (and with it, when user space could place it there,
 * the global current thread state; else that costs a read of its own).
 * Sets *global_ts (0 if unknown or none) and returns the gil_state.
 *
 * Per version (see enum pyperf_gil_kind):
 *  - 2.7 (GIL_KIND_LOCK_PTR): the GIL is the plain lock `interpreter_lock`,
 *    created with the first thread; its holder is _PyThreadState_Current,
 *    which PyEval_SaveThread clears before releasing the lock.
 *  - 3.6 (statics gil_locked / gil_last_holder), 3.7-3.11 (_PyRuntime.ceval.gil),
 *    3.12+ (interp->ceval.gil, per interpreter): struct _gil_runtime_state.
 *  - 3.12+: global_ts is the GIL holder (see py_offsets.global_from_gil).
 */
__noinline int pyperf_gil_state(const struct py_proc *proc, struct pyperf_scratch *s, __u64 this_ts,
				__u64 *global_ts, __u64 *wait_base)
{
	__u64 gil, holder;
	__s32 locked;

	/* Global (verified once, see pyperf_walk_frame): its pointers may be NULL to the verifier. */
	if (!proc || !s || !global_ts || !wait_base)
		return GIL_STATE_ERROR;
	gil = proc->gil_addr;
	*global_ts = 0;
	*wait_base = 0;
	if (proc->off.gil_kind == GIL_KIND_NONE)
		goto no_gil;
	if (!gil && proc->off.interp_gil_ptr >= 0) {
		/* 3.12+: per-interpreter pointer, interp = tstate->interp, or the
		 * main interpreter for a thread without a thread state. */
		__u64 interp = 0;

		if (this_ts)
			interp = get_u64(s->tbuf, proc->off.tstate_interp, PYPERF_TSTATE_BUF);
		else if (read_ptr(proc->interp_head_addr, &interp) || !interp)
			return GIL_STATE_NO_INFO;
		if (!interp || read_ptr(interp + proc->off.interp_gil_ptr, &gil)) {
			s->counters.read_errors++;
			return GIL_STATE_ERROR;
		}
		if (!gil)
			return GIL_STATE_UNINITIALIZED;
		*wait_base = gil;
	}
	if (!gil || read_user(s->gbuf, proc->off.gil_size, PYPERF_GIL_BUF, gil)) {
		s->counters.read_errors++;
		gil = 0;
	}
no_gil:
	if (proc->tstate_current_addr) {
		if (gil && proc->off.gil_tstate_current >= 0)
			*global_ts = get_u64(s->gbuf, proc->off.gil_tstate_current, PYPERF_GIL_BUF);
		else if (read_ptr(proc->tstate_current_addr, global_ts))
			s->counters.read_errors++;
	}
	if (proc->off.gil_kind == GIL_KIND_NONE)
		return GIL_STATE_NO_INFO;
	if (!gil)
		return GIL_STATE_ERROR;
	if (proc->off.gil_kind == GIL_KIND_LOCK_PTR) {
		/* 2.7: no lock yet = single-threaded so far, like 3.6's locked == -1. */
		*wait_base = get_u64(s->gbuf, proc->off.gil_locked, PYPERF_GIL_BUF);
		if (!*wait_base)
			return GIL_STATE_UNINITIALIZED;
		if (!*global_ts)
			return GIL_STATE_NOT_LOCKED;
		return *global_ts == this_ts ? GIL_STATE_THIS_THREAD : GIL_STATE_GLOBAL_CURRENT_THREAD;
	}
	locked = get_s32(s->gbuf, proc->off.gil_locked, PYPERF_GIL_BUF);
	switch (locked) {
	case -1:
		return GIL_STATE_UNINITIALIZED;
	case 0:
		return GIL_STATE_NOT_LOCKED;
	case 1:
		if (proc->gil_holder_addr) {
			if (read_ptr(proc->gil_holder_addr, &holder)) {
				s->counters.read_errors++;
				return GIL_STATE_ERROR;
			}
		} else {
			holder = get_u64(s->gbuf, proc->off.gil_last_holder, PYPERF_GIL_BUF);
		}
		if (proc->off.global_from_gil)
			*global_ts = holder;
		if (!holder)
			return GIL_STATE_NULL;
		if (holder == this_ts)
			return GIL_STATE_THIS_THREAD;
		if (holder == *global_ts)
			return GIL_STATE_GLOBAL_CURRENT_THREAD;
		return GIL_STATE_OTHER_THREAD;
	default:
		return GIL_STATE_ERROR;
	}
}

static __always_inline __u8 pthread_id_match(const struct py_proc *proc,
					     const struct pyperf_scratch *s,
					     __u64 this_ts, __u64 fsbase)
{
	__u64 created;

	if (!this_ts)
		return PTHREAD_ID_THREAD_STATE_NULL;
	if (proc->off.tstate_thread_id < 0)
		return PTHREAD_ID_UNKNOWN;
	created = get_u64(s->tbuf, proc->off.tstate_thread_id, PYPERF_TSTATE_BUF);
	if (!created)
		return PTHREAD_ID_NULL;
	if (!fsbase)
		return PTHREAD_ID_ERROR;
	return created == fsbase ? PTHREAD_ID_MATCH : PTHREAD_ID_MISMATCH;
}
