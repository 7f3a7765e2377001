/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * Garbage collection (part of pyperf.bpf.c, after thread.bpf.h): whether the sampled thread runs the cyclic
 * garbage collector (pyperf_event_header.in_gc).
 */

/* 1 when the interpreter of thread state `ts` (read into s->tbuf) is collecting: the process's one flag
 * (py_proc.gc_addr, <= 3.8) or its interpreter's (py_offsets.interp_gc_collecting, 3.9+). One 4-byte read. */
static __always_inline __u8 gc_collecting(const struct py_proc *proc, struct pyperf_scratch *s)
{
	__u64 addr = proc->gc_addr, interp;
	__s32 flag = 0;

	if (!addr && proc->off.interp_gc_collecting >= 0 && proc->off.tstate_interp >= 0) {
		interp = get_u64(s->tbuf, proc->off.tstate_interp, PYPERF_TSTATE_BUF);
		if (interp)
			addr = interp + proc->off.interp_gc_collecting;
	}
	if (!addr)
		return 0;
	if (bpf_probe_read_user(&flag, sizeof(flag), (void *)addr)) {
		s->counters.read_errors++;
		return 0;
	}
	return flag == 1;
}

/* The thread collects when its interpreter does and it holds the GIL (or the GIL does not exist yet: 2.7/3.6
 * before a second thread, one thread runs). Another thread may run beside a collection with the GIL released
 * (C code, I/O): it is not collecting. Wrong only while the collector's finalizers hand the GIL to another
 * thread (docs/design/gc.md, section 2). */
static __always_inline __u8 thread_in_gc(const struct py_proc *proc, struct pyperf_scratch *s, __u64 ts,
					  int gil_state)
{
	if (!ts || (gil_state != GIL_STATE_THIS_THREAD && gil_state != GIL_STATE_UNINITIALIZED))
		return 0;
	return gc_collecting(proc, s);
}
