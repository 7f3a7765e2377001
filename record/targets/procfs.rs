//! What discovery reads of /proc: a process's identity (which program run it is) kept open for quick looks, its age,
//! namespaces and cgroup, the process tree, a digest of its memory map. The parsing of /proc files is
//! [`crate::proc`]'s (the leaf every room shares); this module may import nothing else of the crate's.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::proc::{parse_nspid, parse_stat, read_small, stat, Identity, Stat};

/// /proc/PID/stat files kept open, re-read from offset 0 (a /proc file regenerates then): a look every
/// `RESCAN_EVERY` at a followed process was an open, a read and a close, and the path walk and file set-up were half
/// of it. An open file stays with the process it was opened for: after its end it reads nothing, even once the pid is
/// reused. At most [`StatFiles::KEEP`] are kept (a descriptor each); others are opened at each read as before.
#[derive(Default)]
pub struct StatFiles {
    files: HashMap<u32, std::fs::File>,
}

impl StatFiles {
    /// Enough for any `-p` list or command's tree; `-a` on a host with more Python processes opens the rest.
    pub const KEEP: usize = 256;

    /// /proc/PID/stat of `pid` now; None if it is gone.
    pub fn stat(&mut self, pid: u32) -> Option<Stat> {
        use std::os::unix::fs::FileExt;
        if !self.files.contains_key(&pid) {
            if self.files.len() >= Self::KEEP {
                return stat(pid);
            }
            self.files.insert(pid, std::fs::File::open(format!("/proc/{pid}/stat")).ok()?);
        }
        let file = self.files.get(&pid)?;
        // One read(2): /proc/PID/stat is a few hundred bytes (52 numbers and a name of at most 64).
        let mut buf = [0u8; 4096];
        let n = loop {
            match file.read_at(&mut buf, 0) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    // ESRCH: the process it was opened for ended.
                    self.files.remove(&pid);
                    return None;
                }
            }
        };
        parse_stat(std::str::from_utf8(&buf[..n]).ok()?)
    }

    /// Closes the files of processes not in `keep`.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.files.retain(|&pid, _| keep(pid));
    }
}

/// The identity of `pid` now; None if it is gone.
pub fn identity(pid: u32) -> Option<Identity> {
    stat(pid).map(|s| s.identity)
}

/// Start time of a process (field 22 of /proc/PID/stat), None if it is gone.
pub fn start_time(pid: u32) -> Option<u64> {
    identity(pid).map(|i| i.start_time)
}

/// How long ago `pid` started (its start time against CLOCK_BOOTTIME, to a clock tick); None if it is gone.
pub fn age(pid: u32) -> Option<std::time::Duration> {
    let start = ticks_ns(start_time(pid)?)?;
    Some(std::time::Duration::from_nanos(clock_ns(libc::CLOCK_BOOTTIME)?.saturating_sub(start)))
}

/// A /proc time in clock ticks (`_SC_CLK_TCK`) as ns.
pub fn ticks_ns(ticks: u64) -> Option<u64> {
    // SAFETY: sysconf reads a configuration value; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks.checked_mul(1_000_000_000 / u64::try_from(hz).ok().filter(|&h| h > 0)?)
}

/// The time of `clock` in ns.
pub fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given, nothing else.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// Where a process lives: its PID namespace and cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespaces {
    /// Its pid in its own (innermost) PID namespace (the last `NSpid` of /proc/PID/status); its host pid when it
    /// shares pyperf's namespace.
    pub ns_pid: u32,
    /// It is in another PID namespace than pyperf: its threads know themselves by that namespace's tids.
    pub other_pid_ns: bool,
    /// Its cgroup (the v2 path of /proc/PID/cgroup, else the first hierarchy's); empty when unreadable.
    pub cgroup: String,
}

/// The namespaces of `pid`; `None` if it is gone.
pub fn namespaces(pid: u32) -> Option<Namespaces> {
    let status = crate::proc::status(pid)?;
    let ns_pid = parse_nspid(&status).unwrap_or(pid);
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let theirs = ns(&pid.to_string());
    let ours = ns("self");
    // Unreadable links (no permission) fall back to what NSpid says: more than one level means nested.
    let other_pid_ns = match (theirs, ours) {
        (Some(t), Some(o)) => t != o,
        _ => ns_pid != pid,
    };
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).map(|c| parse_cgroup(&c)).unwrap_or_default();
    Some(Namespaces { ns_pid, other_pid_ns, cgroup })
}

