//! The release (issue #33), end to end: `scripts/dist` builds target/dist/ (in its Debian 11 root; about a minute
//! with a warm cache, three cold), once per run of this file, and then:
//!
//! - the binary needs only the C library's files and libgcc_s (Rust's unwinder, on every glibc system), as `ldd`
//!   lists them; the newest glibc symbol version it uses is at most Debian 11's 2.31; it is under 15 MB; its build
//!   id is `pyperf.debug`'s, and its `.gnu_debuglink` names that file;
//! - it records a Python program in a fresh copy of the Debian 11 root scripts/setup made with nothing but Python,
//!   man and bash completion (no Rust, clang or libelf: checked), run there with chroot, on Debian 11's own
//!   python3.9 (a non-PIE executable); and sid's python3.15 inside the sid root;
//! - the package installs into another fresh copy with `dpkg -i`; `man pyperf-record` renders there; the bash
//!   completion loads and completes `pyperf rec` to `record`.
//!
//! Each recording is of a function that burns one second of its thread's CPU time: at 199 Hz that is about 199
//! samples whatever the machine's load (CPU-clock samples count CPU time); at least 150 are required in it.
//!
//! Needs root (chroot, mount, BPF) and the roots of scripts/setup; a missing one fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{repo, serial};

/// The Debian 11 root scripts/setup made for running the release (scripts/lib/debian-root.sh).
fn run_root() -> PathBuf {
    std::env::var_os("PYPERF_DIST_RUN_ROOT")
        .filter(|r| !r.is_empty())
        .map_or_else(|| "/srv/pyperf-bullseye-run".into(), PathBuf::from)
}

/// target/dist, built by scripts/dist once per process.
fn dist() -> &'static Path {
    static DIST: OnceLock<PathBuf> = OnceLock::new();
    DIST.get_or_init(|| {
        let started = std::time::Instant::now();
        let o = Command::new(repo().join("scripts/dist")).output().expect("run scripts/dist");
        eprintln!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(o.status.success(), "scripts/dist failed: {:?}", o.status);
        eprintln!("scripts/dist took {:.0} s", started.elapsed().as_secs_f64());
        repo().join("target/dist")
    })
}

fn output(cmd: &mut Command) -> Output {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    if !o.status.success() {
        panic!(
            "{cmd:?}: {:?}\nstdout:\n{}\nstderr:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    o
}

fn text(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&output(cmd).stdout).into_owned()
}

/// A copy of the Debian 11 run root, fresh for one test, with /proc, /sys and /dev mounted; unmounted and removed
/// when dropped, and only once nothing is mounted inside (a delete must never walk into the host's /dev).
struct Root {
    dir: Option<tempfile::TempDir>,
}

/// Mount points at or under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").expect("/proc/self/mounts");
    let dir = dir.to_string_lossy().into_owned();
    let mut found: Vec<String> = mounts
        .lines()
        .filter_map(|l| l.split(' ').nth(1))
        .filter(|m| *m == dir || m.starts_with(&format!("{dir}/")))
        .map(str::to_string)
        .collect();
    found.sort_by(|a, b| b.cmp(a));
    found
}

/// Unmounts everything under `dir`, then removes it without leaving its file system; a directory that still has
/// something mounted inside is left alone (and named).
fn remove_root(dir: &Path) -> bool {
    for m in mounts_under(dir) {
        let _ = Command::new("umount").arg("-l").arg(&m).status();
    }
    if !mounts_under(dir).is_empty() {
        eprintln!("{} still has file systems mounted inside: left in place", dir.display());
        return false;
    }
    Command::new("rm").args(["-rf", "--one-file-system"]).arg(dir).status().is_ok_and(|s| s.success())
}

impl Root {
    fn fresh() -> Root {
        let base = run_root();
        assert!(
            base.join("usr/bin/python3.9").exists(),
            "no Debian 11 root at {} (scripts/setup makes it)",
            base.display()
        );
        // Copies a killed run left behind.
        let parent = base.parent().expect("the root has a parent");
        for old in std::fs::read_dir(parent).expect("the roots' directory").flatten() {
            if old.file_name().to_string_lossy().starts_with("pyperf-dist-root.") {
                remove_root(&old.path());
            }
        }
        // Beside the original: the same file system, so the copy is quick.
        let dir = tempfile::Builder::new()
            .prefix("pyperf-dist-root.")
            .tempdir_in(base.parent().expect("the root has a parent"))
            .expect("temp dir for a root");
        output(Command::new("cp").arg("-a").arg(format!("{}/.", base.display())).arg(dir.path()));
        let root = Root { dir: Some(dir) };
        for (what, at) in [("proc", "proc"), ("/sys", "sys"), ("/dev", "dev")] {
            let target = root.path().join(at);
            if what == "proc" {
                output(Command::new("mount").args(["-t", "proc", "proc"]).arg(&target));
            } else {
                output(Command::new("mount").arg("--bind").arg(what).arg(&target));
            }
        }
        root
    }

