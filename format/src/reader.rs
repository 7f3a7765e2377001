//! Reading a recording as a stream of records, and the symbol and stack tables they build.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;

use crate::chunk::{self, Kind};
use crate::model::*;
use crate::{Error, GilState, PthreadIdMatch, StackStatus, ThreadStateMatch};

/// A decoded chunk.
// One record lives at a time (the reader hands each on, never a collection of them): the sample chunk's column
// vectors inline cost nothing a box would save, and boxing would change the public type.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A process the recorder started following.
    Process(Process),
    /// Symbols new since the previous symbol chunk.
    Symbols(SymbolChunk),
    /// Stack nodes new since the previous stack chunk.
    Stacks(StackChunk),
    /// A batch of samples, with the columns [`Reader::set_columns`] asked for.
    Samples(SampleChunk),
    /// A piece of the complete symbol table the writer repeats at the end.
    SymbolTable(SymbolChunk),
    /// The trailer.
    Stats(Stats),
    /// A warning of the recorder's (1.1+).
    Warning(RecorderWarning),
    /// Python thread names new or changed since the previous such chunk (1.2+), in file order.
    ThreadNames(Vec<ThreadName>),
    /// Off-CPU intervals (1.3+), in file order; none in the chunk the recorder writes first to say that off-CPU time
    /// was recorded.
    OffCpu {
        /// The recording's `--off-cpu-min`, ns.
        min_ns: u64,
        /// The intervals.
        intervals: Vec<OffCpuInterval>,
    },
    /// Native libraries new since the previous such chunk (1.4+), in file order.
    Libraries(Vec<Library>),
    /// Suspended asyncio tasks sampled by the recorder's task sweep (1.5+), in file order; none in the chunk the
    /// recorder writes first to say that the sweep ran.
    TaskWaits(Vec<TaskWait>),
    /// Source files of the recorded program (1.7+), in file order.
    Sources(Vec<SourceFile>),
    /// Spans new since the previous such chunk (1.10+), numbered on from the last one.
    Links(Vec<SpanLink>),
    /// A chunk kind from a newer minor version; skipped.
    Unknown {
        /// Its on-disk kind value.
        kind: u16,
    },
}

/// Reads chunks one at a time: memory stays at one chunk, whatever the file's size.
pub struct Reader<R: Read> {
    input: R,
    version: (u16, u16),
    header: Header,
    offset: u64,
    chunks: u64,
    stored: Vec<u8>,
    budget: chunk::Budget,
    columns: Columns,
}

impl<R: Read> Reader<R> {
    /// Reads the preamble and the header chunk.
    pub fn new(mut input: R) -> Result<Self, Error> {
        let version = chunk::read_preamble(&mut input)?;
        let mut stored = Vec::new();
        let mut budget = chunk::Budget::default();
        let offset = chunk::PREAMBLE_LEN as u64;
        let first = chunk::read_chunk(&mut input, offset, 0, &mut stored, &mut budget)?
            .ok_or(Error::Truncated { offset, complete_chunks: 0 })?;
        if first.kind != Kind::Header as u16 {
            return Err(Error::Corrupt { offset, what: "first chunk is not the header".into() });
        }
        let header = decode(&first.payload, offset)?;
        let offset = offset + first.size;
        Ok(Reader { input, version, header, offset, chunks: 1, stored, budget, columns: Columns::ALL })
    }

    /// Decode only these optional sample columns from now on (default: all). Skipped ones come out empty.
    pub fn set_columns(&mut self, columns: Columns) {
        self.columns = columns;
    }

    /// The file's header chunk, read by [`Reader::new`].
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// (major, minor) of the file.
    pub fn version(&self) -> (u16, u16) {
        self.version
    }

    /// Byte offset of the next chunk.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Complete chunks read so far, the header included.
    pub fn chunks_read(&self) -> u64 {
        self.chunks
    }

