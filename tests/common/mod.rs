//! Shared by the end-to-end tests: running pyperf and the workloads, reading what it recorded, and the macros that
//! make one test per interpreter (`per_interpreter!`, `every_interpreter!`).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};

use pyperf_format::{samples, scan, GilState, Header, PthreadIdMatch, Reader, StackStatus, Tables, ThreadStateMatch};

/// End-to-end tests burn CPU and measure shares: run them one at a time on this 2-CPU machine.
static SERIAL: Mutex<()> = Mutex::new(());

pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// One `#[test]` per interpreter, each calling `check` with its arguments; the test names are the ones CI lists:
///
/// ```ignore
/// per_interpreter! { check:
///     python_2_7_18("2.7.18"),
///     python_sid_3_15("sid-3.15"),
/// }
/// ```
#[macro_export]
macro_rules! per_interpreter {
    ($check:path: $($(#[$meta:meta])* $test:ident($($arg:expr),* $(,)?)),* $(,)?) => {
        $(
            $(#[$meta])*
            #[test]
            fn $test() {
                $check($($arg),*);
            }
        )*
    };
}

/// `per_interpreter!` for every interpreter of testdata/interpreters, the tests named `python_<name>`
/// (`tests/threadnames.rs` checks that the list is whole).
#[macro_export]
macro_rules! every_interpreter {
    ($check:path) => {
        $crate::per_interpreter! { $check:
            python_2_7_18("2.7.18"),
            python_3_6_15("3.6.15"),
            python_3_7_16("3.7.16"),
            python_3_8_18("3.8.18"),
            python_3_9_18("3.9.18"),
            python_3_10_13("3.10.13"),
            python_3_11_7("3.11.7"),
            python_3_12_1("3.12.1"),
            python_3_13_0("3.13.0"),
            python_debian_3_11("debian-3.11"),
            python_sid_3_13("sid-3.13"),
            python_sid_3_14("sid-3.14"),
            python_sid_3_15("sid-3.15"),
        }
    };
}

/// A child process killed (and reaped) on drop, so that a failing test leaves no workload behind.
pub struct Kid(pub Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The pyperf binary, started with SIGHUP and SIGINT at their default actions, as from a terminal: the test
/// runner may itself run under nohup or as a background job of a script (SIGHUP, resp. SIGINT, ignored, and
/// inherited), and pyperf keeps an ignored SIGHUP ignored by design (`tests/record.rs` tests both).
pub fn pyperf() -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(env!("CARGO_BIN_EXE_pyperf"));
    // SAFETY: signal(2) is async-signal-safe, and nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    c
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn workload(name: &str) -> PathBuf {
    repo().join("testdata/workloads").join(name)
}

/// pyenv's root: $PYENV_ROOT, else what `pyenv root` says, else /root/.pyenv (where CI installs it).
pub fn pyenv_root() -> PathBuf {
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

/// The Debian sid root the `sid:` interpreters run in (scripts/setup builds it): $PYPERF_SID_ROOT, else
/// /srv/pyperf-sid.
pub fn sid_root() -> PathBuf {
    std::env::var_os("PYPERF_SID_ROOT")
        .filter(|r| !r.is_empty())
        .map_or_else(|| "/srv/pyperf-sid".into(), PathBuf::from)
}

/// One interpreter of testdata/interpreters.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// `3.11.7`, `debian-3.11`, `sid-3.13`.
    pub name: String,
    /// `(major, minor)`.
    pub version: (u8, u8),
    /// The `python` executable; for a `sid:` interpreter a wrapper that runs it chrooted into [`sid_root`] (see
    /// [`sid_python`]), used the same way.
    pub python: PathBuf,
    /// The shared libpython with debug info (pyenv installs only).
    pub libpython: Option<PathBuf>,
}

/// Every interpreter the tests use (testdata/interpreters, the list scripts/setup checks), oldest first.
pub fn interpreters() -> Vec<Interpreter> {
    let list = std::fs::read_to_string(repo().join("testdata/interpreters")).expect("testdata/interpreters");
    let mut out = Vec::new();
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.len(), 3, "testdata/interpreters: bad line {line:?}");
        let (major, minor) = f[1].split_once('.').expect("version major.minor");
        let version: (u8, u8) = (major.parse().expect("major"), minor.parse().expect("minor"));
        let (python, libpython) = if f[2] == "pyenv" {
            let dir = pyenv_root().join("versions").join(f[0]);
            let exe = if version.0 == 2 { "python2".to_string() } else { format!("python{}.{}", version.0, version.1) };
            // libpython3.7m.so.1.0 before 3.8 (the ABI flag), libpython3.8.so.1.0 after.
            let prefix = format!("libpython{}.{}", version.0, version.1);
            let lib = std::fs::read_dir(dir.join("lib"))
                .ok()
                .and_then(|rd| {
                    rd.filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                        p.file_name()
                            .and_then(|f| f.to_str())
                            .is_some_and(|f| f.starts_with(&prefix) && f.ends_with(".so.1.0"))
                    })
                })
                .unwrap_or_else(|| dir.join("lib").join(format!("{prefix}.so.1.0")));
            (dir.join("bin").join(exe), Some(lib))
        } else if let Some(exe) = f[2].strip_prefix("sid:") {
            (sid_python(exe), None)
        } else {
            (PathBuf::from(f[2]), None)
        };
        out.push(Interpreter { name: f[0].to_string(), version, python, libpython });
    }
    out
}

