/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * asyncio tasks (part of pyperf.bpf.c, after walk.bpf.h): whether a record runs an asyncio task, whose reader
 * then is woken at once (see struct pyperf_task_key).
 */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PYPERF_TASK_COROS);
	__type(key, struct pyperf_task_key);
	__type(value, __u8);
} task_coros SEC(".maps");

/* 1 when the record in `s` (n frames) runs a coroutine (its rootmost run root's code is a coroutine's, not a
 * generator's) that user space has not told us is no task's, in a process whose tasks user space reads: a task,
 * known or not. Its record is worth reading at once: user space names the task from memory, and a task may end
 * (and its address hold another) within milliseconds. Called only when a wakeup could be sent now (the rate
 * limit), so most samples pay nothing. */
static __always_inline int task_sample(const struct py_proc *proc, struct pyperf_scratch *s, __u32 pid, __u32 n)
{
	struct pyperf_event_header *h = &s->ev.hdr;
	struct pyperf_task_key key = { .pid = pid };
	__u32 last, idx;
	__s32 flags = 0;
	__u8 *known;
	__u64 code;

	if (!h->ncoro || proc->off.code_flags < 0 || !bpf_map_lookup_elem(&task_coros, &key))
		return 0;
	/* The rootmost root (the slot written last, see pyperf_event_header.ncoro): a task's coroutine is the root
	 * of its run; a generator driven by next() starts runs leafward of it. */
	last = (h->ncoro + PYPERF_TASK_ROOTS - 1) & (PYPERF_TASK_ROOTS - 1);
	key.frame = h->coro_frame[last];
	known = bpf_map_lookup_elem(&task_coros, &key);
	if (known && !*known)
		return 0;
	idx = h->coro_index[last];
	if (idx >= n || idx >= PYPERF_MAX_FRAMES)
		return 0;
	code = s->ev.frames[idx].code;
	if (!code || bpf_probe_read_user(&flags, sizeof(flags), (void *)(code + proc->off.code_flags)))
		return 0;
	return (flags & PYPERF_CO_TASK_FLAGS) != 0;
}
