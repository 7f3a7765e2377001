//! The `.pyp` file and a push to a server at once (`record -o FILE --push URL`): every call goes to both; the
//! file keeps everything whatever happens to the push.

use anyhow::Result;
use pyperf_format::{Process, RecorderWarning, Stats, Symbol, ThreadName};

use super::push::PushSink;
use super::{OffCpuSample, Sample, Sink};

/// The file sink and the push sink.
pub struct Tee {
    file: Box<dyn Sink>,
    push: PushSink,
}

impl Tee {
    /// Both sinks; `file` is the recording (its sample count is the one reported).
    pub fn new(file: Box<dyn Sink>, push: PushSink) -> Tee {
        Tee { file, push }
    }
}

impl Sink for Tee {
    fn process(&mut self, p: &Process) -> Result<()> {
        self.push.process(p)?;
        self.file.process(p)
    }
    fn warning(&mut self, w: &RecorderWarning) -> Result<()> {
        self.push.warning(w)?;
        self.file.warning(w)
    }
    fn thread_names(&mut self, names: &[ThreadName]) -> Result<()> {
        self.push.thread_names(names)?;
        self.file.thread_names(names)
    }
    fn symbol(&mut self, id: u32, symbol: &Symbol) {
        self.push.symbol(id, symbol);
        self.file.symbol(id, symbol);
    }
    fn library(&mut self, path: &str, build_id: &str) {
        self.push.library(path, build_id);
        self.file.library(path, build_id);
    }
    fn sample(&mut self, s: &Sample<'_>) {
        self.push.sample(s);
        self.file.sample(s);
    }
    fn start_off_cpu(&mut self, min_ns: u64) -> Result<()> {
        self.push.start_off_cpu(min_ns)?;
        self.file.start_off_cpu(min_ns)
    }
    fn off_cpu(&mut self, s: &OffCpuSample<'_>) {
        self.push.off_cpu(s);
        self.file.off_cpu(s);
    }
    fn off_cpu_intervals(&self) -> u64 {
        self.file.off_cpu_intervals()
    }
    fn samples(&self) -> u64 {
        self.file.samples()
    }
    fn flush(&mut self) -> Result<()> {
        // The push sink's flush never fails (a server's trouble is counted, not raised).
        self.push.flush()?;
        self.file.flush()
    }
    /// The push first: its final attempt and counters reach the file's trailer.
    fn finish(self: Box<Self>, stats: &Stats) -> Result<Option<String>> {
        let Tee { file, push } = *self;
        let (counters, push_line) = push.close();
        let mut stats = stats.clone();
        stats.counters.extend(counters);
        let file_line = file.finish(&stats)?;
        Ok(Some(match file_line {
            Some(l) => format!("{push_line}\n{l}"),
            None => push_line,
        }))
    }
}