/// An interpreter the tests must have: a missing one fails the test that needs it, loudly.
pub fn interpreter(name: &str) -> PathBuf {
    let all = interpreters();
    let i = all.iter().find(|i| i.name == name).unwrap_or_else(|| panic!("{name} is not in testdata/interpreters"));
    let path = i.python.clone();
    assert!(path.exists(), "interpreter {name} missing at {} (scripts/setup checks for it)", path.display());
    if let Some(exe) = sid_exe(name) {
        let real = sid_root().join("usr/bin").join(&exe);
        assert!(
            real.exists(),
            "interpreter {name} missing: no {} (run scripts/setup, which builds the Debian sid root)",
            real.display()
        );
    }
    path
}

/// `EXE` of the `sid:EXE` interpreter `name`.
fn sid_exe(name: &str) -> Option<String> {
    let list = std::fs::read_to_string(repo().join("testdata/interpreters")).expect("testdata/interpreters");
    list.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 3 && f[0] == name).then(|| f[2].strip_prefix("sid:").map(str::to_string)).flatten()
    })
}

/// A `sid:EXE` interpreter as a path to run like any `python`: a wrapper script (under target/tmp) that runs
/// `/usr/bin/EXE` chrooted into [`sid_root`] (sid's interpreters need sid's glibc), through `exec` all the way, so
/// the wrapper's pid is the interpreter's, in the caller's working directory when that is visible inside
/// (else `/`). Before returning, makes sure (once per machine, see [`sid_mounts`]) that /proc and the paths the
/// tests give interpreters (the repo, the temp dir) are mounted at the same absolute paths inside the root. A
/// missing root is reported by the wrapper when run (and by [`interpreter`]), naming scripts/setup.
pub fn sid_python(exe: &str) -> PathBuf {
    assert!(!exe.is_empty() && !exe.contains(['/', '\'', ' ']), "testdata/interpreters: bad sid:{exe}");
    let root = sid_root();
    let root_s = root.to_str().expect("UTF-8 sid root");
    assert!(root.is_absolute() && !root_s.contains('\''), "PYPERF_SID_ROOT {root_s:?}: an absolute path without '");
    let real = root.join("usr/bin").join(exe);
    if real.exists() {
        if let Err(e) = SID_MOUNTS.get_or_init(|| sid_mounts(&root)) {
            panic!("cannot prepare the Debian sid root {root_s} for the tests (they run as root): {e}");
        }
    }
    let script = format!(
        "#!/bin/sh\n\
         # Made by tests/common for testdata/interpreters' sid:{exe}: Debian sid's /usr/bin/{exe}, chrooted.\n\
         [ -x '{real}' ] || {{ echo \"pyperf tests: no {real}: run scripts/setup, which builds the Debian sid \
         root {root_s}\" >&2; exit 127; }}\n\
         exec chroot '{root_s}' /bin/sh -c 'cd \"$0\" 2>/dev/null || cd /; exec /usr/bin/{exe} \"$@\"' \"$PWD\" \"$@\"\n",
        real = real.display()
    );
    // One directory per root, so that test processes using different roots do not overwrite each other's.
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sid").join(root_s.trim_matches('/').replace('/', "_"));
    let path = dir.join(exe);
    if std::fs::read_to_string(&path).ok().as_deref() != Some(script.as_str()) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        // Written aside and renamed: concurrent tests never run a half-written wrapper.
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{exe}.{}.{n}", std::process::id()));
        std::fs::write(&tmp, &script).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).expect("chmod wrapper");
        std::fs::rename(&tmp, &path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    path
}

