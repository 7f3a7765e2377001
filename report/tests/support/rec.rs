//! Recordings made on the spot for the flame graph tests (tests/flamegraph.rs, tests/browser.rs): stacks given
//! root first, one thread, samples 1 ms apart.

#![allow(dead_code)]

use pyperf_format::{
    GilState, Header, PthreadIdMatch, Rate, SampleRecord, StackStatus, Stats, Symbol, ThreadStateMatch, Writer,
};
use pyperf_report::{LoadOptions, Profile};

/// A recording made on the spot: stacks (frames root first as (scope, name, file, line)) and their samples.
pub struct Rec {
    w: Writer<Vec<u8>>,
    time: u64,
}

impl Rec {
    pub fn new(workload: &[&str]) -> Rec {
        let header = Header {
            pyperf_version: "0.2.0".into(),
            hostname: "h".into(),
            kernel_release: "k".into(),
            arch: "x86_64".into(),
            start_time_unix_ns: 0,
            event: "cpu-clock".into(),
            rate: Rate::Frequency(1000),
            command_line: vec!["pyperf".into(), "record".into()],
            workload: workload.iter().map(|s| s.to_string()).collect(),
        };
        Rec { w: Writer::new(Vec::new(), &header).expect("header"), time: 0 }
    }

    pub fn stack(&mut self, frames: &[(&str, &str, &str, u32)]) -> u32 {
        let ids: Vec<u32> = frames
            .iter()
            .map(|(scope, name, file, line)| {
                self.w.intern_symbol(&Symbol {
                    scope: scope.to_string(),
                    name: name.to_string(),
                    file: file.to_string(),
                    line: *line,
                    flags: 0,
                })
            })
            .collect();
        self.w.intern_stack(&ids)
    }

    pub fn sample(&mut self, stack: u32, n: usize) {
        for _ in 0..n {
            self.time += 1_000_000;
            self.w
                .push_sample(&SampleRecord {
                    time_ns: self.time,
                    cpu: 0,
                    pid: 1,
                    tid: 1,
                    comm: "python3",
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
    }

    pub fn profile(self) -> Profile {
        let bytes = self.w.finish(&Stats::default()).expect("finish");
        Profile::load(&bytes[..], &LoadOptions::default()).expect("load")
    }
}

/// `<module>` calling `recurse` `depth` times calling `spin`, 90 samples at the leaf; 10 samples in a shallow
/// `<module>` line.
pub fn deep_recursion(depth: usize) -> Profile {
    let mut rec = Rec::new(&["python3", "deep.py"]);
    let mut frames: Vec<(&str, &str, &str, u32)> = vec![("", "<module>", "/srv/deep.py", 30)];
    frames.extend(std::iter::repeat_n(("", "recurse", "/srv/deep.py", 20), depth));
    frames.push(("", "spin", "/srv/deep.py", 12));
    let deep = rec.stack(&frames);
    let shallow = rec.stack(&[("", "<module>", "/srv/deep.py", 31)]);
    rec.sample(deep, 90);
    rec.sample(shallow, 10);
    rec.profile()
}
