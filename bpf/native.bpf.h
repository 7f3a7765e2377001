/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * Native stacks (record --native; part of pyperf.bpf.c, after common.bpf.h): a record's user registers and a copy
 * of the user stack from sp up, which the recorder unwinds with the binaries' CFI. Nothing is unwound here.
 */

/* record --native: user registers and ustack_bytes (<= PYPERF_USTACK_MAX) of user stack in each record. */
const volatile __u8 native = 0;
const volatile __u32 ustack_bytes = 0;

/* The user registers a record carries (record --native); sp 0 = unknown. */
struct user_regs {
	__u64 ip, sp, bp;
};

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
