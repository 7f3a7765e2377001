// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only)
/*
 * pyperf sampler: a perf_event program, run on every sample of every CPU.
 *
 * For a sample of a registered Python process it finds the thread's
 * PyThreadState, classifies thread state / GIL / pthread id, walks the Python
 * frames leaf -> root and emits one variable-size record to a ring buffer:
 * {header, nframes x {code object address, raw instruction position, checksum}}, then with record --kernel the
 * kernel stack (bpf_get_stack) and with record --native the user registers (in the header) and a copy of the
 * user stack from sp up, which the recorder unwinds with the binaries' CFI (the perf --call-graph dwarf way).
 * Names, files and lines are resolved later in user space from the code
 * object's address (read once per code object through /proc/PID/mem).
 *
 * Everything version-specific comes from user space (struct py_proc, filled
 * from the version's row in record/python/), so supporting another CPython
 * version is a matter of offsets, not of code here.
 *
 * Cost notes (this runs on every sample, on every CPU):
 *  - the cheapest path comes first: samples of untracked processes cost one
 *    hash lookup and return;
 *  - reads of the target's memory are the expensive part (each
 *    bpf_probe_read_user is a helper call + a user copy with fault handling),
 *    so each struct is read ONCE as a block of the bytes needed (PyThreadState
 *    prefix, frame prefix, gil state) and fields are picked from the copy;
 *    a cached thread state costs 1 read, each frame costs 2 (frame block +
 *    the code object's checksum word, skipped when the code object is the
 *    previous frame's: recursion), and on 3.11+ the frame blocks come by
 *    windows of several frames (PYPERF_FRAME_WINDOW): ~1 read per frame;
 *  - on 3.7-3.11 the GIL state and the global current thread state are
 *    read as one block of _PyRuntime;
 *  - the thread pointer comes from a direct load of the BTF task pointer, not
 *    a helper call;
 *  - the thread state is cached per thread (LRU, and the CPU's previous
 *    thread before that), validated by the read that is needed anyway; the
 *    thread list is walked only on a miss, bounded;
 *  - scratch memory and counters share one per-CPU slot: one lookup;
 *  - the event is copied to the ring buffer with its used size only, and
 *    without a wakeup unless its stack is new, user space sleeps or the ring
 *    is filling up (see PYPERF_WAKEUP_NS): a wakeup costs the sampled CPU an
 *    irq_work (a self-IPI, a VM exit in a VM).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "pyperf.h"

/* bpf_probe_read_user and bpf_get_current_task_btf are GPL-only helpers. */
char LICENSE[] SEC("license") = "GPL";

/*
 * Kernel fields: where they lie depends on the kernel's version and configuration. User space finds their offsets
 * in the running kernel's BTF and sets `kl` before load (struct pyperf_kernel_layout). No CO-RE relocation: libbpf
 * would parse the kernel's whole BTF for them at every start (~15 ms). The access stays as safe: the base pointer
 * is a BTF one (bpf_get_current_task_btf(), a tp_btf argument), the offset a constant of frozen .rodata, so the
 * verifier checks each load against the kernel's own type at that offset, as it checks a relocated field.
 */
const volatile struct pyperf_kernel_layout kl = {};

/* The field of kernel object `obj` (a BTF pointer) at offset `off` (a member of kl), read as `type`. */
#define KFIELD(type, obj, off) (*(type *)((void *)(obj) + (off)))

/* The user registers a task saved on kernel entry: which system call it is in and its first argument, and (record
 * --native) where it was in user space. x86-64's struct pt_regs, whose layout the kernel's entry code and the
 * user ABI fix (so no relocation either); a perf_event program's context starts with one (struct
 * bpf_perf_event_data: `regs`). */
struct pyperf_pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

/* The user registers a record carries (record --native); sp 0 = unknown. */
struct user_regs {
	__u64 ip, sp, bp;
};

/* Where the kernel addresses of a record come from (record --kernel). */
enum kstack_source {
	KSTACK_NONE = 0,
	KSTACK_HERE = 1,  /* bpf_get_stack() of the program's context: the sample's, or the current task's */
	KSTACK_BLOCK = 2, /* the off_kstack entry taken when the interval's thread blocked */
};

/* x86-64 enters a system call with -ENOSYS in pt_regs->ax, which holds the call's return value once it returns:
 * a task switched out on its way back to user space (preempted after sys_exit) still has orig_ax set, but no
 * longer this. */
#define PYPERF_ENOSYS 38

/* Task states (include/linux/sched.h), as sched_switch's prev_state gives them. */
#define PYPERF_TASK_RUNNING 0x0000
#define PYPERF_TASK_UNINTERRUPTIBLE 0x0002
#define PYPERF_TASK_DEAD 0x0080

/* Set by user space before load (frozen .rodata: the verifier sees constants). */
const volatile __u64 wakeup_bytes = 0; /* force a wakeup when this much data is pending; 0 = always adaptive */
/* record --off-cpu: intervals shorter than this are kept with probability length / off_cpu_min_ns and then
 * weigh off_cpu_min_ns (an unbiased estimate of the time at a bounded cost); longer ones weigh their length. */
const volatile __u64 off_cpu_min_ns = 1000000;
/* Possible CPUs: the scratch array holds one slot per CPU for samples, then one per CPU for off-CPU records. */
const volatile __u32 nr_cpus = 1;
/* record --native: user registers and ustack_bytes (<= PYPERF_USTACK_MAX) of user stack in each record. */
const volatile __u8 native = 0;
const volatile __u32 ustack_bytes = 0;
/* record --kernel: the kernel stack in each record (of a sample in kernel mode, of an off-CPU interval where it left
 * the CPU). */
const volatile __u8 kernel = 0;
/* Set by user space at run time (`pyperf record --bpf-stats`): account the time spent on each
 * target sample in pyperf_counters.target_ns (one more clock read per target sample). */
__u8 measure_cost = 0;
/* Set by user space at run time: 1 while it polls the ring on its own timer (PYPERF_POLL_NS), 0 while it sleeps
 * until woken (see PYPERF_WAKEUP_NS in pyperf.h). */
__u32 consumer_polling = 0;

/* Makes the shared enums appear in BTF, hence in the Rust skeleton's `types`. */
struct pyperf_btf_anchor {
	enum pyperf_stack_status stack_status;
	enum pyperf_gil_state gil_state;
	enum pyperf_thread_state thread_state;
	enum pyperf_pthread_id pthread_id;
	enum pyperf_instr_kind instr_kind;
	enum pyperf_match_kind match_kind;
	enum pyperf_gil_kind gil_kind;
	enum pyperf_limits limits;
	enum pyperf_event_kind event_kind;
	enum pyperf_off_kind off_kind;
	enum pyperf_user_flags user_flags;
	enum pyperf_gen_kind gen_kind;
	struct off_cpu_entry off_cpu_entry;
	struct off_kstack off_kstack;
};
const volatile struct pyperf_btf_anchor pyperf_btf_anchor = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct py_proc);
} procs SEC(".maps");

