/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * The one header shared by the BPF program (bpf/pyperf.bpf.c) and the Rust
 * recorder. Rust never copies these definitions by hand: build.rs compiles
 * the BPF object and libbpf-cargo generates Rust types from its BTF into the
 * skeleton's `types` module. Every struct below must therefore be reachable
 * from a map or a global in pyperf.bpf.c (see `pyperf_btf_anchor` there).
 *
 * Only fixed-width types (from vmlinux.h) are used, and every struct is laid
 * out without implicit padding so the Rust and C views agree byte for byte.
 */
#ifndef PYPERF_H
#define PYPERF_H

/*
 * Sizes and intervals shared with user space. An enum rather than #defines:
 * enumerators are in the BTF from which build.rs generates the Rust types, so
 * the recorder reads these values (types::pyperf_limits) instead of copying
 * them by hand.
 */
enum pyperf_limits {
	/* Deepest stack recorded. Python's default recursion limit is 1000, so
	 * "complete stacks of 1000+ frames" needs more than that; deeper stacks
	 * keep the leaf-nearest frames and are marked TRUNCATED. */
	PYPERF_MAX_FRAMES = 2048,
	/* Bound of the frame walk: frames + C-stack shim frames skipped. */
	PYPERF_MAX_WALK = PYPERF_MAX_FRAMES + 256,
	/* Frames per call of the walk's fast path (pyperf_walk_fast; verification time grows with it). */
	PYPERF_FAST_BATCH = 8,
	/* Bound of the walk of the interpreters' thread lists (per sample, on a
	 * cache miss; one step per thread state, and one per interpreter). Hitting
	 * it is counted in pyperf_counters.thread_walk_bound. */
	PYPERF_MAX_THREADS = 256,
	/* Thread states of one OS thread kept by that walk (3.13+: one per interpreter the thread is in: the one it
	 * runs and those it called Interpreter.exec from); more are counted, not kept. */
	PYPERF_THREAD_MATCHES = 4,
	PYPERF_COMM_LEN = 16,
	/* Bytes of a PyThreadState / frame / _gil_runtime_state read in ONE
	 * bpf_probe_read_user each (user space computes the exact size it needs,
	 * which must not exceed these). */
	PYPERF_TSTATE_BUF = 320, /* 3.11: datastack_chunk at 296 */
	PYPERF_FRAME_BUF = 384, /* <= 3.10: up to f_localsplus[0] (2.7/3.6: 376 + 8) */
	PYPERF_GIL_BUF = 512,   /* 2.7: interpreter_lock and _PyThreadState_Current, 440 bytes apart, in one read */
	PYPERF_CODE_BUF = 128,
	/* struct pyperf_code_snap: most bytes copied of the code object, of its name and qualified name, of its
	 * file name, and of its line table (a bytes object: header and content). */
	PYPERF_SNAP_CODE = 512,
	PYPERF_SNAP_NAME = 256,
	PYPERF_SNAP_FILE = 512,
	PYPERF_SNAP_TABLE = 8192,
	PYPERF_SNAP_REGIONS = 5,
	/* Code objects whose snapshot was sent (known_code). */
	PYPERF_KNOWN_CODE = 16384,
	/* The check-word cache of each scratch slot (struct pyperf_check_entry): sets of 2 entries, indexed by a
	 * hash of the code object's address. 2 ways: a set is shared by 3 of 200 distinct code objects in 1 of
	 * ~8000 samples, where one way would lose ~5% of the frames to conflicts. */
	PYPERF_CHECK_SETS = 2048,
	/* 3.11+ (py_proc.frame_window): frames live on the thread's data stack,
	 * each caller just below its callee, so the walk copies this many bytes
	 * ending at the end of a frame in ONE read and takes the callers that lie
	 * in that window from the copy. A bpf_probe_read_user costs ~110 ns and
	 * ~0.07 ns a byte (bench/RESULTS.md, round 2), so this replaces one read
	 * per frame with one read per ~70 frames (8 KiB: a 200-frame stack 6%
	 * faster than with 4 KiB windows, 16 KiB no faster; 1 KiB windows cost
	 * a deep stack 4x as many reads as 4 KiB). */
	PYPERF_FRAME_WINDOW = 8192,
	/* 3.11+: the least length of a data stack chunk (CPython's DATA_STACK_CHUNK_SIZE, 3.11-3.15; a chunk is longer
	 * only for a frame that needs it): a frame less than this above a chunk's start is in that chunk. */
	PYPERF_DATA_STACK_CHUNK = 16384,
	/* Wakeups of user space from the program are rationed, because a wakeup
	 * is an irq_work, i.e. a self-IPI on the sampled CPU, paid by the target
	 * (a VM exit in a VM: ~20 us measured, bench/RESULTS.md). The program
	 * wakes user space (at most once per PYPERF_WAKEUP_NS per CPU) only for
	 *  - any sample while user space sleeps (`consumer_polling` 0: no samples
	 *    for a while), so an idle recording costs no wakeups;
	 *  - a stack not seen before (seen_stacks), when the process gets no code
	 *    snapshots (py_offsets.snap_code_size 0): it may hold a code object
	 *    user space has not read yet, which may be freed soon (a module body
	 *    runs once at import). With snapshots (every supported version) the
	 *    program copies such code objects itself and nothing is urgent;
	 *  - a record of an asyncio task (struct pyperf_task_key): it may end
	 *    before the next poll, and then cannot be named;
	 *  - a ring filling past `wakeup_bytes` (always).
	 * Otherwise user space takes the ring on its own timer, which fires on
	 * the recorder's CPU, not on the target's: every PYPERF_POLL_NS, 100 ms
	 * (at 50 ms its wakeups were a fifth of its CPU per sample), or sooner
	 * when samples flow fast enough to fill an eighth of the ring before. */
	PYPERF_WAKEUP_NS = 2000000,
	PYPERF_POLL_NS = 100000000,
	/* x86-64 system call number of futex(2): a thread blocked in it on an address inside the GIL is waiting
	 * for the GIL (see py_proc.gil_wait_addr). */
	PYPERF_NR_FUTEX = 202,
	/* 2.7's GIL is a POSIX semaphore (sem_t, 32 bytes on x86-64) that interpreter_lock points to. */
	PYPERF_SEM_SIZE = 32,
	/* record --kernel: kernel return addresses per record (bpf_get_stack), and per off-CPU interval in a system
	 * call (where it blocked, written when it returns: off_kstack). */
	PYPERF_KSTACK_MAX = 64,
	PYPERF_OFF_KSTACK_MAX = 32,
	/* record --native: most bytes of user stack copied per record (the `ustack_bytes` global, <= this). */
	PYPERF_USTACK_MAX = 65536,
	/* A user stack read that fails (bpf_probe_read_user is all or nothing: the copy crossed the end of the
	 * stack's mapping) is retried this many times, each ending at the next lower page boundary, then once more
	 * with the page of sp alone. */
	PYPERF_USTACK_RETRIES = 4,
	/* x86-64 glibc puts a thread's control block (the fs base) at the top of its stack mapping: a stack pointer
	 * below the fs base by less than this is taken to be on that thread's stack, which ends there. */
	PYPERF_TCB_STACK_MAX = 64 << 20,
	/* Bit of pyperf_frame.instr that says the frame is the rootmost Python frame of one activation of the
	 * evaluation loop (3.11+; see pyperf_frame). */
	PYPERF_INSTR_ENTRY_BIT = 31,
	/* Run roots a record keeps (pyperf_event_header.coro_frame): the rootmost ones when there are more. */
	PYPERF_TASK_ROOTS = 4,
	/* Entries of the task_coros map (user space's known tasks' coroutine frames, see struct pyperf_task_key). */
	PYPERF_TASK_COROS = 32768,
	/* PyCodeObject.co_flags of a coroutine's code (CO_COROUTINE | CO_ITERABLE_COROUTINE, 3.5+): only such a run
	 * root can be a task's (a generator's cannot). */
	PYPERF_CO_TASK_FLAGS = 0x180,
	/* Most sampling periods one cpu-clock sample stands for (pyperf_event_header.periods): a timer later than
	 * this (a VM paused for seconds) counts as this many, counted in pyperf_counters.clock_capped. */
	PYPERF_CLOCK_PERIODS_MAX = 1000,
};