    fn path(&self) -> &Path {
        self.dir.as_ref().expect("the root's directory").path()
    }

    /// `sh -c SCRIPT` run chrooted into the root.
    fn sh(&self, script: &str) -> Command {
        let mut cmd = Command::new("chroot");
        cmd.arg(self.path()).args([
            "/usr/bin/env",
            "-i",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME=/root",
        ]);
        cmd.args(["/bin/sh", "-c", script]);
        cmd
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        if let Some(dir) = self.dir.take() {
            // Removed here, or kept: never by TempDir's own delete, which would follow a mount still in place.
            let path = dir.keep();
            remove_root(&path);
        }
    }
}

/// A program burning one second of its thread's CPU time in `burn_here`.
const WORKLOAD: &str = "import time\n\ndef burn_here():\n    t = time.thread_time()\n    while time.thread_time() - t < 1.0:\n        pass\n\nburn_here()\n";

/// The samples of folded output whose leaf frame is `burn_here`.
fn burn_samples(folded: &str) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.rsplit(';').next().is_some_and(|leaf| leaf.starts_with("burn_here ")))
        .filter_map(|(_, n)| n.parse::<u64>().ok())
        .sum()
}

#[test]
fn the_binary_needs_only_the_c_library_of_debian_11() {
    let _guard = serial();
    let dist = dist();
    let bin = dist.join("pyperf");
    let size = std::fs::metadata(&bin).expect("target/dist/pyperf").len();
    assert!(size < 15 << 20, "target/dist/pyperf is {size} bytes");
    // ldd: the C library's files, and libgcc_s.
    let ldd = text(Command::new("ldd").arg(&bin));
    let allowed = [
        "linux-vdso.so.1",
        "libc.so.6",
        "ld-linux-x86-64.so.2",
        "libpthread.so.0",
        "libdl.so.2",
        "libm.so.6",
        "librt.so.1",
        "libgcc_s.so.1",
    ];
    let needed: Vec<&str> = ldd.lines().filter_map(|l| l.split_whitespace().next()).collect();
    let others: Vec<&&str> =
        needed.iter().filter(|n| !allowed.iter().any(|a| n.rsplit('/').next() == Some(*a))).collect();
    eprintln!("ldd: {needed:?}");
    assert!(others.is_empty(), "the binary needs {others:?} besides the C library:\n{ldd}");
    // The newest glibc symbol version it uses, and Debian 11's glibc.
    let symbols = text(Command::new("objdump").arg("-T").arg(&bin));
    let newest = symbols
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut p = v.split('.').map(|n| n.parse::<u32>().ok());
            Some((p.next()??, p.next()?.unwrap_or(0)))
        })
        .max()
        .expect("glibc symbol versions");
    eprintln!("newest glibc symbol version: GLIBC_{}.{}", newest.0, newest.1);
    assert!(newest <= (2, 31), "the binary needs GLIBC_{}.{}, Debian 11 has 2.31", newest.0, newest.1);
    // Its debug information: same build id, named by the debuglink.
    let build_id = |p: &Path| {
        let notes = text(Command::new("readelf").arg("-n").arg(p));
        notes.lines().find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string)).expect("a build id")
    };
    assert_eq!(build_id(&bin), build_id(&dist.join("pyperf.debug")), "pyperf.debug is the binary's");
    let link = text(Command::new("readelf").args(["--string-dump=.gnu_debuglink"]).arg(&bin));
    assert!(link.contains("pyperf.debug"), "debuglink: {link}");
    let debug_sections = text(Command::new("readelf").arg("-S").arg(dist.join("pyperf.debug")));
    assert!(debug_sections.contains(".debug_info"), "pyperf.debug has no DWARF");
}

