/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * Trace context (part of pyperf.bpf.c, after gc.bpf.h): the OpenTelemetry span active on the sampled thread, read
 * from its contextvars context as struct pyperf_trace_conf describes it (user space found the ContextVar, the key
 * and the span classes in the process, see record/traces/). Only for processes with a conf: nothing is read
 * elsewhere.
 */

/* The `traces` map: key tgid, value struct pyperf_trace_conf. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct pyperf_trace_conf);
} traces SEC(".maps");

static __always_inline __u32 popcount32(__u32 x)
{
	x = x - ((x >> 1) & 0x55555555);
	x = (x & 0x33333333) + ((x >> 2) & 0x33333333);
	x = (x + (x >> 4)) & 0x0f0f0f0f;
	return (x * 0x01010101) >> 24;
}

static __always_inline int read_u64(__u64 *dst, __u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (void *)addr);
}

struct hamt_walk {
	const struct pyperf_trace_conf *conf;
	__u64 node;
	__u64 found;  /* the variable's value */
	__u32 shift;
	int err;
};

/* One level of the HAMT lookup of conf->var (CPython's hamt_node_bitmap_find / hamt_node_array_find). */
static long hamt_step(__u32 i, void *arg)
{
	struct hamt_walk *h = arg;
	const struct pyperf_trace_conf *conf = h->conf;
	__u64 kv[2], type, child;
	__u32 idx = (conf->var_hash >> (h->shift & 31)) & 31, bitmap, bit, pos;

	if (read_u64(&type, h->node + conf->object_type)) {
		h->err = 1;
		return 1;
	}
	if (type == conf->bitmap_type) {
		if (bpf_probe_read_user(&bitmap, sizeof(bitmap), (void *)(h->node + conf->hamt_bitmap))) {
			h->err = 1;
			return 1;
		}
		bit = 1u << idx;
		if (!(bitmap & bit))
			return 1; /* not in the mapping: no span active */
		pos = popcount32(bitmap & (bit - 1)) & 31;
		if (bpf_probe_read_user(kv, sizeof(kv), (void *)(h->node + conf->hamt_bitmap_array + pos * 16))) {
			h->err = 1;
			return 1;
		}
		if (kv[0] == conf->var) {
			h->found = kv[1];
			return 1;
		}
		if (kv[0])
			return 1; /* another key in that slot */
		child = kv[1];
	} else if (type == conf->array_type && conf->array_type) {
		if (read_u64(&child, h->node + conf->hamt_array + idx * 8)) {
			h->err = 1;
			return 1;
		}
		if (!child)
			return 1;
	} else {
		h->err = 1; /* a collision node (two 32-bit hashes equal), or not a HAMT node */
		return 1;
	}
	h->node = child;
	h->shift += 5;
	if (h->shift > 30) {
		h->err = 1;
		return 1;
	}
	return 0;
}

/* The value of item `key` of dict `dict` of type `type` (an OpenTelemetry Context: few items, all str keys),
 * found by identity: 0 with *err 0 when absent. */