/* pyperf_event_header.user_flags */
enum pyperf_user_flags {
	PYPERF_USER_REGS = 1, /* user_ip/sp/bp are set, and ustack_len bytes of stack from user_sp follow (maybe 0) */
};

/* pyperf_event_header.interp_flags: how the record's thread states across interpreters were read (3.13+). */
enum pyperf_interp_flags {
	/* The OS thread has thread states in more than one interpreter: it entered the one it runs from another
	 * (Interpreter.exec / .call, _interpreters.exec), whose thread state waits, swapped out. */
	PYPERF_INTERP_NESTED = 1,
	/* The calling interpreter's frames follow the running one's, from frame outer_start on (rootward). */
	PYPERF_INTERP_STITCHED = 2,
	/* The thread has thread states in several interpreters and which one runs could not be told (none attached,
	 * none or several made by Interpreter.exec): no frames, status ERROR. */
	PYPERF_INTERP_AMBIGUOUS = 4,
};

/* Where the program learns that code objects were freed (py_proc.gen_kind): while that count has not moved, an
 * address holds the code object it held, and its check word can come from the cache (struct pyperf_check_entry)
 * instead of a read of the object. */
enum pyperf_gen_kind {
	GEN_NONE = 0,   /* no such count: every new code object's check word is read */
	GEN_INTERP = 1, /* 3.14+: PyInterpreterState._code_object_generation (py_offsets.interp_code_gen), which
	                 * code_dealloc increments first thing, of the interpreter at py_proc.gen_interp */
	GEN_UPROBE = 2, /* py_proc.code_gen, incremented by a uprobe on the process's code_dealloc
	                 * (PyCode_Type.tp_dealloc, pyperf_code_freed) */
};

/* What a ring buffer record is (pyperf_event_header.kind). */
enum pyperf_event_kind {
	PYPERF_EVENT_SAMPLE = 0,  /* a CPU sample */
	/* record --off-cpu (the off_* fields): */
	PYPERF_EVENT_OFF_CPU = 1,       /* an off-CPU interval in a system call that just ended, with its stack */
	PYPERF_EVENT_OFF_CPU_START = 2, /* a thread left the CPU outside a system call (preempted, page fault): its
	                                 * stack now; the interval's end follows in an OFF_CPU_END record */
	PYPERF_EVENT_OFF_CPU_END = 3,   /* the end of the interval an OFF_CPU_START began (no frames); off_weight 0:
	                                 * a short one not drawn, dropped */
	PYPERF_EVENT_CODE = 4,          /* not a sample: a struct pyperf_code_snap (a code object's bytes, copied the
	                                 * first time a sample holds it), before the sample that holds it */
};

/* Why a thread left the CPU (pyperf_event_header.off_kind); the values are the on-disk OffCpuKind. */
enum pyperf_off_kind {
	OFF_KIND_UNKNOWN = 0,
	OFF_KIND_RUNNABLE = 1, /* preempted: still runnable, waiting for a CPU */
	OFF_KIND_BLOCKED = 2,  /* blocked, interruptible (task state S) */
	OFF_KIND_DISK = 3,     /* blocked, uninterruptible (task state D) */
	OFF_KIND_GIL = 4,      /* blocked in futex(2) on the GIL (or 3.15+: gil_requested) */
};

/* Values are also the on-disk values. */
enum pyperf_stack_status {
	STACK_STATUS_COMPLETE = 0,
	STACK_STATUS_ERROR = 1,
	STACK_STATUS_TRUNCATED = 2,
	STACK_STATUS_IDLE = 3, /* no thread state or no Python frame */
	STACK_STATUS_INCOMPLETE = 4, /* 3.15+: the walk ended without reaching the thread's base frame */
};

enum pyperf_gil_state {
	GIL_STATE_NO_INFO = 0,
	GIL_STATE_ERROR = 1,
	GIL_STATE_UNINITIALIZED = 2,
	GIL_STATE_NOT_LOCKED = 3,
	GIL_STATE_THIS_THREAD = 4,
	GIL_STATE_GLOBAL_CURRENT_THREAD = 5,
	GIL_STATE_OTHER_THREAD = 6,
	GIL_STATE_NULL = 7,
	GIL_STATE_WAITING = 8, /* 3.15+: this thread is waiting for the GIL (tstate->gil_requested) */
};

enum pyperf_thread_state {
	THREAD_STATE_UNKNOWN = 0,
	THREAD_STATE_MATCH = 1,
	THREAD_STATE_MISMATCH = 2,
	THREAD_STATE_THIS_THREAD_NULL = 3,
	THREAD_STATE_GLOBAL_CURRENT_THREAD_NULL = 4,
	THREAD_STATE_BOTH_NULL = 5,
};

enum pyperf_pthread_id {
	PTHREAD_ID_UNKNOWN = 0,
	PTHREAD_ID_MATCH = 1,
	PTHREAD_ID_MISMATCH = 2,
	PTHREAD_ID_THREAD_STATE_NULL = 3,
	PTHREAD_ID_NULL = 4,
	PTHREAD_ID_ERROR = 5,
};

