//! The command `pyperf record -- CMD` starts: spawned, watched, ended as Ctrl-C would when recording stops first.

use std::process::{Child, Command, ExitStatus};

use anyhow::{Context, Result};

/// A command pyperf started.
pub struct Workload {
    child: Child,
    argv0: String,
    status: Option<ExitStatus>,
}

impl Workload {
    /// Starts `cmd` (program and arguments).
    pub fn spawn(cmd: &[String]) -> Result<Workload> {
        let (prog, args) = cmd.split_first().context("no command given after --")?;
        let child = Command::new(prog).args(args).spawn().with_context(|| format!("cannot run {prog}"))?;
        Ok(Workload { child, argv0: prog.clone(), status: None })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The program as given.
    pub fn argv0(&self) -> &str {
        &self.argv0
    }

    /// It has exited (reaped: its status is kept).
    pub fn exited(&mut self) -> bool {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status.is_some()
    }

    /// Its exit status; if it still runs (recording stopped first: duration, Ctrl-C), it is ended as Ctrl-C
    /// would end it, and waited for.
    pub fn finish(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(s) = self.status {
            return Ok(s);
        }
        // SAFETY: plain kill(2) on our own child, not yet reaped (so its pid is still ours).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let s = self.child.wait()?;
        self.status = Some(s);
        Ok(s)
    }

    /// pyperf failed: the command must not live on unwatched.
    pub fn kill_if_running(&mut self) {
        if self.status.is_none() && self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
