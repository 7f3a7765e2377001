/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * The Python frame walk (part of pyperf.bpf.c, after thread.bpf.h): from a thread state's leaf frame to its root,
 * each frame's code object, instruction position and check word (with the per-CPU check-word cache and its tag),
 * the <= 3.10 first locals, the stack's hash, and the run roots of generator frames (asyncio tasks). Two paths take
 * frames: fast_frame (3.11+, cached check words, a straight line) and walk_frame (everything else); both fill
 * s->ev.frames the same way.
 */

/* Must equal record/python/code.rs code_check(): user space recomputes it from
 * the code object it reads and drops the frame on a mismatch. */
static __always_inline __u32 pyperf_code_check(__u32 firstlineno, __u64 filename, __u64 name)
{
	__u32 f = (__u32)filename ^ (__u32)(filename >> 32);
	__u32 n = (__u32)name ^ (__u32)(name >> 32);

	return firstlineno + f * 31 + n * 1009;
}

/* bpf_loop's context for the frame walk. */
struct walk_ctx {
	const struct py_proc *proc;
	struct pyperf_scratch *s;
	struct frame_walk *w; /* &s->walk */
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

/* The open run of generator frames, if any, ends: its rootmost frame (the last taken) is a run root, written into
 * slot nruns % PYPERF_TASK_ROOTS of the record (see pyperf_event_header.coro_frame). walk_frame calls it before a
 * frame that is not generator-owned and at a skipped interpreter frame; record_stack after the walk. */
static __always_inline void end_run(struct frame_walk *w, struct pyperf_scratch *s)
{
	__u32 k = w->nruns & (PYPERF_TASK_ROOTS - 1);

	if (!w->in_run)
		return;
	w->in_run = 0;
	s->ev.hdr.coro_frame[k] = w->run_addr;
	s->ev.hdr.coro_index[k] = (__u16)w->run_index;
	w->nruns++;
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
	__s32 owner;

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
	owner = get_u8(fb, proc->off.frame_owner, PYPERF_FRAME_BUF); /* -1 <= 3.10 */
	if (proc->off.owner_cstack >= 0 && owner >= proc->off.owner_cstack) {
		/* the interpreter's own frame (C-stack shim, entry frame): not Python code, and the end of a run */
		end_run(w, s);
		mark_entry(w, s);
		return 0;
	}
	code = get_u64(fb, proc->off.frame_code, PYPERF_FRAME_BUF) & proc->code_mask;
	if (proc->skip_code && code == proc->skip_code) {
		end_run(w, s);
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
	/* A frame not generator-owned ends the run before it (gen_owner is never -1). */
	if (owner != w->gen_owner)
		end_run(w, s);
	w->in_run = owner == w->gen_owner;
	w->run_addr = cur;
	w->run_index = n;
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
 * caller, and the generator owner value (w->gen_owner). Generator frames and the frame after a run of them are
 * walk_frame's, which keeps the run roots: a generator's frame lives in the generator, never in a window of the data
 * stack (it is copied alone), so they cost this path one test. 0 = taken, 1 = not.
 */
struct fast_offsets {
	__u32 back, code, instr, owner, entry, entry_mask, owner_min, fsz, gen;
};

static __always_inline int fast_frame(struct frame_walk *w, const struct py_proc *proc, struct pyperf_scratch *s,
				      const struct fast_offsets *fo)
{
	struct pyperf_frame *f;
	const __u8 *fb;
	__u64 cur = w->cur, code, o;
	__u32 n = w->n, owner;

	if (cur < w->wlo || cur + fo->fsz > w->whi || cur == w->base)
		return 1;
	o = cur - w->wlo;
	if (o > PYPERF_FRAME_WINDOW)
		return 1;
	fb = s->wbuf + o;
	owner = fb[fo->owner];
	if (owner >= fo->owner_min)
		return 1;
	/* A run open, or a generator frame (owner == gen, without a branch). */
	if (w->in_run | (((__u64)(owner ^ fo->gen) - 1) >> 63))
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
	fo.gen = w->gen_owner;
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
	return pyperf_walk_frame(c->w, c->proc, c->s) ? 1 : 0;
}