/// The cgroup of a /proc/PID/cgroup text: the unified (v2) hierarchy's path (`0::PATH`), unless that is the root
/// and a v1 hierarchy places the process deeper (hybrid systems: containers show up there); empty if unknown.
pub fn parse_cgroup(text: &str) -> String {
    let path = |l: &str| l.splitn(3, ':').nth(2).map(str::to_string);
    let unified = text.lines().find(|l| l.starts_with("0::")).and_then(path);
    let v1 = text.lines().filter(|l| !l.starts_with("0::")).filter_map(path).find(|p| p != "/");
    match unified {
        Some(u) if u != "/" => u,
        u => v1.or(u).unwrap_or_default(),
    }
}

/// Where the cgroup hierarchies are mounted: the unified (v2) one at the root, or under `unified/` beside the v1
/// controllers' (hybrid systems).
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The directory of cgroup `path` (as /proc/PID/cgroup shows it): in the unified hierarchy first, then in the
/// v1 ones; `None` if no hierarchy has it.
pub fn cgroup_dir(path: &str) -> Option<PathBuf> {
    let rel = path.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    let root = Path::new(CGROUP_ROOT);
    if root.join("cgroup.controllers").exists() {
        // A pure v2 system: one hierarchy, whose subdirectories are cgroups, not hierarchies.
        let dir = root.join(rel);
        return dir.join("cgroup.procs").exists().then_some(dir);
    }
    let mut hierarchies = vec![root.join("unified")];
    if let Ok(entries) = std::fs::read_dir(root) {
        let mut v1: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        v1.sort();
        hierarchies.extend(v1);
    }
    hierarchies.into_iter().map(|h| h.join(rel)).find(|d| d.join("cgroup.procs").exists())
}

/// The processes of the cgroup at `dir` and of every cgroup below it (their `cgroup.procs`).
pub fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        if let Ok(procs) = std::fs::read_to_string(d.join("cgroup.procs")) {
            out.extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            todo.extend(
                entries.filter_map(|e| e.ok()).filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()),
            );
        }
    }
    out
}

/// Every pid in /proc.
pub fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// `root` and every process descending from it. Read from the children lists of the processes in the tree (a
/// few small reads, however many processes the host runs) where the kernel has them (CONFIG_PROC_CHILDREN), else
/// from the parent of every process.
pub fn descendants(root: u32) -> Vec<u32> {
    static CHILDREN_LISTS: OnceLock<bool> = OnceLock::new();
    let lists = *CHILDREN_LISTS.get_or_init(|| {
        let me = std::process::id();
        Path::new(&format!("/proc/{me}/task/{me}/children")).exists()
    });
    let kids = |pid: u32| -> Vec<u32> {
        // Per thread: a child is listed under the thread that forked it.
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
        let mut out = Vec::new();
        for task in tasks.filter_map(|t| t.ok()) {
            if let Some(list) = task.path().join("children").to_str().and_then(read_small) {
                out.extend(list.split_whitespace().filter_map(|c| c.parse::<u32>().ok()));
            }
        }
        out
    };
    if lists {
        return tree(root, kids);
    }
    let mut by_parent: HashMap<u32, Vec<u32>> = HashMap::new();
    for pid in all_pids() {
        if let Some(s) = stat(pid) {
            by_parent.entry(s.ppid).or_default().push(pid);
        }
    }
    tree(root, |pid| by_parent.get(&pid).cloned().unwrap_or_default())
}

/// `root` and its descendants, `children` giving the children of a process.
fn tree(root: u32, children: impl Fn(u32) -> Vec<u32>) -> Vec<u32> {
    let mut out = vec![root];
    let mut seen: HashSet<u32> = HashSet::from([root]);
    let mut i = 0;
    while i < out.len() {
        for k in children(out[i]) {
            if seen.insert(k) {
                out.push(k);
            }
        }
        i += 1;
    }
    out
}

/// A digest of /proc/PID/maps (addresses, permissions, files): what finding the process's interpreter depends on,
/// besides its image. None if it is gone.
pub fn maps_digest(pid: u32) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let maps = std::fs::read(format!("/proc/{pid}/maps")).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    maps.hash(&mut h);
    Some(h.finish())
}