/* How the instruction position of a frame is read (py_offsets.instr_kind). */
enum pyperf_instr_kind {
	INSTR_NONE = 0,
	INSTR_LASTI = 1,      /* int at frame_lasti (PyFrameObject.f_lasti, <= 3.10) */
	INSTR_PTR_MINUS_CODE = 2, /* pointer at frame_instr minus the code object's address (3.11+) */
};

/* What the GIL block at py_proc.gil_addr holds (py_offsets.gil_kind). */
enum pyperf_gil_kind {
	GIL_KIND_NONE = 0,   /* no GIL information: gil_state NO_INFO */
	GIL_KIND_STRUCT = 1, /* int locked (-1 = not created yet) + PyThreadState *last_holder (3.6+) */
	GIL_KIND_LOCK_PTR = 2, /* 2.7: the lock pointer `interpreter_lock` (NULL = GIL not created yet); the
	                        * holder is the global current thread (_PyThreadState_Current), NULL = released */
};

/* How the sampled thread's PyThreadState is recognised (py_offsets.match_kind). */
enum pyperf_match_kind {
	MATCH_NATIVE_TID = 0, /* tstate->native_thread_id == kernel tid (3.11+) */
	MATCH_PTHREAD = 1,    /* tstate->thread_id == pthread_self() == fsbase (glibc x86-64) */
};

/* Per-version offsets the walk needs, copied by user space from the version's
 * row (record/python/). -1 = absent in this version. All offsets are < the
 * corresponding *_BUF, the *_size fields say how many bytes to read. */
struct py_offsets {
	/* PyInterpreterState */
	__s16 interp_tstate_head;   /* tstate_head (<= 3.10) / threads.head (3.11+) */
	__s16 interp_gil_ptr;       /* ceval.gil pointer (3.12+), else -1 */
	/* The GIL block read at py_proc.gil_addr: struct _gil_runtime_state, and
	 * on 3.7-3.11 also _PyRuntime.gilstate.tstate_current when it is close
	 * enough (one read instead of two). Offsets are relative to gil_addr. */
	__s16 gil_locked;           /* int */
	__s16 gil_last_holder;      /* PyThreadState * */
	__s16 gil_tstate_current;   /* PyThreadState * of the GIL holder, or -1: read tstate_current_addr */
	/* PyThreadState */
	__s16 tstate_next;
	__s16 tstate_interp;        /* PyInterpreterState * (for the 3.12+ GIL pointer) */
	__s16 tstate_thread_id;     /* pthread_t */
	__s16 tstate_native_thread_id; /* kernel tid (3.11+) */
	__s16 tstate_frame;         /* frame pointer read directly from tstate (<= 3.10 .frame, 3.13 .current_frame), or -1 */
	__s16 tstate_cframe;        /* _PyCFrame * (3.11-3.12), or -1 */
	__s16 cframe_current_frame; /* _PyCFrame.current_frame (3.11-3.12), or -1 */
	/* frame (PyFrameObject <= 3.10, _PyInterpreterFrame 3.11+) */
	__s16 frame_back;
	__s16 frame_code;
	__s16 frame_instr;          /* see instr_kind */
	__s16 frame_owner;          /* u8 owner (3.11+), or -1 */
	/* PyCodeObject */
	/* The frame's check word: ONE read of code_span_len bytes at
	 * code + code_span, mixing co_firstlineno, co_filename and co_name (offsets
	 * relative to code_span) as pyperf_code_check() does. A line number alone
	 * cannot tell two module code objects apart (both start at line 1); the
	 * string pointers can. code_span -1 = no check. */
	__s16 code_span;
	__u16 code_span_len;
	__s16 check_firstlineno;
	__s16 check_filename;
	__s16 check_name;
	/* bytes read in one go */
	__u16 tstate_size;
	__u16 frame_size;
	__u16 gil_size;
	__u8 instr_kind;            /* enum pyperf_instr_kind */
	__u8 match_kind;            /* enum pyperf_match_kind */
	__s16 owner_cstack;         /* frames whose owner is this or above are the interpreter's own, skipped
	                             * (3.12/3.13 C-stack shims, 3.14+ entry frames: 3), -1 none */
	/* First-local probe (<= 3.10 only, for the self/cls class-name heuristic; -1 on 3.11+,
	 * which has co_qualname and pays nothing for this): PyFrameObject.f_localsplus, read
	 * within the frame block; PyObject.ob_type; co_argcount relative to code_span (inside
	 * the check read). See struct pyperf_frame.first_local. */
	__s16 frame_localsplus;
	__s16 object_type;
	__s16 check_argcount;
	__u8 gil_kind;              /* enum pyperf_gil_kind */
	/* 3.12+: no global "current thread state" exists any more (_Py_tss_tstate is a C
	 * thread-local). The GIL holder stands in for it: global current thread =
	 * gil.locked == 1 ? gil.last_holder : NULL, which is what 3.7-3.11's
	 * gilstate.tstate_current holds (set after taking the GIL, cleared before dropping
	 * it). 0 = use tstate_current_addr (or nothing). */
	__u8 global_from_gil;
	/* 3.15+: PyThreadState.base_frame, the sentinel at the bottom of the
	 * thread's frames: the walk is complete when it reaches it, and
	 * STACK_STATUS_INCOMPLETE when it ends anywhere else. -1 = none. */
	__s16 tstate_base_frame;
	/* 3.15+: PyThreadState.gil_requested (int): the thread waits for the GIL
	 * (GIL_STATE_WAITING). -1 = none. */
	__s16 tstate_gil_requested;
	/* 3.11: _PyInterpreterFrame.is_entry (bool): the frame is the first of its activation of the evaluation
	 * loop (3.12+ mark that with a C-stack shim frame instead, see owner_cstack). -1 = none. */
	__s16 frame_is_entry;
	/* Code snapshots (struct pyperf_code_snap): bytes of the code object copied (0 = no snapshots), and the
	 * offsets of its name, qualified name (-1 = none), file name and line table (co_lnotab <= 3.9), and of a
	 * bytes object's size and content. */
	__u16 snap_code_size;
	__s16 code_name;
	__s16 code_qualname;
	__s16 code_filename;
	__s16 code_linetable;
	__s16 bytes_size;
	__s16 bytes_data;
	/* 3.14+: PyInterpreterState._code_object_generation (gen_kind GEN_INTERP), else -1. It follows the
	 * interpreter's own GIL: gil_code_gen is its offset in the GIL block (-1 none), used when the block read is
	 * at the same address (the GIL is the interpreter's own), which saves a read per sample. */
	__s16 interp_code_gen;
	__s16 gil_code_gen;
	/* 3.11+: PyThreadState.datastack_chunk, the data stack chunk of the thread's newest frames; a window read
	 * that would start below a chunk starts at it (below is often unmapped: such a read faults, ~1.7 us), and the
	 * chunk's first word is the older chunk. -1 = unknown. */
	__s16 tstate_datastack_chunk;
	/* 3.11+: _PyInterpreterFrame.owner of a generator's or coroutine's frame (FRAME_OWNED_BY_GENERATOR, 1): the
	 * frames whose run roots a record carries (see pyperf_event_header.coro_frame). -1 = none. */
	__s16 owner_generator;
	/* PyCodeObject.co_flags (int), read only for a sample whose run roots are no known task's. -1 = none. */
	__s16 code_flags;
	/* 3.9+: PyInterpreterState.gc.collecting (int) of the sampled thread's interpreter (tstate_interp): 1 while
	 * its cyclic garbage collector runs. -1 = none (see py_proc.gc_addr). */
	__s16 interp_gc_collecting;
	/* PyInterpreterState.id (int64; 0 = the main interpreter), -1 = none: records carry it (interp_id). */
	__s16 interp_id;
	/* PyInterpreterState.next: the next older interpreter, whose thread list the walk takes next. */
	__s16 interp_next;
	/* 3.13+: PyThreadState.state (int; the thread state is current on its thread and holds its interpreter's GIL
	 * when it equals state_attached) and PyThreadState._whence (int; whence_exec: made by Interpreter.exec for
	 * the call, which swaps the thread's previous thread state out until it returns). -1 = none: the walk then
	 * takes the thread's first thread state found, newest interpreter first, and stitches nothing. */
	__s16 tstate_state;
	__s16 tstate_whence;
	__u8 state_attached;
	__u8 whence_exec;
	/* 3.7+: PyThreadState.context (PyContext *), the thread's current contextvars context, inside the tstate
	 * block: where a process's trace context is read from (struct pyperf_trace_conf). -1 = none. */
	__s16 tstate_context;
	__u8 _pad_off[4];
};