    /// The next record; `Ok(None)` at the end of the file. A file cut short gives `Err(Error::Truncated)`
    /// after its last complete chunk.
    pub fn next_record(&mut self) -> Result<Option<Record>, Error> {
        let Some(raw) =
            chunk::read_chunk(&mut self.input, self.offset, self.chunks, &mut self.stored, &mut self.budget)?
        else {
            return Ok(None);
        };
        let at = raw.offset;
        self.offset += raw.size;
        self.chunks += 1;
        let record = match Kind::from_u16(raw.kind) {
            Some(Kind::Header) => return Err(Error::Corrupt { offset: at, what: "second header chunk".into() }),
            Some(Kind::Process) => Record::Process(decode_process(&raw.payload, at)?),
            Some(Kind::Symbols) => Record::Symbols(decode(&raw.payload, at)?),
            Some(Kind::Stacks) => {
                let c: StackChunk = decode(&raw.payload, at)?;
                if c.parent_back.len() != c.symbols.len() {
                    return Err(Error::Corrupt { offset: at, what: "stack chunk columns differ in length".into() });
                }
                Record::Stacks(c)
            }
            Some(Kind::Samples) => {
                let payload = missing_columns_read_empty(raw.payload, SAMPLE_COLUMNS_ADDED);
                let wire: WireSampleChunk<'_> = decode_borrowed(&payload, at)?;
                let mut c = SampleChunk::default();
                crate::columns::decode(&wire, self.columns, &mut c)
                    .map_err(|what| Error::Corrupt { offset: at, what: what.into() })?;
                Record::Samples(c)
            }
            Some(Kind::SymbolTable) => Record::SymbolTable(decode(&raw.payload, at)?),
            Some(Kind::Stats) => Record::Stats(decode(&raw.payload, at)?),
            Some(Kind::Warning) => Record::Warning(decode(&raw.payload, at)?),
            Some(Kind::ThreadNames) => {
                let c: ThreadNameChunk = decode(&raw.payload, at)?;
                let names = c.names().ok_or_else(|| Error::Corrupt {
                    offset: at,
                    what: "thread name chunk columns differ in length".into(),
                })?;
                Record::ThreadNames(names)
            }
            Some(Kind::OffCpu) => {
                let payload = missing_columns_read_empty(raw.payload, OFF_CPU_COLUMNS_ADDED);
                let c: OffCpuChunk = decode(&payload, at)?;
                let min_ns = c.min_ns;
                let intervals = c.into_intervals().ok_or_else(|| Error::Corrupt {
                    offset: at,
                    what: "off-CPU chunk columns differ in length".into(),
                })?;
                Record::OffCpu { min_ns, intervals }
            }
            Some(Kind::Libraries) => {
                let c: LibraryChunk = decode(&raw.payload, at)?;
                let libraries = c.into_libraries().ok_or_else(|| Error::Corrupt {
                    offset: at,
                    what: "library chunk columns differ in length".into(),
                })?;
                Record::Libraries(libraries)
            }
            Some(Kind::TaskWaits) => {
                let c: TaskWaitChunk = decode(&raw.payload, at)?;
                let waits = c.waits().ok_or_else(|| Error::Corrupt {
                    offset: at,
                    what: "task wait chunk columns differ in length".into(),
                })?;
                Record::TaskWaits(waits)
            }
            Some(Kind::Sources) => {
                let c: SourceChunk = decode(&raw.payload, at)?;
                let files = c.into_files().ok_or_else(|| Error::Corrupt {
                    offset: at,
                    what: "source chunk columns differ in length, or a hash is not 32 bytes".into(),
                })?;
                Record::Sources(files)
            }
            Some(Kind::Links) => {
                let c: LinkChunk = decode(&raw.payload, at)?;
                let links = c
                    .into_links()
                    .ok_or_else(|| Error::Corrupt { offset: at, what: "span chunk columns differ in length".into() })?;
                Record::Links(links)
            }
            None => Record::Unknown { kind: raw.kind },
        };
        Ok(Some(record))
    }
}

/// A process record of any minor version: the 1.0 fields, then those 1.1 appended when they are there (a 1.0
/// record ends before them), then whatever a newer minor appended, ignored.
fn decode_process(payload: &[u8], offset: u64) -> Result<Process, Error> {
    let corrupt = |e: postcard::Error| Error::Corrupt { offset, what: format!("undecodable record: {e}") };
    let (v10, rest): (ProcessV10, &[u8]) = postcard::take_from_bytes(payload).map_err(corrupt)?;
    let v11 =
        if rest.is_empty() { None } else { Some(postcard::take_from_bytes::<ProcessV11>(rest).map_err(corrupt)?.0) };
    Ok(Process {
        pid: v10.pid,
        command: v10.command,
        python_version: v10.python_version,
        interpreter_path: v10.interpreter_path,
        build_id: v10.build_id,
        first_seen_ns: v10.first_seen_ns,
        ns_pid: v11.as_ref().map_or(0, |t| t.ns_pid),
        cgroup: v11.map(|t| t.cgroup).unwrap_or_default(),
    })
}