/// The followed processes that ended or exec'd, `now` giving the identity of a pid now.
pub fn changed(live: &HashMap<u32, Identity>, mut now: impl FnMut(u32) -> Option<Identity>) -> Vec<u32> {
    live.iter().filter(|(&pid, id)| now(pid).as_ref() != Some(*id)).map(|(&pid, _)| pid).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // (The stat parser's own cases are crate::proc's.)
    use crate::proc::stat_line as line;

    #[test]
    fn descendants_of_a_process_tree() {
        use std::time::{Duration, Instant};
        // sh -> (sleep, sh -> sleep): the root first, then the other three.
        let mut sh =
            std::process::Command::new("sh").args(["-c", "sleep 30 & sh -c 'sleep 30 & wait' & wait"]).spawn().unwrap();
        let root = sh.id();
        // A generous limit: a loaded machine can take seconds to start the four.
        let until = Instant::now() + Duration::from_secs(60);
        let mut found = descendants(root);
        while found.len() < 4 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
            found = descendants(root);
        }
        // Each one's parent (as /proc/PID/stat says) is in the tree.
        let orphans: Vec<u32> =
            found[1..].iter().copied().filter(|&p| !stat(p).is_some_and(|s| found.contains(&s.ppid))).collect();
        // The processes this test started, youngest first.
        for &pid in found.iter().rev() {
            // SAFETY: plain kill(2).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let _ = sh.wait();
        assert_eq!(found[0], root);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(orphans.is_empty(), "{orphans:?} of {found:?}");
    }

    #[test]
    fn namespace_and_cgroup_lines() {
        assert_eq!(parse_cgroup("0::/system.slice/docker-abc.scope\n"), "/system.slice/docker-abc.scope");
        assert_eq!(parse_cgroup("12:pids:/a\n0::/b:c\n"), "/b:c");
        assert_eq!(parse_cgroup("4:memory:/process_api/75e8\n1:cpu:/\n0::/\n"), "/process_api/75e8");
        assert_eq!(parse_cgroup("1:cpu:/\n0::/\n"), "/");
        assert_eq!(parse_cgroup("4:cpu,cpuacct:/kubepods/pod1\n"), "/kubepods/pod1");
        assert_eq!(parse_cgroup(""), "");
        let me = namespaces(std::process::id()).unwrap();
        assert_eq!(me.ns_pid, std::process::id());
        assert!(!me.other_pid_ns);
        assert!(!stat(std::process::id()).unwrap().kernel_thread());
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
    fn kept_stat_files_read_fresh_and_end_with_their_process() {
        use std::time::{Duration, Instant};
        let mut child = std::process::Command::new("sleep").arg("100").spawn().expect("sleep");
        let pid = child.id();
        let mut files = StatFiles::default();
        let wait_for = |files: &mut StatFiles, what: &str, ok: &dyn Fn(Option<Stat>) -> bool| {
            let t = Instant::now();
            while !ok(files.stat(pid)) {
                assert!(t.elapsed() < Duration::from_secs(60), "{what}: {:?}", files.stat(pid));
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        // Spawned is not yet exec'd: until the child runs sleep's image its stat may show the fork's or none
        // (start_code 0 during the exec); the identity compared below is sleep's.
        let exe = format!("/proc/{pid}/exe");
        wait_for(&mut files, "sleep's image", &|s| {
            s.is_some_and(|s| s.identity.image.0 != 0)
                && std::fs::read_link(&exe).is_ok_and(|p| p.file_name().is_some_and(|n| n == "sleep"))
        });
        let first = files.stat(pid).expect("a running child");
        assert_eq!(first.ppid, std::process::id());
        assert_eq!(files.files.len(), 1, "kept open");
        // Stopped: the same open file shows the new state (it is regenerated at offset 0, not cached).
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        wait_for(&mut files, "stopped", &|s| s.is_some_and(|s| s.state == 'T'));
        assert_eq!(files.stat(pid).map(|s| s.identity), Some(first.identity));
        child.kill().expect("kill");
        wait_for(&mut files, "a zombie", &|s| s.is_some_and(|s| !s.running()));
        child.wait().expect("reap");
        wait_for(&mut files, "gone", &|s| s.is_none());
        assert!(files.files.is_empty(), "closed once its process is gone");
        files.retain(|_| false);
    }

    #[test]
    fn stat_files_keep_a_bounded_number_open() {
        let mut files = StatFiles::default();
        let me = std::process::id();
        for _ in 0..2 {
            assert!(files.stat(me).is_some_and(|s| s.running()));
        }
        files.files.clear();
        // Filled up with (any) open files: a new pid is read without keeping its file.
        for k in 0..StatFiles::KEEP as u32 {
            files.files.insert(u32::MAX - k, std::fs::File::open("/proc/self/stat").expect("open"));
        }
        assert!(files.stat(me).is_some());
        assert!(!files.files.contains_key(&me));
        files.retain(|pid| pid == u32::MAX);
        assert_eq!(files.files.len(), 1);
    }
}
