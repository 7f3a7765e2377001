/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * Code object snapshots (part of pyperf.bpf.c, after walk.bpf.h): the stacks seen so far (seen_stacks), and for a
 * new stack the bytes of each code object user space may not have read yet (struct pyperf_code_snap, once per
 * code object and check word: known_code), sent ahead of the sample since the object may be freed soon.
 */

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
	c->hdr.ncoro = 0; /* (its coro_frame and coro_index are never written: zero) */
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
