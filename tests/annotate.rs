//! `pyperf record --source` and `pyperf annotate` (#32) end to end: needs root (loads BPF), and for the HTML check
//! `chromium` (Debian package; or PYPERF_CHROMIUM; scripts/setup installs it: without it the test fails).
//!
//! testdata/workloads/annotate_lines.py checksums a buffer three times as long on its line A as on its line B and
//! times both lines with its own CPU clock. Recorded with `--source`:
//! - annotate's per-line self counts of A and B split as the workload timed them (within four binomial standard
//!   errors, at least 3 points), and the lines are shown with their text, from the recording's copy, whose SHA-256 is
//!   the file's;
//! - with the file gone from disk, annotate still shows the source (the recording's copy), without a warning;
//! - with the file changed on disk, a one-line warning says the local file differs and that the recording's copy is
//!   shown;
//! - recorded without `--source` (the default), the recording holds no file and annotate shows the local one;
//! - the HTML page, loaded in headless Chromium, has the lines and their shares, and nothing from the network.
//!
//! The Debian sid interpreter runs chrooted, its script in a directory only the chroot has: the recorder reads it
//! through the process's own root (`/proc/PID/root`), and the host has no local copy to fall back on.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{assert_share, interpreter, pyperf, run, scratch, serial, sid_root, workload};
use pyperf_report::annotate::{self, Target};
use pyperf_report::{LoadOptions, Profile};

/// The workload's `lines A B` line: (A seconds, B seconds) of its CPU time.
fn truth(stdout: &[u8]) -> (f64, f64) {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().find(|l| l.starts_with("lines ")).unwrap_or_else(|| panic!("no lines line in {text:?}"));
    let v: Vec<f64> = line.split_whitespace().skip(1).map(|w| w.parse().expect("a number")).collect();
    assert_eq!(v.len(), 2, "{line:?}");
    (v[0], v[1])
}

/// The line numbers of the `# line A` and `# line B` markers in the workload's text.
fn marked_lines(text: &str) -> (u32, u32) {
    let find = |marker: &str| {
        text.lines().position(|l| l.trim_end().ends_with(marker)).map(|i| i as u32 + 1).expect("marker in workload")
    };
    (find("# line A"), find("# line B"))
}

/// `pyperf annotate ARGS`: (success, stdout, stderr).
fn annotate_cli(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pyperf")).arg("annotate").args(args).output().expect("run pyperf");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// The row of `line` in annotate's text output (`  self%  total%  LINE  text`): (self %, total %, text).
fn row(output: &str, line: u32) -> (String, String, String) {
    let want = line.to_string();
    for l in output.lines() {
        // Cells are 7 wide after two spaces each, then the line number right-aligned, two spaces, the text.
        if l.len() < 20 || !l.starts_with("  ") {
            continue;
        }
        let (cells, rest) = l.split_at(18);
        let rest = rest.trim_start();
        let (number, text) = rest.split_once("  ").unwrap_or((rest, ""));
        if number == want {
            let cell = |c: &str| c.trim().to_string();
            return (cell(&cells[2..9]), cell(&cells[11..18]), text.to_string());
        }
    }
    panic!("no row for line {line} in:\n{output}")
}

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("PYPERF_CHROMIUM") {
        return PathBuf::from(p);
    }
    let on_path = |name: &str| {
        std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|d| d.join(name)).find(|p| p.is_file())
    };
    ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"]
        .into_iter()
        .find_map(on_path)
        .expect("chromium (headless browser) not found: scripts/setup installs it, or set PYPERF_CHROMIUM")
}