#[test]
fn the_binary_records_debian_11s_python_in_a_root_without_a_toolchain() {
    let _guard = serial();
    let dist = dist();
    let root = Root::fresh();
    for absent in ["usr/bin/cargo", "usr/bin/rustc", "usr/bin/clang", "usr/bin/gcc"] {
        assert!(!root.path().join(absent).exists(), "the run root has /{absent}");
    }
    let libs = std::fs::read_dir(root.path().join("usr/lib/x86_64-linux-gnu")).expect("the root's libraries");
    let libelf: Vec<String> = libs
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("libelf"))
        .collect();
    assert!(libelf.is_empty(), "the run root has {libelf:?}");
    std::fs::copy(dist.join("pyperf"), root.path().join("usr/local/bin/pyperf")).expect("copy the binary in");
    std::fs::write(root.path().join("tmp/w.py"), WORKLOAD).expect("the workload");
    let glibc = text(&mut root.sh("ldd --version | head -n 1"));
    assert!(glibc.trim_end().ends_with("2.31"), "the root's glibc: {glibc}");
    let o = output(&mut root.sh("cd /tmp && pyperf record -F 199 -o /tmp/p.pyp -- python3 /tmp/w.py"));
    eprintln!("{}", String::from_utf8_lossy(&o.stderr));
    let folded = text(&mut root.sh("pyperf report -i /tmp/p.pyp --folded"));
    let n = burn_samples(&folded);
    eprintln!("Debian 11 python3.9: {n} samples in burn_here");
    assert!(n >= 150, "{n} samples in burn_here:\n{folded}");
    let report = text(&mut root.sh("pyperf report -i /tmp/p.pyp"));
    assert!(report.contains("python       3.9."), "{report}");
}

#[test]
fn the_binary_records_sid_python_3_15_in_the_sid_root() {
    let _guard = serial();
    let dist = dist();
    // The sid root with the repo (and so target/dist) mounted at its own path.
    let wrapper = common::sid_python("python3.15");
    assert!(wrapper.exists());
    let sid = common::sid_root();
    for (what, at) in [("/sys", "sys"), ("/dev", "dev")] {
        let target = sid.join(at);
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
        let want = target.to_string_lossy().into_owned();
        if !mounts.lines().any(|l| l.split(' ').nth(1) == Some(want.as_str())) {
            output(Command::new("mount").arg("--bind").arg(what).arg(&target));
        }
    }
    let dir = tempfile::tempdir_in(repo().join("target")).expect("a directory under the repo");
    let (work, rec) = (dir.path().join("w.py"), dir.path().join("p.pyp"));
    std::fs::write(&work, WORKLOAD).expect("the workload");
    let script = format!(
        "cd / && {bin} record -F 199 -o {rec} -- /usr/bin/python3.15 {work} && {bin} report -i {rec} --folded",
        bin = dist.join("pyperf").display(),
        rec = rec.display(),
        work = work.display()
    );
    let folded = text(Command::new("chroot").arg(&sid).args(["/bin/sh", "-c", &script]));
    let n = burn_samples(&folded);
    eprintln!("sid python3.15: {n} samples in burn_here");
    assert!(n >= 150, "{n} samples in burn_here:\n{folded}");
}

#[test]
fn the_package_installs_with_its_man_pages_and_completions() {
    let _guard = serial();
    let dist = dist();
    let debs: Vec<PathBuf> = std::fs::read_dir(dist)
        .expect("target/dist")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect();
    assert_eq!(debs.len(), 1, "one package in target/dist: {debs:?}");
    let root = Root::fresh();
    std::fs::copy(&debs[0], root.path().join("tmp/pyperf.deb")).expect("copy the package in");
    let install = output(&mut root.sh("dpkg -i /tmp/pyperf.deb"));
    eprintln!("{}", String::from_utf8_lossy(&install.stdout));
    assert_eq!(text(&mut root.sh("pyperf --version")).trim(), format!("pyperf {}", env!("CARGO_PKG_VERSION")));
    // man renders the page of a command, from the package's files.
    let page = text(&mut root.sh("MANWIDTH=100 man -P cat pyperf-record 2>&1"));
    assert!(page.contains("pyperf-record") && page.contains("--off-cpu") && page.contains("SYNOPSIS"), "{page}");
    let top = text(&mut root.sh("MANWIDTH=100 man -P cat pyperf 2>&1"));
    assert!(top.contains("pyperf-report(1)"), "pyperf(1) lists the commands' pages:\n{top}");
    // bash loads the completion as bash-completion does (on first use), and it completes a command.
    let completed = text(&mut root.sh(
        "bash -c '. /usr/share/bash-completion/bash_completion; _completion_loader pyperf; complete -p pyperf; \
         COMP_WORDS=(pyperf rec); COMP_CWORD=1; COMP_LINE=\"pyperf rec\"; COMP_POINT=10; _pyperf pyperf rec pyperf; \
         echo \"completions: ${COMPREPLY[*]}\"'",
    ));
    assert!(completed.contains("-F _pyperf pyperf") && completed.contains("completions: record"), "{completed}");
    for file in [
        "usr/share/zsh/vendor-completions/_pyperf",
        "usr/share/fish/vendor_completions.d/pyperf.fish",
        "usr/share/doc/pyperf/copyright",
    ] {
        assert!(root.path().join(file).is_file(), "the package installed no /{file}");
    }
}