/* Value of the `procs` map (key: tgid), filled by user space. Addresses have
 * the load bias applied. */
struct py_proc {
	__u64 interp_head_addr;    /* address of the PyInterpreterState * of the main interpreter
	                            * (&_PyRuntime.interpreters.head, pre-3.7 &interp_head) */
	__u64 tstate_current_addr; /* address of the GIL holder's PyThreadState * (&_PyRuntime.gilstate.tstate_current
	                            * 3.7-3.11, &_PyThreadState_Current pre-3.7), 0 = none (3.12+) */
	__u64 gil_addr;            /* address of the GIL block (see py_offsets.gil_*) (3.7-3.11), 0 = read through interp_gil_ptr */
	__u64 gil_holder_addr;     /* pre-3.7: address of the static gil_last_holder when it is not in the
	                            * GIL block (read separately), else 0 */
	__u64 code_mask;           /* mask applied to the code pointer read from a frame (tagged refs), ~0 normally */
	__u64 skip_code;           /* frames whose (masked) code pointer equals this are skipped: &_Py_NoneStruct
	                            * on 3.13+ (C-stack entry frames hold Py_None in f_executable), 0 = none */
	__u8 major;
	__u8 minor;
	__u8 micro;
	__u8 frame_window;         /* 1: frames are on the data stack (3.11+), read them by windows (PYPERF_FRAME_WINDOW) */
	__u8 ns_tid;               /* 1: the process is in another PID namespace than pyperf: its thread states hold
	                            * the tids of that namespace (the task's innermost pid), not the host's */
	__u8 track_tasks;          /* 1: records carry their run roots (coro_frame; needs off.owner_generator) */
	__u8 _pad[2];
	/* Where the GIL's condition variables and mutexes are: a thread blocked in futex(2) on an address in
	 * [gil_wait_addr, gil_wait_addr + gil_wait_len) waits for the GIL. gil_wait_addr 0: relative to the GIL
	 * block the walk found (3.12+: interp->ceval.gil; 2.7: the semaphore interpreter_lock points to);
	 * gil_wait_len 0: unknown. */
	__u64 gil_wait_addr;
	__u32 gil_wait_len;
	/* The check-word cache (enum pyperf_gen_kind). cache_id: this registration's number, unique in the session
	 * (1 to 2^24 - 1; 0 = no cache): a pid used again, or registered again, never meets the entries of the
	 * earlier one. */
	__u32 cache_id;
	__u64 code_gen;   /* GEN_UPROBE: code objects freed since registration (the uprobe increments it) */
	__u64 gen_interp; /* GEN_INTERP: the main interpreter (its id 0 cannot be destroyed before the process
	                   * exits); only its threads' frames use the cache */
	/* 2.7-3.8: address of the process's one "collecting" flag (int: 2.7/3.6 gcmodule.c's static, 3.7/3.8
	 * _PyRuntime.gc.collecting), 0 = none (3.9+: off.interp_gc_collecting). */
	__u64 gc_addr;
	/* 3.13+: &_PyRuntime.interpreters.head, which .main follows (one 16-byte read tells whether the process has
	 * one interpreter: head == main), or 0: no subinterpreter handling (see py_offsets.tstate_state). */
	__u64 interps_addr;
	__u8 gen_kind;    /* enum pyperf_gen_kind */
	__u8 _pad2[7];
	struct py_offsets off;
	__u8 _pad3[4]; /* to a multiple of 8 bytes: explicit, as the generated Rust names every field */
};

/*
 * One entry of a scratch slot's check-word cache. Valid for a frame whose code object is at `code` while `tag`
 * equals the sample's: cache_id << 40 | the freed-code count (mod 2^40). The count moves before any code object
 * of the process is freed, and the code objects of a sampled stack are alive all along the sample (the frames
 * hold them), so an entry written in one count describes the same object at every sample of that count.
 */
struct pyperf_check_entry {
	__u64 code;
	__u64 tag;
	__u32 check;
	__s32 argcount; /* <= 3.10: co_argcount, read with the check word (the first-local probe) */
};

/* One frame of a sample. */
struct pyperf_frame {
	__u64 code;  /* PyCodeObject address */
	/* Raw instruction position (see enum pyperf_instr_kind) in the low 31 bits, a signed 31-bit value
	 * (f_lasti -1 is 0x7fffffff); bit PYPERF_INSTR_ENTRY_BIT, 3.11+ only: this frame is the rootmost Python
	 * frame of one activation of the evaluation loop (3.11 _PyInterpreterFrame.is_entry; 3.12+ the next frame
	 * rootward is a C-stack shim or entry frame, which the walk skips). The native unwinder's merge splits the
	 * Python frames into activations with it. */
	__u32 instr;
	__u32 check; /* pyperf_code_check() of the code object, to detect freed-and-reused addresses */
};

