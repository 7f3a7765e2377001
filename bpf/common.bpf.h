/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * What every part of the sampler shares (part of pyperf.bpf.c, which includes it first): the kernel's field
 * offsets (kl, KFIELD) and saved user registers, the run-time settings that are not one part's, the maps every
 * program uses (procs, followed, scratch, the events ring), the record's layout bounds, and the reads of the
 * target's memory. The types shared with user space are not here: they are bpf/pyperf.h's.
 */

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

/* A perf_event program's context as the UAPI lays it out (struct bpf_perf_event_data: the registers, then the
 * sample's period), read without CO-RE (vmlinux.h's copy would relocate, and libbpf would parse the kernel's BTF). */
struct pyperf_perf_ctx {
	struct pyperf_pt_regs regs;
	__u64 sample_period;
};

/* Set by user space before load (frozen .rodata: the verifier sees constants). Each part's own settings are in
 * its file (kernel.bpf.h, native.bpf.h, offcpu.bpf.h). */
const volatile __u64 wakeup_bytes = 0; /* force a wakeup when this much data is pending; 0 = always adaptive */

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
	enum pyperf_interp_flags interp_flags;
	enum pyperf_trace_state trace_state;
	enum pyperf_trace_limits trace_limits;
	enum pyperf_span_op span_op;
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

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by user space before load */
} events SEC(".maps");

/* The record: header, frames, first locals, kernel addresses, user stack, each part right after the last. */
/* Where the first locals start at most: after PYPERF_MAX_FRAMES frames. */
#define PYPERF_LOFF_MAX (sizeof(struct pyperf_event_header) + PYPERF_MAX_FRAMES * sizeof(struct pyperf_frame))
/* Where the kernel addresses start at most: after as many first locals. */
#define PYPERF_KOFF_MAX (PYPERF_LOFF_MAX + PYPERF_MAX_FRAMES * sizeof(struct pyperf_frame_local))
/* Where the user stack starts at most: after PYPERF_KSTACK_MAX kernel addresses. */
#define PYPERF_UOFF_MAX (PYPERF_KOFF_MAX + PYPERF_KSTACK_MAX * 8)

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
