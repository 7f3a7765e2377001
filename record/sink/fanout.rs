//! One recording handed to several sinks: `record` = the `.pyp` file and a push; `top` = the live view, the `.pyp`
//! of `-o` and a push. One of them is the recording (the file, else the view): its counts are the ones reported,
//! and it finishes last, with the counters of the others (a push's) in its statistics, so that they reach the
//! file's trailer. The others run beside it. Owns only the fan-out; imports nothing but the [`Sink`] trait.

use anyhow::Result;
use pyperf_format::{Process, RecorderWarning, Stats, Symbol, ThreadName};

use super::{OffCpuSample, Sample, Sink, TrailerCounters};

/// The recording and the sinks beside it. Every call goes to those beside it first, in the order they were added,
/// then to the recording; a call that fails stops there (the recording ends on it anyway).
pub struct FanOut {
    beside: Vec<Box<dyn Sink>>,
    recording: Box<dyn Sink>,
}

impl FanOut {
    /// `recording` alone for now: its sample count is the one reported, its line the last one.
    pub fn new(recording: Box<dyn Sink>) -> FanOut {
        FanOut { beside: Vec::new(), recording }
    }

    /// Also hands everything to `sink`, beside the recording.
    pub fn with(mut self, sink: Box<dyn Sink>) -> FanOut {
        self.beside.push(sink);
        self
    }

    fn all(&mut self) -> impl Iterator<Item = &mut Box<dyn Sink>> {
        self.beside.iter_mut().chain(std::iter::once(&mut self.recording))
    }
}

impl Sink for FanOut {
    fn process(&mut self, p: &Process) -> Result<()> {
        self.all().try_for_each(|s| s.process(p))
    }
    fn warning(&mut self, w: &RecorderWarning) -> Result<()> {
        self.all().try_for_each(|s| s.warning(w))
    }
    fn thread_names(&mut self, names: &[ThreadName]) -> Result<()> {
        self.all().try_for_each(|s| s.thread_names(names))
    }
    fn sources(&mut self, files: &[pyperf_format::SourceFile]) -> Result<()> {
        self.all().try_for_each(|s| s.sources(files))
    }
    fn symbol(&mut self, id: u32, symbol: &Symbol) {
        self.all().for_each(|s| s.symbol(id, symbol));
    }
    fn library(&mut self, path: &str, build_id: &str) {
        self.all().for_each(|s| s.library(path, build_id));
    }
    fn sample(&mut self, sample: &Sample<'_>) {
        self.all().for_each(|s| s.sample(sample));
    }
    fn start_off_cpu(&mut self, min_ns: u64) -> Result<()> {
        self.all().try_for_each(|s| s.start_off_cpu(min_ns))
    }
    fn off_cpu(&mut self, o: &OffCpuSample<'_>) {
        self.all().for_each(|s| s.off_cpu(o));
    }
    fn start_task_waits(&mut self) -> Result<()> {
        self.all().try_for_each(|s| s.start_task_waits())
    }
    fn task_waits(&mut self, waits: &[crate::tasks::Wait]) {
        self.all().for_each(|s| s.task_waits(waits));
    }
    fn off_cpu_intervals(&self) -> u64 {
        self.recording.off_cpu_intervals()
    }
    fn samples(&self) -> u64 {
        self.recording.samples()
    }
    fn flush(&mut self) -> Result<()> {
        self.all().try_for_each(|s| s.flush())
    }
    /// Those beside first (a push's final attempt and counters reach the file's trailer), then the recording; their
    /// lines in that order.
    fn finish(self: Box<Self>, stats: &Stats) -> Result<Option<String>> {
        let FanOut { beside, recording } = *self;
        let mut stats = stats.clone();
        let mut lines = Vec::new();
        for sink in beside {
            let (counters, line) = sink.finish_beside(&stats)?;
            stats.counters.extend(counters);
            lines.extend(line);
        }
        lines.extend(recording.finish(&stats)?);
        Ok(if lines.is_empty() { None } else { Some(lines.join("\n")) })
    }
    fn finish_beside(self: Box<Self>, stats: &Stats) -> Result<(TrailerCounters, Option<String>)> {
        Ok((Vec::new(), self.finish(stats)?))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use anyhow::bail;
    use pyperf_format::{GilState, PthreadIdMatch, StackStatus, ThreadStateMatch};

    use super::*;

    /// A sink that logs each call as `NAME:what` into a shared log and counts samples.
    struct Probe {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        samples: u64,
        counters: TrailerCounters,
        line: Option<String>,
        fail_process: bool,
    }

    impl Probe {
        fn new(name: &'static str, log: &Arc<Mutex<Vec<String>>>) -> Probe {
            Probe { name, log: log.clone(), samples: 0, counters: Vec::new(), line: None, fail_process: false }
        }
        fn note(&self, what: &str) {
            self.log.lock().unwrap().push(format!("{}:{what}", self.name));
        }
    }

    impl Sink for Probe {
        fn process(&mut self, _p: &Process) -> Result<()> {
            self.note("process");
            if self.fail_process {
                bail!("{} failed", self.name);
            }
            Ok(())
        }
        fn warning(&mut self, _w: &RecorderWarning) -> Result<()> {
            self.note("warning");
            Ok(())
        }
        fn symbol(&mut self, id: u32, _symbol: &Symbol) {
            self.note(&format!("symbol {id}"));
        }
        fn sample(&mut self, _s: &Sample<'_>) {
            self.samples += 1;
            self.note("sample");
        }
        fn samples(&self) -> u64 {
            self.samples
        }
        fn flush(&mut self) -> Result<()> {
            self.note("flush");
            Ok(())
        }
        fn finish(self: Box<Self>, stats: &Stats) -> Result<Option<String>> {
            let counters: Vec<_> = stats.counters.iter().map(|(k, v)| format!("{k}={v}")).collect();
            self.note(&format!("finish [{}]", counters.join(",")));
            Ok(self.line.clone())
        }
        fn finish_beside(self: Box<Self>, stats: &Stats) -> Result<(TrailerCounters, Option<String>)> {
            let counters = self.counters.clone();
            Ok((counters, self.finish(stats)?))
        }
    }

    fn sample() -> Sample<'static> {
        Sample {
            time_ns: 1,
            cpu: 0,
            pid: 1,
            tid: 1,
            comm: "t",
            thread_state: ThreadStateMatch::from_u8(0),
            gil: GilState::NoInfo,
            pthread_id: PthreadIdMatch::from_u8(0),
            status: StackStatus::from_u8(0),
            frames: &[],
            tasks: &[],
            in_gc: false,
            interp: 0,
            span: None,
            stolen: false,
        }
    }

