/* SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0-only) */
/*
 * Benchmark-only variants of the sampler (bench/), never shipped. The sampler
 * (walk.bpf.h, record.bpf.h) calls the hooks below at fixed points; in a shipped build (neither
 * PYPERF_BENCH_INTERN nor PYPERF_BENCH_PROFILE defined, build.rs passes
 * PYPERF_BPF_CFLAGS only for benchmark builds) every hook is empty, so the
 * shipped hot path carries none of this code.
 *
 * Hooks:
 *   BENCH_INTERN_FRAME(s, p)     per new code object, after its check read
 *   PROF_START(t0), PROF(i)      section timing of a target sample
 *   PROF_COUNT(i)                one more in prof_cnt[i] (window reads: 0 tried, 1 failed, 2 of one frame, 3
 *                                starting at a data stack chunk; 5: frames taken the fast way)
 *   PROF_T0(), PROF_ADD(i)       the time from PROF_T0 added to prof_cnt[i] (4: window reads)
 * Included by pyperf.bpf.c after common.bpf.h (its maps and the target memory reads).
 */
#ifndef PYPERF_BENCH_H
#define PYPERF_BENCH_H

#ifdef PYPERF_BENCH_INTERN
/*
 * BENCHMARK-ONLY VARIANT, never shipped (bench/run.sh builds it with -DPYPERF_BENCH_INTERN into its own target
 * directory). It measures the design pyperf did not choose: interning symbols in the kernel, as the seed did.
 * Per frame (per new code object, like the check read) it additionally reads co_name (64 bytes) and
 * co_filename (128 bytes) with bpf_probe_read_user_str into a zeroed {name, file} key and looks the key up in a
 * hash map, inserting it with a fresh id when new. The event is unchanged (so the recorder works as usual):
 * the variant's extra run time is exactly the cost of in-kernel interning on top of the shipped walk.
 */
#ifndef PYPERF_BENCH_STR_OFF
#define PYPERF_BENCH_STR_OFF 48 /* sizeof(PyASCIIObject): 48 on 3.7-3.11, 40 on 3.12+ */
#endif
struct pyperf_intern_key {
	char name[64];
	char file[128];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct pyperf_intern_key);
} intern_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pyperf_intern_key);
	__type(value, __u32);
} interned SEC(".maps");

__u32 intern_next = 0;
__u64 intern_frames = 0;

static __always_inline void intern_symbol(struct pyperf_intern_key *k, __u64 filename, __u64 name)
{
	__u32 *id, fresh;

	__builtin_memset(k, 0, sizeof(*k));
	if (name)
		bpf_probe_read_user_str(k->name, sizeof(k->name), (const void *)(name + PYPERF_BENCH_STR_OFF));
	if (filename)
		bpf_probe_read_user_str(k->file, sizeof(k->file), (const void *)(filename + PYPERF_BENCH_STR_OFF));
	id = bpf_map_lookup_elem(&interned, k);
	if (!id) {
		fresh = intern_next++; /* racy across CPUs; fine for a cost measurement */
		bpf_map_update_elem(&interned, k, &fresh, BPF_NOEXIST);
	}
	__sync_fetch_and_add(&intern_frames, 1);
}

#define BENCH_INTERN_FRAME(s, proc)                                                            \
	do {                                                                                   \
		__u32 __zero = 0;                                                              \
		struct pyperf_intern_key *__ikey = bpf_map_lookup_elem(&intern_scratch, &__zero); \
		if (__ikey)                                                                    \
			intern_symbol(__ikey,                                                  \
				      get_u64((s)->cbuf, (proc)->off.check_filename, PYPERF_CODE_BUF), \
				      get_u64((s)->cbuf, (proc)->off.check_name, PYPERF_CODE_BUF));    \
	} while (0)
#else
#define BENCH_INTERN_FRAME(s, proc) do {} while (0)
#endif /* PYPERF_BENCH_INTERN */

#ifdef PYPERF_BENCH_PROFILE
/* BENCHMARK-ONLY (bench/profile-bpf.sh, -DPYPERF_BENCH_PROFILE, never shipped): time per section of a target
 * sample, summed over samples in prof_ns[] (read with bpftool from .bss). One clock read per section. */
__u64 prof_ns[8] = {};
__u64 prof_samples = 0;
#define PROF(i)                                                        \
	do {                                                           \
		__u64 __t = bpf_ktime_get_ns();                         \
		__sync_fetch_and_add(&prof_ns[i], __t - prof_last);     \
		prof_last = __t;                                        \
	} while (0)
/* Counters and times of parts of a section (PROF_COUNT, PROF_ADD). */
__u64 prof_cnt[8] = {};
#define PROF_COUNT(i) __sync_fetch_and_add(&prof_cnt[i], 1)
#define PROF_T0() __u64 __pt0 = bpf_ktime_get_ns()
#define PROF_ADD(i) __sync_fetch_and_add(&prof_cnt[i], bpf_ktime_get_ns() - __pt0)
#define PROF_START(t0)                                  \
	__u64 prof_last = (t0);                         \
	__sync_fetch_and_add(&prof_samples, 1)
#else
#define PROF_START(t0) do {} while (0)
#define PROF(i) do {} while (0)
#define PROF_COUNT(i) do {} while (0)
#define PROF_T0() do {} while (0)
#define PROF_ADD(i) do {} while (0)
#endif /* PYPERF_BENCH_PROFILE */

#endif /* PYPERF_BENCH_H */

