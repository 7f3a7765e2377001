//! What recording needs of the kernel's permission checks, said before anything starts: root, or the three
//! capabilities (CAP_BPF to load the program, CAP_PERFMON to open perf events, CAP_SYS_PTRACE to read the
//! targets' memory and binaries), e.g. `setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep pyperf`; and of the kernel
//! itself: not locked down against reading kernel memory, the bpf() system call allowed (a container's seccomp
//! filter may refuse it), BPF loops (Linux 5.17+). Each lack is one line naming what to do, not a verifier log.

use anyhow::{bail, Result};

use crate::proc::status_field;

/// `(capability number, name, what it is needed for)`.
const NEEDED: [(u32, &str, &str); 3] = [
    (39, "CAP_BPF", "to load the BPF program"),
    (38, "CAP_PERFMON", "to open perf events"),
    (19, "CAP_SYS_PTRACE", "to read the memory of processes"),
];

/// The effective capability set (`CapEff` of /proc/self/status); `None` if unreadable.
pub fn effective() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_cap_eff(&status)
}

/// `CapEff:` of a /proc/PID/status text.
pub fn parse_cap_eff(status: &str) -> Option<u64> {
    u64::from_str_radix(status_field(status, "CapEff")?, 16).ok()
}

/// The capabilities of [`NEEDED`] missing from `eff`, as `(name, why)`.
pub fn missing(eff: u64) -> Vec<(&'static str, &'static str)> {
    // CAP_SYS_ADMIN (21) stands in for CAP_BPF and CAP_PERFMON, as the kernel lets it.
    let admin = eff & (1 << 21) != 0;
    NEEDED
        .iter()
        .filter(|(bit, _, _)| eff & (1 << bit) == 0 && !(admin && *bit != 19))
        .map(|&(_, name, why)| (name, why))
        .collect()
}

/// Fails, naming what is missing, unless the process can record: the capabilities, and the host's PID namespace
/// (the BPF program knows processes by their host pids, which pyperf in a PID namespace of its own cannot see).
pub fn check_all() -> Result<()> {
    check()?;
    check_kernel()?;
    // The initial PID namespace has this fixed inode (the kernel's PROC_PID_INIT_INO). NSpid of /proc/self/status
    // cannot tell: inside a namespace with a /proc of its own it lists that namespace's pid only.
    const INIT_PID_NS: &str = "pid:[4026531836]";
    if let Ok(ns) = std::fs::read_link("/proc/self/ns/pid") {
        if ns.as_os_str() != INIT_PID_NS {
            bail!(
                "pyperf runs in a PID namespace of its own (a container): it must see the host's processes; \
                 run it on the host, or in a container sharing the host's PID namespace (--pid=host)"
            );
        }
    }
    Ok(())
}

/// Fails, naming what is missing, unless the process has the capabilities to record.
pub fn check() -> Result<()> {
    // Root too: root in a container may have had capabilities dropped.
    let Some(eff) = effective() else { return Ok(()) }; // let the kernel say no
    let missing = missing(eff);
    if missing.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = missing.iter().map(|(n, why)| format!("{n} ({why})")).collect();
    bail!(
        "missing capabilit{} {}: run as root, or grant them: setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep {}",
        if missing.len() == 1 { "y" } else { "ies" },
        list.join(", "),
        std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "pyperf".into())
    )
}

