//! The recording's header: the machine, the time, the command line, what was sampled. A leaf: it imports nothing of
//! the crate.

use pyperf_format::{Header, Rate};

/// The recording's header: what was recorded (`event`, as `-e` names it, at `rate`), where, how.
pub fn header(workload: &[String], event: &str, rate: Rate) -> Header {
    let uts = uname();
    Header {
        pyperf_version: env!("CARGO_PKG_VERSION").to_string(),
        hostname: uts.0,
        kernel_release: uts.1,
        arch: uts.2,
        start_time_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
        event: event.to_string(),
        rate,
        // Lossy: a command line that is not UTF-8 is recorded all the same (std::env::args would panic).
        command_line: std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect(),
        workload: workload.to_vec(),
    }
}

/// (nodename, release, machine)
fn uname() -> (String, String, String) {
    // SAFETY: a zeroed utsname is a valid argument for uname, which fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Default::default();
    }
    let s = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (s(&u.nodename), s(&u.release), s(&u.machine))
}
