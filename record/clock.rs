//! The recorder's clock: CLOCK_MONOTONIC, the clock of the BPF program's timestamps (bpf_ktime_get_ns), which
//! sample, interval and thread-name times are taken on. A leaf: it imports nothing of the crate.

/// CLOCK_MONOTONIC in ns, the clock of bpf_ktime_get_ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
