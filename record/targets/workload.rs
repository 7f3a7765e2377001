//! The command `pyperf record -- CMD` starts: spawned, watched, and ended when recording stops first.
//!
//! Ending it escalates: SIGINT, then SIGTERM after [`GRACE`], then SIGKILL after another; a further SIGINT or
//! SIGTERM to pyperf meanwhile goes straight to SIGKILL, so that pyperf never hangs on a command that ignores
//! signals.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::signals;

/// How long the command gets to exit after each signal but the last.
pub const GRACE: Duration = Duration::from_secs(2);
/// How often the command's exit and pyperf's signals are looked at while waiting: during a grace period, and
/// while waiting for as long as the command runs ([`Ending::Wait`]: fewer wakeups, still at once for a person).
const WAIT_TICK: Duration = Duration::from_millis(10);
const IDLE_TICK: Duration = Duration::from_millis(100);

/// How pyperf ends the command (see [`Workload::end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// Recording stopped first (its duration, a signal): stop the command. With `sigint`, SIGINT first; without,
    /// the command got the terminal's Ctrl-C already and is given [`GRACE`] to act on it before SIGTERM.
    Stop {
        /// Send SIGINT first.
        sigint: bool,
    },
    /// Recording failed: let the command run to its end (it is not its fault), unless pyperf is signalled, which
    /// then stops it as [`Ending::Stop`] does.
    Wait,
}

/// What ending the command took.
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    /// Its exit status.
    pub status: ExitStatus,
    /// The last signal pyperf sent it before it exited (`SIGINT`, `SIGTERM`, `SIGKILL`), if any.
    pub signal: Option<&'static str>,
    /// It was killed at once because pyperf got another SIGINT or SIGTERM meanwhile.
    pub hurried: bool,
}

enum Waited {
    Exited(ExitStatus),
    Signalled,
    TimedOut,
}

/// A command pyperf started.
pub struct Workload {
    child: Child,
    argv0: String,
    status: Option<ExitStatus>,
}

// The push's credentials are pyperf's, not the command's: it would see them in its environment (and so would
// anyone reading its /proc/PID/environ).
use crate::sink::push::{PASSWORD_ENV, TOKEN_ENV};

impl Workload {
    /// Starts `cmd` (program and arguments).
    pub fn spawn<S: AsRef<std::ffi::OsStr>>(cmd: &[S]) -> Result<Workload> {
        let (prog, args) = cmd.split_first().context("no command given after --")?;
        let argv0 = prog.as_ref().to_string_lossy().into_owned();
        let child = Command::new(prog)
            .args(args)
            .env_remove(PASSWORD_ENV)
            .env_remove(TOKEN_ENV)
            .spawn()
            .with_context(|| format!("cannot run {argv0}"))?;
        Ok(Workload { child, argv0, status: None })
    }

    /// Starts `cmd` with this stdin and this stdout (stderr inherited).
    pub fn spawn_with<S: AsRef<std::ffi::OsStr>>(
        cmd: &[S],
        stdin: std::process::Stdio,
        stdout: std::process::Stdio,
    ) -> Result<Workload> {
        let (prog, args) = cmd.split_first().context("no command given after --")?;
        let argv0 = prog.as_ref().to_string_lossy().into_owned();
        let child = Command::new(prog)
            .args(args)
            .env_remove(PASSWORD_ENV)
            .env_remove(TOKEN_ENV)
            .stdin(stdin)
            .stdout(stdout)
            .spawn()
            .with_context(|| format!("cannot run {argv0}"))?;
        Ok(Workload { child, argv0, status: None })
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A pidfd of it (see [`pidfd`]).
    pub fn pidfd(&self) -> Option<std::os::fd::OwnedFd> {
        pidfd(self.child.id())
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

    /// Waits for it to exit, ending it as `how` says if it still runs. `signals_seen` is the count of pyperf's
    /// SIGINT / SIGTERM ([`signals::received`]) already acted on: each one after it escalates.
    pub fn end(&mut self, how: Ending, signals_seen: usize) -> std::io::Result<Ended> {
        let mut ended = Ended { status: ExitStatus::default(), signal: None, hurried: false };
        let mut seen = signals_seen;
        let sigint = match how {
            Ending::Stop { sigint } => sigint,
            Ending::Wait => match self.wait_for(None, seen)? {
                Waited::Exited(status) => return Ok(Ended { status, ..ended }),
                _ => {
                    seen = signals::received();
                    !signals::last_from_terminal()
                }
            },
        };
        for (sig, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
            // Without SIGINT: the terminal's Ctrl-C reached it already, its grace starts now.
            if sig != libc::SIGINT || sigint {
                if let Some(status) = self.poll()? {
                    return Ok(Ended { status, ..ended });
                }
                self.signal(sig);
                ended.signal = Some(name);
            }
            match self.wait_for(Some(GRACE), seen)? {
                Waited::Exited(status) => return Ok(Ended { status, ..ended }),
                Waited::Signalled => {
                    ended.hurried = true;
                    break;
                }
                Waited::TimedOut => {}
            }
        }
        if let Some(status) = self.poll()? {
            return Ok(Ended { status, ..ended });
        }
        self.signal(libc::SIGKILL);
        ended.signal = Some("SIGKILL");
        ended.status = self.child.wait()?;
        self.status = Some(ended.status);
        Ok(ended)
    }

    /// Waits up to `limit` (without: for ever) for it to exit, or for pyperf to get a signal beyond `seen`.
    fn wait_for(&mut self, limit: Option<Duration>, seen: usize) -> std::io::Result<Waited> {
        let until = limit.map(|l| Instant::now() + l);
        loop {
            if let Some(status) = self.poll()? {
                return Ok(Waited::Exited(status));
            }
            if signals::received() > seen {
                return Ok(Waited::Signalled);
            }
            if until.is_some_and(|u| Instant::now() >= u) {
                return Ok(Waited::TimedOut);
            }
            std::thread::sleep(if limit.is_some() { WAIT_TICK } else { IDLE_TICK });
        }
    }

    /// Its status if it has exited (reaped), without waiting.
    fn poll(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: plain kill(2) on our own child, not yet reaped (so its pid is still ours).
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// pyperf failed: the command must not live on unwatched.
    pub fn kill_if_running(&mut self) {
        if self.status.is_none() && self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A pidfd of process `pid`: readable once it has exited (for a poll loop to notice at once). None on kernels
/// before 5.3, or when it is gone.
pub fn pidfd(pid: u32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; nothing is borrowed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a descriptor just returned to us, owned by nobody else.
    (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}