static __noinline __u64 context_item(const struct pyperf_trace_conf *conf, struct pyperf_scratch *s, __u64 dict,
				     int *err)
{
	__u64 kv[2], keys, n, index_bytes, entries, esize, key_at, value_at, size, len, k, v;
	__u8 b = 0;
	int i;

	*err = 1;
	if (read_u64(&k, dict + conf->object_type) || k != conf->context_type)
		return 0;
	if (bpf_probe_read_user(kv, sizeof(kv), (void *)(dict + conf->dict_keys)))
		return 0;
	keys = kv[0];
	if (!keys || kv[1]) /* a split table: not a Context */
		return 0;
	if (read_u64(&n, keys + conf->keys_nentries) || n > PYPERF_CONTEXT_ITEMS)
		return 0;
	if (conf->keys_log2_index_bytes >= 0) {
		if (bpf_probe_read_user(&b, 1, (void *)(keys + conf->keys_log2_index_bytes)) || b > 20)
			return 0;
		index_bytes = 1ULL << b;
		if (bpf_probe_read_user(&b, 1, (void *)(keys + conf->keys_kind)))
			return 0;
		esize = b ? 16 : 24;
		key_at = b ? 0 : 8;
	} else {
		if (read_u64(&size, keys + conf->keys_size) || size > 0xff || !size)
			return 0;
		index_bytes = size; /* one byte an index below 256 slots */
		esize = 24;
		key_at = 8;
	}
	value_at = key_at + 8;
	entries = keys + conf->keys_indices + index_bytes;
	len = n * esize;
	if (len > PYPERF_CONTEXT_ITEMS * 24)
		return 0;
	if (len && bpf_probe_read_user(s->xbuf, len & (PYPERF_CONTEXT_ITEMS * 32 - 1), (void *)entries))
		return 0;
	*err = 0;
	for (i = 0; i < PYPERF_CONTEXT_ITEMS; i++) {
		if (i >= n)
			break;
		k = get_u64(s->xbuf, (__s16)(i * esize + key_at), sizeof(s->xbuf));
		if (k == conf->span_key) {
			v = get_u64(s->xbuf, (__s16)(i * esize + value_at), sizeof(s->xbuf));
			return v;
		}
	}
	return 0;
}

/* An int of at most `ndigits_max` 30-bit digits as (hi, lo); 1 on success. Read into the end of s->xbuf (a
 * stack buffer cannot be indexed by offsets known only at run time). */
static __always_inline int read_int(const struct pyperf_trace_conf *conf, struct pyperf_scratch *s, __u64 obj,
				    __u32 ndigits_max, __u64 *hi, __u64 *lo)
{
	__u8 *buf = s->xbuf + PYPERF_CONTEXT_ITEMS * 24;
	__u32 ot = (__u16)conf->object_type, os = (__u16)conf->long_size, od = (__u16)conf->long_digits;
	__u64 type, nd, d[5] = {};
	__s64 size;
	int i;

	/* The header and five digits: 44 bytes, in one read. */
	if (bpf_probe_read_user(buf, 48, (void *)obj))
		return 0;
	if (ot > 40 || os > 40 || od > 24)
		return 0;
	type = *(const __u64 *)(buf + ot);
	if (type != conf->int_type)
		return 0;
	size = *(const __s64 *)(buf + os);
	if (conf->long_tagged) {
		if ((size & 3) == 1)
			nd = 0; /* zero */
		else if ((size & 3) == 0)
			nd = (__u64)size >> 3;
		else
			return 0; /* negative */
	} else {
		if (size < 0)
			return 0;
		nd = size;
	}
	if (nd > ndigits_max)
		return 0;
	for (i = 0; i < 5; i++)
		if (i < nd)
			d[i] = *(const __u32 *)(buf + od + 4 * i) & 0x3fffffff;
	*lo = d[0] | d[1] << 30 | d[2] << 60;
	*hi = d[2] >> 4 | d[3] << 26 | d[4] << 56;
	return 1;
}

/* The span context of `span` through the path of its class: 0 (and *state TRACE_SPAN_TYPE) when no path is
 * known for its class, 0 (TRACE_UNREADABLE) when the path does not hold. */
