//! The `.pyp` recording file as a [`Sink`]: symbols, stacks and samples go to the format's [`Writer`].

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::{Context, Result};
use pyperf_format::{Header, Process, RecorderWarning, SampleRecord, Stats, Symbol, Writer};

use super::output::Output;
use super::{Sample, Sink};

/// Writes a recording.
pub struct FileSink {
    writer: Writer<BufWriter<File>>,
    path: PathBuf,
    io_error: Option<std::io::Error>,
}

impl FileSink {
    /// Starts the recording in `output` with `header`.
    pub fn new(output: Output, header: &Header) -> Result<FileSink> {
        let path = output.path().to_path_buf();
        let writer = Writer::new(BufWriter::with_capacity(1 << 16, output.into_file()), header)
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(FileSink { writer, path, io_error: None })
    }

    fn cannot_write(&self) -> String {
        format!("cannot write {}", self.path.display())
    }
}

impl Sink for FileSink {
    fn process(&mut self, p: &Process) -> Result<()> {
        self.writer.add_process(p).context("writing the recording")
    }

    fn warning(&mut self, w: &RecorderWarning) -> Result<()> {
        self.writer.add_warning(w).context("writing the recording")
    }

    fn symbol(&mut self, id: u32, symbol: &Symbol) {
        // The writer interns like the symbolizer (by value, in first-seen order), so its ids are the symbolizer's
        // and samples pass their frames as they are. Checked here, once per symbol rather than per frame: were
        // they ever out of step, no further sample is written (they would be mislabelled) and the next flush fails.
        let ours = self.writer.intern_symbol(symbol);
        if ours != id && self.io_error.is_none() {
            self.io_error = Some(std::io::Error::other(format!("internal error: symbol {id} written as {ours}")));
        }
    }

    fn sample(&mut self, s: &Sample<'_>) {
        if self.io_error.is_some() {
            return;
        }
        let stack = self.writer.intern_stack(s.frames);
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
        };
        if let Err(e) = self.writer.push_sample(&rec) {
            self.io_error = Some(std::io::Error::other(e));
        }
    }

    fn samples(&self) -> u64 {
        self.writer.samples_written()
    }

    fn flush(&mut self) -> Result<()> {
        if let Some(e) = self.io_error.take() {
            return Err(e).with_context(|| self.cannot_write());
        }
        self.writer.flush().with_context(|| self.cannot_write())
    }

    fn finish(mut self: Box<Self>, stats: &Stats) -> Result<Option<String>> {
        self.flush()?;
        let samples = self.writer.samples_written();
        let stats = Stats { samples, ..stats.clone() };
        let symbols = self.writer.symbol_count();
        let nodes = self.writer.stack_node_count();
        let what = self.cannot_write();
        let FileSink { writer, path, .. } = *self;
        let out = writer.finish(&stats).with_context(|| what.clone())?;
        let file = out.into_inner().map_err(|e| e.into_error()).with_context(|| what.clone())?;
        file.sync_all().with_context(|| what.clone())?;
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
