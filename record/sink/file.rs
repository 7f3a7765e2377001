//! The `.pyp` recording file as a [`Sink`]: symbols, stacks and samples go to the format's [`Writer`].

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use pyperf_format::{
    Header, OffCpuInterval, Process, RecorderWarning, SampleRecord, Stats, Symbol, ThreadName, Writer,
};

use super::output::Output;
use super::{OffCpuSample, Sample, Sink};

/// Writes a recording.
pub struct FileSink {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
    /// The first error of [`Sink::sample`] or [`Sink::symbol`], which cannot fail: returned by the next flush.
    error: Option<pyperf_format::Error>,
    /// Time of the last sample taken (ns since the start).
    last_time_ns: u64,
    /// Samples and time of the last sample at the last successful flush: what the file holds for sure.
    durable: (u64, u64),
    /// Off-CPU intervals written.
    off_cpu: u64,
}

/// Writing the recording failed for want of space (ENOSPC, or EDQUOT: the user's quota).
#[derive(Debug, thiserror::Error)]
#[error("the disk holding {} is full: recording stopped after {samples} samples; {}", path.display(), holds(*durable))]
pub struct DiskFull {
    /// The recording.
    pub path: PathBuf,
    /// Samples taken when it failed.
    pub samples: u64,
    /// Samples on disk for sure, and the time of the last of them (ns since the start).
    pub durable: (u64, u64),
}

fn holds((samples, until_ns): (u64, u64)) -> String {
    if samples == 0 {
        return "the file holds no samples".to_string();
    }
    format!("the file holds everything up to {:.1} s into the recording ({samples} samples)", until_ns as f64 / 1e9)
}

impl FileSink {
    /// Starts the recording in `output` with `header`.
    pub fn new(output: Output, header: &Header) -> Result<FileSink> {
        let path = output.path().to_path_buf();
        let writer = Writer::new(BufWriter::with_capacity(1 << 16, output.into_file()), header)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(FileSink { writer, path, error: None, last_time_ns: 0, durable: (0, 0), off_cpu: 0 })
    }

    fn failed(&self, e: pyperf_format::Error) -> anyhow::Error {
        write_error(&self.path, self.writer.samples_written(), self.durable, e)
    }
}

/// `e`, writing the recording at `path`, as the error to show: a full disk says so, with what the file holds;
/// anything else names the file.
fn write_error(path: &Path, samples: u64, durable: (u64, u64), e: pyperf_format::Error) -> anyhow::Error {
    match e {
        pyperf_format::Error::Io(io) if matches!(io.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
            anyhow::Error::new(DiskFull { path: path.to_path_buf(), samples, durable })
        }
        e => anyhow::Error::new(e).context(format!("cannot write {}", path.display())),
    }
}

impl Sink for FileSink {
    fn process(&mut self, p: &Process) -> Result<()> {
        self.writer.add_process(p).map_err(|e| self.failed(e))
    }

    fn warning(&mut self, w: &RecorderWarning) -> Result<()> {
        self.writer.add_warning(w).map_err(|e| self.failed(e))
    }

    fn thread_names(&mut self, names: &[ThreadName]) -> Result<()> {
        self.writer.add_thread_names(names).map_err(|e| self.failed(e))
    }

    fn sources(&mut self, files: &[pyperf_format::SourceFile]) -> Result<()> {
        self.writer.add_sources(files).map(drop).map_err(|e| self.failed(e))
    }

    fn library(&mut self, path: &str, build_id: &str) {
        if let Err(e) = self.writer.push_library(path, build_id) {
            if self.error.is_none() {
                self.error = Some(e);
            }
        }
    }

    fn symbol(&mut self, id: u32, symbol: &Symbol) {
        // The writer interns like the symbolizer (by value, in first-seen order), so its ids are the symbolizer's
        // and samples pass their frames as they are. Checked here, once per symbol rather than per frame: were
        // they ever out of step, no further sample is written (they would be mislabelled) and the next flush fails.
        let ours = self.writer.intern_symbol(symbol);
        if ours != id && self.error.is_none() {
            let e = std::io::Error::other(format!("internal error: symbol {id} written as {ours}"));
            self.error = Some(pyperf_format::Error::Io(e));
        }
    }

