//! Perf events: one per online CPU, software cpu-clock or hardware cycles, at a frequency or a period.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

use libbpf_rs::libbpf_sys;

use super::{BpfError, Rate, SampleEvent};

pub(super) fn online_cpus() -> Result<Vec<u32>, BpfError> {
    let path = "/sys/devices/system/cpu/online";
    let s = std::fs::read_to_string(path)
        .map_err(|source| BpfError::Io { what: "reading /sys/devices/system/cpu/online", source })?;
    parse_cpu_list(&s).ok_or_else(|| BpfError::Io {
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

pub(super) fn open_perf_event(event: SampleEvent, rate: Rate, cpu: u32) -> Result<OwnedFd, BpfError> {
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
    // SAFETY: attr is a valid perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const libbpf_sys::perf_event_attr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            libbpf_sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => BpfError::PermissionDenied("opening perf events"),
            Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) if event == SampleEvent::Cycles => BpfError::NoHardwareEvent,
            _ => BpfError::PerfEvent { cpu, source: e },
        });
    }
    // SAFETY: fresh fd owned by us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
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
}