/// Whether the sid root's mounts are in place, checked once per test process.
static SID_MOUNTS: OnceLock<Result<(), String>> = OnceLock::new();

/// Mounts, unless already there (they stay, once per machine): proc at ROOT/proc, and bind mounts of the repo
/// (workloads, target/) and the temp dir (tempfile's scratch directories, recordings, dumps) at the same paths
/// inside the root. Under an exclusive flock of the root directory, so that concurrent test processes never
/// mount twice.
fn sid_mounts(root: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let root = root.canonicalize().map_err(|e| format!("{}: {e}", root.display()))?;
    let lock = std::fs::File::open(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    // SAFETY: flock on a file descriptor `lock` owns and keeps open until the end of this function; closing it
    // releases the lock.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(format!("flock {}: {}", root.display(), std::io::Error::last_os_error()));
    }
    let mounted = |at: &Path| -> Result<bool, String> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").map_err(|e| format!("/proc/self/mounts: {e}"))?;
        // Mount points are the second field, with space, tab, newline and backslash octal-escaped.
        let want = at.to_str().expect("UTF-8 path").replace('\\', "\\134").replace(' ', "\\040").replace('\t', "\\011");
        Ok(mounts.lines().any(|l| l.split(' ').nth(1) == Some(want.as_str())))
    };
    let mount = |args: &[&std::ffi::OsStr]| mount_cmd("mount", args);
    let proc_at = root.join("proc");
    if !mounted(&proc_at)? {
        mount(&["-t".as_ref(), "proc".as_ref(), "proc".as_ref(), proc_at.as_os_str()])?;
    }
    // The paths as the tests give them (not canonicalized: a symlink on the way does not exist inside), each
    // once: one under another is visible through the outer bind.
    // The pyenv root too: the container tests run pyenv's interpreters inside the root.
    let mut paths = vec![repo(), std::env::temp_dir()];
    if pyenv_root().is_dir() {
        paths.push(pyenv_root());
    }
    paths.sort();
    paths.dedup_by(|later, earlier| later.starts_with(earlier));
    for path in paths {
        let at = root.join(path.strip_prefix("/").map_err(|_| format!("{} is not absolute", path.display()))?);
        if same_file(&path, &at) {
            continue;
        }
        // A symlink inside the root (sid's /var/run -> /run) must take neither the new directories nor the mount
        // outside it.
        let inside = |p: &Path| -> Result<PathBuf, String> {
            let real = p.canonicalize().map_err(|e| format!("{}: {e}", p.display()))?;
            if !real.starts_with(&root) {
                return Err(format!("{} leads outside the root, to {}", at.display(), real.display()));
            }
            Ok(real)
        };
        inside(at.ancestors().find(|a| a.exists()).expect("the root exists"))?;
        std::fs::create_dir_all(&at).map_err(|e| format!("{}: {e}", at.display()))?;
        let real = inside(&at)?;
        // A bind mount left by an earlier checkout at the same path (deleted, then cloned again) still shows the
        // deleted directory: replace it.
        if mounted(&real)? {
            mount_cmd("umount", &["-l".as_ref(), real.as_os_str()])?;
        }
        mount(&["--bind".as_ref(), path.as_os_str(), real.as_os_str()])?;
    }
    Ok(())
}