static __noinline __u64 span_context(const struct pyperf_trace_conf *conf, __u64 span, __u8 *state)
{
	__u64 type, p = span, w;
	__u8 byte;
	int i, j;

	*state = TRACE_UNREADABLE;
	if (read_u64(&type, span + conf->object_type))
		return 0;
	for (i = 0; i < PYPERF_SPAN_TYPES; i++) {
		const struct pyperf_span_path *path = &conf->paths[i];

		if (!path->type || path->type != type)
			continue;
		for (j = 0; j < PYPERF_SPAN_STEPS; j++) {
			if (j >= path->nsteps)
				break;
			switch (path->op[j]) {
			case SPAN_DEREF:
				if (read_u64(&w, p + (__s64)path->off[j]) || !w)
					return 0;
				p = w;
				break;
			case SPAN_DEREF_TAGGED:
				if (read_u64(&w, p + (__s64)path->off[j]) || !(w & 1))
					return 0;
				p = w + 1;
				break;
			case SPAN_CHECK_NULL:
				if (read_u64(&w, p + (__s64)path->off[j]) || w)
					return 0;
				break;
			case SPAN_CHECK_BYTE:
				if (bpf_probe_read_user(&byte, 1, (void *)(p + (__s64)path->off[j])) || byte != 1)
					return 0;
				break;
			default:
				return 0;
			}
		}
		if (read_u64(&type, p + conf->object_type) || type != conf->span_context_type)
			return 0;
		*state = TRACE_FOUND;
		return p;
	}
	*state = TRACE_SPAN_TYPE;
	return 0;
}

/* Fills the record's trace fields for thread state `ts` (read into s->tbuf) of process `pid`. */
static __noinline void read_trace(const struct py_proc *proc, struct pyperf_scratch *s, __u32 pid, __u64 ts,
				  struct pyperf_event_header *h)
{
	const struct pyperf_trace_conf *conf;
	struct hamt_walk hw = {};
	__u64 ctx, vars, span, sc, items[2];
	__u8 state;
	int err;

	h->trace_state = TRACE_NONE;
	h->trace_hi = 0;
	h->trace_lo = 0;
	h->span_id = 0;
	h->trace_probe = 0;
	if (!ts || proc->off.tstate_context < 0)
		return;
	conf = bpf_map_lookup_elem(&traces, &pid);
	if (!conf)
		return;
	ctx = get_u64(s->tbuf, proc->off.tstate_context, PYPERF_TSTATE_BUF);
	if (!ctx)
		return;
	if (read_u64(&vars, ctx + conf->context_vars) || !vars)
		goto unreadable;
	if (!conf->var) {
		h->trace_state = TRACE_DISCOVER;
		h->trace_probe = vars;
		return;
	}
	if (read_u64(&hw.node, vars + conf->hamt_root) || !hw.node)
		goto unreadable;
	hw.conf = conf;
	bpf_loop(PYPERF_HAMT_DEPTH, hamt_step, &hw, 0);
	if (hw.err)
		goto unreadable;
	if (!hw.found)
		return; /* the variable is not set in this context: no span */
	if (!conf->span_key) {
		h->trace_state = TRACE_DISCOVER;
		h->trace_probe = vars;
		return;
	}
	span = context_item(conf, s, hw.found, &err);
	if (err)
		goto unreadable;
	if (!span)
		return;
	sc = span_context(conf, span, &state);
	if (state == TRACE_SPAN_TYPE) {
		h->trace_state = TRACE_SPAN_TYPE;
		h->trace_probe = span;
		return;
	}
	if (!sc)
		goto unreadable;
	if (bpf_probe_read_user(items, sizeof(items), (void *)(sc + conf->tuple_item)))
		goto unreadable;
	/* Read into the record, not the stack (see struct frame_walk): the span id's high word into trace_probe. */
	if (!read_int(conf, s, items[0], 5, &h->trace_hi, &h->trace_lo) ||
	    !read_int(conf, s, items[1], 3, &h->trace_probe, &h->span_id))
		goto unreadable;
	h->trace_probe = 0;
	if (!(h->trace_hi | h->trace_lo) || !h->span_id) {
		/* an invalid span context (INVALID_SPAN): no span */
		h->trace_hi = 0;
		h->trace_lo = 0;
		h->span_id = 0;
		return;
	}
	h->trace_state = TRACE_FOUND;
	s->counters.trace_found++;
	return;
unreadable:
	h->trace_state = TRACE_UNREADABLE;
	h->trace_hi = 0;
	h->trace_lo = 0;
	h->span_id = 0;
	h->trace_probe = 0;
	s->counters.trace_unreadable++;
}
