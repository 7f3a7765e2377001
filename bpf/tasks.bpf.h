/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * asyncio tasks (part of pyperf.bpf.c, after walk.bpf.h): whether a record's coroutine runs belong to a task user
 * space has not listed yet, which then must be woken at once (see struct pyperf_task_key).
 */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PYPERF_TASK_COROS);
	__type(key, struct pyperf_task_key);
	__type(value, __u8);
} task_coros SEC(".maps");

/* 1 when the record in `s` (n frames) has coroutine run roots none of which user space knows, the rootmost being
 * a coroutine's, in a process whose tasks user space reads. Lookups and one read of co_flags: called only when a
 * wakeup could be sent now (the rate limit), so most samples pay nothing. */
static __always_inline int unknown_task(const struct py_proc *proc, struct pyperf_scratch *s, __u32 pid, __u32 n)
{
	struct pyperf_event_header *h = &s->ev.hdr;
	struct pyperf_task_key key = { .pid = pid };
	__u32 k, slots, last, idx;
	__s32 flags = 0;
	__u64 code;

	if (!h->ncoro || proc->off.code_flags < 0 || !bpf_map_lookup_elem(&task_coros, &key))
		return 0;
	slots = h->ncoro < PYPERF_TASK_ROOTS ? h->ncoro : PYPERF_TASK_ROOTS;
	for (k = 0; k < PYPERF_TASK_ROOTS; k++) {
		if (k >= slots)
			break;
		key.frame = h->coro_frame[k];
		if (bpf_map_lookup_elem(&task_coros, &key))
			return 0;
	}
	/* The rootmost root (the slot written last, see pyperf_event_header.ncoro): a task's coroutine is the root
	 * of its run; a generator driven by next() starts runs leafward of it. */
	last = (h->ncoro + PYPERF_TASK_ROOTS - 1) & (PYPERF_TASK_ROOTS - 1);
	idx = h->coro_index[last];
	if (idx >= n || idx >= PYPERF_MAX_FRAMES)
		return 0;
	code = s->ev.frames[idx].code;
	if (!code || bpf_probe_read_user(&flags, sizeof(flags), (void *)(code + proc->off.code_flags)))
		return 0;
	return (flags & PYPERF_CO_TASK_FLAGS) != 0;
}
