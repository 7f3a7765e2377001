//! speedscope output a person can trust: weights are CPU time (a sleeping thread does not look busy), the busiest
//! thread opens first, names cannot hide or reorder text, and every file follows speedscope's schema.

use std::path::PathBuf;
use std::process::Command;

use pyperf_format::*;
use pyperf_report::speedscope::{self, sample_weight_ns};
use pyperf_report::{Filter, LoadOptions, Profile};
use serde_json::Value;

const MS: u64 = 1_000_000;

/// A recording made sample by sample, at given times.
struct Rec {
    w: Writer<Vec<u8>>,
}

impl Rec {
    fn new(event: &str, rate: Rate, arg0: &str) -> Self {
        let header = Header {
            pyperf_version: "0.1.0".into(),
            hostname: "h".into(),
            kernel_release: "k".into(),
            arch: "x86_64".into(),
            start_time_unix_ns: 0,
            event: event.into(),
            rate,
            command_line: vec!["pyperf".into(), "record".into()],
            workload: vec!["python3".into(), "t.py".into()],
        };
        let mut w = Writer::new(Vec::new(), &header).expect("header");
        w.add_process(&Process {
            pid: 1,
            command: vec![arg0.into(), "t.py".into()],
            python_version: "3.11.7".into(),
            interpreter_path: "/usr/bin/python3.11".into(),
            build_id: String::new(),
            first_seen_ns: 0,
            ns_pid: 0,
            cgroup: String::new(),
        })
        .expect("process");
        Rec { w }
    }

    /// 1000 Hz cpu-clock: one sample is 1 ms of CPU time.
    fn cpu_clock() -> Self {
        Rec::new("cpu-clock", Rate::Frequency(1000), "/usr/bin/python3.11")
    }

    /// Frames root first as (name, file, line).
    fn stack(&mut self, frames: &[(&str, &str, u32)]) -> u32 {
        let ids: Vec<u32> = frames
            .iter()
            .map(|(n, f, l)| {
                self.w.intern_symbol(&Symbol {
                    scope: String::new(),
                    name: n.to_string(),
                    file: f.to_string(),
                    line: *l,
                    flags: 0,
                })
            })
            .collect();
        self.w.intern_stack(&ids)
    }

    fn sample(&mut self, tid: u32, comm: &str, time_ns: u64, stack: u32) {
        self.w
            .push_sample(&SampleRecord {
                time_ns,
                cpu: 0,
                pid: 1,
                tid,
                comm,
                thread_state: ThreadStateMatch::Match,
                gil: GilState::ThisThread,
                pthread_id: PthreadIdMatch::Match,
                status: StackStatus::Complete,
                stack,
                task_stack: 0,
                flags: 0,
                interp: 0,
                link: 0,
            })
            .expect("sample");
    }

    fn load(self, duration_ns: u64) -> Profile {
        let bytes = self.w.finish(&Stats { duration_ns, ..Default::default() }).expect("finish");
        Profile::load(&bytes[..], &LoadOptions::new(Filter::default(), true)).expect("load")
    }
}

fn render(profile: &Profile, options: &speedscope::Options) -> (Vec<u8>, Value) {
    let mut out = Vec::new();
    speedscope::write(profile, options, &mut out).expect("write");
    let doc = serde_json::from_slice(&out).expect("json");
    (out, doc)
}