/* The tgids in `procs`, one bit each (word tgid / 64, bit tgid % 64), set and cleared by user space with them
 * (512 KiB: every pid of 64-bit Linux, below 2^22). The first test of every program: an array lookup is inlined by the verifier,
 * so a sample, a context switch or a system call of a process nobody follows costs a few loads, not a hash. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 65536); /* PID_MAX_LIMIT / 64, set by user space before load */
	__type(key, __u32);
	__type(value, __u64);
} followed SEC(".maps");

static __always_inline bool is_followed(__u32 tgid)
{
	__u32 word = tgid >> 6;
	__u64 *bits = bpf_map_lookup_elem(&followed, &word);

	return bits && (*bits >> (tgid & 63)) & 1;
}

/* pid_tgid -> PyThreadState address and the start time of the thread it was
 * found for. Keyed by pid_tgid (not tid alone) so a recycled tid in another
 * process cannot hit a stale entry unnoticed; every hit is validated anyway.
 * The start time catches a tid reused inside the process: the dead thread's
 * freed thread state may still hold the same tid and pthread id (glibc reuses
 * the thread block), and would pass the validation with stale frames. */
struct tstate_entry {
	__u64 ts;
	__u64 start;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct tstate_entry);
} tstate_cache SEC(".maps");

/* Stacks seen so far (a hash of the process and its frames' code objects and check words). A sample with a
 * stack not in here may hold a code object user space has never read: it wakes user space at once (see
 * PYPERF_WAKEUP_NS), since such a code object may be freed soon. Samples of known stacks wait for user space's
 * own, slower poll. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} seen_stacks SEC(".maps");

/* Code objects whose snapshot was sent (struct pyperf_code_snap), with their check word: a new stack's frames are
 * looked up here, and a code object not in it (or whose address now holds another one) is copied. */
struct known_code_key {
	__u64 code;
	__u32 pid;
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PYPERF_KNOWN_CODE);
	__type(key, struct known_code_key);
	__type(value, __u32);
} known_code SEC(".maps");

/* record --off-cpu: the followed threads that are off CPU now, from their switch-out to their switch-in. Keyed
 * by pid_tgid, not by CPU: a thread may come back on another CPU. LRU: an entry whose thread never came back
 * (it exited while blocked, or the entry outlived a lost switch-in) makes room for live ones. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct off_cpu_entry);
} off_cpu SEC(".maps");

/*
 * Per-CPU scratch + counters, indexed by CPU id. A plain ARRAY with one slot
 * per possible CPU (user space sets max_entries) rather than a PERCPU_ARRAY:
 * per-CPU values are limited to 32 KiB and the event alone is larger. It is
 * as cheap (an inlined array lookup) and as safe: perf_event programs do not
 * nest on a CPU, so a slot has one user at a time.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* 2 x the number of possible CPUs, set before load (samples, then off-CPU) */
	__type(key, __u32);
	__type(value, struct pyperf_scratch);
} scratch SEC(".maps");

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

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by user space before load */
} events SEC(".maps");

/* Benchmark-only variants (never shipped): their code lives in bench.h, hooked in below by macros that are
 * empty in the shipped build. */
#include "bench.h"

/* Field of a block copied from the target. Offsets come from a map value, so
 * the verifier needs the explicit bound; a negative (absent) offset becomes
 * a huge u32 and yields 0. */
static __always_inline __u64 get_u64(const __u8 *buf, __s16 off, __u32 bufsz)
{
	__u32 o = (__u16)off;

	if (o > bufsz - 8)
		return 0;
	return *(const __u64 *)(buf + o);
}

static __always_inline __s32 get_s32(const __u8 *buf, __s16 off, __u32 bufsz)
{
	__u32 o = (__u16)off;

	if (o > bufsz - 4)
		return 0;
	return *(const __s32 *)(buf + o);
}

static __always_inline __s32 get_u8(const __u8 *buf, __s16 off, __u32 bufsz)
{
	__u32 o = (__u16)off;

	if (o > bufsz - 1)
		return -1;
	return buf[o];
}

/* Must equal record/python/code.rs code_check(): user space recomputes it from
 * the code object it reads and drops the frame on a mismatch. */
static __always_inline __u32 pyperf_code_check(__u32 firstlineno, __u64 filename, __u64 name)
{
	__u32 f = (__u32)filename ^ (__u32)(filename >> 32);
	__u32 n = (__u32)name ^ (__u32)(name >> 32);

	return firstlineno + f * 31 + n * 1009;
}

static __always_inline int read_user(void *dst, __u32 size, __u32 max, __u64 addr)
{
	if (size > max || size == 0)
		return -1;
	return bpf_probe_read_user(dst, size, (const void *)addr);
}

static __always_inline long read_ptr(__u64 addr, __u64 *out)
{
	*out = 0;
	return bpf_probe_read_user(out, sizeof(*out), (const void *)addr);
}

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

/* Plain data: see struct frame_walk. */
struct thread_walk {
	__u64 cur;
	__u64 found;
	__u64 fsbase;
	__u32 tid;
	int err;
};

struct thread_walk_ctx {
	const struct py_proc *proc;
	struct pyperf_scratch *s;
	struct thread_walk w;
};

/* One thread state of the interpreter's list: 0 = go on, 1 = stop. Global: verified once (see
 * pyperf_walk_frame). */
