//! Perf events: one per online CPU, or per task (inherited), software cpu-clock or hardware cycles, at a frequency
//! or a period.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

use pyperf_format::Rate;

/// Which perf event drives sampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleEvent {
    /// Software CPU clock (works everywhere, including VMs).
    CpuClock,
    /// Hardware CPU cycles (needs a PMU; usually absent in VMs).
    Cycles,
}

impl SampleEvent {
    /// The events by the names `-e` takes and the recording's header stores.
    pub const NAMES: [&'static str; 2] = ["cpu-clock", "cycles"];

    /// The event's name ([`SampleEvent::NAMES`]).
    pub fn name(self) -> &'static str {
        match self {
            SampleEvent::CpuClock => Self::NAMES[0],
            SampleEvent::Cycles => Self::NAMES[1],
        }
    }

    /// The event named `name`, if it is one of [`SampleEvent::NAMES`].
    pub fn from_name(name: &str) -> Option<SampleEvent> {
        [SampleEvent::CpuClock, SampleEvent::Cycles].into_iter().find(|e| e.name() == name)
    }
}

/// Why perf events could not be opened. The sampler says it to the user as a [`super::BpfError`] (its `From`):
/// the messages are written there, once.
#[derive(Debug)]
pub enum PerfError {
    /// Not allowed to open perf events.
    PermissionDenied,
    /// `-e cycles` without a PMU.
    NoHardwareEvent,
    /// perf_event_open failed for the event `on`; `hint` says what to do, if pyperf can tell.
    Event { on: On, reason: io::Error, hint: Option<String> },
    /// `-F freq` above the kernel's maximum `max`.
    RateTooHigh { freq: u64, max: u64 },
    /// Reading what the events need failed.
    Io { what: &'static str, source: io::Error },
}

pub(super) fn online_cpus() -> Result<Vec<u32>, PerfError> {
    let path = "/sys/devices/system/cpu/online";
    let s = std::fs::read_to_string(path)
        .map_err(|source| PerfError::Io { what: "reading /sys/devices/system/cpu/online", source })?;
    parse_cpu_list(&s).ok_or_else(|| PerfError::Io {
        what: "parsing /sys/devices/system/cpu/online",
        source: io::Error::new(io::ErrorKind::InvalidData, s.trim().to_string()),
    })
}

pub(super) fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.trim().parse::<u32>().ok()?..=b.trim().parse::<u32>().ok()?),
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// What a perf event samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum On {
    /// Everything that runs on this CPU.
    Cpu(u32),
    /// This thread, and the threads and processes it starts (inherited).
    Thread(u32),
    /// The next child of this thread (a tid) that calls execve, from then on, with its threads and children
    /// (inherited; off in the thread itself).
    Exec(u32),
}

impl std::fmt::Display for On {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            On::Cpu(c) => write!(f, "on CPU {c}"),
            On::Thread(t) => write!(f, "of thread {t}"),
            On::Exec(_) => write!(f, "of the command"),
        }
    }
}

pub(super) fn open_perf_event(event: SampleEvent, rate: Rate, on: On) -> Result<OwnedFd, PerfError> {
    // SAFETY: all-zero is a valid perf_event_attr.
    let mut attr: libbpf_sys::perf_event_attr = unsafe { std::mem::zeroed() };
    attr.size = std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32;
    match event {
        SampleEvent::CpuClock => {
            attr.type_ = libbpf_sys::PERF_TYPE_SOFTWARE;
            attr.config = libbpf_sys::PERF_COUNT_SW_CPU_CLOCK as u64;
        }
        SampleEvent::Cycles => {
            attr.type_ = libbpf_sys::PERF_TYPE_HARDWARE;
            attr.config = libbpf_sys::PERF_COUNT_HW_CPU_CYCLES as u64;
        }
    }
    match rate {
        Rate::Frequency(f) => {
            attr.__bindgen_anon_1.sample_freq = f.max(1);
            attr.set_freq(1);
        }
        Rate::Period(p) => attr.__bindgen_anon_1.sample_period = p.max(1),
    }
    let (pid, cpu) = match on {
        On::Cpu(c) => (-1, c as libc::c_int),
        On::Thread(t) => {
            attr.set_inherit(1);
            (t as libc::pid_t, -1)
        }
        On::Exec(tid) => {
            // As `perf record -- CMD`: off here, inherited by the child, on from its execve.
            attr.set_inherit(1);
            attr.set_disabled(1);
            attr.set_enable_on_exec(1);
            (tid as libc::pid_t, -1)
        }
    };
    // SAFETY: attr is a valid perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const libbpf_sys::perf_event_attr,
            pid,
            cpu,
            -1 as libc::c_int,
            libbpf_sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        return Err(open_error(event, rate, on, io::Error::last_os_error(), max_sample_rate()));
    }
    // SAFETY: fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Turns on the kernel's hooks for per-task events ahead of the first one. The first per-task event of the system
