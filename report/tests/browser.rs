//! The flame graph and the speedscope file in a real browser: headless Chromium, driven through the DevTools
//! protocol by tests/support/cdp.py (python3), loads them from file:// URLs and reports what a person sees.
//!
//! Needs `chromium` (Debian package; or PYPERF_CHROMIUM naming a Chromium or Chrome) and, for speedscope, the
//! `speedscope` npm package (`npm install -g speedscope`; or PYPERF_SPEEDSCOPE naming its index.html); scripts/setup
//! installs both. Without them the tests fail when CI=true, and otherwise skip with a loud message.
//!
//! Screenshots are kept in the cargo target directory (tmp/browser/*.png) to look at.

#[path = "support/rec.rs"]
mod rec;
#[path = "support/synth.rs"]
mod synth;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use pyperf_report::{flamegraph, folded, speedscope, Filter, LoadOptions, Mode, Profile};
use serde_json::Value;

fn on_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A tool the test needs is missing: a failure on CI, a loud skip elsewhere. Returns whether to skip.
fn missing(what: &str) -> bool {
    let message = format!("{what} (scripts/setup installs it)");
    assert!(!on_ci(), "{message}: needed on CI");
    // Straight to standard error: the test harness captures eprintln! of passing tests, and this must be seen.
    let _ = writeln!(std::io::stderr(), "\n======== SKIPPED: {message} ========\n");
    true
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").iter().flat_map(std::env::split_paths).map(|dir| dir.join(name)).find(|p| p.is_file())
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PYPERF_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"].into_iter().find_map(on_path)
}

/// Debian's python3 (scripts/setup), else whichever is on PATH; PYPERF_PYTHON overrides.
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PYPERF_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let debian = PathBuf::from("/usr/bin/python3");
    if debian.is_file() {
        return Some(debian);
    }
    on_path("python3")
}

/// speedscope's index.html, from the npm package.
fn speedscope_index() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PYPERF_SPEEDSCOPE") {
        let p = PathBuf::from(p);
        return Some(if p.is_dir() { p.join("dist/release/index.html") } else { p });
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    if let Ok(out) = Command::new("npm").args(["root", "-g"]).output() {
        let root = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && !root.is_empty() {
            roots.push(root.into());
        }
    }
    roots.extend(["/usr/local/lib/node_modules", "/usr/lib/node_modules"].map(PathBuf::from));
    roots.into_iter().map(|r| r.join("speedscope/dist/release/index.html")).find(|p| p.is_file())
}

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

/// Runs tests/support/cdp.py with these arguments; its JSON report.
fn cdp(python: &Path, chromium: &Path, args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/cdp.py");
    let out = Command::new(python)
        .arg(&script)
        .arg(chromium)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", python.display()));
    assert!(
        out.status.success(),
        "cdp.py {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cdp.py's JSON")
}

fn tools() -> Option<(PathBuf, PathBuf)> {
    let Some(chromium) = chromium() else {
        missing("chromium (headless browser) not found");
        return None;
    };
    let Some(python) = python() else {
        missing("python3 not found");
        return None;
    };
    Some((python, chromium))
}

fn split_profile() -> Profile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/recordings/split-3.11.pyp");
    // With timelines: speedscope needs them.
    Profile::open(&path, &LoadOptions::new(Filter::default(), true)).expect("split-3.11.pyp")
}

/// The synthetic off-CPU recording (support/synth.rs) in wall-clock mode, with timelines.
fn wall_profile() -> Profile {
    let mut options = LoadOptions::new(Filter::default(), true);
    options.mode = Mode::Wall;
    Profile::load(&synth::recording("offcpu")[..], &options).expect("offcpu")
}

/// The synthetic recording with native, kernel, glue and marker frames (support/synth.rs), with timelines.
fn native_profile() -> Profile {
    Profile::load(&synth::recording("native")[..], &LoadOptions::new(Filter::default(), true)).expect("native")
}

fn write_svg(profile: &Profile, options: &flamegraph::Options, path: &Path) {
    let mut out = Vec::new();
    flamegraph::write(profile, options, &mut out).expect("svg");
    std::fs::write(path, out).expect("write svg");
}

fn frames(state: &Value) -> &Vec<Value> {
    state["frames"].as_array().expect("frames")
}