/* <= 3.10 only (3.11+ has co_qualname, and its records have none: 16 bytes a frame, not 32, which was a tenth of
 * a 200-frame sample's time): after a record's frames come as many of these when its header's `has_locals` is
 * set, the frame's first local variable, read at sample time, for the self/cls class-name heuristic.
 * Filled when the code object has co_argcount >= 1 (so localsplus[0] is the
	 * first argument, not value-stack garbage) and the slot is not NULL (a `del`ed
	 * argument, or one moved into a cell, reads as NULL: both fields 0).
	 *   first_local      = f_localsplus[0], the object (e.g. the instance bound to
	 *                      `self`, or the class bound to `cls`). User space must NOT
	 *                      dereference it unless first_local_type shows it is a class
	 *                      (a type object: long-lived), never an instance, which may
	 *                      be freed and reused by the time user space reads.
	 *   first_local_type = Py_TYPE(first_local), read at sample time: a type object.
	 * Use: co_varnames[0] == "self" -> class name = first_local_type->tp_name;
	 *      co_varnames[0] == "cls" and first_local_type is a metatype (== &PyType_Type,
	 *      or its tp_flags has Py_TPFLAGS_TYPE_SUBCLASS) -> class name =
	 *      ((PyTypeObject *)first_local)->tp_name. */
struct pyperf_frame_local {
	__u64 first_local;
	__u64 first_local_type;
};

/* Fixed part of a ring buffer record; `nframes` pyperf_frame follow it. */
struct pyperf_event_header {
	__u64 ktime;  /* bpf_ktime_get_ns() */
	__u32 pid;    /* tgid */
	__u32 tid;
	__u32 cpu;
	__u32 nframes;
	char comm[PYPERF_COMM_LEN];
	__u8 thread_state_match; /* enum pyperf_thread_state */
	__u8 gil_state;          /* enum pyperf_gil_state */
	__u8 pthread_id_match;   /* enum pyperf_pthread_id */
	__u8 stack_status;       /* enum pyperf_stack_status */
	__u8 kind;               /* enum pyperf_event_kind */
	__u8 off_kind;           /* enum pyperf_off_kind (off-CPU records) */
	__u8 off_flags;          /* off_cpu_entry.flags (off-CPU records) */
	__u8 has_locals;         /* 1: nframes pyperf_frame_local follow the frames (<= 3.10) */
	/* Off-CPU records only (0 in samples): */
	__u64 off_start;    /* ktime of the switch-out that began it */
	__u64 off_duration; /* ns off CPU (a wait in a system call that went on CPU in between: its times off CPU) */
	__u64 off_runnable; /* of which runnable: woken or preempted, waiting for a CPU */
	__u64 off_weight;   /* ns it counts for: its duration, or off_cpu_min_ns for a sampled short one */
	__s32 off_syscall;  /* system call it blocked in, -1 none */
	/* CPU samples: the sampling periods it stands for, >= 1 (0 in other records). More than 1 when the cpu-clock
	 * event's timer fired late by whole periods: the CPU did not run this machine meanwhile (a hypervisor's steal,
	 * a paused VM) while the thread was on it (clock_periods in pyperf.bpf.c). */
	__u32 periods;
	/* record --kernel / --native. The record is this header, nframes pyperf_frame, nframes pyperf_frame_local
	 * if has_locals, nkernel __u64 kernel addresses, ustack_len bytes of user stack, in that order, with no
	 * gaps. */
	__u16 nkernel;      /* kernel addresses after the frames (leaf first): 0 without --kernel or in user mode */
	__u16 user_flags;   /* enum pyperf_user_flags */
	__u32 ustack_len;   /* bytes of user stack copied from user_sp up */
	__u64 user_ip;      /* the user registers: where the thread is in user space (in a system call: */
	__u64 user_sp;      /* where it entered the kernel) */
	__u64 user_bp;
	/* asyncio tasks (py_proc.track_tasks, 3.11+): the record's *run roots*. A run is a maximal sequence of
	 * adjacent generator-owned frames (owner == py_offsets.owner_generator) with no skipped interpreter frame (a
	 * C-stack shim, an entry frame) between them; its root is its rootmost frame: the next frame rootward is not
	 * generator-owned, is a skipped interpreter frame, or the walk ended there. A running asyncio task's
	 * coroutine is the root of the run of its awaiting coroutines (user space matches it to the task). Written
	 * leaf to root, run k into slot k % PYPERF_TASK_ROOTS, so that with more than PYPERF_TASK_ROOTS runs the
	 * slots hold the rootmost ones. ncoro: the number of runs below 256, else 252 + the number mod 4 (so that
	 * ncoro % PYPERF_TASK_ROOTS is still the next slot; 252-255: at least that many). All 0 when not tracked. */
	__u64 coro_frame[PYPERF_TASK_ROOTS]; /* the run root's frame (_PyInterpreterFrame) address */
	__u16 coro_index[PYPERF_TASK_ROOTS]; /* its index in the record's frames (0 = leaf) */
	__u8 ncoro;
	/* 1: the sampled thread was running the interpreter's cyclic garbage collector: the interpreter's
	 * `collecting` flag was set and this thread held the GIL (or no GIL exists yet: one thread). The flag is
	 * the interpreter's, not the thread's: a thread running C code with the GIL released beside a collection
	 * is not collecting (docs/design/gc.md). */
	__u8 in_gc;
	__u8 interp_flags;      /* enum pyperf_interp_flags */
	__u8 _pad3[5];
	/* PyInterpreterState.id of the interpreter the frames run in (0 = main), -1 = unknown (no thread state, or
	 * py_offsets.interp_id -1). */
	__s64 interp_id;
	/* PYPERF_INTERP_STITCHED: frames [outer_start, nframes) are the calling interpreter's (outer_interp_id), from
	 * the thread's swapped-out thread state there: the frames that called Interpreter.exec, down to its root. */
	__s64 outer_interp_id;
	__u32 outer_start;
	/* The OpenTelemetry span active on the thread (a process with a struct pyperf_trace_conf): enum
	 * pyperf_trace_state; with TRACE_FOUND its trace id (trace_hi:trace_lo, 128 bits) and span id, as the SDK holds
	 * them (never 0); with TRACE_DISCOVER or TRACE_SPAN_TYPE the object user space should look at (trace_probe). */
	__u8 trace_state;
	__u8 _pad4[3];
	__u64 trace_hi;
	__u64 trace_lo;
	__u64 span_id;
	__u64 trace_probe;
};

/* The ring buffer record as built in scratch memory: the frames, then `tail` for the kernel addresses and the user
 * stack, which start right after the last frame used (so at offsets known only at run time). */
