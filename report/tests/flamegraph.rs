//! The SVG flame graph's structure, read back with a strict XML parser (roxmltree): labels that lead with the
//! function name, hostile names that cannot break the XML or hide in it, icicle layout, the height cap for deep
//! stacks, narrow frames omitted and counted, fixed width. The browser's view of it is tests/browser.rs.

use std::path::PathBuf;

#[path = "support/rec.rs"]
mod rec;

use pyperf_report::{flamegraph, LoadOptions, Profile};
use rec::Rec;

const FG: &str = "urn:pyperf:flamegraph";

fn svg(profile: &Profile, options: &flamegraph::Options) -> String {
    let mut out = Vec::new();
    flamegraph::write(profile, options, &mut out).expect("write svg");
    String::from_utf8(out).expect("utf-8")
}

/// One drawn frame as the file has it.
#[derive(Debug, Clone)]
struct Frame {
    /// The label shown (the text element).
    label: String,
    /// The whole label (`fg:l` when the shown one is cut).
    whole: String,
    /// The tooltip.
    title: String,
    x: u64,
    w: u64,
    d: u32,
    y: f64,
    hidden: bool,
}

/// Parses the SVG strictly (a malformed file, or a character XML 1.0 forbids, fails) and returns its frames.
fn frames(svg: &str) -> (roxmltree::Document<'_>, Vec<Frame>) {
    let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}"));
    let container = doc.descendants().find(|n| n.attribute("id") == Some("frames")).expect("#frames");
    let mut out = Vec::new();
    for g in container.children().filter(|n| n.has_tag_name("g")) {
        let child = |tag: &str| g.children().find(|n| n.has_tag_name(tag)).unwrap_or_else(|| panic!("no {tag}"));
        let label = child("text").text().unwrap_or("").to_string();
        out.push(Frame {
            whole: g.attribute((FG, "l")).map(str::to_string).unwrap_or_else(|| label.clone()),
            label,
            title: child("title").text().unwrap_or("").to_string(),
            x: g.attribute((FG, "x")).expect("fg:x").parse().expect("x"),
            w: g.attribute((FG, "w")).expect("fg:w").parse().expect("w"),
            d: g.attribute((FG, "d")).expect("fg:d").parse().expect("d"),
            y: child("rect").attribute("y").expect("y").parse().expect("y"),
            hidden: g.attribute("class").unwrap_or("").split(' ').any(|c| c == "h"),
        });
    }
    (doc, out)
}

fn text_of<'a>(doc: &'a roxmltree::Document, id: &str) -> &'a str {
    doc.descendants().find(|n| n.attribute("id") == Some(id)).and_then(|n| n.text()).unwrap_or("")
}

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

#[test]
fn hostile_names_cannot_break_or_hide_in_the_xml() {
    let evil = "evil\u{1b}[31m<&>\"'\u{202e}";
    let mut rec = Rec::new(&["python3", "x\u{1b}]0;owned\u{7}", "\u{202e}gpj.exe", "<&>\"'"]);
    let s = rec.stack(&[
        ("", "<module>", "/srv/app/main.py", 1),
        ("Cls<&>", evil, "/srv/\u{202e}yp.txt\u{1}/\u{2066}mod.py", 7),
    ]);
    rec.sample(s, 10);
    let profile = rec.profile();
    for icicle in [false, true] {
        let mut o = flamegraph::Options::default();
        o.icicle = icicle;
        let out = svg(&profile, &o);
        // Nothing that is invisible, reorders text or is illegal in XML reaches the file.
        for c in out.chars() {
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}');
            let control = c.is_control() && c != '\n';
            assert!(!bidi && !control, "raw {c:?} in the SVG");
        }
        let (doc, frames) = frames(&out);
        // The title (the recorded command), escaped the way the text report escapes.
        let title = text_of(&doc, "title");
        assert_eq!(title, r#"python3 'x\x1b]0;owned\x07' \u{202e}gpj.exe '<&>"'\'''"#);
        let f = frames.iter().find(|f| f.d == 2).expect("the hostile frame");
        assert!(f.whole.starts_with("Cls<&>.evil\\x1b[31m<&>\"'\\u{202e} ("), "{}", f.whole);
        assert!(f.whole.ends_with("\\u{2066}mod.py:7)"), "{}", f.whole);
        assert!(f.title.contains("/srv/\\u{202e}yp.txt\\x01/\\u{2066}mod.py:7"), "{}", f.title);
        // And with a hostile --title.
        o.title = Some("t\u{0}\u{1b}\u{2067}<b>&amp;".to_string());
        let out = svg(&profile, &o);
        let (doc, _) = self::frames(&out);
        assert_eq!(text_of(&doc, "title"), "t\\x00\\x1b\\u{2067}<b>&amp;");
    }
}

