//! What recording needs of the kernel's permission checks, said before anything starts: root, or the three
//! capabilities (CAP_BPF to load the program, CAP_PERFMON to open perf events, CAP_SYS_PTRACE to read the
//! targets' memory and binaries), e.g. `setcap cap_bpf,cap_perfmon,cap_sys_ptrace+ep pyperf`.

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

#[cfg(test)]
mod tests {
    use super::*;

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