struct pyperf_event {
	struct pyperf_event_header hdr;
	struct pyperf_frame frames[PYPERF_MAX_FRAMES]; /* leaf first */
	__u8 tail[PYPERF_MAX_FRAMES * sizeof(struct pyperf_frame_local) + PYPERF_KSTACK_MAX * 8 + PYPERF_USTACK_MAX];
};

/* A region of the target's memory in a code snapshot: `len` bytes from `addr` (0: not copied). */
struct pyperf_snap_region {
	__u64 addr;
	__u32 len;
	__u32 _pad;
};

/*
 * PYPERF_EVENT_CODE: the bytes of a code object and of the objects it names (name, qualified name, file name,
 * line table), copied by the program the first time a new stack holds it (known_code), so that user space can
 * name the frames of a code object freed before it reads it (module bodies run once at import, programs that
 * exit). The record ends after `table`'s used bytes (regions[4].len).
 */
struct pyperf_code_snap {
	struct pyperf_event_header hdr; /* kind PYPERF_EVENT_CODE, ktime, pid, tid; nframes 0 */
	__u64 code;
	__u32 check; /* the code object's check word, as in the frames */
	__u32 _pad;
	struct pyperf_snap_region regions[PYPERF_SNAP_REGIONS]; /* code, name, qualname, file, table, in that order */
	__u8 code_obj[PYPERF_SNAP_CODE];
	__u8 name[PYPERF_SNAP_NAME];
	__u8 qualname[PYPERF_SNAP_NAME];
	__u8 file[PYPERF_SNAP_FILE];
	__u8 table[PYPERF_SNAP_TABLE];
};

/* Per-CPU counters; user space sums them over CPUs. */
/* Key of the task_coros map (asyncio tasks, py_proc.track_tasks): user space puts there the frame address of
 * each listed task's coroutine (value 1) and of run roots it found to be no task's (value 0), and frame 0 when
 * the process's tasks can be read at all. A record of that process whose rootmost run root is a coroutine's
 * (co_flags) and not one of those no task's runs a task: it wakes user space at once (PYPERF_WAKEUP_NS), which
 * names the task from memory while it still runs. At the 10 ms poll a request's task (tens of milliseconds,
 * its CPU at its end) was often gone, or another at its address; a list taken for another record meanwhile
 * forgets it. The value 1 only says user space listed it. */
struct pyperf_task_key {
	__u64 frame;
	__u32 pid;
	__u32 _pad;
};

struct pyperf_counters {
	__u64 samples;           /* perf samples that hit a target process */
	__u64 events;            /* events written to the ring buffer */
	__u64 rb_full;           /* samples dropped (the periods they stood for, pyperf_event_header.periods): ring
	                          * buffer full */
	__u64 truncated;         /* stacks deeper than PYPERF_MAX_FRAMES */
	__u64 read_errors;       /* failed reads of the target's memory */
	__u64 thread_walk_bound; /* thread-list walks that hit PYPERF_MAX_THREADS */
	__u64 thread_walks;      /* thread-state cache misses (list walked) */
	__u64 idle;              /* events with stack_status IDLE */
	__u64 target_ns;         /* time spent on samples of target processes, when measure_cost is set */
	__u64 incomplete;        /* walks that ended without reaching the thread's base frame (3.15+) */
	__u64 base_reached;      /* walks that ended at the thread's base frame (3.15+): checked complete */
	/* record --off-cpu: intervals of followed threads that ended */
	__u64 off_cpu_ended;     /* switch-ins after a switch-out seen */
	__u64 off_cpu_short;     /* shorter than off_cpu_min_ns and not drawn: dropped */
	__u64 off_cpu_sampled;   /* shorter than off_cpu_min_ns and drawn: kept, weighing off_cpu_min_ns */
	__u64 off_cpu_events;    /* off-CPU records written to the ring buffer */
	__u64 off_cpu_rb_full;   /* off-CPU records dropped: ring buffer full */
	__u64 off_cpu_short_ns;  /* total length of the dropped ones */
	__u64 off_cpu_busy;      /* intervals lost: the CPU's off-CPU scratch slot was in use (a preempted run) */
	__u64 off_cpu_stale;     /* marks of threads already off CPU when followed that had woken meanwhile: dropped */
	__u64 off_cpu_in_unseen; /* intervals whose switch-in the sched_switch tracepoint never showed: end estimated */
	/* record --native / --kernel */
	__u64 ustack_copies;     /* records with a copy of the user stack (ustack_len > 0) */
	__u64 ustack_bytes;      /* their bytes, total */
	__u64 ustack_short;      /* copies cut short: the first read failed, a shorter one worked */
	__u64 ustack_failed;     /* records with user registers but no stack copy (every read failed) */
	__u64 kernel_stacks;     /* records with kernel addresses (nkernel > 0) */
	__u64 off_kstack_lost;   /* off-CPU intervals in a system call whose kernel stack was not taken at the block */
	/* code snapshots (PYPERF_EVENT_CODE) */
	__u64 code_snaps;        /* sent */
	__u64 code_snap_failed;  /* not sent: the code object unreadable, or the ring buffer full */
	/* check words of frames (a code object not the previous frame's) */
	__u64 checks_read;       /* read from the code object */
	__u64 checks_cached;     /* taken from the cache (struct pyperf_check_entry) */
	__u64 window_faults;     /* 3.11+ window reads that faulted (the frame then copied alone): ~1.7 us each */
	__u64 task_wakeups;      /* wakeups for a record of an asyncio task (struct pyperf_task_key) */
	__u64 in_gc;             /* records of a thread running the cyclic garbage collector (header in_gc) */
	/* subinterpreters (3.13+, pyperf_interp_flags) */
	__u64 interp_nested;     /* records of a thread in an interpreter it entered from another */
	__u64 interp_unstitched; /* of which the calling interpreter's frames could not be read whole: not stitched */
	__u64 interp_ambiguous;  /* records whose running thread state could not be told (no frames) */
	/* trace context (struct pyperf_trace_conf) */
	__u64 trace_found;       /* records with an active span's ids */
	__u64 trace_unreadable;  /* records whose trace context could not be read (TRACE_UNREADABLE) */
	/* cpu-clock samples whose timer fired late by whole periods (pyperf_event_header.periods > 1) */
	__u64 clock_late;        /* such samples */
	__u64 clock_added;       /* the periods they stand for beyond their own */
	__u64 clock_capped;      /* of them, late by more than PYPERF_CLOCK_PERIODS_MAX periods: counted as that many */
};

/* Value of the off_cpu map (key: pid_tgid): a followed thread that went off CPU and has not ended the interval
 * yet. Blocked in a system call: the interval ends when the call returns (sys_exit, in the thread's own context:
 * its stack is walked then). Otherwise its stack was walked when it left (walked = 1) and the interval ends
 * when it is switched in. */