/// The real recording of testdata/workloads/split.py: every label shown starts with the function name and names
/// the file by its base name; the tooltip has the full path.
#[test]
fn labels_lead_with_the_function_name() {
    let path = testdata().join("recordings/split-3.11.pyp");
    let profile = Profile::open(&path, &LoadOptions::default()).expect("split-3.11.pyp");
    let functions: Vec<String> = profile.tables.symbols.iter().map(|s| s.qualified_name()).collect();
    let (_, frames) = frames(&svg(&profile, &flamegraph::Options::default()));
    let shown: Vec<&Frame> = frames.iter().filter(|f| !f.hidden && !f.label.is_empty()).collect();
    assert!(shown.len() >= 10, "{} labels shown", shown.len());
    for f in &frames {
        assert!(!f.label.starts_with(".."), "label {:?} starts with ..", f.label);
        assert!(f.whole.starts_with(&f.label.trim_end_matches("..").to_string()), "{f:?}");
        let leads = f.whole == "all"
            || f.whole.starts_with('[')
            || functions.iter().any(|name| f.whole.starts_with(&format!("{name} (")));
        assert!(leads, "label {:?} does not start with a function name", f.whole);
        assert!(!f.whole.contains("/work/") && !f.whole.contains("/root/"), "full path in label {:?}", f.whole);
    }
    let burn = frames.iter().find(|f| f.whole == "burn (split.py:15)").expect("burn (split.py:15)");
    assert!(burn.title.starts_with("burn (/work/main/testdata/workloads/split.py:15) ("), "{}", burn.title);
    assert!(burn.title.ends_with("%)") && burn.title.contains(" samples, "), "{}", burn.title);
    // Standard-library frames are named by file, as application ones.
    assert!(frames.iter().any(|f| f.whole == "Thread.run (threading.py:982)"), "threading.py frame");
    // Cut labels keep their first characters: the function name.
    let cut: Vec<&&Frame> = shown.iter().filter(|f| f.label.ends_with("..")).collect();
    assert!(!cut.is_empty(), "no label is cut");
    for f in cut {
        assert!(f.label.len() >= 4 && f.whole.starts_with(f.label.trim_end_matches("..")), "{f:?}");
    }
}

#[test]
fn icicle_puts_the_root_at_the_top() {
    let path = testdata().join("recordings/split-3.11.pyp");
    let profile = Profile::open(&path, &LoadOptions::default()).expect("split-3.11.pyp");
    let (_, flame) = frames(&svg(&profile, &flamegraph::Options::default()));
    let mut o = flamegraph::Options::default();
    o.icicle = true;
    let (_, icicle) = frames(&svg(&profile, &o));
    assert_eq!(flame.len(), icicle.len());
    let shown = |fs: &[Frame]| fs.iter().filter(|f| !f.hidden).map(|f| f.y).collect::<Vec<f64>>();
    let (fy, iy) = (shown(&flame), shown(&icicle));
    let root = |fs: &[Frame]| fs.iter().find(|f| f.d == 0).expect("root").y;
    assert_eq!(root(&flame), fy.iter().cloned().fold(f64::MIN, f64::max), "flame: root at the bottom");
    assert_eq!(root(&icicle), iy.iter().cloned().fold(f64::MAX, f64::min), "icicle: root at the top");
    // Same frames, mirrored: each level's y in one plus its y in the other is the same for every frame.
    let sum = root(&flame) + root(&icicle);
    for (a, b) in flame.iter().zip(&icicle) {
        assert_eq!((a.x, a.w, a.d, &a.label), (b.x, b.w, b.d, &b.label));
        if !a.hidden {
            assert_eq!(a.y + b.y, sum, "{a:?} / {b:?}");
        }
    }
    // Callees above their callers in a flame graph, below them in an icicle graph.
    let child = flame.iter().find(|f| f.d == 1).expect("depth 1");
    assert!(child.y < root(&flame));
    let child = icicle.iter().find(|f| f.d == 1).expect("depth 1");
    assert!(child.y > root(&icicle));
}

/// A 3,000-frame recursion opens on a picture of at most DEFAULT_MAX_LEVELS levels (under 900 pixels), not on a
/// 48,000-pixel tower; the deeper frames are in the file, hidden until a zoom; max_levels 0 shows everything.
#[test]
fn deep_recursion_opens_on_a_bounded_view() {
    let profile = rec::deep_recursion(3000);

    let out = svg(&profile, &flamegraph::Options::default());
    let (doc, frames) = frames(&out);
    let height: usize = doc.root_element().attribute("height").expect("height").parse().expect("number");
    assert!(height <= 900, "height {height}");
    assert_eq!(frames.len(), 1 + 3002 + 1, "every frame is in the file");
    for f in &frames {
        assert_eq!(f.hidden, f.d as usize >= flamegraph::DEFAULT_MAX_LEVELS, "{f:?}");
    }
    assert!(text_of(&doc, "levels").contains("of 3002 shown"), "{}", text_of(&doc, "levels"));
    let button = doc.descendants().find(|n| n.attribute("id") == Some("all-levels")).expect("button");
    assert_eq!(button.attribute("class"), Some("button"), "Show all levels is offered");

    let mut o = flamegraph::Options::default();
    o.max_levels = 0;
    let out = svg(&profile, &o);
    let (doc, frames) = self::frames(&out);
    let height: usize = doc.root_element().attribute("height").expect("height").parse().expect("number");
    assert!(height > 3003 * 16, "height {height}");
    assert!(frames.iter().all(|f| !f.hidden));
}