/// Validates a speedscope file against speedscope's own schema (as the golden test does for the expected files).
fn follows_the_schema(bytes: &[u8]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("out.speedscope.json");
    std::fs::write(&file, bytes).expect("write");
    let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/speedscope-file-format-schema.json");
    let script = r#"
import json, sys
try:
    import jsonschema
except ImportError:
    sys.exit("python3 has no jsonschema module: install it (apt-get install python3-jsonschema, or scripts/setup)")
validator = jsonschema.Draft7Validator(json.load(open(sys.argv[1])))
errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(json.load(open(sys.argv[2], encoding="utf-8")))]
print("\n".join(errors))
sys.exit(1 if errors else 0)
"#;
    let python = std::env::var_os("PYPERF_SCHEMA_PYTHON").unwrap_or_else(|| "/usr/bin/python3".into());
    let out =
        Command::new(python).arg("-c").arg(script).arg(&schema).arg(&file).output().unwrap_or_else(|e| {
            panic!("cannot run python3 (needed with jsonschema to validate speedscope output): {e}")
        });
    assert!(
        out.status.success(),
        "speedscope schema validation failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (frame lists, weights) of a profile.
fn samples(profile: &Value) -> Vec<(Vec<u64>, u64)> {
    let s = profile["samples"].as_array().expect("samples");
    let w = profile["weights"].as_array().expect("weights");
    assert_eq!(s.len(), w.len());
    s.iter()
        .zip(w)
        .map(|(s, w)| {
            let frames = s.as_array().expect("stack").iter().map(|f| f.as_u64().expect("frame")).collect();
            (frames, w.as_u64().expect("integer weight"))
        })
        .collect()
}

/// Weight of the samples whose stack holds the frame called `name`.
fn weight_of(doc: &Value, profile: &Value, name: &str) -> u64 {
    let frames = doc["shared"]["frames"].as_array().expect("frames");
    let id = frames.iter().position(|f| f["name"] == name).unwrap_or_else(|| panic!("no frame {name}")) as u64;
    samples(profile).iter().filter(|(s, _)| s.contains(&id)).map(|(_, w)| w).sum()
}

/// What speedscope calls idle (empty samples) and the rest.
fn idle_and_busy(profile: &Value) -> (u64, u64) {
    let all = samples(profile);
    (
        all.iter().filter(|(s, _)| s.is_empty()).map(|(_, w)| w).sum(),
        all.iter().filter(|(s, _)| !s.is_empty()).map(|(_, w)| w).sum(),
    )
}

fn profile_named(doc: &Value, tid: u32) -> &Value {
    let needle = format!("thread {tid} (");
    doc["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .find(|p| p["name"].as_str().is_some_and(|n| n.contains(&needle)))
        .unwrap_or_else(|| panic!("no profile for thread {tid}"))
}

/// The brief's case: a thread doing 8 x (30 ms of CPU, 250 ms asleep). Weighing each sample by the time to the
/// thread's next one made its function 2.6 s; it used 240 ms.
#[test]
fn a_sleeping_thread_weighs_its_cpu_time_not_its_sleep() {
    let mut r = Rec::cpu_clock();
    let busy = r.stack(&[("main", "m.py", 1), ("busy", "m.py", 5)]);
    let other = r.stack(&[("main", "m.py", 1), ("other", "m.py", 9)]);
    let mut time = 5 * MS;
    for _ in 0..8 {
        for k in 0..30 {
            r.sample(7, "bursty", time + k * MS, busy);
        }
        time += 30 * MS + 250 * MS;
    }
    // A thread running without pause for 100 ms, a thread with 5 samples.
    for k in 0..100 {
        r.sample(3, "steady", 1000 * MS + k * MS, other);
    }
    for k in 0..5 {
        r.sample(2, "rare", 100 * MS + k * 500 * MS, other);
    }
    let p = r.load(2300 * MS);
    let (bytes, doc) = render(&p, &speedscope::Options::default());
    follows_the_schema(&bytes);

    let bursty = profile_named(&doc, 7);
    let cpu = weight_of(&doc, bursty, "busy");
    let period = MS;
    assert!(cpu.abs_diff(8 * 30 * MS) <= period, "busy weighs {cpu} ns, not 240 ms of CPU time");
    let (idle, total_busy) = idle_and_busy(bursty);
    assert_eq!(total_busy, 240 * MS, "only samples are CPU time");
    // Before the first sample: 5 ms; between bursts: 7 x 250 ms; after the last: to the recording's end.
    let end = bursty["endValue"].as_u64().expect("end");
    assert_eq!(end, 2300 * MS, "the recording's duration");
    assert_eq!(idle, end - 240 * MS);
    let gaps: Vec<u64> = samples(bursty).iter().filter(|(s, _)| s.is_empty()).map(|(_, w)| *w).collect();
    assert_eq!(gaps[0], 5 * MS);
    assert_eq!(&gaps[1..8], &[250 * MS; 7], "each sleep, at its place in time");
    // Consecutive samples of one stack are one sample of their summed weight: 8 bursts.
    assert_eq!(samples(bursty).iter().filter(|(s, _)| !s.is_empty()).count(), 8);

    // Every profile spans the same time, from the recording's start; weights add up to it.
    for prof in doc["profiles"].as_array().expect("profiles") {
        assert_eq!(prof["startValue"], 0);
        assert_eq!(prof["endValue"], 2300 * MS);
        assert_eq!(samples(prof).iter().map(|(_, w)| w).sum::<u64>(), 2300 * MS);
    }
    assert_eq!(idle_and_busy(profile_named(&doc, 3)).1, 100 * MS);
    assert_eq!(idle_and_busy(profile_named(&doc, 2)).1, 5 * MS);
}

/// speedscope opens `activeProfileIndex`: the thread with the most samples; the others follow by samples
/// (ties: lowest pid, then tid), whatever the order of the file.
#[test]
fn the_busiest_thread_opens_first() {
    let mut r = Rec::cpu_clock();
    let s = r.stack(&[("main", "m.py", 1)]);
    let mut time = MS;
    // Thread 9 is seen first, with 3 samples; 12 and 11 tie at 4; thread 20 has the most, and comes last.
    for (tid, n) in [(9, 3), (12, 4), (11, 4), (20, 6)] {
        for _ in 0..n {
            r.sample(tid, "t", time, s);
            time += 2 * MS;
        }
    }
    let p = r.load(0);
    let (bytes, doc) = render(&p, &speedscope::Options::default());
    follows_the_schema(&bytes);
    let names: Vec<&str> =
        doc["profiles"].as_array().expect("profiles").iter().map(|p| p["name"].as_str().expect("name")).collect();
    assert_eq!(
        names,
        [
            "python3.11 [pid 1] thread 20 (t)",
            "python3.11 [pid 1] thread 11 (t)",
            "python3.11 [pid 1] thread 12 (t)",
            "python3.11 [pid 1] thread 9 (t)"
        ]
    );
    let active = doc["activeProfileIndex"].as_u64().expect("activeProfileIndex") as usize;
    assert_eq!(names[active], "python3.11 [pid 1] thread 20 (t)");
    // Names come from Profile::thread_label, so that a better thread name changes every output at once.
    assert!(names[active].ends_with(&p.thread_label(p.threads.iter().find(|t| t.tid == 20).expect("thread 20"))));
}

/// Text that reorders what follows it (U+202E) or breaks a line is shown as escapes, in frame names, files,
/// profile names and the file's name.
#[test]
fn names_cannot_hide_or_reorder_text() {
    let mut r = Rec::new("cpu-clock", Rate::Frequency(1000), "/usr/bin/py\u{202e}thon");
    let s = r.stack(&[("evil\u{202e}cod.exe", "/tmp/a\u{2066}b\nc.py", 3), ("g\u{200f}\u{1}", "x\u{061c}.py", 4)]);
    r.sample(5, "comm\u{202d}\t", MS, s);
    let p = r.load(0);
    let mut o = speedscope::Options::default();
    o.name = Some("title\u{2069}\r\u{2028}".into());
    let (bytes, doc) = render(&p, &o);
    follows_the_schema(&bytes);

    // No raw control or bidirectional character anywhere in the file, nor in any string once parsed.
    let text = String::from_utf8(bytes).expect("utf-8");
    let forbidden = |c: char| {
        c.is_control() && c != '\n'
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
            || matches!(c, '\u{2028}' | '\u{2029}')
    };
    assert!(!text.chars().any(forbidden), "raw character in the file");
    fn strings(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            Value::Object(o) => o.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    strings(&doc, &mut all);
    for s in &all {
        assert!(!s.chars().any(|c| forbidden(c) || c == '\n'), "raw character in {s:?}");
    }
    let frames = &doc["shared"]["frames"];
    assert_eq!(frames[0]["name"], r"evil\u202ecod.exe");
    assert_eq!(frames[0]["file"], r"/tmp/a\u2066b\nc.py");
    assert_eq!(frames[1]["name"], r"g\u200f\x01");
    assert_eq!(frames[1]["file"], r"x\u061c.py");
    assert_eq!(doc["profiles"][0]["name"], r"py\u202ethon [pid 1] thread 5 (comm\u202d\t)");
    assert_eq!(doc["name"], r"title\u2069\r\u2028");
}

/// An event that is not a clock (cycles, a period in events): one sample's time is estimated as the median gap
/// between consecutive samples of a thread, so a thread that sleeps between samples still weighs its samples only.
#[test]
fn cycles_weigh_the_median_gap() {
    let mut r = Rec::new("cycles", Rate::Period(100_000), "/usr/bin/python3.11");
    let work = r.stack(&[("work", "w.py", 1)]);
    let nap = r.stack(&[("nap", "w.py", 2)]);
    // Thread 1 runs without pause: a sample every 40 us, one in ten 2 us late; thread 2 wakes up 10 times a second.
    for k in 0..200u64 {
        r.sample(1, "runner", 1_000_000 + k * 40_000 + if k % 10 == 5 { 2_000 } else { 0 }, work);
    }
    for k in 0..10u64 {
        r.sample(2, "sleeper", 2_000_000 + k * 100 * MS, nap);
    }
    let p = r.load(0);
    assert_eq!(sample_weight_ns(&p), 40_000);
    let (bytes, doc) = render(&p, &speedscope::Options::default());
    follows_the_schema(&bytes);
    assert_eq!(weight_of(&doc, profile_named(&doc, 2), "nap"), 10 * 40_000, "10 samples, not 900 ms");
    // Jitter of a few us is not a sleep: one unbroken run of 200 samples.
    let runner = samples(profile_named(&doc, 1));
    assert_eq!(runner.iter().filter(|(s, _)| !s.is_empty()).map(|(_, w)| *w).collect::<Vec<_>>(), [200 * 40_000]);
    assert_eq!(doc["profiles"][0]["name"], "python3.11 [pid 1] thread 1 (runner)");
}

/// Samples a little out of time order in the file (CPUs deliver them so) are drawn in time order; samples at
/// jittered times one period apart have no slivers of idle time between them.
#[test]
fn samples_are_drawn_in_time_order() {
    let mut r = Rec::cpu_clock();
    let a = r.stack(&[("a", "m.py", 1)]);
    let b = r.stack(&[("b", "m.py", 2)]);
    // a a b b a, at 1.00, 2.05, 3.00, 3.95, 5.05 ms; written b-first.
    let times = [1_000_000, 2_050_000, 3_000_000, 3_950_000, 5_050_000];
    let stacks = [a, a, b, b, a];
    for k in [2, 0, 1, 4, 3] {
        r.sample(1, "t", times[k], stacks[k]);
    }
    let p = r.load(0);
    let (_, doc) = render(&p, &speedscope::Options::default());
    let got = samples(&doc["profiles"][0]);
    let names: Vec<String> = got
        .iter()
        .map(|(s, w)| {
            let name = s.last().map(|&f| doc["shared"]["frames"][f as usize]["name"].as_str().expect("name"));
            format!("{}:{w}", name.unwrap_or("idle"))
        })
        .collect();
    assert_eq!(names, ["idle:1000000", "a:2000000", "b:2000000", "a:1000000"]);
    assert_eq!(doc["profiles"][0]["endValue"], 6 * MS);
}

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// What the schema cannot say, in every expected speedscope file (the golden test checks they are what the code
/// writes): the first profile, the one speedscope opens, has the most CPU time (off-CPU time for `--mode off-cpu`)
/// and the others follow; every profile starts at the recording's start and ends with the others; no raw control or
/// bidirectional character.
#[test]
fn expected_files_open_on_the_busiest_thread() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata().join("expected"))
        .expect("testdata/expected")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".speedscope.json"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read");
        let doc: Value = serde_json::from_str(&text).expect("json");
        let what = file.display();
        assert_eq!(doc["activeProfileIndex"], 0, "{what}");
        let profiles = doc["profiles"].as_array().expect("profiles");
        // In wall-clock files, the samples whose leaf is not an [off-CPU: ...] frame are the CPU time.
        let frames = doc["shared"]["frames"].as_array().expect("frames");
        let on_cpu = |stack: &[u64]| {
            stack.last().is_some_and(|&f| !frames[f as usize]["name"].as_str().expect("name").starts_with("[off-CPU: "))
        };
        let busy: Vec<u64> = profiles
            .iter()
            .map(|p| match what.to_string().contains(".wall.") {
                true => samples(p).iter().filter(|(s, _)| on_cpu(s)).map(|(_, w)| w).sum(),
                false => idle_and_busy(p).1,
            })
            .collect();
        assert!(busy.windows(2).all(|w| w[0] >= w[1]), "{what}: profiles not by CPU time: {busy:?}");
        for p in profiles {
            assert_eq!(p["startValue"], 0, "{what}");
            assert_eq!(p["endValue"], profiles[0]["endValue"], "{what}");
        }
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n' || ('\u{202a}'..='\u{202e}').contains(&c)),
            "{what}: raw control character"
        );
    }
}