struct off_cpu_entry {
	__u64 start;    /* ktime of the switch-out that began it */
	__u64 out;      /* ktime of the last switch-out; 0 = on CPU now (switched in, the call not returned yet) */
	__u64 wake;     /* ktime of the wakeup after that switch-out, 0 = none yet */
	__u64 uaddr;    /* first system call argument (futex: the address waited on) */
	__u64 off_ns;   /* time off CPU before the last switch-in (a wait in a system call may be several) */
	__u64 runnable_ns; /* of which runnable */
	/* The thread's sched_info.run_delay + 1 at the last switch-out (the kernel's total wait in run queues, which
	 * counts a hypervisor's steal as waiting, as the guest's clock does); 0 = not known (pyperf_kernel_layout
	 * .task_run_delay 0, or a mark made by user space). Where the switch-in goes unseen, its growth says how long
	 * the thread waited to come back (off_cpu_unseen_in). */
	__u64 run_delay;
	__s32 syscall;  /* system call number, -1 = not in one */
	__u8 kind;      /* enum pyperf_off_kind as known at the switch-out (runnable, blocked, disk) */
	__u8 flags;     /* on-disk OffCpuInterval flags: 1 = put there by user space for a thread already off CPU
	                 * when it was first followed (start = that moment) */
	__u8 walked;    /* 1: its stack went out in an OFF_CPU_START record */
	__u8 out_runnable; /* the last switch-out was a preemption (runnable from it on) */
};

/* pyperf dump --native (bpf/regs.bpf.c): one thread's user registers as its last entry into the kernel saved them. */
struct pyperf_task_regs {
	__u64 tid;
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__s64 orig_ax; /* the system call it is in, -1 (or an interrupt's ~vector) outside one */
};

/* Where the kernel fields the programs read lie in this kernel (byte offsets), found by user space in the running
 * kernel's BTF before loading (record/sampler/kernel.rs) and set as .rodata: the verifier sees constants and checks
 * every access against the kernel's own types, as with CO-RE, but libbpf need not parse the kernel's 5 MB of BTF
 * at each start (bench/RESULTS.md, round 2: ~15 ms of a ~40 ms start-up). */
struct pyperf_kernel_layout {
	__u32 task_pid;        /* task_struct.pid (int) */
	__u32 task_tgid;       /* task_struct.tgid (int) */
	__u32 task_thread_pid; /* task_struct.thread_pid (struct pid *) */
	__u32 task_start_time; /* task_struct.start_time (u64) */
	__u32 task_mm;         /* task_struct.mm (struct mm_struct *) */
	__u32 task_fsbase;     /* task_struct.thread.fsbase (x86-64: the thread pointer; unsigned long) */
	__u32 pid_level;       /* struct pid.level (unsigned int) */
	__u32 pid_numbers;     /* struct pid.numbers (struct upid[]) */
	__u32 upid_size;       /* sizeof(struct upid): the stride of numbers */
	__u32 upid_nr;         /* struct upid.nr (int) */
	__u32 mm_start_stack;  /* mm_struct.start_stack (unsigned long) */
	__u32 task_runtime;    /* task_struct.se.sum_exec_runtime (u64): its CPU time, ns */
	__u32 task_runtime_at_pick; /* task_struct.se.prev_sum_exec_runtime (u64): the same when last picked to run */
	/* cpu-clock samples (clock_periods): 0 = not found in this kernel's BTF, then every sample stands for one period */
	__u32 perf_ctx_event;       /* bpf_perf_event_data_kern.event (struct perf_event *): the context's event */
	__u32 perf_timer_expires;   /* perf_event.hw.hrtimer.node.expires (ktime_t): when its timer was due */
	__u32 task_run_delay;       /* task_struct.sched_info.run_delay (u64, CONFIG_SCHED_INFO): its total wait in run
	                             * queues, ns; 0 = not found (off_cpu_unseen_in then falls back to CPU time) */
};

/* record --off-cpu --kernel: the kernel stack of a thread that blocked in a system call, taken when it blocked
 * (sched_switch) and written into the interval's record when the call returns (sys_exit), where only the return
 * path is on the stack. Value of the off_kstack map (key: pid_tgid). */
struct off_kstack {
	__u64 start; /* off_cpu_entry.start of the interval it belongs to (else stale: not used) */
	__u64 n;     /* addresses in ips, leaf first */
	__u64 ips[PYPERF_OFF_KSTACK_MAX];
};

/* The thread state a sampled thread runs, as find_tstate (bpf/thread.bpf.h) found it: the value of its per-thread
 * cache (tstate_cache, key pid_tgid) and of the scratch slot's last thread. */
struct pyperf_thread_found {
	__u64 ts;    /* PyThreadState address, 0 = none */
	__u64 start; /* start time of the thread it was found for: a tid reused by a new thread must not inherit it */
	__s64 interp_id;       /* PyInterpreterState.id of its interpreter, -1 unknown */
	__s64 outer_interp_id; /* of `outer`'s, -1 unknown */
	__u64 outer;           /* the thread's thread state in the interpreter that called into this one, 0 = none */
	__u64 flags;           /* enum pyperf_interp_flags */
};

/* Per-CPU scratch (one slot per CPU of the `scratch` array): too big for the
 * 512-byte BPF stack. The counters live in the same value so a sample costs
 * one lookup, not two. */
/* What a record says of the thread's trace context (pyperf_event_header.trace_state). */
enum pyperf_trace_state {
	TRACE_NONE = 0,       /* not looked for (no struct pyperf_trace_conf), or no span is active */
	TRACE_FOUND = 1,      /* trace_hi, trace_lo, span_id hold the active span's ids */
	TRACE_UNREADABLE = 2, /* a span may be active but was not read: an unexpected object or layout, a failed read
	                       * (counted in pyperf_counters.trace_unreadable); never a guess */
	TRACE_DISCOVER = 3,   /* conf.var is not known yet: trace_probe is the context's variables (a HAMT) */
	TRACE_SPAN_TYPE = 4,  /* the active span is of a type no conf.paths entry knows: trace_probe is the span */
};

enum pyperf_trace_limits {
	PYPERF_SPAN_TYPES = 4,    /* span classes a process's conf knows the path to their span context of */
	PYPERF_SPAN_STEPS = 3,    /* steps of such a path */
	PYPERF_CONTEXT_ITEMS = 8, /* entries of an OpenTelemetry Context (a dict) searched for the span */
	PYPERF_HAMT_DEPTH = 7,    /* levels of a HAMT (32-bit hashes, 5 bits a level) */
};

/* One step of a path from a span object to its span context (enum pyperf_span_op), relative to the current
 * address p (the span at first). */