__noinline int pyperf_thread_step(struct thread_walk *w, const struct py_proc *proc, struct pyperf_scratch *s)
{
	if (!w || !proc || !s || !w->cur)
		return 1;
	if (read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, w->cur)) {
		w->err = 1;
		return 1;
	}
	if (tstate_is_ours(proc, s, w->tid, w->fsbase)) {
		w->found = w->cur;
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

/*
 * Returns the sampled thread's PyThreadState address (its first
 * tstate_size bytes are then in s->tbuf), or 0. `tid` is the thread's id as
 * the interpreter knows it (in its own PID namespace); pid_tgid, the host's,
 * keys the caches.
 */
static __always_inline __u64 find_tstate(const struct py_proc *proc,
					 struct pyperf_scratch *s, __u64 pid_tgid,
					 __u32 tid, __u64 fsbase, __u64 start)
{
	__u64 interp = 0, head = 0;
	struct tstate_entry *cached, entry = {};
	struct thread_walk_ctx c = {};
	struct thread_walk *w = &c.w;

	/* The thread of this CPU's previous sample: no hash lookup. */
	if (s->last_pid_tgid == pid_tgid && s->last_start == start && s->last_ts &&
	    !read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, s->last_ts) &&
	    tstate_is_ours(proc, s, tid, fsbase))
		return s->last_ts;
	s->last_pid_tgid = pid_tgid;
	s->last_start = start;
	s->last_ts = 0;

	cached = bpf_map_lookup_elem(&tstate_cache, &pid_tgid);
	if (cached && cached->start == start) {
		__u64 ts = cached->ts;

		/* Validation is the read we need anyway. */
		if (ts && !read_user(s->tbuf, proc->off.tstate_size, PYPERF_TSTATE_BUF, ts) &&
		    tstate_is_ours(proc, s, tid, fsbase)) {
			s->last_ts = ts;
			return ts;
		}
	}

	s->counters.thread_walks++;
	if (read_ptr(proc->interp_head_addr, &interp) || !interp) {
		/* Not initialised yet (or finalising): no thread state. */
		goto miss;
	}
	if (proc->off.interp_tstate_head < 0 ||
	    read_ptr(interp + proc->off.interp_tstate_head, &head)) {
		s->counters.read_errors++;
		goto miss;
	}

	c.proc = proc;
	c.s = s;
	w->cur = head;
	w->tid = tid;
	w->fsbase = fsbase;
	bpf_loop(PYPERF_MAX_THREADS, thread_walk_step, &c, 0);
	if (w->err)
		s->counters.read_errors++;
	if (w->found) {
		entry.ts = w->found;
		entry.start = start;
		bpf_map_update_elem(&tstate_cache, &pid_tgid, &entry, BPF_ANY);
		s->last_ts = w->found;
		return w->found;
	}
	if (w->cur && !w->err)
		s->counters.thread_walk_bound++;
miss:
	if (cached)
		bpf_map_delete_elem(&tstate_cache, &pid_tgid);
	return 0;
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

/* The walk's state: plain data, written by pyperf_walk_frame (a global function, whose pointer arguments point to
 * memory without pointer types: proc and s are passed to it apart, see struct walk_ctx). */
struct frame_walk {
	__u64 cur;
	__u64 last_code;  /* checksum of the previous frame's code object, reused */
	__u32 last_check; /* for recursion (same code object): one read less per frame */
	__s32 last_argcount;
	__u64 wlo, whi;   /* target addresses [wlo, whi) copied at the start of s->wbuf; whi 0 = none */
	__u64 hash;       /* of the frames so far (code, check), for seen_stacks */
	__u64 base;       /* 3.15+: the thread's base frame, where a complete walk ends; 0 = none */
	__u64 tag;        /* the sample's check-word cache tag (see struct pyperf_check_entry), 0 = no cache */
	__u64 chunk;      /* 3.11+: the data stack chunk of the frames reached so far (its start), 0 = unknown */
	__u64 chunk_prev; /* the chunk before it, once its header was copied; 0 = not yet */
	__u32 n;
	__u8 status;
	__u8 reached_base;
	__u8 fast;        /* the sample may take frames the fast way (see pyperf_walk_fast) */
};

/* bpf_loop's context for the frame walk. */
struct walk_ctx {
	const struct py_proc *proc;
	struct pyperf_scratch *s;
	struct frame_walk w;
};

#define PYPERF_INSTR_ENTRY (1U << PYPERF_INSTR_ENTRY_BIT)
#define PYPERF_INSTR_VALUE (PYPERF_INSTR_ENTRY - 1)

/* 3.12+: the walk skips an interpreter frame (a C-stack shim or entry frame): the Python frame before it, if any,
 * is the rootmost of its activation of the evaluation loop. Not part of the stack's hash: a flag, not a frame. */
static __always_inline void mark_entry(struct frame_walk *w, struct pyperf_scratch *s)
{
	__u32 n = w->n;

	if (n > 0 && n <= PYPERF_MAX_FRAMES)
		s->ev.frames[n - 1].instr |= PYPERF_INSTR_ENTRY;
}

/* The check-word cache's set of code object `code` (see struct pyperf_check_entry): its 2 entries, most recent first. */
static __always_inline struct pyperf_check_entry *check_set(struct pyperf_scratch *s, __u64 code)
{
	__u32 set = (__u32)((code >> 4) * 0x9e3779b97f4a7c15ULL >> 32) & (PYPERF_CHECK_SETS - 1);

	return &s->checks[set * 2];
}

/* Code object `code`'s check word (and argument count) from the cache, in the sample's count (w->tag, see
 * check_tag), into w->last_*: false = not there (w unchanged). Both walk paths look up through this. */
static __always_inline bool check_cached(struct frame_walk *w, struct pyperf_scratch *s, __u64 code)
{
	struct pyperf_check_entry *e = check_set(s, code);

	if (!w->tag)
		return false;
	if (e[0].code == code && e[0].tag == w->tag) {
		w->last_check = e[0].check;
		w->last_argcount = e[0].argcount;
	} else if (e[1].code == code && e[1].tag == w->tag) {
		w->last_check = e[1].check;
		w->last_argcount = e[1].argcount;
	} else {
		return false;
	}
	w->last_code = code;
	s->counters.checks_cached++;
	return true;
}

/* The stack's hash (seen_stacks) with one more frame: both walk paths add frames through this. */
static __always_inline void hash_frame(struct frame_walk *w, __u64 code, __u32 check)
{
	w->hash = (w->hash ^ code ^ ((__u64)check << 32)) * 0x9e3779b97f4a7c15ULL;
	w->hash ^= w->hash >> 29;
}

/* Is a frame of `fsz` bytes at `cur` in the data stack chunk that starts at `chunk` (0: none)? One this near a
 * chunk's start is: chunks are at least PYPERF_DATA_STACK_CHUNK long. (A stale or torn chunk address only moves where
 * a copy starts, never which bytes are a frame.) */
static __always_inline bool in_chunk(__u64 cur, __u32 fsz, __u64 chunk)
{
	return chunk && cur >= chunk && cur + fsz <= chunk + PYPERF_DATA_STACK_CHUNK;
}

/*
 * The cold parts of a frame, out of the walk's loop (global functions: each verified once, and the loop's body
 * stays small). 0 = go on, 1 = stop.
 *
 * A new window of frames for w->cur: the frame's bytes, from the copy of the target's [wlo, whi) at the start of
 * s->wbuf. 3.11+ (frame_window), a frame of a data stack chunk the walk knows (w->chunk, the thread's newest, then
 * each older one in turn): PYPERF_FRAME_WINDOW bytes ending at the frame's end, so that the callers below it come
 * from the same copy, but none below the chunk's start: what lies below a chunk is often unmapped, and a read that
 * faults costs ~1.7 us before the smaller one that follows. A window that starts at the chunk holds its header,
 * whose first word is the older chunk (w->chunk_prev). Any other frame (a generator's, a C-stack shim: its caller is
 * not below it; or of a thread state without a chunk, which has no frame on a data stack) is copied alone; so is
 * every frame before 3.11, or when a window read fails.
 */
__noinline int pyperf_frame_window(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s)
{
	__u64 cur, lo, len, chunk;
	__u32 fsz;
	bool copied = false;

	if (!w || !proc || !s)
		return 1;
	cur = w->cur;
	fsz = proc->off.frame_size;
	w->whi = 0;
	if (fsz == 0 || fsz > PYPERF_FRAME_BUF) {
		w->status = STACK_STATUS_ERROR;
		return 1;
	}
	/* In the older chunk: it becomes the walk's chunk. */
	if (in_chunk(cur, fsz, w->chunk_prev)) {
		w->chunk = w->chunk_prev;
		w->chunk_prev = 0;
	}
	chunk = w->chunk;
	if (proc->frame_window && in_chunk(cur, fsz, chunk)) {
		lo = cur + fsz - chunk > PYPERF_FRAME_WINDOW ? cur + fsz - PYPERF_FRAME_WINDOW : chunk;
		len = cur + fsz - lo;
		barrier_var(len);
		PROF_T0();
		copied = len >= fsz && len <= PYPERF_FRAME_WINDOW && !bpf_probe_read_user(s->wbuf, len, (const void *)lo);
		PROF_ADD(4);
		PROF_COUNT(0);
		if (copied && lo == chunk) {
			w->chunk_prev = *(const __u64 *)s->wbuf; /* _PyStackChunk.previous */
			PROF_COUNT(3);
		}
		if (!copied) {
			PROF_COUNT(1);
			s->counters.window_faults++;
		}
	}
	if (!copied) {
		PROF_COUNT(2);
		lo = cur;
		if (bpf_probe_read_user(s->wbuf, fsz, (const void *)cur)) {
			s->counters.read_errors++;
			w->status = STACK_STATUS_ERROR;
			return 1;
		}
	}
	w->wlo = lo;
	w->whi = cur + fsz;
	return 0;
}

/* The check word of code object w->last_code read from it (w->last_check, 0 = unreadable; w->last_argcount), and
 * put in the cache when the sample has a tag. */
__noinline int pyperf_check_read(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s)
{
	struct pyperf_check_entry *e;
	__u64 code;

	if (!w || !proc || !s)
		return 1;
	code = w->last_code;
	w->last_check = 0;
	w->last_argcount = 0;
	if (proc->off.code_span < 0)
		return 0;
	if (read_user(s->cbuf, proc->off.code_span_len, PYPERF_CODE_BUF, code + proc->off.code_span)) {
		s->counters.read_errors++;
		return 0;
	}
	w->last_check = pyperf_code_check((__u32)get_s32(s->cbuf, proc->off.check_firstlineno, PYPERF_CODE_BUF),
					  get_u64(s->cbuf, proc->off.check_filename, PYPERF_CODE_BUF),
					  get_u64(s->cbuf, proc->off.check_name, PYPERF_CODE_BUF));
	BENCH_INTERN_FRAME(s, proc);
	if (proc->off.check_argcount >= 0)
		w->last_argcount = get_s32(s->cbuf, proc->off.check_argcount, PYPERF_CODE_BUF);
	s->counters.checks_read++;
	if (w->tag) {
		/* Into the set, most recent first: over the first entry if it has this address (another count's),
		 * else the first moves over the second. */
		e = check_set(s, code);
		if (e[0].code != code)
			e[1] = e[0];
		e[0].code = code;
		e[0].tag = w->tag;
		e[0].check = w->last_check;
		e[0].argcount = w->last_argcount;
	}
	return 0;
}

/* <= 3.10: the first argument of frame w->n (at byte o of s->wbuf) and its type, for the self/cls heuristic (see
 * struct pyperf_frame): one read. */
__noinline int pyperf_first_local(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s, __u64 o)
{
	struct pyperf_frame_local *f;
	__u64 obj, type = 0;
	__u32 n;

	if (!w || !proc || !s)
		return 1;
	n = w->n;
	if (n >= PYPERF_MAX_FRAMES || o > PYPERF_FRAME_WINDOW)
		return 0;
	f = &s->locals[n];
	obj = get_u64(s->wbuf + o, proc->off.frame_localsplus, PYPERF_FRAME_BUF);
	if (obj && !read_ptr(obj + proc->off.object_type, &type) && type) {
		f->first_local = obj;
		f->first_local_type = type;
	}
	return 0;
}

/* One frame of the walk: 0 = go on, 1 = stop. */
static __always_inline int walk_frame(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s)
{
	struct pyperf_frame *f;
	const __u8 *fb;
	__u64 code, cur, o;
	__u32 n, fsz;

	cur = w->cur;
	n = w->n;
	fsz = proc->off.frame_size;
	if (!cur)
		return 1;
	if (cur == w->base) {
		/* The sentinel at the bottom of the thread's frames: nothing below it is Python. */
		w->reached_base = 1;
		return 1;
	}
	/* In the current window, else a new one. Every path ends in the same buffer at a bounded offset, so the
	 * verifier checks what follows once. */
	if (!(w->whi && cur >= w->wlo && cur + fsz <= w->whi) && pyperf_frame_window(w, proc, s))
		return 1;
	o = cur - w->wlo;
	if (o > PYPERF_FRAME_WINDOW) {
		w->status = STACK_STATUS_ERROR;
		return 1;
	}
	fb = s->wbuf + o;
	w->cur = get_u64(fb, proc->off.frame_back, PYPERF_FRAME_BUF);
	if (proc->off.owner_cstack >= 0 &&
	    get_u8(fb, proc->off.frame_owner, PYPERF_FRAME_BUF) >= proc->off.owner_cstack) {
		/* the interpreter's own frame (C-stack shim, entry frame): not Python code */
		mark_entry(w, s);
		return 0;
	}
	code = get_u64(fb, proc->off.frame_code, PYPERF_FRAME_BUF) & proc->code_mask;
	if (proc->skip_code && code == proc->skip_code) {
		mark_entry(w, s); /* 3.13+: f_executable == Py_None, a C-stack entry frame */
		return 0;
	}
	if (!code) {
		w->status = STACK_STATUS_ERROR;
		return 1;
	}
	if (n >= PYPERF_MAX_FRAMES) {
		/* Leaf-nearest frames kept; more Python frames above. */
		w->status = STACK_STATUS_TRUNCATED;
		return 1;
	}
	f = &s->ev.frames[n];
	f->code = code;
	/* 31 bits of position (f_lasti -1 becomes 0x7fffffff, still -1 as a 31-bit number), the top bit for the
	 * entry flag: a <= 3.10 frame never has it. */
	if (proc->off.instr_kind == INSTR_PTR_MINUS_CODE)
		f->instr = (__u32)(get_u64(fb, proc->off.frame_instr, PYPERF_FRAME_BUF) - code) & PYPERF_INSTR_VALUE;
	else if (proc->off.instr_kind == INSTR_LASTI)
		f->instr = (__u32)get_s32(fb, proc->off.frame_instr, PYPERF_FRAME_BUF) & PYPERF_INSTR_VALUE;
	else
		f->instr = 0;
	/* 3.11: the frame says itself that it is the first of its activation of the evaluation loop. */
	if (proc->off.frame_is_entry >= 0 && get_u8(fb, proc->off.frame_is_entry, PYPERF_FRAME_BUF) > 0)
		f->instr |= PYPERF_INSTR_ENTRY;
	/* The check word: the previous frame's (recursion), else the cache's, else read. */
	if (code != w->last_code && !check_cached(w, s, code)) {
		w->last_code = code;
		pyperf_check_read(w, proc, s);
	}
	f->check = w->last_check;
	if (proc->off.frame_localsplus >= 0) {
		s->locals[n].first_local = 0;
		s->locals[n].first_local_type = 0;
		if (w->last_argcount > 0)
			pyperf_first_local(w, proc, s, o);
	}
	hash_frame(w, code, f->check);
	w->n = n + 1;
	return 0;
}

/*
 * The sample's check-word cache tag (see struct pyperf_check_entry), 0 = no cache: cache_id << 40 | the process's
 * count of freed code objects, read now. Read once per sample, not per frame: it is the cache's whole cost.
 */
static __always_inline __u64 check_tag(const struct py_proc *proc, struct pyperf_scratch *s, __u64 ts, __u64 gil,
				       int gil_state)
{
	__u64 gen = 0, interp;

	if (!proc->cache_id || !ts)
		return 0;
	if (proc->gen_kind == GEN_UPROBE) {
		gen = *(volatile const __u64 *)&proc->code_gen;
	} else if (proc->gen_kind == GEN_INTERP) {
		/* Only the main interpreter's threads: another one's count is not this one's. */
		interp = get_u64(s->tbuf, proc->off.tstate_interp, PYPERF_TSTATE_BUF);
		if (!interp || interp != proc->gen_interp || proc->off.interp_code_gen < 0)
			return 0;
		/* From this sample's GIL block when it holds the count (the same address), else read. */
		if (gil && gil_state != GIL_STATE_ERROR && proc->off.gil_code_gen >= 0 &&
		    gil + proc->off.gil_code_gen == interp + proc->off.interp_code_gen)
			gen = get_u64(s->gbuf, proc->off.gil_code_gen, PYPERF_GIL_BUF);
		else if (read_ptr(interp + proc->off.interp_code_gen, &gen))
			return 0;
	} else {
		return 0;
	}
	return (__u64)proc->cache_id << 40 | (gen & ((1ULL << 40) - 1));
}

/*
 * The common frame the fast way: a Python frame of 3.11+ in the current window whose check word is the previous
 * frame's or in the cache. Each test sends anything else (a new window, an interpreter frame, a cache miss, the
 * end) to walk_frame, which does the same for such frames and the rest; so this is a straight line, cheap for the
 * verifier several times over. `fo`: the frame field offsets (back, code, instr, owner, is_entry), checked by the
 * caller. 0 = taken, 1 = not.
 */
struct fast_offsets {
	__u32 back, code, instr, owner, entry, entry_mask, owner_min, fsz;
};

static __always_inline int fast_frame(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s,
				      const struct fast_offsets *fo)
{
	struct pyperf_frame *f;
	const __u8 *fb;
	__u64 cur = w->cur, code, o;
	__u32 n = w->n;

	if (cur < w->wlo || cur + fo->fsz > w->whi || cur == w->base)
		return 1;
	o = cur - w->wlo;
	if (o > PYPERF_FRAME_WINDOW)
		return 1;
	fb = s->wbuf + o;
	if (fb[fo->owner] >= fo->owner_min)
		return 1;
	code = *(const __u64 *)(fb + fo->code) & proc->code_mask;
	if (!code || code == proc->skip_code)
		return 1;
	if (code != w->last_code && !check_cached(w, s, code))
		return 1;
	/* (The barrier: else clang computes the address from n before the test, which the verifier refuses.) */
	barrier_var(n);
	if (n >= PYPERF_MAX_FRAMES)
		return 1;
	f = &s->ev.frames[n];
	f->code = code;
	f->instr = ((__u32)(*(const __u64 *)(fb + fo->instr) - code) & PYPERF_INSTR_VALUE) |
		   ((((__u32)fb[fo->entry] + 0xff) >> 8 & fo->entry_mask) << PYPERF_INSTR_ENTRY_BIT); /* byte != 0 */
	f->check = w->last_check;
	hash_frame(w, code, f->check);
	w->cur = *(const __u64 *)(fb + fo->back);
	w->n = n + 1;
	PROF_COUNT(5);
	return 0;
}

/*
 * Up to PYPERF_FAST_BATCH frames the fast way (fast_frame), when the sample allows it (w->fast: 3.11+, a cache
 * tag, no first local): 0 = all taken, 1 = the next frame is walk_frame's. A global function, verified once.
 */
__noinline int pyperf_walk_fast(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s)
{
	struct fast_offsets fo;
	__u32 k, entry, cstack, has_entry, has_cstack;

	if (!w || !proc || !s || !w->fast)
		return 1;
	/* Offsets of 3.11+ frame fields are below 128 (user space checks it; -1 = none is caught here). */
	fo.back = (__u16)proc->off.frame_back;
	fo.code = (__u16)proc->off.frame_code;
	fo.instr = (__u16)proc->off.frame_instr;
	fo.owner = (__u16)proc->off.frame_owner;
	/* The optional fields without a branch: each branch here made the verifier walk the 8 frames below once more
	 * per way (start-up time: 7.3 k instructions processed, 3 k without). Masks of all ones when the field exists
	 * (offset >= 0), hidden from clang, which would turn the selects back into branches. */
	entry = (__u16)proc->off.frame_is_entry;
	cstack = (__u16)proc->off.owner_cstack;
	has_entry = ((entry >> 15) ^ 1) * 0xffff;
	has_cstack = ((cstack >> 15) ^ 1) * 0xffff;
	barrier_var(has_entry);
	barrier_var(has_cstack);
	fo.entry = (entry & has_entry) | (fo.owner & ~has_entry);
	fo.entry_mask = has_entry & 1;
	fo.owner_min = (cstack & has_cstack) | (256 & ~has_cstack);
	fo.fsz = proc->off.frame_size;
	if (fo.back > 120 || fo.code > 120 || fo.instr > 120 || fo.owner > 127 || fo.entry > 127 || fo.fsz == 0 ||
	    fo.fsz > PYPERF_FRAME_BUF)
		return 1;
	for (k = 0; k < PYPERF_FAST_BATCH; k++)
		if (fast_frame(w, proc, s, &fo))
			return 1;
	return 0;
}

/*
 * The walk's step: frames the fast way, then one frame of walk_frame (new window, cache miss, interpreter frame, end
 * of the walk): at least one frame per call. 0 = go on, 1 = stop. A global function: the verifier checks it once, on
 * its own, rather than along every path into it over the loop's iterations (start-up time: 87 k instructions
 * processed, 0.21 s, when one frame was inlined into the loop's callback). Several frames per call: a call per frame
 * (the loop's callback, then this) was a fifth of a deep stack's time.
 */
__noinline int pyperf_walk_frame(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s)
{
	if (!w || !proc || !s)
		return 1;
	if (!pyperf_walk_fast(w, proc, s))
		return 0;
	return walk_frame(w, proc, s);
}

static long frame_walk_step(__u32 i, void *arg)
{
	struct walk_ctx *c = arg;

	/* bpf_loop wants 0 or 1, and a global function's result is any number to the verifier. */
	return pyperf_walk_frame(&c->w, c->proc, c->s) ? 1 : 0;
}


/* Where the first locals start at most: after PYPERF_MAX_FRAMES frames. */
#define PYPERF_LOFF_MAX (sizeof(struct pyperf_event_header) + PYPERF_MAX_FRAMES * sizeof(struct pyperf_frame))
/* Where the kernel addresses start at most: after as many first locals. */
#define PYPERF_KOFF_MAX (PYPERF_LOFF_MAX + PYPERF_MAX_FRAMES * sizeof(struct pyperf_frame_local))
/* Where the user stack starts at most: after PYPERF_KSTACK_MAX kernel addresses. */
#define PYPERF_UOFF_MAX (PYPERF_KOFF_MAX + PYPERF_KSTACK_MAX * 8)

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

/* One try of the user stack copy: [sp, top) to dst, all or nothing. */
static __always_inline bool read_ustack(__u8 *dst, __u64 sp, __u64 top)
{
	__u64 len = top - sp;

	if (top <= sp || len > PYPERF_USTACK_MAX)
		return false;
	return !bpf_probe_read_user(dst, len, (const void *)sp);
}

/*
 * record --native: the user registers `ur`, and the user stack from ur->sp up, at byte `at` of the event (after the
 * kernel addresses); returns where the record ends now.
 *
 * bpf_probe_read_user copies all or nothing, so the copy must end inside the stack's mapping. Where it ends:
 *  - a glibc thread: its control block (the fs base, pthread_self()) sits at the top of its stack mapping;
 *  - the main thread: above mm->start_stack (argc, where the stack began at exec) come argv and the environment,
 *    in the same mapping;
 *  - else (another thread library, a coroutine's stack, a sigaltstack) not known: ustack_bytes, and on a failed
 *    read shorter, each try ending a page lower (PYPERF_USTACK_RETRIES), last the page of sp alone.
 * The copy is at most ustack_bytes long either way.
 */
/*
 * The copy itself: a global function, so that the verifier checks it once, on its own, instead of once per path
 * of every caller (inlined into the stack walk's programs, its tries multiplied their states: loading took 0.9 s
 * instead of 0.1 s). `bound`: where the stack's mapping is known to end, 0 for unknown. Returns the bytes copied
 * to byte `at` of s->ev, 0 for none; `*retried` (s's header) says whether a shorter copy was taken.
 */
__noinline int pyperf_copy_ustack(struct pyperf_scratch *s, __u64 sp, __u64 bound, __u64 at)
{
	__u64 top, next;
	bool ok = false, retried = false;
	__u8 *dst;
	__u32 i;

	if (!s || !sp || !ustack_bytes || at > PYPERF_UOFF_MAX)
		return 0;
	top = sp + (ustack_bytes <= PYPERF_USTACK_MAX ? ustack_bytes : PYPERF_USTACK_MAX);
	if (bound && bound < top)
		top = bound;
	dst = (__u8 *)&s->ev + at;
	ok = read_ustack(dst, sp, top);
	for (i = 0; i < PYPERF_USTACK_RETRIES && !ok; i++) {
		next = (top - 1) & ~4095ULL;
		if (next <= sp)
			break;
		top = next;
		retried = true;
		ok = read_ustack(dst, sp, top);
	}
	if (!ok) {
		/* The page of sp, which is mapped if sp is good. */
		next = (sp | 4095) + 1;
		if (next < top) {
			top = next;
			retried = true;
			ok = read_ustack(dst, sp, top);
		}
	}
	if (!ok || top - sp > PYPERF_USTACK_MAX) {
		s->counters.ustack_failed++;
		return 0;
	}
	s->counters.ustack_copies++;
	s->counters.ustack_bytes += top - sp;
	if (retried)
		s->counters.ustack_short++;
	return top - sp;
}

static __always_inline __u64 add_user_stack(struct pyperf_scratch *s, struct task_struct *task,
					    __u64 fsbase, const struct user_regs *ur, __u64 at)
{
	struct pyperf_event_header *h = &s->ev.hdr;
	__u64 sp = ur->sp, bound = 0, l;
	int len;

	if (!sp)
		return at;
	h->user_flags = PYPERF_USER_REGS;
	h->user_ip = ur->ip;
	h->user_sp = sp;
	h->user_bp = ur->bp;
	if (sp < fsbase && fsbase - sp < PYPERF_TCB_STACK_MAX) {
		bound = fsbase;
	} else {
		void *mm = KFIELD(void *, task, kl.task_mm);
		__u64 start = mm ? KFIELD(unsigned long, mm, kl.mm_start_stack) : 0;

		if (sp < start)
			bound = start;
	}
	len = pyperf_copy_ustack(s, sp, bound, at);
	if (len <= 0 || at > PYPERF_UOFF_MAX)
		return at;
	/* A bound the verifier can see on the 64-bit value (the function's result is any int to it). */
	l = (__u32)len;
	barrier_var(l);
	if (l > PYPERF_USTACK_MAX)
		return at;
	h->ustack_len = l;
	return at + l;
}

/*
 * Walks the current thread's Python stack and writes one record to the ring buffer: a CPU sample (off == NULL)
 * or the off-CPU interval `off` that the thread ends by coming back on CPU now (its stack cannot have changed
 * while it was off CPU). `s` is the CPU's scratch slot of that kind. `ctx`: the program's (for bpf_get_stack);
 * `ur`: the thread's user registers with record --native (NULL: none); `ksrc`: enum kstack_source, with
 * record --kernel.
 */
/* Copies up to `max` bytes of the object at `addr` into `dst`: all of them, else (the object near the end of a
 * mapping) up to the end of its page. Returns the bytes copied, 0 for none. */
static __always_inline __u32 snap_copy(void *dst, __u32 max, __u64 addr)
{
	__u32 n = max;

	if (!addr)
		return 0;
	if (!bpf_probe_read_user(dst, n, (const void *)addr))
		return n;
	n = 4096 - (addr & 4095);
	if (n == 0 || n >= max)
		return 0;
	return bpf_probe_read_user(dst, n, (const void *)addr) ? 0 : n;
}

/*
 * Sends the snapshot of frame `i`'s code object (see struct pyperf_code_snap) unless known_code says it was sent
 * already. Global: verified once. Returns 0 to go on, 1 to stop.
 */
__noinline int pyperf_snap_code(const struct py_proc *proc, struct pyperf_scratch *s, __u32 i)
{
	struct known_code_key key = {};
	struct pyperf_code_snap *c;
	struct pyperf_frame *f;
	__u32 *known, check, n, size;
	__u64 table = 0, tsize = 0;

	if (!proc || !s || i >= PYPERF_MAX_FRAMES)
		return 1;
	f = &s->ev.frames[i];
	check = f->check;
	/* No check word: the program could not read the code object; nor can it copy it. */
	if (!check)
		return 0;
	key.code = f->code;
	key.pid = s->ev.hdr.pid;
	known = bpf_map_lookup_elem(&known_code, &key);
	if (known && *known == check)
		return 0;
	c = &s->snap;
	n = proc->off.snap_code_size;
	if (n == 0 || n > PYPERF_SNAP_CODE || bpf_probe_read_user(c->code_obj, n, (const void *)key.code)) {
		s->counters.code_snap_failed++;
		return 0;
	}
	c->hdr.ktime = s->ev.hdr.ktime;
	c->hdr.pid = s->ev.hdr.pid;
	c->hdr.tid = s->ev.hdr.tid;
	c->hdr.cpu = s->ev.hdr.cpu;
	c->hdr.nframes = 0;
	c->hdr.kind = PYPERF_EVENT_CODE;
	c->code = key.code;
	c->check = check;
	c->regions[0].addr = key.code;
	c->regions[0].len = n;
	c->regions[1].addr = get_u64(c->code_obj, proc->off.code_name, PYPERF_SNAP_CODE);
	c->regions[1].len = snap_copy(c->name, PYPERF_SNAP_NAME, c->regions[1].addr);
	c->regions[2].addr = proc->off.code_qualname >= 0 ?
		get_u64(c->code_obj, proc->off.code_qualname, PYPERF_SNAP_CODE) : 0;
	c->regions[2].len = snap_copy(c->qualname, PYPERF_SNAP_NAME, c->regions[2].addr);
	c->regions[3].addr = get_u64(c->code_obj, proc->off.code_filename, PYPERF_SNAP_CODE);
	c->regions[3].len = snap_copy(c->file, PYPERF_SNAP_FILE, c->regions[3].addr);
	/* The line table: its header, then its size says how much more. */
	table = get_u64(c->code_obj, proc->off.code_linetable, PYPERF_SNAP_CODE);
	size = 0;
	if (table && proc->off.bytes_size >= 0 && proc->off.bytes_data > 0 &&
	    !read_ptr(table + proc->off.bytes_size, &tsize) && tsize < PYPERF_SNAP_TABLE) {
		/* 64-bit, so that the bound below holds for the value passed (a 32-bit one is compared zero-extended
		 * in another register, and the verifier does not carry the bound back). */
		__u64 want = tsize + (__u16)proc->off.bytes_data + 1;

		barrier_var(want);
		if (want > PYPERF_SNAP_TABLE)
			want = PYPERF_SNAP_TABLE;
		if (!bpf_probe_read_user(c->table, want, (const void *)table))
			size = want;
	}
	c->regions[4].addr = table;
	c->regions[4].len = size;
	/* (Bounded again here: the verifier does not carry the bound through the stores above.) */
	if (size > PYPERF_SNAP_TABLE)
		size = PYPERF_SNAP_TABLE;
	/* Samples first: a copy that would leave less than three quarters of the ring free is not sent (counted; a
	 * later new stack with this code object tries again). */
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + offsetof(struct pyperf_code_snap, table) + size >
	    bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 4) {
		s->counters.code_snap_failed++;
		return 0;
	}
	if (bpf_ringbuf_output(&events, c, offsetof(struct pyperf_code_snap, table) + size, BPF_RB_NO_WAKEUP)) {
		s->counters.code_snap_failed++;
		return 0;
	}
	s->counters.code_snaps++;
	bpf_map_update_elem(&known_code, &key, &check, BPF_ANY);
	return 0;
}