fn mount_cmd(cmd: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Whether two paths name the same directory (device and inode), as a current bind mount does.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Where a test writes its recording.
pub fn scratch(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    (dir, path)
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run pyperf");
    eprintln!("status: {:?}\nstderr:\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    out
}

/// The heavy share of `split.py`'s Runner.run phase as the workload itself timed it: the `cpu heavy=H light=L`
/// line it printed (thread CPU time).
pub fn split_truth(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().find(|l| l.starts_with("cpu heavy=")).unwrap_or_else(|| panic!("no cpu line in {text:?}"));
    let num = |key: &str| -> f64 {
        let v = line.split_whitespace().find_map(|w| w.strip_prefix(key)).unwrap_or_else(|| panic!("{line:?}"));
        v.parse().unwrap_or_else(|_| panic!("{line:?}"))
    };
    let (h, l) = (num("heavy="), num("light="));
    assert!(h + l > 0.0, "{line:?}");
    h / (h + l)
}

/// Checks a sampled share against the workload's own timing: within four binomial standard errors (at least
/// 3 points), so a biased sampler fails and sampling noise does not. The workload should do 3:1 work; a truth far
/// from 0.75 means the workload itself is broken.
pub fn assert_share(what: &str, hits: usize, of: usize, truth: f64) {
    assert!((0.6..=0.9).contains(&truth), "{what}: the workload timed a {truth:.3} share; it should be near 0.75");
    assert!(of >= 100, "{what}: only {of} samples");
    let sampled = hits as f64 / of as f64;
    let tolerance = (4.0 * (truth * (1.0 - truth) / of as f64).sqrt()).max(0.03);
    eprintln!("{what}: sampled share {sampled:.3}, timed by the workload {truth:.3} (tolerance {tolerance:.3})");
    assert!(
        (sampled - truth).abs() <= tolerance,
        "{what}: sampled share {sampled:.3} of {of} samples, the workload timed {truth:.3} (tolerance {tolerance:.3})"
    );
}

/// Starts a workload and waits until it has printed its `ready` line.
pub fn start_workload(python: &Path, script: &str, args: &[&str]) -> Child {
    let mut child =
        Command::new(python).arg(workload(script)).args(args).stdout(Stdio::piped()).spawn().expect("start workload");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready"), "workload said {line:?}");
    child
}

#[derive(Debug, Clone)]
pub struct S {
    pub time_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub gil: GilState,
    pub thread_state: ThreadStateMatch,
    pub pthread_id: PthreadIdMatch,
    pub status: StackStatus,
    /// Qualified function names, root first.
    pub names: Vec<String>,
    /// (qualified name, file, line), root first.
    pub frames: Vec<(String, String, u32)>,
    /// A period a late sample stood for (steal; format 1.11 sample flag STOLEN): wall time, no CPU time.
    pub stolen: bool,
}

pub struct Recording {
    pub tables: Tables,
    pub samples: Vec<S>,
    pub warnings: Vec<String>,
}

/// Reads a recording the way `pyperf report` does, checking every reference; `each` makes one test-side value per
/// sample from the tables so far, the sample and its frames' symbol ids (root first). Returns the header, the
/// tables, those values and the reader's warnings.
pub fn read_each<T>(
    path: &Path,
    mut each: impl FnMut(&Tables, &pyperf_format::Sample<'_>, Vec<u32>) -> T,
) -> (Header, Tables, Vec<T>, Vec<String>) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    let mut reader = Reader::new(BufReader::new(file)).expect("recording header");
    let header = reader.header().clone();
    let mut tables = Tables::default();
    let mut out = Vec::new();
    let notes = scan(&mut reader, &mut tables, |t, chunk| {
        for s in samples(chunk) {
            let mut ids = Vec::new();
            t.frames_root_first(s.stack, &mut ids);
            out.push(each(t, &s, ids));
        }
    })
    .expect("a readable recording (every stack and symbol defined before use)");
    (header, tables, out, notes.warnings)
}

pub fn read(path: &Path) -> Recording {
    let (_, tables, samples, warnings) = read_each(path, |t, s, ids| {
        let frames: Vec<(String, String, u32)> = ids
            .iter()
            .map(|&id| {
                let sym = t.symbol(id);
                (sym.qualified_name(), sym.file.clone(), sym.line)
            })
            .collect();
        S {
            time_ns: s.time_ns,
            pid: s.pid,
            tid: s.tid,
            comm: s.comm.to_string(),
            gil: s.gil,
            thread_state: s.thread_state,
            pthread_id: s.pthread_id,
            status: s.status,
            names: frames.iter().map(|f| f.0.clone()).collect(),
            frames,
            stolen: s.flags & pyperf_format::sample_flags::STOLEN != 0,
        }
    });
    Recording { tables, samples, warnings }
}

impl Recording {
    /// The samples that are CPU time: all but the stolen periods, which CPU views (`top`, `push`) leave out.
    pub fn cpu_samples(&self) -> usize {
        self.samples.iter().filter(|s| !s.stolen).count()
    }

    pub fn of_pid(&self, pid: u32) -> Vec<&S> {
        self.samples.iter().filter(|s| s.pid == pid).collect()
    }

    /// Samples whose stack contains a frame named `name`.
    pub fn with_frame<'a>(&'a self, name: &str) -> Vec<&'a S> {
        self.samples.iter().filter(|s| s.names.iter().any(|n| n == name)).collect()
    }
}

