//! Which processes are profiled: given pids (`-p`), every Python process (`-a`), or a command and its
//! descendants (`-- CMD`). Follows exits, exec and pid reuse: a process image is known by its [`Identity`].

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::bpf::Sampler;
use crate::process::{self, InspectError};
use crate::recorder::{monotonic_ns, Recorder};

/// One program run in one process. Pid reuse changes the start time; exec keeps the pid and the start time but
/// builds a new address space, whose code and stack addresses (set by exec, placed at random by ASLR; a different
/// program has a different code size) change with it. A sampler configured for the old image would read the new
/// one at the old addresses: an identity change means "forget this process, look at it again".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    /// Clock ticks since boot (/proc/PID/stat field 22).
    pub start_time: u64,
    /// (startcode, endcode, startstack): fields 26-28. Zero for a zombie, whose image is gone.
    pub image: (u64, u64, u64),
}

/// What pyperf reads of /proc/PID/stat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// R, S, D, Z (zombie: exited, not yet reaped), ...
    pub state: char,
    pub ppid: u32,
    pub identity: Identity,
}

impl Stat {
    /// Still running: not a zombie (an exited process its parent has not reaped yet).
    pub fn running(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// Parses /proc/PID/stat. The command name (field 2) may hold spaces and parentheses: fields after it follow
/// the last ')'.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    // Field k (1-based) is at index k - 3 from here.
    let f: Vec<&str> = rest.split(' ').collect();
    let num = |k: usize| f.get(k - 3)?.trim().parse::<u64>().ok();
    Some(Stat {
        state: f.first()?.chars().next()?,
        ppid: num(4)? as u32,
        identity: Identity { start_time: num(22)?, image: (num(26)?, num(27)?, num(28)?) },
    })
}

pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The identity of `pid` now; None if it is gone.
pub fn identity(pid: u32) -> Option<Identity> {
    stat(pid).map(|s| s.identity)
}

/// Start time of a process (field 22 of /proc/PID/stat), None if it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    identity(pid).map(|i| i.start_time)
}

/// Looks at a process image found not to be Python before it is left alone (see `Targets::rescan`).
const NOT_PYTHON_LOOKS: u32 = 2;

enum Mode {
    /// The pids given and their start times: the same processes are followed through exec, never a later
    /// process that reuses the pid.
    Pids(Vec<(u32, u64)>),
    All,
    Workload(Workload),
}

pub struct Targets {
    mode: Mode,
    /// Processes being sampled, with the image they were set up for.
    live: HashMap<u32, Identity>,
    /// Process images looked at and found not to be profilable, with the number of looks; an exec or a reused
    /// pid makes a new identity, worth new looks.
    rejected: HashMap<(u32, Identity), u32>,
    pending_pids: Vec<u32>,
    ever_profiled: bool,
    /// Python processes that could not be set up (BPF map of processes full, vanished meanwhile, memory not
    /// readable): trailer counter `targets_setup_failed`.
    pub setup_failed: u64,
    /// Processes left out after a look (unsupported Python version, permission denied): `targets_unsupported`.
    pub unsupported: u64,
    /// Processes left because they ended or exec'd while followed.
    pub ended: u64,
    finished: bool,
}

pub struct Workload {
    child: Child,
    argv0: String,
    status: Option<std::process::ExitStatus>,
}

impl Workload {
    pub fn spawn(cmd: &[String]) -> Result<Workload> {
        let (prog, args) = cmd.split_first().context("no command given after --")?;
        let child = Command::new(prog).args(args).spawn().with_context(|| format!("cannot run {prog}"))?;
        Ok(Workload { child, argv0: prog.clone(), status: None })
    }
}

impl Targets {
    pub fn pids(pids: &[u32]) -> Result<Targets> {
        // Check them all now, so that a wrong pid fails before anything is written.
        let mut given = Vec::new();
        for &pid in pids {
            process::inspect(pid).map_err(anyhow::Error::new)?;
            given.push((pid, start_time(pid).ok_or(InspectError::NoSuchProcess(pid))?));
        }
        Ok(Targets::new(Mode::Pids(given), pids.to_vec()))
    }