struct snap_ctx {
	const struct py_proc *proc;
	struct pyperf_scratch *s;
};

static long snap_step(__u32 i, void *arg)
{
	struct snap_ctx *c = arg;

	return pyperf_snap_code(c->proc, c->s, i) ? 1 : 0;
}

static __always_inline void record_stack(void *ctx, struct py_proc *proc, struct pyperf_scratch *s, __u64 pid_tgid,
					 __u32 cpu, __u64 now, const struct off_cpu_entry *off, __u64 weight,
					 const struct user_regs *ur, int ksrc)
{
	__u32 pid = pid_tgid >> 32, n, tid;
	struct pyperf_event_header *h;
	struct task_struct *task;
	__u64 fsbase = 0, ts, global_ts = 0, frame = 0, cframe = 0, size, flags, wait_base = 0, lo;
	struct walk_ctx c = {};
	int gil_state;

	h = &s->ev.hdr;
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
	h->nkernel = 0;
	h->user_flags = 0;
	h->ustack_len = 0;
	h->user_ip = 0;
	h->user_sp = 0;
	h->user_bp = 0;

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
	PROF(2); /* GIL block, states */

	/* Leaf frame: tstate->frame / ->current_frame, or tstate->cframe->current_frame. */
	if (ts) {
		if (proc->off.tstate_frame >= 0) {
			frame = get_u64(s->tbuf, proc->off.tstate_frame, PYPERF_TSTATE_BUF);
		} else {
			cframe = get_u64(s->tbuf, proc->off.tstate_cframe, PYPERF_TSTATE_BUF);
			if (cframe && proc->off.cframe_current_frame >= 0 &&
			    read_ptr(cframe + proc->off.cframe_current_frame, &frame))
				s->counters.read_errors++;
		}
	}

	PROF(3); /* leaf frame pointer */
	c.w.status = STACK_STATUS_COMPLETE;
	if (frame) {
		c.proc = proc;
		c.s = s;
		c.w.cur = frame;
		/* 3.12+: wait_base is the GIL block read (interp->ceval.gil). */
		c.w.tag = check_tag(proc, s, ts, proc->off.interp_gil_ptr >= 0 ? wait_base : 0, gil_state);
		if (proc->off.tstate_base_frame >= 0)
			c.w.base = get_u64(s->tbuf, proc->off.tstate_base_frame, PYPERF_TSTATE_BUF);
		if (proc->off.tstate_datastack_chunk >= 0)
			c.w.chunk = get_u64(s->tbuf, proc->off.tstate_datastack_chunk, PYPERF_TSTATE_BUF);
		/* 3.11+ with the cache: frames the fast way (pyperf_walk_fast), which needs no first local. */
		c.w.fast = proc->frame_window && c.w.tag && proc->off.instr_kind == INSTR_PTR_MINUS_CODE &&
			   proc->off.frame_localsplus < 0;
		bpf_loop(PYPERF_MAX_WALK, frame_walk_step, &c, 0);
		if (c.w.status == STACK_STATUS_COMPLETE && c.w.cur && !c.w.reached_base)
			c.w.status = STACK_STATUS_TRUNCATED; /* bpf_loop bound (many skipped shims) */
		if (c.w.reached_base)
			s->counters.base_reached++;
		if (c.w.status == STACK_STATUS_COMPLETE && c.w.base && !c.w.reached_base) {
			/* Ended on a NULL link above the base frame: a torn or unfinished chain. */
			c.w.status = STACK_STATUS_INCOMPLETE;
			s->counters.incomplete++;
		}
	}
	PROF(4); /* frame walk */
	n = c.w.n;
	if (n > PYPERF_MAX_FRAMES)
		n = PYPERF_MAX_FRAMES;
	if (c.w.status == STACK_STATUS_TRUNCATED)
		s->counters.truncated++;
	if (c.w.status == STACK_STATUS_COMPLETE && n == 0) {
		c.w.status = STACK_STATUS_IDLE;
		s->counters.idle++;
	}
	h->nframes = n;
	h->stack_status = c.w.status;

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
		__u64 key = c.w.hash ^ ((__u64)pid * 0xff51afd7ed558ccdULL);

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
			s->counters.rb_full++;
	} else {
		if (off)
			s->counters.off_cpu_events++;
		else
			s->counters.events++;
	}
	PROF(5); /* ring buffer output */
}