fn element<'a>(state: &'a Value, id: &str) -> &'a Value {
    &state["elements"][id]
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The real recording of testdata/workloads/split.py in Chromium: the labels a person sees start with function
/// names and fit their boxes; a mouse click zooms into a frame; Reset Zoom goes back; Ctrl-F searches.
#[test]
fn flame_graph_in_chromium() {
    let Some((python, chromium)) = tools() else { return };
    let profile = split_profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("flame.svg");
    write_svg(&profile, &flamegraph::Options::default(), &svg);
    let shot = screenshots().join("flame.png");
    let report = cdp(
        &python,
        &chromium,
        &["flamegraph", svg.to_str().expect("utf-8 path"), shot.to_str().expect("utf-8 path"), "heavy (", "burn"],
    );
    eprintln!("screenshots: {} and -zoomed.png, -search.png next to it", shot.display());
    assert!(report.get("error").is_none(), "{}", report["error"]);

    // The file parsed as an SVG document (a malformed one shows Chromium's XML error page).
    let initial = &report["initial"];
    assert_eq!(initial["elements"]["root"], "svg");
    assert_eq!(initial["elements"]["parsererror"], 0);
    assert!(initial["elements"]["svg_height"].as_f64().expect("height") <= 900.0, "{}", initial["elements"]);

    let functions: Vec<String> = profile.tables.symbols.iter().map(|s| s.qualified_name()).collect();
    let labels: Vec<&Value> =
        frames(initial).iter().filter(|f| !text(&f["label"]).trim_matches('.').is_empty()).collect();
    assert!(labels.len() >= 10, "{} labels seen", labels.len());
    let mut leading = 0;
    for f in &labels {
        let label = text(&f["label"]);
        assert!(!label.starts_with(".."), "label {label:?} starts with ..");
        if label == "all" || label.starts_with('[') || functions.iter().any(|n| label.starts_with(n.as_str())) {
            leading += 1;
        }
        // A label stays inside its box.
        let (tw, w) = (f["tw"].as_f64().expect("tw"), f["w"].as_f64().expect("w"));
        assert!(tw <= w, "label {label:?} ({tw} px) wider than its box ({w} px)");
    }
    assert_eq!(leading, labels.len(), "labels not starting with a function name: {labels:?}");
    assert!(labels.iter().any(|f| f["label"] == "burn (split.py:15)"), "burn (split.py:15) not shown");

    // A click on `heavy` zooms into it: it fills the width, only its callers and callees remain.
    let clicked = &report["clicked"];
    assert!(text(&clicked["title"]).starts_with("heavy ("), "{clicked}");
    let zoomed = &report["zoomed"];
    assert_eq!(element(zoomed, "unzoom")["shown"], true, "Reset Zoom shown");
    let heavy = frames(zoomed).iter().find(|f| text(&f["title"]).starts_with("heavy (")).expect("heavy shown");
    let full = 1400.0 * 0.99;
    assert!(heavy["w"].as_f64().expect("w") > full - 2.0, "zoomed frame not full width: {heavy}");
    for f in frames(zoomed) {
        let title = text(&f["title"]);
        assert!(
            !title.starts_with("light (") && !title.starts_with("spin ("),
            "{title} shown after zooming into heavy"
        );
    }
    assert!(frames(zoomed).len() < frames(initial).len());
    assert!(
        text(&element(zoomed, "details")["text"]).starts_with("heavy ("),
        "details bar: {}",
        element(zoomed, "details")
    );

    // Reset Zoom (clicked with the mouse) brings back the first view.
    let reset = &report["reset"];
    assert_eq!(element(reset, "unzoom")["shown"], false);
    let boxes = |s: &Value| {
        frames(s)
            .iter()
            .map(|f| (text(&f["title"]).to_string(), f["x"].to_string(), f["w"].to_string()))
            .collect::<Vec<_>>()
    };
    assert_eq!(boxes(reset), boxes(initial));

    // Ctrl-F, `burn` typed into the prompt: the burn frames are highlighted, the share of samples under them shown.
    assert_eq!(report["dialog"], "prompt");
    let searched = &report["searched"];
    let highlighted: Vec<&Value> = frames(searched).iter().filter(|f| f["fill"] == "rgb(230,0,230)").collect();
    assert!(!highlighted.is_empty());
    assert!(highlighted.iter().all(|f| text(&f["title"]).contains("burn")), "{highlighted:?}");
    let stacks = folded::stacks(&profile, &folded::Options::default());
    let total: u64 = stacks.iter().map(|(_, n)| n).sum();
    let burning: u64 = stacks.iter().filter(|(s, _)| s.contains("burn (")).map(|(_, n)| n).sum();
    let expected = format!("Matched: {:.2}%", burning as f64 * 100.0 / total as f64);
    let matched = text(&element(searched, "matched")["text"]);
    assert!(matched.starts_with(&expected), "{matched:?}, expected {expected:?}");
}