/// Columns appended to the sample chunk since 1.4: `task_stack` (1.5), `flags` (1.6), `interp` (1.8), `link` (1.10).
const SAMPLE_COLUMNS_ADDED: usize = 4;
/// Columns appended to the off-CPU chunk since 1.4: `task_stack` (1.5), `interp` (1.9), `link` (1.10).
const OFF_CPU_COLUMNS_ADDED: usize = 3;

/// The payload of a sample or off-CPU chunk, ready for a decoder that knows the `added` columns appended since 1.4: a
/// file before them ends before them, and each zero byte added here reads as one's empty value (postcard's empty
/// byte string or vector), which says "none" (no task stacks, no flags); after a chunk that has them they are
/// trailing bytes, ignored like a newer minor's fields.
fn missing_columns_read_empty(mut payload: Vec<u8>, added: usize) -> Vec<u8> {
    payload.resize(payload.len() + added, 0);
    payload
}

/// Decodes the known prefix of a record; trailing bytes are fields of a newer minor version.
fn decode<T: DeserializeOwned>(payload: &[u8], offset: u64) -> Result<T, Error> {
    postcard::take_from_bytes(payload)
        .map(|(v, _rest)| v)
        .map_err(|e| Error::Corrupt { offset, what: format!("undecodable record: {e}") })
}

fn decode_borrowed<'a, T: serde::Deserialize<'a>>(payload: &'a [u8], offset: u64) -> Result<T, Error> {
    postcard::take_from_bytes(payload)
        .map(|(v, _rest)| v)
        .map_err(|e| Error::Corrupt { offset, what: format!("undecodable record: {e}") })
}

/// One sample, resolved against its chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// ns since the recording's start.
    pub time_ns: u64,
    /// CPU it was taken on.
    pub cpu: u32,
    /// Process id (tgid).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name (task comm).
    pub comm: &'a str,
    /// Whether the thread's thread state was the interpreter's current one.
    pub thread_state: ThreadStateMatch,
    /// Who held the GIL.
    pub gil: GilState,
    /// Whether the thread state belonged to this OS thread.
    pub pthread_id: PthreadIdMatch,
    /// How complete the stack is.
    pub status: StackStatus,
    /// Leaf stack node, 0 for none; resolve with [`Tables::frames`].
    pub stack: u32,
    /// 1.5+: leaf node of its task-view stack (asyncio), 0 for none (or a file before 1.5, or the column skipped).
    pub task_stack: u32,
    /// 1.6+: its [`crate::sample_flags`] ([`crate::sample_flags::GC`]: in the garbage collector), 0 before 1.6 (or
    /// the column skipped).
    pub flags: u8,
    /// 1.8+: the id of the interpreter its leaf frames run in (0: the main one), 0 before 1.8 (or the column skipped).
    pub interp: u32,
    /// 1.10+: the span it ran in, a number for [`Tables::link`]; 0 none (and before 1.10, or the column skipped).
    pub link: u32,
}

/// Iterates the samples of a chunk. Columns the reader skipped read as 0 (time: the chunk's base time).
pub fn samples(c: &SampleChunk) -> impl Iterator<Item = Sample<'_>> + '_ {
    let mut time = c.base_time_ns;
    let u32_at = |v: &Vec<u32>, i: usize| v.get(i).copied().unwrap_or(0);
    let u8_at = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
    (0..c.len()).map(move |i| {
        time = time.wrapping_add(c.time_delta_ns.get(i).copied().unwrap_or(0) as u64);
        Sample {
            time_ns: time,
            cpu: u32_at(&c.cpu, i),
            pid: u32_at(&c.pid, i),
            tid: u32_at(&c.tid, i),
            // Indices were checked against `comms` when the column was decoded.
            comm: c.comm.get(i).and_then(|&k| c.comms.get(k as usize)).map(String::as_str).unwrap_or(""),
            thread_state: ThreadStateMatch::from_u8(u8_at(&c.thread_state, i)),
            gil: GilState::from_u8(u8_at(&c.gil, i)),
            pthread_id: PthreadIdMatch::from_u8(u8_at(&c.pthread_id, i)),
            status: StackStatus::from_u8(c.status[i]),
            stack: c.stack[i],
            task_stack: u32_at(&c.task_stack, i),
            flags: u8_at(&c.flags, i),
            interp: u32_at(&c.interp, i),
            link: u32_at(&c.link, i),
        }
    })
}