/// switches on the scheduler's perf hooks (a static key: code patched on every CPU, 6-15 ms on the machines of
/// bench/RESULTS.md), which stay on until ~1 s after the last such event closes. A dummy event, which counts
/// nothing, opened on a thread of its own pays that while the caller verifies the BPF program; the real events then
/// open in microseconds. None if it cannot be opened: the real events say why.
pub(super) fn warm_task_events() -> std::thread::JoinHandle<Option<OwnedFd>> {
    std::thread::spawn(|| {
        // SAFETY: all-zero is a valid perf_event_attr.
        let mut attr: libbpf_sys::perf_event_attr = unsafe { std::mem::zeroed() };
        attr.size = std::mem::size_of::<libbpf_sys::perf_event_attr>() as u32;
        attr.type_ = libbpf_sys::PERF_TYPE_SOFTWARE;
        attr.config = libbpf_sys::PERF_COUNT_SW_DUMMY as u64;
        attr.set_disabled(1);
        // SAFETY: attr is a valid perf_event_attr of the size it declares; pid 0, cpu -1: this thread.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const libbpf_sys::perf_event_attr,
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                libbpf_sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        // SAFETY: a fresh fd owned by us, when there is one.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) })
    })
}

/// /proc/sys/kernel/perf_event_max_sample_rate: the highest `-F` the kernel takes now.
fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate").ok()?.trim().parse().ok()
}

/// perf_event_open's failure `e` as one line that says what to do. `max_rate`: the kernel's highest frequency.
fn open_error(event: SampleEvent, rate: Rate, cpu: On, e: io::Error, max_rate: Option<u64>) -> PerfError {
    let errno = e.raw_os_error().unwrap_or(0);
    // Above the limit the kernel answers EINVAL (root, CAP_PERFMON) or, for the unprivileged, EACCES.
    if let (Rate::Frequency(freq), Some(max)) = (rate, max_rate) {
        if freq > max && matches!(errno, libc::EINVAL | libc::EACCES | libc::EPERM) {
            return PerfError::RateTooHigh { freq, max };
        }
    }
    let hint = match errno {
        libc::EACCES | libc::EPERM => return PerfError::PermissionDenied,
        libc::ENOENT | libc::EOPNOTSUPP if event == SampleEvent::Cycles => return PerfError::NoHardwareEvent,
        libc::EMFILE | libc::ENFILE => Some(
            "too many open files (pyperf opens one per CPU, or one per thread with -p): raise the limit, ulimit -n",
        ),
        libc::EBUSY => Some("another tool holds the counters exclusively: stop it, or use -e cpu-clock"),
        libc::EINVAL => Some(match rate {
            Rate::Period(_) => "the kernel refused the sampling period: give a smaller -c, or -F instead",
            Rate::Frequency(_) => "the kernel refused the sampling settings: try the defaults (no -F, -c or -e)",
        }),
        _ => None,
    };
    PerfError::Event { on: cpu, reason: e, hint: hint.map(str::to_string) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3\n"), Some(vec![0, 1, 2, 3]));
        assert_eq!(parse_cpu_list("0,2-3,7"), Some(vec![0, 2, 3, 7]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn open_errors_say_what_to_do() {
        // Said to the user as the sampler's error.
        let open_error = |event, rate, on, e, max| super::super::BpfError::from(open_error(event, rate, on, e, max));
        let einval = || io::Error::from_raw_os_error(libc::EINVAL);
        let e = open_error(SampleEvent::CpuClock, Rate::Frequency(1_000_000), On::Cpu(0), einval(), Some(100_000));
        let msg = e.to_string();
        assert!(msg.starts_with("-F 1000000 is above the kernel's maximum sampling rate, 100000 Hz"), "{msg}");
        assert!(msg.contains("perf_event_max_sample_rate") && !msg.contains('\n'), "{msg}");
        let eacces = io::Error::from_raw_os_error(libc::EACCES);
        let e = open_error(SampleEvent::CpuClock, Rate::Frequency(200_000), On::Cpu(0), eacces, Some(100_000));
        assert!(matches!(e, super::super::BpfError::RateTooHigh { freq: 200_000, max: 100_000 }), "{e}");
        // Below the limit EINVAL is something else, said once with a hint.
        let e = open_error(SampleEvent::CpuClock, Rate::Period(u64::MAX), On::Cpu(3), einval(), Some(100_000));
        let msg = e.to_string();
        assert!(msg.starts_with("cannot open the perf event on CPU 3 (perf_event_open: Invalid argument"), "{msg}");
        assert!(msg.ends_with("give a smaller -c, or -F instead") && msg.matches("Invalid argument").count() == 1);
        // Per-task events (-p, a command): which thread, and what to do about too many of them.
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        let msg = open_error(SampleEvent::CpuClock, Rate::Frequency(99), On::Thread(4242), emfile, None).to_string();
        assert!(msg.starts_with("cannot open the perf event of thread 4242 (perf_event_open: "), "{msg}");
        assert!(msg.contains("one per thread with -p") && msg.ends_with("ulimit -n") && !msg.contains('\n'), "{msg}");
    }
}