/// A wall-clock flame graph (`--mode wall`) in Chromium: widths are time, the tooltips and details bar say ms, a
/// click zooms into a blocked function, and searching `off-CPU: ` shows the share of the threads' time spent off
/// CPU (2,384.002 of 2,984.002 ms in support/synth.rs).
#[test]
fn wall_clock_flame_graph_in_chromium() {
    let Some((python, chromium)) = tools() else { return };
    let profile = wall_profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("wall.svg");
    write_svg(&profile, &flamegraph::Options::default(), &svg);
    let shot = screenshots().join("wall.png");
    let report = cdp(
        &python,
        &chromium,
        &["flamegraph", svg.to_str().expect("utf-8"), shot.to_str().expect("utf-8"), "Worker.wait_job (", "off-CPU: "],
    );
    eprintln!("screenshots: {} and -zoomed.png, -search.png next to it", shot.display());
    assert!(report.get("error").is_none(), "{}", report["error"]);
    let initial = &report["initial"];
    assert_eq!(initial["elements"]["root"], "svg");
    assert_eq!(initial["elements"]["parsererror"], 0);
    let all = frames(initial).iter().find(|f| text(&f["label"]) == "all").expect("root frame");
    assert_eq!(text(&all["title"]), "all (2,984.002 ms, 100.00%)");

    let zoomed = &report["zoomed"];
    let details = text(&element(zoomed, "details")["text"]);
    assert!(details.starts_with("Worker.wait_job (/srv/worker.py:12) (650.001 ms, 21.78%)"), "{details}");
    let futex = frames(zoomed).iter().find(|f| text(&f["title"]).starts_with("[off-CPU: futex] (")).expect("futex");
    assert!(futex["w"].as_f64().expect("w") > 1400.0 * 0.9, "{futex}");

    let matched = text(&element(&report["searched"], "matched")["text"]);
    assert!(matched.starts_with("Matched: 79.89%"), "{matched:?}");
}

/// Native and kernel frames in the flame graph: the SVG parses, the frames are drawn with their library in the
/// tooltip, and a search for the library matches their share (40 + 10 of the 100 samples go through `deflate`).
#[test]
fn native_flame_graph_in_chromium() {
    let Some((python, chromium)) = tools() else { return };
    let profile = native_profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("native.svg");
    write_svg(&profile, &flamegraph::Options::default(), &svg);
    let shot = screenshots().join("native.png");
    let report = cdp(
        &python,
        &chromium,
        &["flamegraph", svg.to_str().expect("utf-8"), shot.to_str().expect("utf-8"), "deflate (", "libz"],
    );
    eprintln!("screenshots: {} and -zoomed.png, -search.png next to it", shot.display());
    assert!(report.get("error").is_none(), "{}", report["error"]);
    let initial = &report["initial"];
    assert_eq!(initial["elements"]["parsererror"], 0);
    let titles: Vec<&str> = frames(initial).iter().map(|f| text(&f["title"])).collect();
    assert!(titles.iter().any(|t| t.starts_with("deflate (") && t.contains("libz.so.1.3")), "{titles:?}");
    assert!(titles.iter().any(|t| t.starts_with("do_syscall_64")), "no kernel frame: {titles:?}");
    assert!(!titles.iter().any(|t| t.contains("_PyEval_EvalFrameDefault")), "glue shown by default: {titles:?}");
    let matched = text(&element(&report["searched"], "matched")["text"]);
    assert!(matched.starts_with("Matched: 50.00%"), "{matched:?}");
}

/// A 3,000-frame recursion opens on a bounded picture in the browser; a click on the top frame of the tower shows
/// the levels above it.
#[test]
fn deep_recursion_in_chromium() {
    let Some((python, chromium)) = tools() else { return };
    let profile = rec::deep_recursion(3000);
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("deep.svg");
    write_svg(&profile, &flamegraph::Options::default(), &svg);
    let shot = screenshots().join("deep.png");
    let report = cdp(
        &python,
        &chromium,
        &["flamegraph", svg.to_str().expect("utf-8"), shot.to_str().expect("utf-8"), "recurse (", "spin"],
    );
    assert!(report.get("error").is_none(), "{}", report["error"]);
    let initial = &report["initial"];
    assert!(initial["elements"]["svg_height"].as_f64().expect("height") <= 900.0);
    let deepest = |s: &Value| frames(s).iter().map(|f| f["d"].as_u64().expect("d")).max().unwrap_or(0);
    assert_eq!(deepest(initial), flamegraph::DEFAULT_MAX_LEVELS as u64 - 1);
    assert_eq!(report["clicked"]["d"], flamegraph::DEFAULT_MAX_LEVELS as u64 - 1, "the top frame of the tower");
    let zoomed = &report["zoomed"];
    assert!(deepest(zoomed) > 2 * flamegraph::DEFAULT_MAX_LEVELS as u64 - 10, "deeper levels after the click");
    assert!(zoomed["elements"]["svg_height"].as_f64().expect("height") <= 900.0);
    let levels = text(&element(zoomed, "levels")["text"]);
    assert!(levels.starts_with("Levels 48-97 of 3002"), "{levels}");
    // The search finds the leaf even though it is not drawn at first.
    assert!(text(&element(&report["searched"], "matched")["text"]).starts_with("Matched: 90.00%"));
}