/// The CPU time `pid` has used so far (all its threads, user and system; /proc/PID/stat in clock ticks), or `None`
/// once it is gone.
pub fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at state, field 3; utime and stime are 14, 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(14 - 3);
    let ticks: u64 = f.next()?.parse::<u64>().ok()? + f.next()?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(std::time::Duration::from_nanos(ticks * 1_000_000_000 / hz))
}

/// Waits until `pid` has used `seconds` more CPU time than when called (at most two minutes): the number of
/// samples a recording holds follows the CPU time the target got, which a loaded machine makes any fixed wall time
/// fall short of.
pub fn wait_cpu(pid: u32, seconds: f64) {
    let start = cpu_time(pid).unwrap_or_else(|| panic!("process {pid} is gone"));
    let want = start + std::time::Duration::from_secs_f64(seconds);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let now = cpu_time(pid).unwrap_or_else(|| panic!("process {pid} ended before using {seconds} s of CPU"));
        if now >= want {
            return;
        }
        assert!(std::time::Instant::now() < until, "process {pid} used only {:?} of CPU in two minutes", now - start);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until the recorder writing `out` is recording: its first flush (after the sampling loop starts) has put
/// the header on disk. Starting (loading the BPF program, inspecting the targets) takes from a few hundred
/// milliseconds to many seconds on a loaded machine.
pub fn wait_recording(out: &Path) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !std::fs::metadata(out).is_ok_and(|m| m.len() > 0) {
        assert!(std::time::Instant::now() < until, "the recorder did not start within two minutes");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Ends a recorder as Ctrl-C does (SIGINT) and waits for it.
pub fn interrupt(recorder: &mut Child) -> std::process::ExitStatus {
    // SAFETY: plain kill(2) of a child this test started and has not waited for yet.
    assert_eq!(unsafe { libc::kill(recorder.id() as i32, libc::SIGINT) }, 0, "SIGINT to the recorder");
    let status = recorder.wait().expect("wait for the recorder");
    eprintln!("recorder status after SIGINT: {status:?}");
    status
}

/// Runs a recorder (`pyperf record -p PID ... -o OUT` without `-d`, through `cmd`) until the target has used
/// `cpu_seconds` of CPU after the recording started, then ends it with SIGINT; a recorder that exits by itself
/// (a refused start) is just waited for. Returns its output, as [`run`] does.
pub fn record_for_cpu(cmd: &mut Command, out: &Path, pid: u32, cpu_seconds: f64) -> Output {
    let mut rec = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run pyperf");
    // Its stderr drained meanwhile, so that a chatty recorder never blocks on a full pipe.
    let mut stderr = rec.stderr.take().expect("piped stderr");
    let drain = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut buf);
        buf
    });
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        if rec.try_wait().expect("wait for pyperf").is_some() {
            break;
        }
        if std::fs::metadata(out).is_ok_and(|m| m.len() > 0) {
            wait_cpu(pid, cpu_seconds);
            // SAFETY: plain kill(2) of a child this test started and has not reaped yet.
            unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
            break;
        }
        assert!(std::time::Instant::now() < until, "the recorder neither started nor ended within two minutes");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut o = rec.wait_with_output().expect("wait for pyperf");
    o.stderr = drain.join().expect("stderr reader");
    eprintln!("status: {:?}\nstderr:\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    o
}

/// The interpreter of process `pid`, once it is mapped and recognisable (a process just started may not be yet).
pub fn inspect_when_ready(pid: u32) -> pyperf::python::PythonProcess {
    let t = std::time::Instant::now();
    loop {
        match pyperf::python::inspect(pid) {
            Ok(p) => return p,
            Err(e) if t.elapsed() > std::time::Duration::from_secs(10) => panic!("inspect({pid}): {e}"),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// The directory with the OpenTelemetry SDK (scripts/setup installs it).
pub fn otel_site() -> std::path::PathBuf {
    let site =
        std::env::var_os("PYPERF_OTEL_SITE").map_or_else(|| repo().join("target/otel-site"), std::path::PathBuf::from);
    assert!(site.join("opentelemetry/sdk").is_dir(), "{} has no OpenTelemetry SDK: run scripts/setup", site.display());
    site
}
