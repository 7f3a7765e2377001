//! Writing a recording: interning symbols and stacks, batching samples into column chunks.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;

use crate::chunk::{self, Kind};
use crate::model::*;
use crate::{Error, GilState, PthreadIdMatch, StackStatus, ThreadStateMatch};

/// Samples per chunk. Big enough for zstd to find the repetition, small enough that a killed recorder loses
/// little and a reader's chunk buffer stays near a megabyte.
pub const SAMPLES_PER_CHUNK: usize = 16 * 1024;
/// Symbols per chunk: keeps symbol chunks far below `MAX_CHUNK_BYTES` even with long names.
pub const SYMBOLS_PER_CHUNK: usize = 4096;
/// Thread names per chunk: at most ~1 MiB of names of the longest length the recorder keeps.
pub const THREAD_NAMES_PER_CHUNK: usize = 4096;
/// Off-CPU intervals per chunk (format 1.3+): as samples, a few hundred KiB before compression.
pub const OFF_CPU_PER_CHUNK: usize = 16 * 1024;
/// Native libraries per chunk (format 1.4+): at most a few hundred KiB of paths.
pub const LIBRARIES_PER_CHUNK: usize = 1024;
/// Task waits per chunk (format 1.5+): as samples, a few hundred KiB before compression.
pub const TASK_WAITS_PER_CHUNK: usize = 16 * 1024;

/// Highest compression ratio of a source chunk (format 1.7+); one that would compress more is stored uncompressed.
/// Half the reader's [`crate::chunk::MAX_RATIO`]: whatever the files hold, the recording stays within a reader's
/// ratio budget.
pub const SOURCE_MAX_RATIO: u64 = chunk::MAX_RATIO / 2;

/// One sample as the recorder hands it over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SampleRecord<'a> {
    /// ns since the recording's start.
    pub time_ns: u64,
    /// CPU it was taken on.
    pub cpu: u32,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name (task comm); stored once per chunk.
    pub comm: &'a str,
    /// Whether the thread's thread state was the interpreter's current one.
    pub thread_state: ThreadStateMatch,
    /// Who held the GIL.
    pub gil: GilState,
    /// Whether the thread state belonged to this OS thread.
    pub pthread_id: PthreadIdMatch,
    /// How complete the stack is.
    pub status: StackStatus,
    /// Leaf stack node from [`Writer::intern_stack`], 0 for none.
    pub stack: u32,
    /// 1.5+: leaf node of its task-view stack (asyncio: task markers between the tasks' frames) from
    /// [`Writer::intern_stack`], 0 for none (the task view then uses `stack`).
    pub task_stack: u32,
    /// 1.6+: its [`crate::sample_flags`], 0 for none.
    pub flags: u8,
    /// 1.8+: the id of the interpreter its leaf frames run in (`PyInterpreterState.id`; 0 the main one, and for
    /// none).
    pub interp: u32,
    /// 1.10+: the span it ran in, a number from [`Writer::intern_link`]; 0 none.
    pub link: u32,
}

/// Hasher for the stack-node map, keyed by one `u64` (parent << 32 | symbol) that the writer makes itself: a
/// multiply-rotate (as rustc's FxHash) instead of SipHash, which the recorder otherwise pays per frame of every
/// sample. No flooding concern: the keys are the writer's own dense ids.
#[derive(Default, Clone, Copy)]
struct NodeHasher(u64);