/// Symbols, stack nodes and processes seen so far. Grows with unique stacks, never with samples.
#[derive(Debug, Default, Clone)]
pub struct Tables {
    /// Symbol `i` at index `i`.
    pub symbols: Vec<Symbol>,
    /// (parent node, symbol id) for node i+1.
    pub nodes: Vec<(u32, u32)>,
    /// Process records in file order (a reused pid appears again, later).
    pub processes: Vec<Process>,
    /// The trailer, once read.
    pub stats: Option<Stats>,
    /// Whether the final complete symbol table was read.
    pub complete_symbol_table: bool,
    /// The recorder's warnings, in file order.
    pub warnings: Vec<RecorderWarning>,
    /// Python thread names (1.2+), in file order: a thread's name appears when the recorder first read it and again
    /// when it changed; an empty name ends the one before it (the thread's name is unknown from then on). They may
    /// come after the samples they name (the recorder reads a thread's name after the thread first shows up in the
    /// samples): look names up once the recording is read, with [`Tables::thread_name`].
    pub thread_names: Vec<ThreadName>,
    /// Built from `thread_names` and `processes` at the first lookup after a change (names arrive in any time
    /// order: one sort then, rather than a sorted insert per name).
    pub(crate) name_index: OnceLock<NameIndex>,
    /// The recording's off-CPU minimum, from the first off-CPU chunk (1.3+).
    pub(crate) off_cpu_min_ns: Option<u64>,
    /// Native libraries (1.4+): path -> build id.
    pub(crate) libraries: BTreeMap<String, String>,
    /// Whether a task wait chunk was applied (1.5+).
    pub(crate) task_sweep: bool,
    /// Source files (1.7+): path -> the first record of it.
    pub(crate) sources: BTreeMap<String, SourceFile>,
    /// Spans (1.10+): number `i` at index `i - 1`.
    pub links: Vec<SpanLink>,
}

/// Thread names by thread, for [`Tables::thread_name`].
#[derive(Debug, Default, Clone)]
pub(crate) struct NameIndex {
    /// pid -> `first_seen_ns` of its process records, ascending.
    starts: HashMap<u32, Vec<u64>>,
    /// (pid, tid) -> its names, sorted: by process epoch (the `first_seen_ns` of the process record that applies,
    /// [`NameIndex::epoch`]), then time, then file order.
    names: HashMap<(u32, u32), Vec<NameAt>>,
}

/// (epoch, time_ns, index into `Tables::thread_names`) of one name.
type NameAt = (u64, u64, usize);

impl NameIndex {
    fn build(processes: &[Process], names: &[ThreadName]) -> NameIndex {
        let mut starts: HashMap<u32, Vec<u64>> = HashMap::new();
        for p in processes {
            starts.entry(p.pid).or_default().push(p.first_seen_ns);
        }
        for s in starts.values_mut() {
            s.sort_unstable();
        }
        let mut index = NameIndex { starts, names: HashMap::new() };
        for (i, n) in names.iter().enumerate() {
            let epoch = index.epoch(n.pid, n.time_ns);
            index.names.entry((n.pid, n.tid)).or_default().push((epoch, n.time_ns, i));
        }
        for list in index.names.values_mut() {
            list.sort_unstable();
        }
        index
    }

    /// `first_seen_ns` of the process record of `pid` that applies at `time_ns`: the latest starting at or before
    /// it (0 when none does).
    fn epoch(&self, pid: u32, time_ns: u64) -> u64 {
        let Some(starts) = self.starts.get(&pid) else { return 0 };
        let at = starts.partition_point(|&t| t <= time_ns);
        at.checked_sub(1).map_or(0, |i| starts[i])
    }
}