    fn sample(&mut self, s: &Sample<'_>) {
        // After an error nothing more is written: the file stays a readable prefix of the recording.
        if self.error.is_some() {
            return;
        }
        let stack = self.writer.intern_stack(s.frames);
        let task_stack = if s.tasks.is_empty() { 0 } else { self.writer.intern_stack(s.tasks) };
        let rec = SampleRecord {
            time_ns: s.time_ns,
            cpu: s.cpu,
            pid: s.pid,
            tid: s.tid,
            comm: s.comm,
            thread_state: s.thread_state,
            gil: s.gil,
            pthread_id: s.pthread_id,
            status: s.status,
            stack,
            task_stack,
            flags: if s.in_gc { pyperf_format::sample_flags::GC } else { 0 }
                | if s.stolen { pyperf_format::sample_flags::STOLEN } else { 0 },
            interp: s.interp,
            link: s.span.map_or(0, |l| self.writer.intern_link(l)),
        };
        self.last_time_ns = s.time_ns;
        if let Err(e) = self.writer.push_sample(&rec) {
            self.error = Some(e);
        }
    }

    fn samples(&self) -> u64 {
        self.writer.samples_written()
    }

    fn start_off_cpu(&mut self, min_ns: u64) -> Result<()> {
        self.writer.start_off_cpu(min_ns).map_err(|e| self.failed(e))
    }

    fn off_cpu(&mut self, o: &OffCpuSample<'_>) {
        if self.error.is_some() {
            return;
        }
        let s = &o.sample;
        let stack = self.writer.intern_stack(s.frames);
        let task_stack = if s.tasks.is_empty() { 0 } else { self.writer.intern_stack(s.tasks) };
        let iv = OffCpuInterval {
            pid: s.pid,
            tid: s.tid,
            start_ns: o.start_ns,
            duration_ns: o.duration_ns,
            runnable_ns: o.runnable_ns,
            weight_ns: o.weight_ns,
            kind: o.kind,
            syscall: o.syscall,
            gil: s.gil,
            status: s.status,
            stack,
            flags: o.flags | if s.in_gc { pyperf_format::off_cpu_flags::GC } else { 0 },
            comm: s.comm.to_string(),
            task_stack,
            interp: s.interp,
            link: s.span.map_or(0, |l| self.writer.intern_link(l)),
        };
        match self.writer.push_off_cpu(&iv) {
            Ok(()) => self.off_cpu += 1,
            Err(e) => self.error = Some(e),
        }
    }

    fn off_cpu_intervals(&self) -> u64 {
        self.off_cpu
    }

    fn start_task_waits(&mut self) -> Result<()> {
        self.writer.start_task_waits().map_err(|e| self.failed(e))
    }

    fn task_waits(&mut self, waits: &[crate::tasks::Wait]) {
        if self.error.is_some() {
            return;
        }
        let waits: Vec<pyperf_format::TaskWait> = waits
            .iter()
            .map(|w| pyperf_format::TaskWait {
                pid: w.pid,
                tid: w.tid,
                time_ns: w.time_ns,
                weight_ns: w.weight_ns,
                stack: self.writer.intern_stack(&w.frames),
            })
            .collect();
        if let Err(e) = self.writer.task_waits(&waits) {
            self.error = Some(e);
        }
    }

    fn flush(&mut self) -> Result<()> {
        if let Some(e) = self.error.take() {
            return Err(self.failed(e));
        }
        self.writer.flush().map_err(|e| self.failed(e))?;
        self.durable = (self.writer.samples_written(), self.last_time_ns);
        Ok(())
    }

    fn finish(mut self: Box<Self>, stats: &Stats) -> Result<Option<String>> {
        self.flush()?;
        let samples = self.writer.samples_written();
        let stats = Stats { samples, ..stats.clone() };
        let symbols = self.writer.symbol_count();
        let nodes = self.writer.stack_node_count();
        let FileSink { writer, path, durable, .. } = *self;
        let failed = |e| write_error(&path, samples, durable, e);
        let out = writer.finish(&stats).map_err(failed)?;
        let file = out.into_inner().map_err(|e| failed(e.into_error().into()))?;
        file.sync_all().map_err(|e| failed(e.into()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Some(format!(
            "pyperf: wrote {} ({}, {} symbols, {} stack nodes, {:.1} bytes/sample)",
            path.display(),
            human_size(size),
            symbols,
            nodes,
            if samples == 0 { 0.0 } else { size as f64 / samples as f64 },
        )))
    }
}

fn human_size(n: u64) -> String {
    match n {
        n if n < 10 * 1024 => format!("{n} B"),
        n if n < 10 * 1024 * 1024 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0)),
    }
}