/// The DOM of `page` as headless Chromium builds it (`--dump-dom`).
fn dump_dom(page: &Path) -> String {
    let profile = tempfile::tempdir().expect("browser profile dir");
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(page)
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where the workload is run from: (path the interpreter is given, path on this machine, a guard removing it).
struct Script {
    inside: String,
    host: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Script {
    fn drop(&mut self) {
        if self._dir.is_none() {
            if let Some(parent) = self.host.parent() {
                let _ = std::fs::remove_dir_all(parent);
            }
        }
    }
}

/// A copy of the workload the test may delete and change: in a temp dir, or for a sid interpreter in a directory
/// inside the chroot only (the host has nothing at that path).
fn place_script(name: &str) -> Script {
    let text = std::fs::read(workload("annotate_lines.py")).expect("workload");
    if name.starts_with("sid-") {
        let inside = format!("/opt/pyperf-annotate-{}/annotate_lines.py", std::process::id());
        let host = sid_root().join(inside.trim_start_matches('/'));
        std::fs::create_dir_all(host.parent().expect("dir")).expect("mkdir in the sid root");
        std::fs::write(&host, &text).expect("write in the sid root");
        assert!(!Path::new(&inside).exists(), "{inside} exists outside the chroot too");
        Script { inside, host, _dir: None }
    } else {
        let dir = tempfile::tempdir().expect("temp dir");
        let host = dir.path().join("annotate_lines.py");
        std::fs::write(&host, &text).expect("write");
        Script { inside: host.display().to_string(), host, _dir: Some(dir) }
    }
}

fn annotate_lines(name: &str) {
    let _serial = serial();
    let python = interpreter(name);
    let script = place_script(name);
    let source = std::fs::read(&script.host).expect("script");
    let (line_a, line_b) = marked_lines(&String::from_utf8_lossy(&source));
    let (dir, out) = scratch("lines.pyp");
    let rec = run(pyperf()
        .args(["record", "--source", "-F", "997", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&python)
        .args([script.inside.as_str(), "3"]));
    assert!(rec.status.success(), "{name}: pyperf record failed");
    let (a, b) = truth(&rec.stdout);
    let timed = a / (a + b);

    // The per-line counts, exactly, from the library; their split against the workload's clock.
    let profile = Profile::open(&out, &LoadOptions::default()).expect("recording");
    let stored = &profile.tables.sources()[&script.inside];
    assert!(stored.is_stored(), "{name}: not stored: {}", stored.error);
    assert_eq!(stored.content, source, "{name}: the file's bytes");
    assert_eq!(stored.sha256_hex(), pyperf_format::hex(&pyperf_format::sha256(&source)));
    let counters = &profile.tables.stats.as_ref().expect("trailer").counters;
    assert!(counters.iter().any(|(k, v)| k == "source_files" && *v >= 1), "{name}: {counters:?}");
    let mut o = annotate::Options::default();
    o.target = Target::Line { file: script.inside.clone(), line: line_a };
    o.local = false;
    let annotated = annotate::annotate(&profile, &o).expect("annotates");
    let f = &annotated.annotations[0];
    assert_eq!(f.function, "checksums", "{name}");
    let count = |line: u32| f.lines.iter().find(|l| l.line == line).map_or(0, |l| l.self_count);
    let (sa, sb) = (count(line_a), count(line_b));
    eprintln!("{name}: line A {sa} samples, line B {sb} (of {}), timed A {a:.3} s, B {b:.3} s", annotated.selection);
    assert_share(&format!("{name}: line A's share of lines A and B"), sa as usize, (sa + sb) as usize, timed);

    // The command: the same numbers, the lines' text from the recording's copy.
    let rec_path = out.display().to_string();
    let target = format!("{}:{line_a}", script.inside);
    let (ok, text, err) = annotate_cli(&["-i", &rec_path, "--color", "never", &target]);
    assert!(ok, "{name}: {err}");
    assert!(err.is_empty(), "{name}: no warning expected: {err}");
    let share = |n: u64| format!("{:.1}%", n as f64 * 100.0 / annotated.selection as f64);
    let (self_a, _, text_a) = row(&text, line_a);
    assert_eq!((self_a, text_a.as_str()), (share(sa), "        crc = zlib.crc32(big, crc)  # line A"), "{text}");
    assert_eq!(row(&text, line_b).0, share(sb), "{text}");
    assert!(text.contains(&format!("source: the recording's copy (sha256 {})", stored.sha256_hex())), "{text}");

    // The file gone from this machine (for sid: it never was on the host): the recording's copy, no warning.
    let kept = dir.path().join("copy.pyp");
    std::fs::copy(&out, &kept).expect("copy the recording");
    std::fs::remove_file(&script.host).expect("remove the script");
    let (ok, gone, err) = annotate_cli(&["-i", &kept.display().to_string(), "--color", "never", &target]);
    assert!(ok && err.is_empty(), "{name}: {err}");
    assert_eq!(row(&gone, line_a), row(&text, line_a), "{name}: the source without the file");

    // Changed on this machine: a warning naming the file, saying which copy is shown.
    if !name.starts_with("sid-") {
        let changed = String::from_utf8_lossy(&source).replace("# line A", "# line A, changed");
        std::fs::write(&script.host, changed).expect("write");
        let (ok, now, err) = annotate_cli(&["-i", &kept.display().to_string(), "--color", "never", &target]);
        assert!(ok, "{name}: {err}");
        let warning = err.lines().collect::<Vec<_>>();
        assert_eq!(warning.len(), 1, "{name}: one line: {err}");
        assert!(
            warning[0]
                .contains(&format!("warning: {} on this machine differs from the recording's copy", script.inside))
                && warning[0].contains("showing the recording's copy"),
            "{name}: {err}"
        );
        assert_eq!(row(&now, line_a).2, "        crc = zlib.crc32(big, crc)  # line A", "the recording's copy shown");
    }

    // Without --source (the default) the recording holds no file; annotate reads the one on this machine and says so.
    if !name.starts_with("sid-") {
        let plain = dir.path().join("plain.pyp");
        let rec = run(pyperf()
            .args(["record", "-F", "199", "-o"])
            .arg(&plain)
            .arg("--")
            .arg(&python)
            .args([script.inside.as_str(), "0.5"]));
        assert!(rec.status.success(), "{name}: pyperf record failed");
        let p = Profile::open(&plain, &LoadOptions::default()).expect("recording");
        assert!(p.tables.sources().is_empty(), "{name}: sources stored without --source");
        let (ok, text, err) = annotate_cli(&["-i", &plain.display().to_string(), "--color", "never", &target]);
        assert!(ok && err.is_empty(), "{name}: {err}");
        let local =
            format!("source: {} on this machine (not in the recording: recorded without --source)", script.inside);
        assert!(text.contains(&local), "{name}: {text}");
        assert_eq!(row(&text, line_a).2, "        crc = zlib.crc32(big, crc)  # line A, changed", "the local file");
    }

    // HTML, in a real browser: the lines, their shares, nothing fetched.
    let page = dir.path().join("annotate.html");
    let (ok, _, err) =
        annotate_cli(&["-i", &kept.display().to_string(), "--html", "-o", &page.display().to_string(), &target]);
    assert!(ok, "{name}: {err}");
    let html = std::fs::read_to_string(&page).expect("page");
    for external in ["http:", "https:", "//", "src=", "<script", "@import", "url("] {
        let outside_doctype = html.replacen("<!DOCTYPE html>", "", 1);
        assert!(!outside_doctype.contains(external), "{name}: the page refers to something outside ({external})");
    }
    let dom = dump_dom(&page);
    let pct = |n: u64| format!("{:.1}", n as f64 * 100.0 / annotated.selection as f64);
    for (line, n) in [(line_a, sa), (line_b, sb)] {
        let attrs = format!("data-line=\"{line}\" data-self=\"{}\"", pct(n));
        assert!(dom.contains(&attrs), "{name}: no row with {attrs} in the DOM:\n{dom}");
    }
    assert!(dom.contains("crc = zlib.crc32(big, crc)  # line A"), "{name}: line A's text in the DOM");
    assert!(dom.contains(&format!("<td class=\"self\">{}</td>", share(sa))), "{name}: line A's share shown");
}

per_interpreter! { annotate_lines:
    annotate_2_7("2.7.18"),
    annotate_3_12("3.12.1"),
    annotate_sid_3_14("sid-3.14"),
}
