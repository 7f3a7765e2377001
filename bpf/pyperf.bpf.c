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
 *
 * The parts, each in its own header, included here in this order (each uses only those before it):
 *  - common.bpf.h: kernel field offsets, shared settings and maps, the record's layout, target memory reads;
 *  - bench.h: the benchmark-only hooks (empty in a shipped build);
 *  - thread.bpf.h: the sampled thread's PyThreadState, namespace tid, GIL state;
 *  - gc.bpf.h: whether that thread runs the cyclic garbage collector;
 *  - trace.bpf.h: the OpenTelemetry span active on that thread (its trace and span ids);
 *  - walk.bpf.h: the Python frame walk and its check words;
 *  - kernel.bpf.h: kernel stacks (record --kernel);
 *  - native.bpf.h: user registers and the user stack copy (record --native);
 *  - code.bpf.h: code object snapshots for new stacks;
 *  - tasks.bpf.h: whether a record runs an asyncio task user space does not know yet (wake it);
 *  - record.bpf.h: record_stack, which assembles one record from the above and writes it to the ring;
 *  - offcpu.bpf.h: the off-CPU programs (record --off-cpu), after the CPU sample's programs below.
 * The ABI shared with user space (record layout, map values, enums) is bpf/pyperf.h.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "pyperf.h"

/* bpf_probe_read_user and bpf_get_current_task_btf are GPL-only helpers. */
char LICENSE[] SEC("license") = "GPL";

#include "common.bpf.h"
/* Benchmark-only variants (never shipped): their code lives in bench.h, hooked into the parts below by macros
 * that are empty in the shipped build. */
#include "bench.h"
#include "thread.bpf.h"
#include "gc.bpf.h"
#include "trace.bpf.h"
#include "walk.bpf.h"
#include "kernel.bpf.h"
#include "native.bpf.h"
#include "code.bpf.h"
#include "tasks.bpf.h"
#include "record.bpf.h"

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

/* Set by user space before load: 1 when the sampling event is cpu-clock, whose timer tells how late it fired. */
const volatile __u8 clock_catch_up = 0;

/*
 * The sampling periods a cpu-clock sample stands for. The event's timer fires once however late it is, and a
 * timer due while the CPU did not run this machine (a hypervisor's steal: the vCPU preempted by the host; a
 * paused VM) fires only when it runs again: the periods in between would be lost, and with them the running
 * thread's time (its wall time in --mode wall fell short by up to 40% on a busy host). The thread was running
 * for all of them, as the guest's scheduler sees it, so the sample counts for them too: 1 + the whole periods by
 * which the timer is late (user space writes the missed ones as samples flagged stolen: wall time, not CPU time).
 * Its expiry is read before the timer is moved on (perf_swevent_hrtimer forwards it after the overflow handler,
 * this program, returns). Normal interrupt latency is far below a period.
 */
static __always_inline __u32 clock_periods(struct bpf_perf_event_data *ctx, struct pyperf_scratch *s, __u64 now)
{
	__u64 period = ((const struct pyperf_perf_ctx *)ctx)->sample_period, event = 0, late, n;
	__s64 due = 0;

	if (!clock_catch_up || !kl.perf_ctx_event || !kl.perf_timer_expires || !period)
		return 1;
	/* The context is the kernel's struct bpf_perf_event_data_kern; its event, read at the offset BTF gave. */
	if (bpf_probe_read_kernel(&event, sizeof(event), (void *)ctx + kl.perf_ctx_event) || !event)
		return 1;
	if (bpf_probe_read_kernel(&due, sizeof(due), (void *)event + kl.perf_timer_expires) || due <= 0 ||
	    now < (__u64)due + period)
		return 1;
	late = now - (__u64)due;
	n = late / period;
	s->counters.clock_late++;
	if (n >= PYPERF_CLOCK_PERIODS_MAX) {
		s->counters.clock_capped++;
		n = PYPERF_CLOCK_PERIODS_MAX - 1;
	}
	s->counters.clock_added += n;
	return 1 + n;
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
	record_stack(ctx, proc, s, pid_tgid, cpu, now, NULL, clock_periods(ctx, s, now), native ? &ur : NULL,
		     user_mode ? KSTACK_NONE : KSTACK_HERE);
	if (measure_cost)
		s->counters.target_ns += bpf_ktime_get_ns() - now;
	return 0;
}

/* record --off-cpu: its programs come after the CPU sample's. */
#include "offcpu.bpf.h"