impl Tables {
    /// Adds what a record defines. Checks every reference, so later lookups cannot fail.
    pub fn apply(&mut self, record: &Record, offset: u64) -> Result<(), Error> {
        match record {
            Record::Process(p) => {
                self.processes.push(p.clone());
                self.name_index.take();
            }
            Record::Symbols(c) => self.add_symbols(c, offset)?,
            Record::SymbolTable(c) => {
                self.add_symbols(c, offset)?;
                self.complete_symbol_table = true;
            }
            Record::Stacks(c) => {
                if c.first_id as usize != self.nodes.len() + 1 {
                    return Err(Error::Corrupt {
                        offset,
                        what: format!("stack nodes start at {}, expected {}", c.first_id, self.nodes.len() + 1),
                    });
                }
                for (i, (&back, &sym)) in c.parent_back.iter().zip(&c.symbols).enumerate() {
                    let id = c.first_id + i as u32;
                    let parent = id
                        .checked_sub(back)
                        .ok_or_else(|| Error::Corrupt { offset, what: format!("stack node {id} refers forward") })?;
                    if parent == id {
                        return Err(Error::Corrupt { offset, what: format!("stack node {id} is its own caller") });
                    }
                    if sym as usize >= self.symbols.len() {
                        return Err(Error::Corrupt {
                            offset,
                            what: format!("stack node {id} names symbol {sym}, which is not defined before it"),
                        });
                    }
                    self.nodes.push((parent, sym));
                }
            }
            Record::Samples(c) => {
                self.check_stacks(c.stack.iter().chain(&c.task_stack).copied(), "sample", offset)?;
                self.check_links(c.link.iter().copied(), "sample", offset)?;
            }
            Record::Stats(s) => self.stats = Some(s.clone()),
            Record::Warning(w) => self.warnings.push(w.clone()),
            Record::ThreadNames(names) => {
                self.thread_names.extend_from_slice(names);
                self.name_index.take();
            }
            Record::OffCpu { min_ns, intervals } => {
                let stacks = intervals.iter().flat_map(|iv| [iv.stack, iv.task_stack]);
                self.check_stacks(stacks, "off-CPU interval", offset)?;
                self.check_links(intervals.iter().map(|iv| iv.link), "off-CPU interval", offset)?;
                self.off_cpu_min_ns.get_or_insert(*min_ns);
            }
            Record::TaskWaits(waits) => {
                self.check_stacks(waits.iter().map(|w| w.stack), "task wait", offset)?;
                self.task_sweep = true;
            }
            Record::Libraries(libraries) => {
                for l in libraries {
                    self.libraries.insert(l.path.clone(), l.build_id.clone());
                }
            }
            Record::Sources(files) => {
                for f in files {
                    self.sources.entry(f.path.clone()).or_insert_with(|| f.clone());
                }
            }
            Record::Links(links) => self.links.extend_from_slice(links),
            Record::Unknown { .. } => {}
        }
        Ok(())
    }

    /// The span numbered `link` (1.10+: a sample's or interval's [`Sample::link`]), `None` for 0.
    pub fn link(&self, link: u32) -> Option<&SpanLink> {
        self.links.get((link as usize).checked_sub(1)?)
    }

    /// Every span number of `links` names a span already read (a recorder writes a span before its first use).
    fn check_links(&self, mut links: impl Iterator<Item = u32>, what: &str, offset: u64) -> Result<(), Error> {
        let n = self.links.len();
        match links.find(|&l| l as usize > n) {
            Some(l) => Err(Error::Corrupt { offset, what: format!("{what} names span {l}, of {n} defined") }),
            None => Ok(()),
        }
    }

    /// Every stack node a record of `what` names is defined (ordering rule: in an earlier chunk).
    fn check_stacks(&self, stacks: impl Iterator<Item = u32>, what: &str, offset: u64) -> Result<(), Error> {
        let max = self.nodes.len() as u32;
        let mut stacks = stacks;
        match stacks.find(|&s| s > max) {
            Some(bad) => Err(Error::Corrupt {
                offset,
                what: format!("{what} names stack {bad}, which is not defined before it"),
            }),
            None => Ok(()),
        }
    }

    fn add_symbols(&mut self, c: &SymbolChunk, offset: u64) -> Result<(), Error> {
        let first = c.first_id as usize;
        if first > self.symbols.len() {
            return Err(Error::Corrupt {
                offset,
                what: format!("symbols start at {first}, only {} defined", self.symbols.len()),
            });
        }
        for (i, s) in c.symbols.iter().enumerate() {
            let id = first + i;
            match self.symbols.get(id) {
                Some(known) if known != s => {
                    return Err(Error::Corrupt { offset, what: format!("symbol {id} defined twice, differently") })
                }
                Some(_) => {}
                None => self.symbols.push(s.clone()),
            }
        }
        Ok(())
    }