impl Hasher for NodeHasher {
    fn finish(&self) -> u64 {
        // The product's low bits depend only on the key's low bits (the symbol): the table indexes by them, so
        // bring the well-mixed high bits down, else every node of one symbol lands in one bucket.
        self.0.rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type NodeMap = HashMap<u64, u32, BuildHasherDefault<NodeHasher>>;

/// Writes a recording as it is made: interns symbols and stacks, batches samples into column chunks of
/// [`SAMPLES_PER_CHUNK`], and writes every definition before the first chunk that refers to it, so that the file
/// is readable wherever it is cut. Dropping the writer without [`Writer::finish`] leaves a file without trailer
/// (and without what was batched since the last [`Writer::flush`]), as a killed recorder does.
pub struct Writer<W: Write> {
    out: W,
    level: i32,
    bytes_written: u64,
    symbol_ids: HashMap<Symbol, u32>,
    symbols: Vec<Symbol>,
    /// Index in `symbols` of the first symbol not yet on disk.
    symbols_flushed: usize,
    nodes: NodeMap,
    /// The last stack interned (root first) and the node of each of its prefixes: consecutive samples mostly
    /// share all but their leaf frames, and those are not looked up again.
    last_stack: Vec<u32>,
    last_nodes: Vec<u32>,
    pending_nodes: StackChunk,
    node_count: u32,
    batch: SampleChunk,
    batch_comms: HashMap<String, u32>,
    last_time: u64,
    samples: u64,
    /// The recording's off-CPU minimum, once [`Writer::start_off_cpu`] was called.
    off_cpu_min_ns: Option<u64>,
    off_cpu_batch: OffCpuChunk,
    off_cpu: u64,
    /// Libraries pushed: path -> build id, to write each once.
    libraries: HashMap<String, String>,
    /// Libraries pushed but not yet on disk.
    pending_libraries: Vec<Library>,
    /// Spans interned (1.10+): span -> its number (from 1).
    links: HashMap<SpanLink, u32>,
    /// Spans interned but not yet on disk.
    pending_links: Vec<SpanLink>,
    /// Whether [`Writer::start_task_waits`] was called.
    task_sweep: bool,
    task_wait_batch: TaskWaitChunk,
    task_waits: u64,
}

impl<W: Write> Writer<W> {
    /// Writes the preamble and the header.
    pub fn new(mut out: W, header: &Header) -> Result<Self, Error> {
        chunk::write_preamble(&mut out)?;
        let mut w = Writer {
            out,
            level: 3,
            bytes_written: chunk::PREAMBLE_LEN as u64,
            symbol_ids: HashMap::new(),
            symbols: Vec::new(),
            symbols_flushed: 0,
            nodes: NodeMap::default(),
            last_stack: Vec::new(),
            last_nodes: Vec::new(),
            pending_nodes: StackChunk { first_id: 1, ..Default::default() },
            node_count: 1,
            batch: SampleChunk::default(),
            batch_comms: HashMap::new(),
            last_time: 0,
            samples: 0,
            off_cpu_min_ns: None,
            off_cpu_batch: OffCpuChunk::default(),
            off_cpu: 0,
            libraries: HashMap::new(),
            pending_libraries: Vec::new(),
            links: HashMap::new(),
            pending_links: Vec::new(),
            task_sweep: false,
            task_wait_batch: TaskWaitChunk::default(),
            task_waits: 0,
        };
        w.write_record(Kind::Header, header)?;
        Ok(w)
    }

    /// zstd level for the chunks written from now on (default 3).
    pub fn set_compression_level(&mut self, level: i32) {
        self.level = level;
    }

    /// Bytes handed to the output so far (preamble and chunks; not what is still batched).
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Samples pushed so far, batched ones included.
    pub fn samples_written(&self) -> u64 {
        self.samples
    }

    /// Off-CPU intervals pushed so far, batched ones included.
    pub fn off_cpu_written(&self) -> u64 {
        self.off_cpu
    }

    /// Task waits pushed so far, batched ones included (format 1.5+).
    pub fn task_waits_written(&self) -> u64 {
        self.task_waits
    }

    /// Distinct symbols interned so far.
    pub fn symbol_count(&self) -> usize {
        self.symbols.len()
    }

    /// Stack nodes interned so far (node 0, the empty stack, not counted).
    pub fn stack_node_count(&self) -> u32 {
        self.node_count - 1
    }

    /// Writes a recorder warning now (not batched).
    pub fn add_warning(&mut self, warning: &RecorderWarning) -> Result<(), Error> {
        self.write_record(Kind::Warning, warning)
    }

    /// Writes Python thread names now (not batched; format 1.2+): one chunk, in pieces of at most
    /// [`THREAD_NAMES_PER_CHUNK`]; nothing for an empty slice. Names refer to nothing else in the file, so they may
    /// be written at any time; a thread's name is written when first known and again when it changes.
    pub fn add_thread_names(&mut self, names: &[ThreadName]) -> Result<(), Error> {
        for part in names.chunks(THREAD_NAMES_PER_CHUNK) {
            self.write_record(Kind::ThreadNames, &ThreadNameChunk::from_names(part))?;
        }
        Ok(())
    }

    /// Writes source files now (not batched; format 1.7+): one chunk per file (a file may take megabytes), stored
    /// uncompressed when it compresses more than [`SOURCE_MAX_RATIO`] times. Files refer to nothing else in the
    /// file, so they may be written at any time; the recorder writes each path once. Returns the bytes written.
    pub fn add_sources(&mut self, files: &[SourceFile]) -> Result<u64, Error> {
        let before = self.bytes_written;
        for file in files {
            let chunk = SourceChunk::from_files(std::slice::from_ref(file));
            let raw = postcard::to_stdvec(&chunk).map_err(|e| Error::Encode(e.to_string()))?;
            self.bytes_written +=
                chunk::write_chunk_within(&mut self.out, Kind::Sources, &raw, self.level, SOURCE_MAX_RATIO)?;
        }
        Ok(self.bytes_written - before)
    }

    /// Adds a native library the recording has frames of (format 1.4+): `path` as mapped (the `file` of its native
    /// frames), `build_id` its GNU build id in lower-case hex ("" if none). Each library is written once: a path
    /// pushed again with the same build id is ignored, with another one (the file was replaced) written again.
    /// Batched: written with the next symbols (at the next [`Writer::flush`], full sample batch or
    /// [`Writer::finish`]), or when [`LIBRARIES_PER_CHUNK`] are waiting.
    pub fn push_library(&mut self, path: &str, build_id: &str) -> Result<(), Error> {
        if self.libraries.get(path).is_some_and(|known| known == build_id) {
            return Ok(());
        }
        self.libraries.insert(path.to_string(), build_id.to_string());
        self.pending_libraries.push(Library { path: path.to_string(), build_id: build_id.to_string() });
        if self.pending_libraries.len() >= LIBRARIES_PER_CHUNK {
            self.write_libraries()?;
        }
        Ok(())
    }

    /// Distinct libraries pushed so far (format 1.4+).
    pub fn library_count(&self) -> usize {
        self.libraries.len()
    }

    /// Writes the libraries not yet on disk, if any.
    fn write_libraries(&mut self) -> Result<(), Error> {
        if !self.pending_libraries.is_empty() {
            let chunk = LibraryChunk::from_libraries(&self.pending_libraries);
            self.pending_libraries.clear();
            self.write_record(Kind::Libraries, &chunk)?;
        }
        Ok(())
    }

    /// The number of span `link` (1.10+), from 1, interning it: written before the next samples (with the symbols).
    pub fn intern_link(&mut self, link: SpanLink) -> u32 {
        if let Some(&n) = self.links.get(&link) {
            return n;
        }
        let n = self.links.len() as u32 + 1;
        self.links.insert(link, n);
        self.pending_links.push(link);
        n
    }

    /// Writes a process record now (not batched): it comes before every sample pushed after it.
    pub fn add_process(&mut self, process: &Process) -> Result<(), Error> {
        self.write_record(Kind::Process, process)
    }

    /// Returns the id of `symbol`, adding it if new. Equal symbols get equal ids.
    pub fn intern_symbol(&mut self, symbol: &Symbol) -> u32 {
        if let Some(&id) = self.symbol_ids.get(symbol) {
            return id;
        }
        let id = self.symbols.len() as u32;
        self.symbols.push(symbol.clone());
        self.symbol_ids.insert(symbol.clone(), id);
        id
    }

    /// Returns the leaf node of the stack `frames` (symbol ids, ROOT FIRST); 0 for an empty stack.
    pub fn intern_stack(&mut self, frames: &[u32]) -> u32 {
        // Start below the prefix shared with the previous stack (its nodes are known).
        let shared = frames.iter().zip(&self.last_stack).take_while(|(a, b)| a == b).count();
        self.last_stack.truncate(shared);
        self.last_nodes.truncate(shared);
        let mut node = if shared == 0 { 0 } else { self.last_nodes[shared - 1] };
        for &sym in &frames[shared..] {
            node = self.intern_node(node, sym);
            self.last_stack.push(sym);
            self.last_nodes.push(node);
        }
        node
    }

    /// Returns the node for frame `symbol` called from `parent` (0 for a root frame).
    pub fn intern_node(&mut self, parent: u32, symbol: u32) -> u32 {
        debug_assert!((symbol as usize) < self.symbols.len(), "symbol interned before use");
        let key = (parent as u64) << 32 | symbol as u64;
        if let Some(&id) = self.nodes.get(&key) {
            return id;
        }
        let id = self.node_count;
        self.node_count += 1;
        self.nodes.insert(key, id);
        // A root frame refers back to itself (distance = own id), which decodes to parent 0.
        self.pending_nodes.parent_back.push(id - parent);
        self.pending_nodes.symbols.push(symbol);
        id
    }

    /// Adds a sample. Its stack must come from this writer. Writes a chunk when the batch is full.
    pub fn push_sample(&mut self, s: &SampleRecord<'_>) -> Result<(), Error> {
        debug_assert!(s.stack < self.node_count && s.task_stack < self.node_count);
        let b = &mut self.batch;
        if b.stack.is_empty() {
            b.base_time_ns = s.time_ns;
            self.last_time = s.time_ns;
        }
        b.time_delta_ns.push(s.time_ns.wrapping_sub(self.last_time) as i64);
        self.last_time = s.time_ns;
        b.cpu.push(s.cpu);
        b.pid.push(s.pid);
        b.tid.push(s.tid);
        // Most samples have the previous one's command name: checked first, without hashing it.
        let last = b.comm.last().copied();
        let comm = match last.filter(|&i| b.comms.get(i as usize).is_some_and(|c| c == s.comm)) {
            Some(i) => i,
            None => match self.batch_comms.get(s.comm) {
                Some(&i) => i,
                None => {
                    let i = b.comms.len() as u32;
                    b.comms.push(s.comm.to_string());
                    self.batch_comms.insert(s.comm.to_string(), i);
                    i
                }
            },
        };
        b.comm.push(comm);
        b.thread_state.push(s.thread_state.as_u8());
        b.gil.push(s.gil.as_u8());
        b.pthread_id.push(s.pthread_id.as_u8());
        b.status.push(s.status.as_u8());
        b.stack.push(s.stack);
        b.task_stack.push(s.task_stack);
        b.flags.push(s.flags);
        b.interp.push(s.interp);
        b.link.push(s.link);
        self.samples += 1;
        if self.batch.len() >= SAMPLES_PER_CHUNK {
            self.write_definitions()?;
            self.write_samples()?;
        }
        Ok(())
    }

    /// Says that off-CPU time is recorded (format 1.3+), with the recording's `--off-cpu-min` in ns: writes an
    /// empty off-CPU chunk now, so that a reader knows it even if no interval follows. Call it once, before
    /// [`Writer::push_off_cpu`].
    pub fn start_off_cpu(&mut self, min_ns: u64) -> Result<(), Error> {
        if self.off_cpu_min_ns.is_some() {
            return Err(Error::Encode("start_off_cpu called twice".into()));
        }
        self.off_cpu_min_ns = Some(min_ns);
        self.off_cpu_batch.min_ns = min_ns;
        self.write_record(Kind::OffCpu, &OffCpuChunk { min_ns, ..Default::default() })
    }

    /// Adds an off-CPU interval (format 1.3+; after [`Writer::start_off_cpu`]). Its stack must come from this
    /// writer. Batched like samples: writes a chunk (after the stack nodes and symbols it may use) when the batch
    /// holds [`OFF_CPU_PER_CHUNK`].
    pub fn push_off_cpu(&mut self, iv: &OffCpuInterval) -> Result<(), Error> {
        if self.off_cpu_min_ns.is_none() {
            return Err(Error::Encode("push_off_cpu called before start_off_cpu".into()));
        }
        debug_assert!(iv.stack < self.node_count && iv.task_stack < self.node_count);
        self.off_cpu_batch.push(iv);
        self.off_cpu += 1;
        if self.off_cpu_batch.len() >= OFF_CPU_PER_CHUNK {
            self.write_definitions()?;
            self.write_off_cpu()?;
        }
        Ok(())
    }

    /// Says that the recorder's asyncio task sweep runs (format 1.5+): writes an empty task wait chunk now, so that a
    /// reader knows it even if no wait follows. Call it once, before [`Writer::task_waits`] (after
    /// [`Writer::start_off_cpu`], if that is called).
    pub fn start_task_waits(&mut self) -> Result<(), Error> {
        if self.task_sweep {
            return Err(Error::Encode("start_task_waits called twice".into()));
        }
        self.task_sweep = true;
        self.write_record(Kind::TaskWaits, &TaskWaitChunk::default())
    }

    /// Adds suspended asyncio tasks of one sweep (format 1.5+; after [`Writer::start_task_waits`]). Their stacks must
    /// come from this writer. Batched like samples: writes a chunk (after the stack nodes and symbols it may use)
    /// when the batch holds [`TASK_WAITS_PER_CHUNK`].
    pub fn task_waits(&mut self, waits: &[TaskWait]) -> Result<(), Error> {
        if !self.task_sweep {
            return Err(Error::Encode("task_waits called before start_task_waits".into()));
        }
        for w in waits {
            debug_assert!(w.stack < self.node_count);
            self.task_wait_batch.push(w);
            self.task_waits += 1;
            if self.task_wait_batch.len() >= TASK_WAITS_PER_CHUNK {
                self.write_definitions()?;
                self.write_task_waits()?;
            }
        }
        Ok(())
    }

    /// Writes everything buffered (new symbols, then new stacks, then samples, off-CPU intervals and task waits: each
    /// reference reaches the disk no later than what it refers to) and flushes the output. Call it periodically
    /// so that a killed recorder loses little.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.write_pending()?;
        self.out.flush()?;
        Ok(())
    }

    fn write_pending(&mut self) -> Result<(), Error> {
        self.write_definitions()?;
        self.write_samples()?;
        self.write_off_cpu()?;
        self.write_task_waits()
    }

    /// Writes the task wait batch, if any (the definitions it uses must be written before).
    fn write_task_waits(&mut self) -> Result<(), Error> {
        if !self.task_wait_batch.is_empty() {
            let chunk = std::mem::take(&mut self.task_wait_batch);
            self.write_record(Kind::TaskWaits, &chunk)?;
        }
        Ok(())
    }

    /// Writes the off-CPU batch, if any (the definitions it uses must be written before).
    fn write_off_cpu(&mut self) -> Result<(), Error> {
        if !self.off_cpu_batch.is_empty() {
            let min_ns = self.off_cpu_batch.min_ns;
            let chunk = std::mem::replace(&mut self.off_cpu_batch, OffCpuChunk { min_ns, ..Default::default() });
            self.write_record(Kind::OffCpu, &chunk)?;
        }
        Ok(())
    }

    /// Writes the libraries, symbols and stack nodes not yet on disk (the libraries first: native symbols name them).
    fn write_definitions(&mut self) -> Result<(), Error> {
        self.write_libraries()?;
        if !self.pending_links.is_empty() {
            let chunk = LinkChunk::from_links(&self.pending_links);
            self.pending_links.clear();
            self.write_record(Kind::Links, &chunk)?;
        }
        while self.symbols_flushed < self.symbols.len() {
            let end = self.symbols.len().min(self.symbols_flushed + SYMBOLS_PER_CHUNK);
            let chunk = SymbolChunk {
                first_id: self.symbols_flushed as u32,
                symbols: self.symbols[self.symbols_flushed..end].to_vec(),
            };
            self.write_record(Kind::Symbols, &chunk)?;
            self.symbols_flushed = end;
        }
        if !self.pending_nodes.symbols.is_empty() {
            let next = StackChunk { first_id: self.node_count, ..Default::default() };
            let chunk = std::mem::replace(&mut self.pending_nodes, next);
            self.write_record(Kind::Stacks, &chunk)?;
        }
        Ok(())
    }

    /// Writes the sample batch, if any (the definitions it uses must be written before).
    fn write_samples(&mut self) -> Result<(), Error> {
        if !self.batch.is_empty() {
            let raw = crate::columns::encode(&self.batch).map_err(|e| Error::Encode(e.to_string()))?;
            self.bytes_written += chunk::write_chunk(&mut self.out, Kind::Samples, &raw, self.level)?;
            self.batch = SampleChunk::default();
            self.batch_comms.clear();
        }
        Ok(())
    }

    /// Writes what is pending, the complete symbol table and the trailer; returns the output.
    pub fn finish(mut self, stats: &Stats) -> Result<W, Error> {
        self.write_pending()?;
        let symbols = std::mem::take(&mut self.symbols);
        for (i, part) in symbols.chunks(SYMBOLS_PER_CHUNK).enumerate() {
            let table = SymbolChunk { first_id: (i * SYMBOLS_PER_CHUNK) as u32, symbols: part.to_vec() };
            self.write_record(Kind::SymbolTable, &table)?;
        }
        self.write_record(Kind::Stats, stats)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn write_record<T: serde::Serialize>(&mut self, kind: Kind, value: &T) -> Result<(), Error> {
        let raw = postcard::to_stdvec(value).map_err(|e| Error::Encode(e.to_string()))?;
        self.bytes_written += chunk::write_chunk(&mut self.out, kind, &raw, self.level)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix cache of `intern_stack` gives the nodes a plain per-frame walk gives, whatever the order.
    #[test]
    fn intern_stack_reuses_prefixes_exactly() {
        let header = Header {
            pyperf_version: String::new(),
            hostname: String::new(),
            kernel_release: String::new(),
            arch: String::new(),
            start_time_unix_ns: 0,
            event: String::new(),
            rate: Rate::Frequency(1),
            command_line: Vec::new(),
            workload: Vec::new(),
        };
        let mut w = Writer::new(Vec::new(), &header).unwrap();
        for i in 0..6 {
            let s = Symbol { scope: String::new(), name: format!("f{i}"), file: String::new(), line: 1, flags: 0 };
            w.intern_symbol(&s);
        }
        let stacks: [&[u32]; 9] =
            [&[0, 1, 2], &[0, 1, 3], &[0, 1, 2], &[0], &[], &[0, 1, 2, 4, 5], &[1, 0], &[0, 1], &[0, 1, 2, 4]];
        for _ in 0..2 {
            for s in stacks {
                let mut node = 0;
                for &sym in s {
                    node = *w.nodes.get(&((node as u64) << 32 | sym as u64)).unwrap_or(&u32::MAX);
                    if node == u32::MAX {
                        break;
                    }
                }
                let got = w.intern_stack(s);
                if node != u32::MAX {
                    assert_eq!(got, node, "{s:?}");
                }
                // Walking the tree up from the node gives the stack back.
                let mut back = Vec::new();
                let mut n = got;
                while n != 0 {
                    let (&key, _) = w.nodes.iter().find(|(_, &v)| v == n).unwrap();
                    back.push(key as u32);
                    n = (key >> 32) as u32;
                }
                back.reverse();
                assert_eq!(back, s);
            }
        }
        assert_eq!(w.stack_node_count(), 8);
    }
}