/// Names and a recorded command full of control characters, bidirectional-text controls and XML syntax: Chromium
/// parses the file (its XML parser is strict) and shows the characters as escapes.
#[test]
fn hostile_names_in_chromium() {
    let Some((python, chromium)) = tools() else { return };
    let mut rec = rec::Rec::new(&["python3", "x\u{1b}]0;owned\u{7}", "\u{202e}gpj.exe", "<&>\"'"]);
    let s = rec.stack(&[
        ("", "<module>", "/srv/app/main.py", 1),
        ("C<&>", "evil\u{1b}[31m\u{202e}\"'", "/srv/\u{2066}x\u{1}.py", 7),
    ]);
    rec.sample(s, 10);
    let profile = rec.profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("hostile.svg");
    write_svg(&profile, &flamegraph::Options::default(), &svg);
    let shot = screenshots().join("hostile.png");
    let report = cdp(
        &python,
        &chromium,
        &["flamegraph", svg.to_str().expect("utf-8"), shot.to_str().expect("utf-8"), "C<&>", "evil"],
    );
    assert!(report.get("error").is_none(), "{}", report["error"]);
    let initial = &report["initial"];
    assert_eq!(initial["elements"]["root"], "svg");
    assert_eq!(initial["elements"]["parsererror"], 0);
    assert_eq!(
        text(&element(initial, "title")["text"]),
        r#"python3 'x\x1b]0;owned\x07' \u{202e}gpj.exe '<&>"'\'''"#,
        "title as shown"
    );
    let evil = frames(initial).iter().find(|f| text(&f["title"]).starts_with("C<&>.evil")).expect("the hostile frame");
    assert_eq!(text(&evil["label"]), r#"C<&>.evil\x1b[31m\u{202e}"' (\u{2066}x\x01.py:7)"#);
    assert!(text(&element(&report["searched"], "matched")["text"]).starts_with("Matched: 100.00%"));
}

/// speedscope itself (the npm package's index.html, opened the way the `speedscope` command opens a file) reads
/// the speedscope file of a real recording: its name becomes the page title, every thread's profile is in its
/// menu, no error dialog or exception.
#[test]
fn speedscope_reads_the_file_in_chromium() {
    let Some((python, chromium)) = tools() else { return };
    let Some(index) = speedscope_index() else {
        missing("speedscope (npm package) not found");
        return;
    };
    // A real recording, the synthetic off-CPU one as a wall-clock timeline (idle gaps, [off-CPU: ...] frames).
    // And the synthetic one with native and kernel frames (their library as the frame's file).
    for (name, profile) in [("split", split_profile()), ("offcpu-wall", wall_profile()), ("native", native_profile())] {
        speedscope_reads(&python, &chromium, &index, name, &profile);
    }
}

fn speedscope_reads(python: &Path, chromium: &Path, index: &Path, name: &str, profile: &Profile) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(format!("{name}.speedscope.json"));
    let mut out = Vec::new();
    speedscope::write(profile, &speedscope::Options::default(), &mut out).expect("speedscope");
    std::fs::write(&file, &out).expect("write");
    let doc: Value = serde_json::from_slice(&out).expect("json");
    let shot = screenshots().join(format!("speedscope-{name}.png"));
    let report = cdp(
        python,
        chromium,
        &["speedscope", index.to_str().expect("utf-8"), file.to_str().expect("utf-8"), shot.to_str().expect("utf-8")],
    );
    eprintln!("screenshot: {}", shot.display());
    let name = text(&doc["name"]);
    let loaded = &report["loaded"];
    assert_eq!(text(&loaded["title"]), format!("{name} - speedscope"), "{loaded}");
    assert!(loaded["canvases"].as_u64().unwrap_or(0) >= 1, "no flame chart drawn");
    let profiles: Vec<&str> = doc["profiles"].as_array().expect("profiles").iter().map(|p| text(&p["name"])).collect();
    let page = text(&loaded["text"]);
    assert!(page.contains(&format!("{} (1/{})", profiles[0], profiles.len())), "{page}");
    let menu = text(&report["menu"]["text"]);
    for p in &profiles {
        assert!(menu.contains(p), "profile {p:?} not in speedscope's menu: {menu}");
    }
    for bad in ["Something went wrong", "Unrecognized format", "rror"] {
        assert!(!page.contains(bad) && !menu.contains(bad), "{bad:?} on the page: {page}");
    }
    assert_eq!(report["dialogs"], Value::Array(vec![]), "dialogs");
    assert_eq!(report["exceptions"], Value::Array(vec![]), "exceptions");
}