/// Fails, naming what to do, where the kernel would refuse the programs: locked down for confidentiality (the
/// verifier then lacks the helpers that read kernel memory), bpf() refused (seccomp, an LSM), no BPF loops.
pub fn check_kernel() -> Result<()> {
    if let Ok(mode) = std::fs::read_to_string("/sys/kernel/security/lockdown") {
        if lockdown_mode(&mode) == Some("confidentiality") {
            bail!(
                "the kernel is locked down for confidentiality (/sys/kernel/security/lockdown): it refuses BPF \
                 programs that read kernel memory, as pyperf's do; boot with lockdown=integrity or none (Secure Boot \
                 distributions: see their lockdown setting)"
            );
        }
    }
    // bpf() with a command no kernel has: EINVAL where the call is allowed; EPERM or EACCES from a seccomp filter
    // (before the kernel looks) or a security module (which the kernel asks first).
    // SAFETY: the kernel reads no memory for an unknown command (a null attribute pointer, size 0).
    let refused = unsafe { libc::syscall(libc::SYS_bpf, -1i64, std::ptr::null::<u8>(), 0u64) } < 0
        && matches!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EPERM) | Some(libc::EACCES) | Some(libc::ENOSYS)
        );
    if refused {
        let err = std::io::Error::last_os_error();
        let seccomp =
            std::fs::read_to_string("/proc/self/status").ok().is_some_and(|s| status_field(&s, "Seccomp") == Some("2"));
        bail!(
            "the kernel refuses the bpf() system call ({err}) although pyperf has the capabilities{}",
            if seccomp {
                ": a seccomp filter refuses it (a container's default profile does: run the container with \
                 --security-opt seccomp=unconfined, or pyperf on the host)"
            } else if in_user_namespace() {
                ": pyperf runs in a user namespace (a rootless container), whose capabilities are not the host's: \
                 run it on the host, or in a privileged container"
            } else if err.raw_os_error() == Some(libc::ENOSYS) {
                ": this kernel has no BPF (CONFIG_BPF_SYSCALL)"
            } else {
                ": a security module's policy may refuse it (AppArmor, SELinux, Landlock)"
            }
        );
    }
    // SAFETY: libbpf's probe loads a two-instruction program calling the helper and closes it; no pointer is
    // passed but the absent options.
    let loops = unsafe {
        libbpf_rs::libbpf_sys::libbpf_probe_bpf_helper(
            libbpf_rs::libbpf_sys::BPF_PROG_TYPE_TRACEPOINT,
            libbpf_rs::libbpf_sys::BPF_FUNC_loop,
            std::ptr::null(),
        )
    };
    if loops == 0 {
        bail!(
            "this kernel ({}) has no BPF loops (bpf_loop, Linux 5.17 or newer, or a distribution kernel with them \
             backported): pyperf's programs need them",
            kernel_release()
        );
    }
    // 1, or an error of the probe itself: loading says what it is.
    Ok(())
}

/// Whether this process runs in a user namespace other than the initial one (whose uid map is the identity over the
/// whole range).
fn in_user_namespace() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
}

/// The selected mode of a /sys/kernel/security/lockdown text (`none [integrity] confidentiality`).
fn lockdown_mode(text: &str) -> Option<&str> {
    text.split_whitespace().find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
}

/// `uname -r`.
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease").map_or_else(|_| "unknown".into(), |r| r.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lockdown_modes_are_read() {
        assert_eq!(lockdown_mode("[none] integrity confidentiality\n"), Some("none"));
        assert_eq!(lockdown_mode("none integrity [confidentiality]\n"), Some("confidentiality"));
        assert_eq!(lockdown_mode(""), None);
    }

    #[test]
    fn this_kernel_has_what_pyperf_needs() {
        // The tests run as root on a kernel that records (as the end-to-end tests need): the probe must agree.
        check_kernel().expect("this kernel can load pyperf's programs");
    }

    #[test]
    fn capabilities_are_named() {
        assert_eq!(parse_cap_eff("Name:\tx\nCapEff:\t000001ffffffffff\n"), Some(0x1ff_ffff_ffff));
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
        assert!(missing(0x1ff_ffff_ffff).is_empty());
        let all_three = (1 << 39) | (1 << 38) | (1 << 19);
        assert!(missing(all_three).is_empty());
        assert_eq!(missing(1 << 39 | 1 << 19), vec![("CAP_PERFMON", "to open perf events")]);
        assert_eq!(missing(0).len(), 3);
        // CAP_SYS_ADMIN covers BPF and perf events, not ptrace.
        assert_eq!(missing(1 << 21), vec![("CAP_SYS_PTRACE", "to read the memory of processes")]);
    }
}