    pub fn all() -> Targets {
        Targets::new(Mode::All, Vec::new())
    }

    pub fn workload(w: Workload) -> Targets {
        let pid = w.child.id();
        Targets::new(Mode::Workload(w), vec![pid])
    }

    fn new(mode: Mode, pending_pids: Vec<u32>) -> Targets {
        Targets {
            mode,
            live: HashMap::new(),
            rejected: HashMap::new(),
            pending_pids,
            ever_profiled: false,
            setup_failed: 0,
            unsupported: 0,
            ended: 0,
            finished: false,
        }
    }

    pub fn count(&self) -> usize {
        self.live.len()
    }

    /// What the trailer counts about the targets.
    pub fn counters(&self) -> [(&'static str, u64); 3] {
        [
            ("targets_setup_failed", self.setup_failed),
            ("targets_unsupported", self.unsupported),
            ("targets_ended", self.ended),
        ]
    }

    /// Registers the initial targets.
    pub fn start(&mut self, sampler: &mut Sampler, rec: &mut Recorder) -> Result<()> {
        match self.mode {
            Mode::Pids(_) => {
                for pid in std::mem::take(&mut self.pending_pids) {
                    let p = process::inspect(pid).map_err(anyhow::Error::new)?;
                    let id = identity(pid).ok_or(InspectError::NoSuchProcess(pid))?;
                    self.follow(&p, id, sampler, rec)?;
                }
            }
            Mode::All => self.rescan(sampler, rec)?,
            Mode::Workload(_) => {
                // Catch the interpreter as soon as the dynamic loader has mapped it, before the program's own
                // code runs: poll tightly for a moment, then fall back to the regular rescans.
                let until = Instant::now() + Duration::from_secs(2);
                while self.live.is_empty() && Instant::now() < until && !self.workload_exited() {
                    self.rescan(sampler, rec)?;
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
        }
        Ok(())
    }

    fn follow(
        &mut self,
        p: &process::PythonProcess,
        id: Identity,
        sampler: &mut Sampler,
        rec: &mut Recorder,
    ) -> Result<()> {
        // The process record applies from this time on (FORMAT.md: a reused pid's later record applies from its
        // first_seen_ns): take it before the first sample can be taken.
        let seen = monotonic_ns();
        sampler.add_process(p).with_context(|| format!("cannot profile process {}", p.pid))?;
        if let Err(e) = rec.add_process(p, seen) {
            sampler.remove_process(p.pid);
            return Err(e);
        }
        self.live.insert(p.pid, id);
        self.ever_profiled = true;
        Ok(())
    }

    /// Drops exited (or exec'd) targets and picks up new Python processes: for `-a` any, for `-- CMD` the
    /// command's descendants, for `-p` the given processes again after an exec.
    pub fn rescan(&mut self, sampler: &mut Sampler, rec: &mut Recorder) -> Result<()> {
        let gone = changed(&self.live, identity);
        if !gone.is_empty() {
            // Symbolize what is still queued for them while their memory and caches are at hand.
            sampler.poll(Duration::ZERO, &mut |s| rec.on_sample(s)).context("reading samples")?;
        }
        for pid in gone {
            self.live.remove(&pid);
            sampler.remove_process(pid);
            rec.remove_process(pid);
            self.ended += 1;
        }
        let candidates: Vec<u32> = match &self.mode {
            Mode::Pids(given) => {
                given.iter().filter(|&&(pid, st)| start_time(pid) == Some(st)).map(|&(pid, _)| pid).collect()
            }
            Mode::All => all_pids(),
            Mode::Workload(w) => descendants(w.child.id()),
        };
        if matches!(self.mode, Mode::All) {
            // Forget rejected processes that are gone: over a long recording on a busy host they would add up.
            let present: HashSet<u32> = candidates.iter().copied().collect();
            self.rejected.retain(|(pid, _), _| present.contains(pid));
        }
        let me = std::process::id();
        for pid in candidates {
            if pid == me || self.live.contains_key(&pid) {
                continue;
            }
            let Some(id) = identity(pid) else { continue };
            let looks = self.rejected.get(&(pid, id)).copied().unwrap_or(0);
            if looks >= NOT_PYTHON_LOOKS {
                continue;
            }
            match process::inspect(pid) {
                // Inspected the image we identified? An exec in between would leave a stale identity.
                Ok(p) if identity(pid) == Some(id) => {
                    if let Err(e) = self.follow(&p, id, sampler, rec) {
                        // A process that vanished while we set it up is not an error of the recording.
                        eprintln!("pyperf: warning: {e:#}");
                        self.setup_failed += 1;
                        self.rejected.insert((pid, id), NOT_PYTHON_LOOKS);
                    }
                }
                Ok(_) => {} // changed under us: next rescan
                Err(InspectError::NotPython(_) | InspectError::NoSuchProcess(_)) => {
                    // Right after exec the dynamic loader may not have mapped libpython yet: every image gets a
                    // second look a rescan later (a workload's own process, until it is first profiled, as many
                    // as it needs); then it is left alone until it execs something else.
                    if !matches!(&self.mode, Mode::Workload(w) if w.child.id() == pid && !self.ever_profiled) {
                        self.rejected.insert((pid, id), looks + 1);
                    }
                }
                Err(e) => {
                    eprintln!("pyperf: warning: {e}; leaving it out");
                    self.unsupported += 1;
                    self.rejected.insert((pid, id), NOT_PYTHON_LOOKS);
                }
            }
        }
        Ok(())
    }

    fn workload_exited(&mut self) -> bool {
        match &mut self.mode {
            Mode::Workload(w) => {
                if w.status.is_none() {
                    w.status = w.child.try_wait().ok().flatten();
                }
                w.status.is_some()
            }
            _ => false,
        }
    }

    /// True when recording should end because there is nothing left to profile.
    pub fn all_exited(&mut self) -> bool {
        match &self.mode {
            Mode::All => false,
            // The given processes, through exec: recording ends when they have all ended.
            Mode::Pids(given) => {
                given.iter().all(|&(pid, st)| !stat(pid).is_some_and(|s| s.identity.start_time == st && s.running()))
            }
            Mode::Workload(_) => self.workload_exited() && none_alive(&self.live),
        }
    }

    /// Stops sampling every target (before the last drain of the ring buffer, so that the counters and the file
    /// agree: every sample taken is either in the file or counted lost).
    pub fn stop_sampling(&mut self, sampler: &mut Sampler) {
        for &pid in self.live.keys() {
            sampler.remove_process(pid);
        }
    }

    /// Ends the workload, if any, and gives pyperf's exit code: the workload's status, else success.
    pub fn finish(mut self) -> Result<ExitCode> {
        self.finished = true;
        let ever = self.ever_profiled;
        let Mode::Workload(w) = &mut self.mode else { return Ok(ExitCode::SUCCESS) };
        let status = match w.status {
            Some(s) => s,
            None => {
                // Recording stopped (duration, Ctrl-C) before the command ended: end it as Ctrl-C would.
                // SAFETY: plain kill(2) on our own child.
                unsafe { libc::kill(w.child.id() as i32, libc::SIGINT) };
                w.child.wait().with_context(|| format!("waiting for {}", w.argv0))?
            }
        };
        if !ever {
            eprintln!("pyperf: warning: {} ran no Python process that pyperf could profile", w.argv0);
        }
        use std::os::unix::process::ExitStatusExt;
        let code = match (status.code(), status.signal()) {
            (Some(c), _) => c,
            (None, Some(sig)) => 128 + sig,
            _ => 1,
        };
        Ok(ExitCode::from(code.clamp(0, 255) as u8))
    }
}

impl Drop for Targets {
    /// pyperf failed (an error before [`Targets::finish`]): the command it started must not live on unwatched.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        if let Mode::Workload(w) = &mut self.mode {
            if w.status.is_none() && w.child.try_wait().ok().flatten().is_none() {
                let _ = w.child.kill();
                let _ = w.child.wait();
            }
        }
    }
}

fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// `root` and every live process descending from it.
fn descendants(root: u32) -> Vec<u32> {
    let mut tree: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in all_pids() {
        if let Some(s) = stat(pid) {
            tree.entry(s.ppid).or_default().push(pid);
        }
    }
    let mut out = vec![root];
    let mut seen: HashSet<u32> = HashSet::from([root]);
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = tree.get(&out[i]) {
            for &k in kids {
                if seen.insert(k) {
                    out.push(k);
                }
            }
        }
        i += 1;
    }
    out
}