/// Frames narrower than min_width are left out with their callees; their samples stay in their caller's width
/// and the header counts them.
#[test]
fn narrow_frames_are_omitted_and_counted() {
    let mut rec = Rec::new(&["python3", "wide.py"]);
    let big = rec.stack(&[("", "main", "/srv/wide.py", 1), ("", "work", "/srv/wide.py", 2)]);
    rec.sample(big, 20_000);
    let names: Vec<String> = (0..50).map(|i| format!("tiny_{i:02}")).collect();
    for name in &names {
        let s = rec.stack(&[("", "main", "/srv/wide.py", 1), ("", name, "/srv/wide.py", 3), ("", "leaf", "/x.py", 4)]);
        rec.sample(s, 1);
    }
    let profile = rec.profile();
    let out = svg(&profile, &flamegraph::Options::default());
    let (doc, frames) = frames(&out);
    assert!(!frames.iter().any(|f| f.whole.starts_with("tiny_") || f.whole.starts_with("leaf")));
    let main = frames.iter().find(|f| f.whole == "main (wide.py:1)").expect("main");
    assert_eq!(main.w, 20_050, "the omitted samples stay in main's width");
    let work = frames.iter().find(|f| f.whole == "work (wide.py:2)").expect("work");
    // Children are laid out in name order after the omitted ones they follow: `work` sorts after `tiny_*`.
    assert_eq!(work.x, 50);
    let subtitle = text_of(&doc, "subtitle");
    assert!(subtitle.contains("20,050 samples; 50 in 50 frames narrower than 0.1 px not drawn"), "{subtitle}");

    // With no minimum, they are drawn.
    let mut o = flamegraph::Options::default();
    o.min_width = 0.0;
    let (_, frames) = self::frames(&svg(&profile, &o));
    assert_eq!(frames.iter().filter(|f| f.whole.starts_with("tiny_")).count(), 50);
}

#[test]
fn width_is_fluid_unless_given() {
    let path = testdata().join("recordings/split-3.11.pyp");
    let profile = Profile::open(&path, &LoadOptions::default()).expect("split-3.11.pyp");
    let out = svg(&profile, &flamegraph::Options::default());
    let (doc, _) = frames(&out);
    assert_eq!(doc.root_element().attribute("width"), Some("100%"));
    assert_eq!(doc.root_element().attribute("viewBox"), None);

    let mut o = flamegraph::Options::default();
    o.width = Some(800);
    let out = svg(&profile, &o);
    let (doc, narrow) = frames(&out);
    let height = doc.root_element().attribute("height").expect("height");
    assert_eq!(doc.root_element().attribute("width"), Some("800"));
    assert_eq!(doc.root_element().attribute("viewBox"), Some(format!("0 0 800 {height}").as_str()));
    // Labels are cut for 800 pixels: shorter than for 1200.
    let (_, wide) = frames(&svg(&profile, &flamegraph::Options::default()));
    let chars = |fs: &[Frame]| fs.iter().map(|f| f.label.chars().count()).sum::<usize>();
    assert!(chars(&narrow) < chars(&wide));
    // Deterministic.
    assert_eq!(out, svg(&profile, &o));
}

#[test]
fn a_function_keeps_its_colour_on_every_line() {
    let mut rec = Rec::new(&["python3", "c.py"]);
    let a = rec.stack(&[("", "main", "/srv/c.py", 1), ("", "f", "/srv/c.py", 10)]);
    let b = rec.stack(&[("", "main", "/srv/c.py", 2), ("", "f", "/srv/c.py", 11)]);
    rec.sample(a, 5);
    rec.sample(b, 5);
    let out = svg(&rec.profile(), &flamegraph::Options::default());
    let doc = roxmltree::Document::parse(&out).expect("xml");
    let fill = |label: &str| {
        doc.descendants()
            .filter(|n| n.has_tag_name("g"))
            .find(|g| g.children().any(|t| t.has_tag_name("text") && t.text() == Some(label)))
            .and_then(|g| g.children().find(|r| r.has_tag_name("rect")))
            .and_then(|r| r.attribute("fill"))
            .unwrap_or_else(|| panic!("{label}"))
            .to_string()
    };
    assert_eq!(fill("f (c.py:10)"), fill("f (c.py:11)"));
    assert_eq!(fill("main (c.py:1)"), fill("main (c.py:2)"));
}