/*
 * A uprobe at the entry of a followed process's code_dealloc (gen_kind GEN_UPROBE, before 3.14, which has its own
 * count): a code object is about to be freed, so cached check words of this process may describe objects that
 * are gone. Counting is all it does; it runs once per code object freed (a module's at exit, code a program
 * compiles and drops), never per sample.
 */
SEC("uprobe")
int pyperf_code_freed(void *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct py_proc *proc;

	if (!is_followed(pid))
		return 0;
	proc = bpf_map_lookup_elem(&procs, &pid);
	if (proc)
		__sync_fetch_and_add(&proc->code_gen, 1);
	return 0;
}

SEC("perf_event")
int pyperf_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid(), now;
	__u32 pid = pid_tgid >> 32, cpu;
	/* The sample's registers: the context starts with them (struct bpf_perf_event_data). */
	const struct pyperf_pt_regs *sregs = (const void *)ctx;
	struct user_regs ur = {};
	struct pyperf_pt_regs *regs;
	struct pyperf_scratch *s;
	struct py_proc *proc;
	bool user_mode;

	/* Cheapest path first: not a tracked process. */
	if (!is_followed(pid))
		return 0;
	proc = bpf_map_lookup_elem(&procs, &pid);
	if (!proc)
		return 0;
	cpu = bpf_get_smp_processor_id();
	s = bpf_map_lookup_elem(&scratch, &cpu);
	if (!s)
		return 0;
	s->counters.samples++;
	now = bpf_ktime_get_ns();
	/* The sample's registers are the user's if it hit user mode (x86: CPL in the low bits of cs); in the kernel
	 * (a system call, a fault, an interrupt) the user's are those the task saved on kernel entry. */
	user_mode = sregs->cs & 3;
	if (native) {
		/* Loaded unconditionally: clang would otherwise merge these loads with those from the task's pt_regs
		 * into loads through a selected pointer, and the verifier refuses a modified context pointer. */
		ur.ip = sregs->ip;
		ur.sp = sregs->sp;
		ur.bp = sregs->bp;
		if (!user_mode) {
			regs = (struct pyperf_pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
			ur.ip = regs ? regs->ip : 0;
			ur.sp = regs ? regs->sp : 0;
			ur.bp = regs ? regs->bp : 0;
		}
	}
	record_stack(ctx, proc, s, pid_tgid, cpu, now, NULL, 0, native ? &ur : NULL,
		     user_mode ? KSTACK_NONE : KSTACK_HERE);
	if (measure_cost)
		s->counters.target_ns += bpf_ktime_get_ns() - now;
	return 0;
}

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