/// True when no followed process is alive (as the image it was set up for) any more.
fn none_alive(live: &HashMap<u32, Identity>) -> bool {
    changed(live, identity).len() == live.len()
}

/// The followed processes that ended or exec'd, `now` giving the identity of a pid now.
fn changed(live: &HashMap<u32, Identity>, now: impl Fn(u32) -> Option<Identity>) -> Vec<u32> {
    live.iter().filter(|(&pid, id)| now(pid).as_ref() != Some(*id)).map(|(&pid, _)| pid).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(comm: &str, start_time: u64, image: (u64, u64, u64)) -> String {
        // 52 fields as Linux 6.x writes them; only 2, 4, 22 and 26-28 matter here.
        let mut f: Vec<String> = (1..=52).map(|k| (k * 10).to_string()).collect();
        f[0] = "4242".into();
        f[1] = format!("({comm})");
        f[2] = "R".into();
        f[3] = "77".into();
        f[21] = start_time.to_string();
        f[25] = image.0.to_string();
        f[26] = image.1.to_string();
        f[27] = image.2.to_string();
        f.join(" ") + "\n"
    }

    #[test]
    fn stat_fields_after_a_strange_command_name() {
        for comm in ["python3", "a b", "x) (y", ")", "((", "py thon) 1 2 3"] {
            let s = parse_stat(&line(comm, 123456, (0x55d0, 0x55f0, 0x7ffd))).unwrap();
            assert_eq!(s.ppid, 77, "{comm}");
            assert_eq!(s.state, 'R', "{comm}");
            assert!(s.running());
            assert_eq!(s.identity, Identity { start_time: 123456, image: (0x55d0, 0x55f0, 0x7ffd) }, "{comm}");
        }
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("1 (x) R 1 2"), None);
    }

    #[test]
    fn pid_reuse_and_exec_change_the_identity() {
        let first = parse_stat(&line("python3", 1000, (1, 2, 3))).unwrap().identity;
        // Same pid, later start: another process (reuse).
        let reused = parse_stat(&line("python3", 1005, (1, 2, 3))).unwrap().identity;
        // Same pid and start, new address space: the process exec'd.
        let execd = parse_stat(&line("sh", 1000, (9, 12, 30))).unwrap().identity;
        // A zombie: the image is gone.
        let zombie = parse_stat(&line("python3", 1000, (0, 0, 0))).unwrap().identity;
        assert_ne!(first, reused);
        assert_ne!(first, execd);
        assert_ne!(first, zombie);
        assert_eq!(first, parse_stat(&line("renamed", 1000, (1, 2, 3))).unwrap().identity, "prctl(PR_SET_NAME)");
        let live = HashMap::from([(4242u32, first), (7, first)]);
        assert!(changed(&live, |_| Some(first)).is_empty());
        for other in [reused, execd, zombie] {
            assert_eq!(changed(&live, |pid| if pid == 4242 { Some(other) } else { Some(first) }), vec![4242]);
        }
        assert_eq!(changed(&live, |pid| if pid == 7 { None } else { Some(first) }), vec![7], "exited");
    }

    #[test]
    fn this_process_has_an_identity_that_stays() {
        let me = std::process::id();
        let a = identity(me).unwrap();
        assert!(a.start_time > 0);
        assert_ne!(a.image, (0, 0, 0), "run as root, or the kernel hides the image addresses");
        assert_eq!(identity(me), Some(a));
        assert_eq!(start_time(me), Some(a.start_time));
    }

    #[test]
    fn exec_is_seen_in_a_real_process() {
        // sh sleeps, then execs into another program: same pid and start time, new identity.
        let mut child = Command::new("sh").args(["-c", "sleep 0.3; exec sleep 5"]).spawn().unwrap();
        let pid = child.id();
        std::thread::sleep(Duration::from_millis(100));
        let before = identity(pid).unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let after = identity(pid).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(before.start_time, after.start_time);
        assert_ne!(before, after);
    }
}
