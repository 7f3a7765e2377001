//! The pyperf recorder: a BPF program walks the Python stack of the thread on the CPU at each perf event;
//! user space resolves code objects to names and lines and writes the samples to a `.pyp` recording.

pub mod bpf;
pub mod cli;
pub mod layouts;
pub mod linetable;
pub mod output;
pub mod process;
pub mod recorder;
pub mod signals;
pub mod symbolize;
pub mod targets;

/// What the unit tests that run real interpreters share.
#[cfg(test)]
pub(crate) mod testenv {
    use std::path::PathBuf;
    use std::process::Command;

    /// pyenv's root: $PYENV_ROOT, else what `pyenv root` says, else /root/.pyenv (where CI installs it).
    pub(crate) fn pyenv_root() -> PathBuf {
        if let Some(r) = std::env::var_os("PYENV_ROOT").filter(|r| !r.is_empty()) {
            return PathBuf::from(r);
        }
        if let Ok(out) = Command::new("pyenv").arg("root").output() {
            let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if out.status.success() && !s.is_empty() {
                return PathBuf::from(s);
            }
        }
        PathBuf::from("/root/.pyenv")
    }
}