/* The end of an interval whose stack went out at its start (PYPERF_EVENT_OFF_CPU_START). */
static __always_inline void off_cpu_end(__u64 key, const struct off_cpu_entry *e, __u64 now)
{
	struct pyperf_event_header h = {};
	struct pyperf_scratch *s;
	__u32 cpu;

	s = off_cpu_slot(&cpu);
	if (!s)
		return;
	h.ktime = now;
	h.pid = key >> 32;
	h.tid = (__u32)key;
	h.cpu = cpu;
	h.kind = PYPERF_EVENT_OFF_CPU_END;
	h.off_kind = e->kind;
	h.off_flags = e->flags;
	h.off_start = e->start;
	h.off_duration = e->off_ns;
	h.off_runnable = e->runnable_ns;
	h.off_syscall = e->syscall;
	h.off_weight = off_cpu_weight(s, e->off_ns);
	if (bpf_ringbuf_output(&events, &h, sizeof(h), BPF_RB_NO_WAKEUP))
		s->counters.off_cpu_rb_full++;
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
			if (now > cur->out) {
				cur->off_ns += now - cur->out;
				if (cur->out_runnable)
					cur->runnable_ns += now - cur->out;
				else if (cur->wake >= cur->out && now > cur->wake)
					cur->runnable_ns += now - cur->wake;
			}
			cur->out = 0;
			cur->wake = 0;
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
	/* Still in the system call whose block began its interval (woken, then switched out again before the
	 * call returned): the interval goes on until sys_exit. */
	if (!now)
		now = bpf_ktime_get_ns();
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
		return 0;
	}
	__builtin_memset(&e, 0, sizeof(e));
	e.start = now;
	e.out = now;
	e.out_runnable = !blocked;
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
	/* No switch-in seen: user space marked a thread that had been woken meanwhile; how long it waited is
	 * unknown (it may have run since). Dropped, counted. */
	if (off.out) {
		s->counters.off_cpu_stale++;
		return 0;
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