    /// Symbol ids of the stack ending at `leaf`, LEAF FIRST. `leaf` must have passed [`Tables::apply`].
    pub fn frames(&self, leaf: u32) -> Frames<'_> {
        Frames { tables: self, node: leaf }
    }

    /// Symbol ids of the stack ending at `leaf`, ROOT FIRST, into `out` (cleared first).
    pub fn frames_root_first(&self, leaf: u32, out: &mut Vec<u32>) {
        out.clear();
        out.extend(self.frames(leaf));
        out.reverse();
    }

    /// The recording's `--off-cpu-min` in ns, once an off-CPU chunk was applied (1.3+): `Some` means the recording
    /// has off-CPU data (the recorder writes an empty off-CPU chunk first), even if no interval was recorded; `None`
    /// for a recording made without `--off-cpu` (and every recording before 1.3). From the first chunk (every chunk
    /// of a file has the same).
    pub fn off_cpu_min_ns(&self) -> Option<u64> {
        self.off_cpu_min_ns
    }

    /// Whether the recorder's asyncio task sweep ran (1.5+): a task wait chunk was applied (the recorder writes an empty
    /// one first), so the recording says where suspended tasks waited, even if no wait was recorded.
    pub fn task_sweep(&self) -> bool {
        self.task_sweep
    }

    /// The native libraries the recording has frames of (1.4+, `record --native`): path as mapped -> GNU build id
    /// (lower-case hex, empty when unknown), in path order. A path written again with another build id (the file
    /// was replaced while the recording ran) has the latest. Empty for recordings without native frames.
    pub fn libraries(&self) -> &BTreeMap<String, String> {
        &self.libraries
    }

    /// The source files the recording holds (1.7+, `record --source`), by path as the recording names them (the
    /// `file` of their Python frames): each stored, or why it was not. A path written twice keeps its first record.
    /// Empty for recordings made without `--source`.
    pub fn sources(&self) -> &BTreeMap<String, SourceFile> {
        &self.sources
    }

    /// The symbol with this id. Panics on an id no record defined (ids from checked records are defined).
    pub fn symbol(&self, id: u32) -> &Symbol {
        &self.symbols[id as usize]
    }

    /// The latest process record of `pid`, if any.
    pub fn process(&self, pid: u32) -> Option<&Process> {
        self.processes.iter().rev().find(|p| p.pid == pid)
    }

    /// The Python name of thread `tid` of process `pid` at `time_ns` (ns since the recording's start, e.g. a
    /// sample's time), if the recorder read one (1.2+): the latest name read at or before `time_ns`, else the
    /// first one read after it (a thread's name is read after its first samples and names them too); `None` when
    /// that is an empty name (the name before it no longer applies: the thread's tid was reused, or it is gone).
    /// Names of an earlier process with the same pid (a process record with a later `first_seen_ns` lies between)
    /// are not used. The first lookup after [`Tables::apply`] added names or processes sorts them once.
    pub fn thread_name(&self, pid: u32, tid: u32, time_ns: u64) -> Option<&str> {
        let index = self.name_index.get_or_init(|| NameIndex::build(&self.processes, &self.thread_names));
        let list = index.names.get(&(pid, tid))?;
        let epoch = index.epoch(pid, time_ns);
        // This process's names: one run of the sorted list.
        let lo = list.partition_point(|e| e.0 < epoch);
        let hi = list.partition_point(|e| e.0 <= epoch);
        let run = &list[lo..hi];
        let at = run.partition_point(|e| e.1 <= time_ns);
        let &(_, _, i) = if at > 0 { &run[at - 1] } else { run.first()? };
        let name = self.thread_names.get(i)?.name.as_str();
        (!name.is_empty()).then_some(name)
    }
}

/// Leaf-to-root iterator over a stack's symbol ids.
pub struct Frames<'a> {
    tables: &'a Tables,
    node: u32,
}

impl Iterator for Frames<'_> {
    type Item = u32;
    fn next(&mut self) -> Option<u32> {
        if self.node == 0 {
            return None;
        }
        let (parent, sym) = self.tables.nodes[self.node as usize - 1];
        // Parents always have smaller ids (checked in apply), so this terminates.
        self.node = parent;
        Some(sym)
    }
}