    fn process() -> Process {
        Process {
            pid: 1,
            command: Vec::new(),
            python_version: "3.12.0".into(),
            interpreter_path: String::new(),
            build_id: String::new(),
            first_seen_ns: 0,
            ns_pid: 1,
            cgroup: String::new(),
        }
    }

    #[test]
    fn every_call_reaches_those_beside_then_the_recording() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut file = Probe::new("file", &log);
        file.line = Some("wrote".into());
        let mut push = Probe::new("push", &log);
        push.counters = vec![("push_windows".into(), 3)];
        push.line = Some("pushed".into());
        let mut fan = Box::new(FanOut::new(Box::new(file)).with(Box::new(push)));
        fan.process(&process()).unwrap();
        fan.symbol(0, &Symbol { scope: String::new(), name: "f".into(), file: "a.py".into(), line: 1, flags: 0 });
        fan.sample(&sample());
        fan.sample(&sample());
        fan.flush().unwrap();
        assert_eq!(fan.samples(), 2);
        // The push finishes first; its counters are in the file's statistics; its line comes first.
        let line = fan.finish(&Stats::default()).unwrap();
        assert_eq!(line.as_deref(), Some("pushed\nwrote"));
        let log = log.lock().unwrap().clone();
        assert_eq!(
            log,
            [
                "push:process",
                "file:process",
                "push:symbol 0",
                "file:symbol 0",
                "push:sample",
                "file:sample",
                "push:sample",
                "file:sample",
                "push:flush",
                "file:flush",
                "push:finish []",
                "file:finish [push_windows=3]",
            ]
        );
    }

    #[test]
    fn the_recording_counts_and_an_error_stops_the_call() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let live = Probe::new("live", &log);
        let mut file = Probe::new("file", &log);
        file.fail_process = true;
        let mut fan = Box::new(FanOut::new(Box::new(file)).with(Box::new(live)));
        let err = fan.process(&process()).unwrap_err();
        assert_eq!(err.to_string(), "file failed");
        // Alone, a sink's count and line are its own; no line at all is none.
        let alone = Box::new(FanOut::new(Box::new(Probe::new("live", &log))));
        assert_eq!(alone.samples(), 0);
        assert_eq!(alone.finish(&Stats::default()).unwrap(), None);
    }
}