enum pyperf_span_op {
	SPAN_DEREF = 0,       /* p = *(p + off), which must not be 0 */
	SPAN_DEREF_TAGGED = 1, /* w = *(p + off) must have bit 0 set (3.12: a tagged values pointer); p = w + 1 */
	SPAN_CHECK_NULL = 2,  /* *(p + off) must be 0 (3.13+: no dict has taken the inline values over) */
	SPAN_CHECK_BYTE = 3,  /* the byte at p + off must be 1 (3.13+: the inline values are valid) */
};

/* The path from a span of class `type` to its span context (the attribute `_context`), as user space found it
 * for that class: nsteps steps, the last of which (a SPAN_DEREF) yields the span context. */
struct pyperf_span_path {
	__u64 type;
	__s32 off[PYPERF_SPAN_STEPS];
	__u8 op[PYPERF_SPAN_STEPS];
	__u8 nsteps;
};

/* Value of the `traces` map (key: tgid), filled by user space for a process that may use the OpenTelemetry SDK:
 * where its active span is. Per sample: tstate->context (py_offsets.tstate_context) -> ctx_vars (a HAMT) ->
 * the value of ContextVar `var` (an OpenTelemetry Context, a dict) -> its item `span_key` (the span) -> its span
 * context (a path of paths[]) -> items 0 and 1 (trace id, span id: ints). Every object on the way is type
 * checked; anything unexpected is TRACE_UNREADABLE. Offsets from the version's row. */
struct pyperf_trace_conf {
	__u64 var;               /* the ContextVar, 0: not known yet (records carry TRACE_DISCOVER) */
	__u64 span_key;          /* the str keying the span in the Context, 0: not known yet */
	__u64 bitmap_type;       /* type of HAMT bitmap nodes (hamt_bitmap_node) */
	__u64 array_type;        /* type of HAMT array nodes (hamt_array_node), 0 = unknown: not followed */
	__u64 context_type;      /* type of the Context (a dict subclass) */
	__u64 span_context_type; /* type of span contexts (SpanContext, a tuple subclass) */
	__u64 int_type;          /* int */
	struct pyperf_span_path paths[PYPERF_SPAN_TYPES];
	__u32 var_hash;          /* var's hash as the HAMT folds it to 32 bits */
	__s16 context_vars;      /* PyContext.ctx_vars */
	__s16 hamt_root;         /* PyHamtObject.h_root */
	__s16 hamt_bitmap;       /* PyHamtNode_Bitmap.b_bitmap (u32) */
	__s16 hamt_bitmap_array; /* PyHamtNode_Bitmap.b_array */
	__s16 hamt_array;        /* PyHamtNode_Array.a_array */
	__s16 object_type;       /* PyObject.ob_type */
	__s16 dict_keys;         /* PyDictObject.ma_keys, ma_values right after it */
	__s16 keys_size;         /* <= 3.10: PyDictKeysObject.dk_size (i64), else -1 */
	__s16 keys_log2_index_bytes; /* 3.11+: dk_log2_index_bytes (u8), else -1 */
	__s16 keys_kind;         /* 3.11+: dk_kind (u8; 0 general entries, else unicode entries), else -1 */
	__s16 keys_nentries;     /* dk_nentries (i64) */
	__s16 keys_indices;      /* dk_indices */
	__s16 tuple_item;        /* PyTupleObject.ob_item */
	__s16 long_size;         /* <= 3.11: ob_size (i64, digits), 3.12+: lv_tag (u64, digits << 3 | sign) */
	__s16 long_digits;       /* ob_digit (30-bit digits, u32) */
	__u8 long_tagged;        /* 1: long_size is lv_tag */
	__u8 _pad[5];
};

/* The Python frame walk's state (bpf/walk.bpf.h), in the scratch, not on the stack: the programs that walk
 * frames from tp_btf tracepoints (off-CPU) have no private stack, and their frame plus read_trace's exceeded the
 * verifier's 512 bytes (a 6.18 kernel refused pyperf_switch). Plain data, written by pyperf_walk_frame (a global
 * function, whose pointer arguments point to memory without pointer types: proc and s are passed to it apart, see
 * struct walk_ctx). */
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
	/* Run roots (pyperf_event_header.coro_frame): */
	__u64 run_addr;   /* the address and index of the last frame walk_frame took: while in_run (the fast path */
	__u32 run_index;  /* takes none then), the rootmost frame of the open run so far */
	__u32 gen_owner;  /* owner value of generator frames (py_offsets.owner_generator); 256 (no u8) = not tracked */
	__u32 nruns;      /* runs ended so far (not capped) */
	__u32 n;
	__u8 status;
	__u8 reached_base;
	__u8 fast;        /* the sample may take frames the fast way (see pyperf_walk_fast) */
	__u8 in_run;      /* the last frame taken is generator-owned: a run is open */
};

struct pyperf_scratch {
	struct pyperf_counters counters;
	__u64 last_wakeup; /* ktime of this CPU's last ring buffer wakeup */
	/* The thread state found for the last sample on this CPU: tried before the tstate_cache (a hash
	 * lookup), validated like it by the read of the thread state that is needed anyway. */
	__u64 last_pid_tgid;
	struct pyperf_thread_found last; /* of that thread; last.ts 0 = none */
	__u64 interp_flags; /* find_tstate's enum pyperf_interp_flags, also when it finds no thread state */
	__u64 found[PYPERF_THREAD_MATCHES]; /* find_tstate's walk: the sampled thread's thread states, newest interpreter first */
	__u64 new_stack; /* a new stack's wakeup is pending (rate limit) */
	__u64 busy;      /* off-CPU slot: a program is using it (sys_exit programs may be preempted) */
	__u8 tbuf[PYPERF_TSTATE_BUF];
	__u8 gbuf[PYPERF_GIL_BUF];
	__u8 cbuf[PYPERF_CODE_BUF];
	/* frames: one frame, or a window of frames (3.11+); PYPERF_FRAME_BUF more so that fields of a frame
	 * that ends the window are read with the same bounds as any other */
	__u8 wbuf[PYPERF_FRAME_WINDOW + PYPERF_FRAME_BUF];
	/* the trace context's reads (trace.bpf.h): a HAMT node's head and pairs, a Context's entries */
	__u8 xbuf[PYPERF_CONTEXT_ITEMS * 24 + 64];
	struct pyperf_event ev;
	/* <= 3.10: the frames' first locals, copied after the frames when the record is written */
	struct pyperf_frame_local locals[PYPERF_MAX_FRAMES];
	struct pyperf_code_snap snap;
	struct pyperf_check_entry checks[PYPERF_CHECK_SETS * 2]; /* set i: entries 2i, 2i + 1 (most recent first) */
	struct frame_walk walk; /* the frame walk of the record being made (record_stack) */
};

#endif /* PYPERF_H */
