//! Native stacks from a copy of the user stack, as `perf --call-graph dwarf` takes them: the BPF program copies the
//! registers ip, sp and bp and the bytes at `[sp, sp + len)`; here the frames are unwound with the DWARF call frame
//! information of the files the process maps (`.eh_frame`, via `framehop`) and named with their symbols.
//!
//! Processes are known by their `/proc/PID/maps`: the executable file mappings, each file opened through
//! `/proc/PID/root/<path>` (so a process in a chroot or a container has its own files) or, failing that,
//! `/proc/PID/map_files/<start>-<end>`. A file is parsed once for all processes that map it, keyed by (device,
//! inode). An address in no known mapping (an extension `dlopen`ed since, code a JIT generated) re-reads the maps
//! when that can help (see [`REREAD_FLOOR`]).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};

use super::elf::{self, ElfInfo};
use super::jit::{self, GeneratedCode, TrampolineShape};
use crate::clock::monotonic_ns;
use crate::mem::{ProcMem, ReadMem as _};
use crate::proc::{maps as read_maps, parse_maps, MapsEntry};

/// Frames beyond this many end the unwind ([`UnwindEnd::TooDeep`]).
pub const MAX_FRAMES: usize = 1024;
/// A process's maps (and its JIT list) are re-read when a sample taken after they were last read has an address in
/// no known mapping (no known code), at most every REREAD_FLOOR: the code may be new. Not for a sample taken before
/// the last read: its code, if still there, was in what was read. A re-read that finds nothing new doubles the wait
/// before the next, up to REREAD_INTERVAL (a process whose samples keep giving bad addresses costs a read every
/// 100 ms, as before); one that finds new code brings it back to REREAD_FLOOR. Counted from when the maps were
/// *read*, not from when they were parsed (which may take hundreds of milliseconds, debug files waited for): a
/// process that mapped JIT code meanwhile had its samples in it refused a re-read (tests/jit.rs under load, 12%).
pub const REREAD_FLOOR: Duration = Duration::from_millis(10);
/// How often at most an address to name (no sample time) re-reads the maps.
pub const REREAD_INTERVAL: Duration = Duration::from_millis(100);
/// The name of an address in no mapping of a file.
pub const UNKNOWN: &str = "[unknown]";
/// The address-to-symbol cache is emptied when it grows past this many entries (bounds memory on long
/// recordings of code with many distinct leaf addresses).
const ADDR_CACHE_MAX: usize = 1 << 20;
/// How long the unwinding waits for one file's separate debug file (looked for and parsed by a worker thread):
/// a usual one is in well before, so names are right from the first sample; a slow or huge one comes later, its
/// file's frames named by offset meanwhile.
pub const DEBUG_FILE_WAIT: Duration = Duration::from_millis(500);
/// How long the unwinding waits for debug files in all: past it, they only come as they come (a process mapping
/// many libraries with slow debug files cannot stall a recording for long).
pub const DEBUG_FILE_WAIT_TOTAL: Duration = Duration::from_secs(3);

/// The user registers an unwind starts from (x86-64: rip, rsp, rbp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: the address of the first byte of the stack copy.
    pub sp: u64,
    /// Frame pointer (used only where a function has no call frame information).
    pub bp: u64,
}

/// Why an unwind stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnwindEnd {
    /// The outermost frame was reached: its call frame information says there is no caller (`_start`,
    /// `clone3`), or the return address is 0.
    Complete,
    /// The next frame's return address lies beyond the copy of the stack.
    StackCopyEnd,
    /// The frame is in a file without call frame information (`.eh_frame` / `.debug_frame`).
    NoUnwindInfo,
    /// The address is in no mapping of a file (JIT code, a bad unwind), or the unwind rules gave nonsense.
    BadAddress,
    /// More than [`MAX_FRAMES`] frames.
    TooDeep,
}

impl UnwindEnd {
    /// Name used in the counters.
    pub fn as_str(self) -> &'static str {
        match self {
            UnwindEnd::Complete => "complete",
            UnwindEnd::StackCopyEnd => "stack_copy_end",
            UnwindEnd::NoUnwindInfo => "no_unwind_info",
            UnwindEnd::BadAddress => "bad_address",
            UnwindEnd::TooDeep => "too_deep",
        }
    }

    const ALL: [UnwindEnd; 5] = [
        UnwindEnd::Complete,
        UnwindEnd::StackCopyEnd,
        UnwindEnd::NoUnwindInfo,
        UnwindEnd::BadAddress,
        UnwindEnd::TooDeep,
    ];
}

/// The name of a native frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeSymbol {
    /// Demangled function name; `libz.so.1+0x1a2b` when no symbol covers the address: the offset (from the
    /// file's lowest load address) of the start of the code range the call frame information puts it in, else of
    /// the address itself; [`UNKNOWN`] when no file holds it.
    pub name: String,
    /// The file's path as the process maps it ("" when no file).
    pub library: Arc<str>,
    /// The file's GNU build id, lower-case hex ("" without one).
    pub build_id: Arc<str>,
    /// Whether a symbol covers the address.
    pub resolved: bool,
    /// A trampoline of the interpreter's (generated code of a known shape, [`GeneratedCode`]): glue.
    pub trampoline: bool,
}

type Bytes = Arc<[u8]>;

/// What identifies a file across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FileKey {
    Inode {
        dev: u64,
        inode: u64,
    },
    /// The kernel's vDSO: the same image in every process (of one ABI).
    Vdso,
}

/// A file mapped by some process, parsed once.
struct FileEntry {
    /// `None`: it could not be read or parsed (its frames are named by offset and end unwinds).
    info: Option<Arc<ElfInfo>>,
    build_id: Arc<str>,
    /// Its debug file was not in within the wait: names may have been given from the file's own symbols since.
    late: bool,
}

/// One executable mapping of a file in a process.
#[derive(Clone)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    key: FileKey,
    file: usize,
    /// Run-time address minus file address.
    bias: u64,
    /// The path as mapped (" (deleted)" removed).
    path: Arc<str>,
    /// The file's name, for "lib+0xoffset" names.
    basename: Arc<str>,
    /// `None` when the file has no call frame information.
    module: Option<Module<Bytes>>,
}

/// A followed process.
struct Process {
    root: PathBuf,
    mappings: Vec<Mapping>,
    unwinder: UnwinderX86_64<Bytes>,
    cache: Box<CacheX86_64>,
    /// When its maps were read, and when they may be again.
    maps_read: Reads,
    /// Its anonymous executable mappings: code generated at run time (see [`jit`]), sorted.
    generated: Vec<std::ops::Range<u64>>,
    /// The generated code it registered through GDB's JIT interface, sorted.
    jit: Vec<JitEntry>,
    /// The run-time address of its `__jit_debug_descriptor`, when a file it maps defines one.
    jit_descriptor: Option<u64>,
    /// When its JIT list was read, and when it may be again.
    jit_read: Reads,
    /// Its memory, opened on first need (the code around return addresses in generated code).
    mem: Option<ProcMem>,
    /// Return addresses in generated code checked for a perf trampoline's return site: the shape's index.
    trampolines: HashMap<u64, Option<u8>>,
}

/// Return addresses remembered per process as perf trampolines' or not, at most (then forgotten, and checked again).
const TRAMPOLINES_MAX: usize = 1 << 16;

/// One piece of registered generated code of a process.
struct JitEntry {
    range: std::ops::Range<u64>,
    /// Its object in the process (address, size).
    object: (u64, u64),
    name: Arc<str>,
    module: Module<Bytes>,
}

/// What an address in no file mapping is.
enum Generated {
    /// Generated code with call frame information (registered).
    Registered,
    /// The return site of a perf trampoline of this shape.
    Trampoline(&'static TrampolineShape),
    /// Generated code with none.
    Unregistered,
    /// Not generated code (an address the maps do not know yet, or a bad one).
    No,
}

impl Process {
    fn find(&self, addr: u64) -> Option<usize> {
        let i = self.mappings.partition_point(|m| m.start <= addr).checked_sub(1)?;
        (addr < self.mappings[i].end).then_some(i)
    }

    fn find_jit(&self, addr: u64) -> Option<&JitEntry> {
        let i = self.jit.partition_point(|j| j.range.start <= addr).checked_sub(1)?;
        self.jit.get(i).filter(|j| addr < j.range.end)
    }

    fn in_generated(&self, addr: u64) -> bool {
        in_ranges(&self.generated, &(addr..addr.saturating_add(1)))
    }
}

#[derive(Default)]
struct Counts {
    unwinds: u64,
    ends: [u64; 5],
    frames: u64,
    maps_reads: u64,
    maps_rereads: u64,
    files_parsed: u64,
    files_unusable: u64,
    debug_files: u64,
    debug_files_late: u64,
    debug_files_rejected: u64,
    cold_parts: u64,
    cache_hits: u64,
    cache_misses: u64,
    jit_frames: u64,
    jit_stops: u64,
    jit_reads: u64,
    jit_refused: u64,
    trampolines: u64,
}

/// Unwinds and names the native frames of the followed processes.
pub struct NativeUnwinder {
    processes: HashMap<u32, Process>,
    files: Vec<FileEntry>,
    file_ids: HashMap<FileKey, usize>,
    /// (file, file address) -> index of the symbol covering it.
    addr_cache: HashMap<(usize, u64), Option<u32>>,
    /// (file, symbol index) -> demangled name.
    names: HashMap<(usize, u32), Arc<str>>,
    empty: Arc<str>,
    counts: Counts,
    debug: DebugLoader,
    /// Bumped when names given before may be stale: a file's symbols changed (a debug file came late), or a
    /// process's mappings did (an address in none, `[unknown]`, may be in one now).
    generation: u64,
    /// The library name of generated code's frames.
    jit_library: Arc<str>,
    /// An address was named [`UNKNOWN`] since the generation last changed.
    unknown_named: bool,
    /// What is known of the interpreter's generated code.
    code: &'static GeneratedCode,
}

/// A request to the debug file worker: the separate debug file of `file` (its parsed self `info`, `path` as
/// mapped, the process's `root`), and the file itself to parse again with those symbols.
struct DebugRequest {
    file: usize,
    root: PathBuf,
    path: String,
    build_id: Arc<str>,
    debuglink: Option<String>,
    data: File,
}

/// The worker thread that finds and parses separate debug files off the unwinding path: a debug file is the
/// target's to choose (it may be huge, or slow to read), so waiting for it is bounded.
#[derive(Default)]
struct DebugLoader {
    /// Started on first use.
    worker: Option<(std::sync::mpsc::Sender<DebugRequest>, std::sync::mpsc::Receiver<DebugReply>)>,
    /// Files asked for and not answered yet.
    pending: usize,
    /// Waited so far in all (see [`DEBUG_FILE_WAIT_TOTAL`]).
    waited: Duration,
}

/// The worker's answer for a file: the file parsed again with its debug file's symbols (`None`: no usable debug
/// file), and how many candidates were refused (not regular files, too large).
struct DebugReply {
    file: usize,
    info: Option<ElfInfo>,
    rejected: u64,
}

impl DebugLoader {
    /// Asks for the debug file of a file; false when the worker cannot be started.
    fn request(&mut self, req: DebugRequest) -> bool {
        if self.worker.is_none() {
            let (req_tx, req_rx) = std::sync::mpsc::channel::<DebugRequest>();
            let (reply_tx, reply_rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new().name("pyperf-debugfiles".into()).spawn(move || {
                for r in req_rx {
                    let reply = load_debug(r);
                    if reply_tx.send(reply).is_err() {
                        break;
                    }
                }
            });
            if spawned.is_err() {
                return false;
            }
            self.worker = Some((req_tx, reply_rx));
        }
        let Some((tx, _)) = &self.worker else { return false };
        if tx.send(req).is_err() {
            return false;
        }
        self.pending += 1;
        true
    }

    /// An answer, waiting at most `wait` (and never past the total budget); `None` when none came.
    fn reply(&mut self, wait: Duration) -> Option<DebugReply> {
        let (_, rx) = self.worker.as_ref()?;
        if self.pending == 0 {
            return None;
        }
        let wait = wait.min(DEBUG_FILE_WAIT_TOTAL.saturating_sub(self.waited));
        let started = Instant::now();
        let got = if wait.is_zero() { rx.try_recv().ok() } else { rx.recv_timeout(wait).ok() };
        self.waited += started.elapsed();
        if got.is_some() {
            self.pending -= 1;
        }
        got
    }
}

/// The worker's part: finds the debug file of a request and parses the file again with its symbols.
fn load_debug(r: DebugRequest) -> DebugReply {
    let mut rejected = 0;
    let debug = find_debug_file(&r.root, &r.path, &r.build_id, r.debuglink.as_deref(), &mut rejected);
    let info = debug.and_then(|d| {
        let mut d = Some(d);
        ElfInfo::parse_file_with(r.data, &mut |_| d.take()).ok().filter(|i| i.has_debug_file)
    });
    DebugReply { file: r.file, info, rejected }
}

impl Default for NativeUnwinder {
    fn default() -> Self {
        Self::new()
    }
}

impl NativeUnwinder {
    /// An unwinder following no process yet.
    pub fn new() -> Self {
        NativeUnwinder {
            processes: HashMap::new(),
            files: Vec::new(),
            file_ids: HashMap::new(),
            addr_cache: HashMap::new(),
            names: HashMap::new(),
            empty: Arc::from(""),
            counts: Counts::default(),
            debug: DebugLoader::default(),
            generation: 0,
            jit_library: Arc::from(jit::JIT),
            unknown_named: false,
            code: &GeneratedCode::NONE,
        }
    }

    /// An unwinder that knows the interpreter's generated code `code` (its JIT's names, its trampolines).
    pub fn with_generated_code(code: &'static GeneratedCode) -> Self {
        NativeUnwinder { code, ..Self::new() }
    }

    /// Bumped each time names given before may have changed (a separate debug file parsed late, a process's
    /// executable mappings or JIT code changed): names cached by the caller from before are then stale.
    pub fn generation(&mut self) -> u64 {
        self.take_debug_replies(Duration::ZERO);
        self.generation
    }

    /// Waits up to `wait` for the debug files asked for (a one-shot reader such as `dump` can afford it; the
    /// total wait stays bounded). Whether none is pending any more.
    pub fn wait_for_debug_files(&mut self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while self.debug.pending > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.debug.reply(left) {
                Some(reply) => self.apply_debug(reply),
                None => break,
            }
        }
        self.debug.pending == 0
    }

    /// Takes the worker's answers that have come (waiting at most `wait` for the first).
    fn take_debug_replies(&mut self, wait: Duration) {
        let mut wait = wait;
        while let Some(reply) = self.debug.reply(wait) {
            self.apply_debug(reply);
            wait = Duration::ZERO;
        }
    }

    /// Installs a debug file's symbols in its file.
    fn apply_debug(&mut self, reply: DebugReply) {
        self.counts.debug_files_rejected += reply.rejected;
        let Some(info) = reply.info else { return };
        let Some(entry) = self.files.get_mut(reply.file) else { return };
        self.counts.debug_files += 1;
        self.counts.cold_parts += info.cold_parts as u64;
        entry.info = Some(Arc::new(info));
        // Names given from the file's own symbols are stale; a debug file in within the wait came before any
        // (every cache kept).
        if entry.late {
            self.addr_cache.clear();
            self.names.clear();
            self.generation += 1;
        }
    }

    /// Follows process `pid`: reads its `/proc/PID/maps` and parses the files it maps (those not seen yet).
    pub fn add_process(&mut self, pid: u32) -> std::io::Result<()> {
        let read_ns = monotonic_ns();
        let maps = read_maps(pid)?;
        self.counts.maps_reads += 1;
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let mappings = self.mappings(pid, &root, &maps, &[]);
        let mut process = Process {
            root,
            mappings: Vec::new(),
            unwinder: UnwinderX86_64::new(),
            cache: Box::new(CacheX86_64::new()),
            maps_read: Reads::at(read_ns),
            generated: generated_code(&maps),
            jit: Vec::new(),
            jit_descriptor: self.jit_descriptor(&mappings),
            jit_read: Reads::default(),
            mem: None,
            trampolines: HashMap::new(),
        };
        set_mappings(&mut process, mappings);
        self.processes.insert(pid, process);
        Ok(())
    }

    /// Stops following `pid` (its files stay parsed for other processes).
    pub fn remove_process(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// The executable file mappings of `maps`, reusing those of `old` that did not change.
    fn mappings(&mut self, pid: u32, root: &Path, maps: &str, old: &[Mapping]) -> Vec<Mapping> {
        let mut out = Vec::new();
        for e in parse_maps(maps) {
            if !e.exec || e.start >= e.end {
                continue;
            }
            let key = if e.path == "[vdso]" {
                FileKey::Vdso
            } else if e.inode != 0 && e.path.starts_with('/') {
                FileKey::Inode { dev: e.dev, inode: e.inode }
            } else {
                // Anonymous (JIT) and other special mappings: no file to read.
                continue;
            };
            if let Some(m) =
                old.iter().find(|m| m.start == e.start && m.end == e.end && m.offset == e.offset && m.key == key)
            {
                out.push(m.clone());
                continue;
            }
            let file = self.file(pid, root, &e, key);
            let path: Arc<str> = e.path.strip_suffix(" (deleted)").unwrap_or(&e.path).into();
            let basename: Arc<str> = path.rsplit('/').next().unwrap_or(&path).into();
            let info = self.files[file].info.clone();
            let bias = info.as_ref().map_or(e.start.wrapping_sub(e.offset), |i| i.bias(e.start, e.offset));
            let module = info.as_ref().and_then(|i| module(i, &path, e.start..e.end, bias));
            out.push(Mapping { start: e.start, end: e.end, offset: e.offset, key, file, bias, path, basename, module });
        }
        out.sort_by_key(|m| m.start);
        // Overlapping entries cannot come from one maps file; drop any so lookups stay well defined.
        out.dedup_by(|later, first| later.start < first.end);
        out
    }

    /// The index of the file of maps entry `e` of process `pid`, parsing it if it is new.
    fn file(&mut self, pid: u32, root: &Path, e: &MapsEntry, key: FileKey) -> usize {
        if let Some(&i) = self.file_ids.get(&key) {
            return i;
        }
        let info = match key {
            FileKey::Vdso => own_vdso().map(|i| (i, None)),
            FileKey::Inode { inode, .. } => self.parse_file(pid, root, e, inode),
        };
        self.counts.files_parsed += 1;
        if info.is_none() {
            self.counts.files_unusable += 1;
        }
        let (info, data) = info.map_or((None, None), |(i, d)| (Some(i), d));
        let build_id = info.as_ref().map_or_else(|| Arc::from(""), |i| i.build_id.clone());
        // A stripped file: its separate debug file is looked for by the worker.
        let request = match (&info, data) {
            (Some(i), Some(data)) if !i.has_symtab => Some(DebugRequest {
                file: self.files.len(),
                root: root.to_owned(),
                path: e.path.strip_suffix(" (deleted)").unwrap_or(&e.path).to_string(),
                build_id: build_id.clone(),
                debuglink: i.debuglink.clone(),
                data,
            }),
            _ => None,
        };
        let i = self.files.len();
        self.files.push(FileEntry { info: info.map(Arc::new), build_id, late: false });
        self.file_ids.insert(key, i);
        if let Some(req) = request {
            if self.debug.request(req) {
                // Waited for a little (usually enough); else its frames get their names when it comes.
                let deadline = Instant::now() + DEBUG_FILE_WAIT;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let Some(reply) = self.debug.reply(left) else {
                        self.counts.debug_files_late += 1;
                        self.files[i].late = true;
                        break;
                    };
                    let done = reply.file == i;
                    self.apply_debug(reply);
                    if done {
                        break;
                    }
                }
            }
        }
        i
    }

    /// Opens and parses a mapped file: through the process's root when the file there is the one mapped (same
    /// inode), else through `map_files` (the mapping itself, even of a deleted or replaced file). The path is the
    /// target's: opened as [`elf::open_in_root`] opens it (a FIFO or a link put in its place is refused). With
    /// it, a second handle on the file, for parsing it again with a separate debug file's symbols.
    fn parse_file(&mut self, pid: u32, root: &Path, e: &MapsEntry, inode: u64) -> Option<(ElfInfo, Option<File>)> {
        let deleted = e.path.ends_with(" (deleted)");
        let path = e.path.strip_suffix(" (deleted)").unwrap_or(&e.path);
        let by_root = if deleted { None } else { elf::open_in_root(root, path, u64::MAX).ok() };
        let same = by_root.as_ref().and_then(|f| f.metadata().ok()).is_some_and(|m| m.ino() == inode);
        let file = if same {
            by_root
        } else {
            // The kernel's link to the mapping (followed: it is no path of the target's), still not blocking.
            let mapped = format!("/proc/{pid}/map_files/{:x}-{:x}", e.start, e.end);
            pyperf_report::open_regular(Path::new(&mapped)).ok().or(by_root)
        }?;
        let again = file.try_clone().ok();
        let info = ElfInfo::parse_file_with(file, &mut |_| None).ok()?;
        self.counts.cold_parts += info.cold_parts as u64;
        Some((info, again))
    }

    /// Re-reads the maps of `pid` if that may show code they did not have: for an address of a sample taken at
    /// `taken_ns`, if it was taken after they were read, at most every [`REREAD_FLOOR`] (more while re-reads find
    /// nothing new); for an address to name (`None`), at most every [`REREAD_INTERVAL`]. Whether it did.
    fn reread(&mut self, pid: u32, taken_ns: Option<u64>) -> bool {
        let Some(p) = self.processes.get(&pid) else { return false };
        if !p.maps_read.due(taken_ns) {
            return false;
        }
        let root = p.root.clone();
        let read_ns = monotonic_ns();
        let Ok(maps) = read_maps(pid) else {
            // Gone (or going): not tried again for samples taken before now.
            if let Some(p) = self.processes.get_mut(&pid) {
                p.maps_read.read(read_ns);
            }
            return false;
        };
        self.counts.maps_rereads += 1;
        let old = self.processes.get_mut(&pid).map(|p| std::mem::take(&mut p.mappings)).unwrap_or_default();
        let mappings = self.mappings(pid, &root, &maps, &old);
        let descriptor = self.jit_descriptor(&mappings);
        let Some(p) = self.processes.get_mut(&pid) else { return false };
        let generated = generated_code(&maps);
        let new_code = p.generated != generated;
        if new_code {
            // Code unmapped since may have been replaced: what was known of the old code goes (registered code
            // outside the new mappings, the trampolines found).
            p.trampolines.clear();
            let before = p.jit.len();
            p.jit.retain(|j| in_ranges(&generated, &j.range));
            if p.jit.len() != before {
                p.jit_read.forget();
            }
        }
        p.generated = generated;
        if p.jit_descriptor != descriptor {
            // Another list (an exec, a libpython loaded since): read when its code shows up, whatever the time.
            p.jit.clear();
            p.jit_descriptor = descriptor;
            p.jit_read.forget();
        }
        let same = |a: &Mapping, b: &Mapping| (a.start, a.end, a.offset, a.key) == (b.start, b.end, b.offset, b.key);
        let unchanged = mappings.len() == old.len() && mappings.iter().zip(&old).all(|(a, b)| same(a, b));
        if unchanged && !new_code {
            // Nothing new (a bad address): keep the unwinder and its warm rule cache.
            p.mappings = mappings;
        } else {
            set_mappings(p, mappings);
        }
        p.maps_read.read(read_ns);
        p.maps_read.found(new_code || !unchanged);
        if (new_code || !unchanged) && self.unknown_named {
            // An address named `[unknown]` before (in no mapping then) may be in one now: names given before are
            // stale.
            self.unknown_named = false;
            self.generation += 1;
        }
        true
    }

    /// The mapping of `addr` in `pid` (following the process if it is new, re-reading its maps once if no
    /// mapping holds the address).
    fn mapping(&mut self, pid: u32, addr: u64) -> Option<&Mapping> {
        if !self.processes.contains_key(&pid) && self.add_process(pid).is_err() {
            return None;
        }
        let found = self.processes.get(&pid).and_then(|p| p.find(addr));
        let i = match found {
            Some(i) => i,
            None => {
                if !self.reread(pid, None) {
                    return None;
                }
                self.processes.get(&pid)?.find(addr)?
            }
        };
        self.processes.get(&pid)?.mappings.get(i)
    }

    /// Unwinds the stack of a thread of `pid` from `regs` and the copy `stack` of its bytes at `[regs.sp,
    /// regs.sp + stack.len())`, taken at `taken_ns` (CLOCK_MONOTONIC). `out` gets the frames' addresses, leaf
    /// first: `regs.ip`, then the return addresses found (its previous contents are dropped). Tells why it stopped.
    pub fn unwind(&mut self, pid: u32, regs: UserRegs, stack: &[u8], taken_ns: u64, out: &mut Vec<u64>) -> UnwindEnd {
        out.clear();
        let end = self.unwind_frames(pid, regs, stack, taken_ns, out);
        self.counts.unwinds += 1;
        self.counts.frames += out.len() as u64;
        if let Some(i) = UnwindEnd::ALL.iter().position(|&e| e == end) {
            self.counts.ends[i] += 1;
        }
        end
    }

    fn unwind_frames(
        &mut self,
        pid: u32,
        regs: UserRegs,
        stack: &[u8],
        taken_ns: u64,
        out: &mut Vec<u64>,
    ) -> UnwindEnd {
        let sp = regs.sp;
        let stack_end = sp.saturating_add(stack.len() as u64);
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().map_err(|_| ())?))
        };
        if !self.processes.contains_key(&pid) && self.add_process(pid).is_err() {
            return UnwindEnd::BadAddress;
        }
        let mut fregs = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut address = FrameAddress::from_instruction_pointer(regs.ip);
        out.push(regs.ip);
        loop {
            let Some(p) = self.processes.get_mut(&pid) else { return UnwindEnd::BadAddress };
            let lookup = address.address_for_lookup();
            match p.find(lookup) {
                Some(i) if p.mappings[i].module.is_none() => return UnwindEnd::NoUnwindInfo,
                Some(_) => {}
                None => match self.generated(pid, address, taken_ns) {
                    Generated::Registered => self.counts.jit_frames += 1,
                    Generated::Unregistered => {
                        self.counts.jit_stops += 1;
                        return UnwindEnd::NoUnwindInfo;
                    }
                    Generated::Trampoline(shape) => {
                        // A perf trampoline's return site: its frame is known (see `trampolines`).
                        self.counts.trampolines += 1;
                        if out.len() >= MAX_FRAMES {
                            return UnwindEnd::TooDeep;
                        }
                        let sp = fregs.sp();
                        let bp = if shape.saves_bp { read_stack(sp) } else { Ok(fregs.bp()) };
                        let (Ok(ra), Ok(bp)) = (read_stack(sp.wrapping_add(8)), bp) else {
                            return UnwindEnd::StackCopyEnd;
                        };
                        fregs.set_sp(sp.wrapping_add(shape.frame_size));
                        fregs.set_bp(bp);
                        match FrameAddress::from_return_address(ra) {
                            Some(next) => {
                                out.push(ra);
                                address = next;
                                continue;
                            }
                            None => return UnwindEnd::Complete,
                        }
                    }
                    // Maybe a library loaded since: look again with new maps (once; re-reading is rate limited).
                    Generated::No if self.reread(pid, Some(taken_ns)) => continue,
                    Generated::No => return UnwindEnd::BadAddress,
                },
            }
            let Some(p) = self.processes.get_mut(&pid) else { return UnwindEnd::BadAddress };
            if out.len() >= MAX_FRAMES {
                return UnwindEnd::TooDeep;
            }
            match p.unwinder.unwind_frame(address, &mut fregs, &mut p.cache, &mut read_stack) {
                Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                    Some(next) => {
                        out.push(ra);
                        address = next;
                    }
                    None => return UnwindEnd::Complete,
                },
                Ok(None) => return UnwindEnd::Complete,
                Err(framehop::Error::CouldNotReadStack(at)) if at >= sp && at.saturating_add(8) > stack_end => {
                    return UnwindEnd::StackCopyEnd
                }
                Err(_) => return UnwindEnd::BadAddress,
            }
        }
    }

    /// The name of the frame at `addr` in `pid`; `is_return`: `addr` is a return address (the call is at
    /// `addr - 1`, which may be in another function when the call was a function's last instruction).
    pub fn symbol(&mut self, pid: u32, addr: u64, is_return: bool) -> NativeSymbol {
        let lookup = if is_return { addr.saturating_sub(1) } else { addr };
        if let Some(p) = self.processes.get(&pid).filter(|p| p.find(lookup).is_none()) {
            // Generated code: a perf trampoline's, the name it was registered under, else [jit] (no file, no
            // symbols; CPython registers its code as [jit] too: one symbol whether the list was read yet or not).
            let registered = p.find_jit(lookup).map(|j| j.name.to_string());
            if registered.is_some() || p.in_generated(lookup) {
                let trampoline = is_return && self.trampoline(pid, addr).is_some();
                let name = if trampoline {
                    self.code.trampoline_name.to_string()
                } else {
                    registered.unwrap_or_else(|| jit::JIT.to_string())
                };
                return NativeSymbol {
                    resolved: name != jit::JIT,
                    trampoline,
                    name,
                    library: self.jit_library.clone(),
                    build_id: self.empty.clone(),
                };
            }
        }
        let Some(m) = self.mapping(pid, lookup) else {
            // Maybe in a mapping made since: names are given again once the maps show new code.
            self.unknown_named = true;
            return NativeSymbol {
                name: UNKNOWN.to_string(),
                library: self.empty.clone(),
                build_id: self.empty.clone(),
                resolved: false,
                trampoline: false,
            };
        };
        let (file, bias, library, basename) = (m.file, m.bias, m.path.clone(), m.basename.clone());
        let Some(entry) = self.files.get(file) else {
            return NativeSymbol {
                name: UNKNOWN.to_string(),
                library,
                build_id: self.empty.clone(),
                resolved: false,
                trampoline: false,
            };
        };
        let build_id = entry.build_id.clone();
        let svma = lookup.wrapping_sub(bias);
        let Some(info) = entry.info.clone() else {
            // Unreadable file: the offset in the file stands in (file address = file offset is as good a guess
            // as any, and is stable).
            let name = format!("{basename}+0x{svma:x}");
            return NativeSymbol { name, library, build_id, resolved: false, trampoline: false };
        };
        let index = match self.addr_cache.get(&(file, svma)) {
            Some(&found) => {
                self.counts.cache_hits += 1;
                found
            }
            None => {
                self.counts.cache_misses += 1;
                if self.addr_cache.len() >= ADDR_CACHE_MAX {
                    self.addr_cache.clear();
                }
                let found = info.symbols.lookup(svma);
                self.addr_cache.insert((file, svma), found);
                found
            }
        };
        match index {
            Some(i) => {
                let name = self
                    .names
                    .entry((file, i))
                    .or_insert_with(|| Arc::from(elf::demangle(info.symbols.name(i))))
                    .to_string();
                NativeSymbol { name, library, build_id, resolved: true, trampoline: false }
            }
            None => {
                // Within code the call frame information knows (a static function of a stripped file), the
                // range's start names it: its samples stay one frame.
                let at = info.unnamed_start(svma).unwrap_or(svma);
                let name = format!("{basename}+0x{:x}", at.wrapping_sub(info.base_vaddr));
                NativeSymbol { name, library, build_id, resolved: false, trampoline: false }
            }
        }
    }

    /// The run-time address of the JIT descriptor of the files of `mappings` (the first that defines one).
    fn jit_descriptor(&self, mappings: &[Mapping]) -> Option<u64> {
        mappings.iter().find_map(|m| {
            let info = self.files.get(m.file)?.info.as_ref()?;
            info.jit_descriptor.map(|svma| svma.wrapping_add(m.bias))
        })
    }

    /// What the frame at `address` of `pid`, in no file mapping, is: registered generated code, a perf trampoline's
    /// return site, generated code without unwind rules, or none of these. Code not in the JIT list yet has the
    /// list read again, if the sample (taken at `taken_ns`) came after the last read (see [`REREAD_FLOOR`]).
    fn generated(&mut self, pid: u32, address: FrameAddress, taken_ns: u64) -> Generated {
        let addr = address.address_for_lookup();
        let Some(p) = self.processes.get(&pid) else { return Generated::No };
        if p.find_jit(addr).is_some() {
            return Generated::Registered;
        }
        if !p.in_generated(addr) {
            return Generated::No;
        }
        if let FrameAddress::ReturnAddress(ra) = address {
            if let Some(shape) = self.trampoline(pid, ra.get()) {
                return Generated::Trampoline(shape);
            }
        }
        if self.reread_jit(pid, taken_ns) && self.processes.get(&pid).is_some_and(|p| p.find_jit(addr).is_some()) {
            Generated::Registered
        } else {
            Generated::Unregistered
        }
    }

    /// The shape of the perf trampoline whose return site is `ra` (an address in generated code of `pid`), checked
    /// against the code there once per address.
    fn trampoline(&mut self, pid: u32, ra: u64) -> Option<&'static TrampolineShape> {
        let p = self.processes.get_mut(&pid)?;
        let index = match p.trampolines.get(&ra) {
            Some(&known) => known,
            None => {
                if p.mem.is_none() {
                    p.mem = ProcMem::open(pid, ra).ok();
                }
                let mut code = [0u8; jit::BEFORE + jit::AFTER];
                let start = ra.checked_sub(jit::BEFORE as u64)?;
                let read = p.mem.as_ref().is_some_and(|m| m.read(start, &mut code));
                let found = read.then(|| self.code.shape_at(&code)).flatten().and_then(|i| u8::try_from(i).ok());
                if p.trampolines.len() >= TRAMPOLINES_MAX {
                    p.trampolines.clear();
                }
                p.trampolines.insert(ra, found);
                found
            }
        };
        self.code.trampolines.get(usize::from(index?))
    }

    /// Reads the JIT list of `pid` again for a sample taken at `taken_ns` (not if the process has none, or it was
    /// read after the sample, or less than [`REREAD_FLOOR`] ago), installing the code's unwind rules. Whether it
    /// read it.
    fn reread_jit(&mut self, pid: u32, taken_ns: u64) -> bool {
        let Some(p) = self.processes.get_mut(&pid) else { return false };
        let Some(descriptor) = p.jit_descriptor else { return false };
        if !p.jit_read.due(Some(taken_ns)) {
            return false;
        }
        p.jit_read.read(monotonic_ns());
        self.counts.jit_reads += 1;
        if p.mem.is_none() {
            p.mem = ProcMem::open(pid, descriptor).ok();
        }
        let Some(mem) = p.mem.as_ref() else { return false };
        // An unreadable list: no registered code (what was known of it goes).
        let list = jit::read_registered(mem, descriptor, &p.generated, self.code).unwrap_or_default();
        self.counts.jit_refused += list.refused;
        let same = list.code.len() == p.jit.len()
            && list.code.iter().zip(&p.jit).all(|(a, b)| (&a.range, a.object) == (&b.range, b.object));
        p.jit_read.found(!same);
        if !same {
            p.jit = list
                .code
                .into_iter()
                .filter_map(|c| {
                    let module = jit_module(&c)?;
                    Some(JitEntry { range: c.range, object: c.object, name: Arc::from(c.name), module })
                })
                .collect();
            let mappings = std::mem::take(&mut p.mappings);
            set_mappings(p, mappings);
        }
        true
    }

    /// Counters for the recording's trailer: unwinds and how they ended, frames, maps reads, files parsed, symbol
    /// cache use.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let c = &self.counts;
        let mut v = vec![("native_unwinds".to_string(), c.unwinds)];
        for (end, n) in UnwindEnd::ALL.iter().zip(c.ends) {
            v.push((format!("native_unwind_{}", end.as_str()), n));
        }
        v.extend([
            ("native_unwind_frames".to_string(), c.frames),
            ("native_maps_reads".to_string(), c.maps_reads),
            ("native_maps_rereads".to_string(), c.maps_rereads),
            ("native_files_parsed".to_string(), c.files_parsed),
            ("native_files_unusable".to_string(), c.files_unusable),
            ("native_debug_files".to_string(), c.debug_files),
            ("native_debug_files_late".to_string(), c.debug_files_late),
            ("native_debug_files_refused".to_string(), c.debug_files_rejected),
            ("native_cold_parts_named".to_string(), c.cold_parts),
            ("native_symbol_cache_hits".to_string(), c.cache_hits),
            ("native_symbol_cache_misses".to_string(), c.cache_misses),
            ("native_jit_frames".to_string(), c.jit_frames),
            ("native_jit_stops".to_string(), c.jit_stops),
            ("native_jit_list_reads".to_string(), c.jit_reads),
            ("native_jit_list_refused".to_string(), c.jit_refused),
            ("native_perf_trampolines".to_string(), c.trampolines),
        ]);
        v
    }
}

/// Installs `mappings` in `p`, with a new framehop unwinder holding their modules and those of its registered
/// generated code (the old rule cache entries are invalidated by the unwinder's new generation).
fn set_mappings(p: &mut Process, mappings: Vec<Mapping>) {
    let mut unwinder = UnwinderX86_64::new();
    for m in &mappings {
        if let Some(module) = &m.module {
            unwinder.add_module(module.clone());
        }
    }
    for j in &p.jit {
        unwinder.add_module(j.module.clone());
    }
    p.unwinder = unwinder;
    p.mappings = mappings;
}

/// The framehop module of registered code: its object's call frame information at the code's own addresses (the
/// object has no program headers; its `.text` start is the base both framehop's addresses are relative to).
fn jit_module(code: &jit::JitCode) -> Option<Module<Bytes>> {
    let eh = code.info.unwind.eh_frame.as_ref()?;
    let base = code.range.start;
    let section_info = ExplicitModuleSectionInfo {
        base_svma: base,
        text_svma: Some(code.range.clone()),
        eh_frame_svma: Some(eh.svma.clone()),
        eh_frame: Some(eh.data.clone()),
        ..Default::default()
    };
    Some(Module::new(code.name.clone(), code.range.clone(), base, section_info))
}

/// Whether `r` lies in one of the sorted ranges `ranges`.
fn in_ranges(ranges: &[std::ops::Range<u64>], r: &std::ops::Range<u64>) -> bool {
    let i = ranges.partition_point(|m| m.start <= r.start);
    i.checked_sub(1).and_then(|i| ranges.get(i)).is_some_and(|m| r.end <= m.end)
}

/// The anonymous executable mappings of a maps file (see [`jit::is_generated_code`]), sorted.
fn generated_code(maps: &str) -> Vec<std::ops::Range<u64>> {
    let mut v: Vec<_> = parse_maps(maps).into_iter().filter(jit::is_generated_code).map(|e| e.start..e.end).collect();
    v.sort_by_key(|r| r.start);
    v
}

/// The framehop module of a mapping of `info` at `avma` with load bias `bias`; `None` without call frame
/// information.
fn module(info: &ElfInfo, name: &str, avma: std::ops::Range<u64>, bias: u64) -> Option<Module<Bytes>> {
    let u = &info.unwind;
    if u.is_empty() {
        return None;
    }
    let base_svma = info.base_vaddr;
    let svma = |s: &Option<elf::SectionData>| s.as_ref().map(|s| s.svma.clone());
    let data = |s: &Option<elf::SectionData>| s.as_ref().map(|s| s.data.clone());
    // An index that does not describe this .eh_frame is left out (framehop then searches .eh_frame itself):
    // gimli subtracts its pointers unchecked, which a damaged file would make overflow.
    let hdr = match (&u.eh_frame_hdr, &u.eh_frame) {
        (Some(hdr), Some(eh)) if eh_frame_hdr_is_sound(hdr, eh) => u.eh_frame_hdr.clone(),
        _ => None,
    };
    let section_info = ExplicitModuleSectionInfo {
        base_svma,
        text_svma: u.text_svma.clone(),
        got_svma: u.got_svma.clone(),
        eh_frame_svma: svma(&u.eh_frame),
        eh_frame: data(&u.eh_frame),
        eh_frame_hdr_svma: svma(&hdr),
        eh_frame_hdr: data(&hdr),
        // Used only without .eh_frame (framehop prefers .eh_frame).
        debug_frame: data(&u.debug_frame),
        ..Default::default()
    };
    Some(Module::new(name.to_string(), avma, base_svma.wrapping_add(bias), section_info))
}

/// Whether `.eh_frame_hdr` is the index of `.eh_frame` as linkers write it (version 1, `eh_frame_ptr` pc-relative
/// sdata4, the count udata4, the table datarel sdata4): it points at `eh` and every entry's FDE lies inside `eh`.
fn eh_frame_hdr_is_sound(hdr: &elf::SectionData, eh: &elf::SectionData) -> bool {
    let d = &hdr.data;
    let i32_at = |at: usize| d.get(at..at + 4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if d.len() < 12 || d[0] != 1 || d[1] != 0x1b || d[2] != 0x03 || d[3] != 0x3b {
        return false;
    }
    let base = hdr.svma.start;
    let Some(ptr) = i32_at(4).map(|o| (base + 4).wrapping_add_signed(i64::from(o))) else { return false };
    if ptr != eh.svma.start {
        return false;
    }
    let Some(count) = i32_at(8).map(|c| c as u32 as usize) else { return false };
    let Some(table_end) = count.checked_mul(8).and_then(|n| n.checked_add(12)) else { return false };
    if table_end > d.len() {
        return false;
    }
    let eh_end = eh.svma.start.saturating_add(eh.data.len() as u64);
    (0..count).all(|i| {
        let fde = i32_at(12 + i * 8 + 4).map(|o| base.wrapping_add_signed(i64::from(o)));
        fde.is_some_and(|f| f >= eh.svma.start && f < eh_end)
    })
}

/// The separate debug file of a stripped file (`path` as mapped, with its build id and `.gnu_debuglink`): the
/// first candidate (see [`elf::debug_file_candidates`]) with symbols and the same build id, in the process's
/// `root`, then in this system's. Candidates that are not regular files (or too large) are refused, and counted in
/// `rejected`.
fn find_debug_file(
    root: &Path,
    path: &str,
    build_id: &str,
    debuglink: Option<&str>,
    rejected: &mut u64,
) -> Option<ElfInfo> {
    for r in [root, Path::new("/")] {
        for candidate in elf::debug_file_candidates(path, build_id, debuglink) {
            let file = match elf::open_in_root(r, &candidate, elf::MAX_DEBUG_FILE) {
                Ok(f) => f,
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::InvalidInput || e.raw_os_error() == Some(libc::ELOOP) {
                        *rejected += 1;
                    }
                    continue;
                }
            };
            let Ok(debug) = ElfInfo::parse_file_with(file, &mut |_| None) else { continue };
            let matches = build_id.is_empty() || *debug.build_id == *build_id;
            if matches && !debug.symbols.is_empty() {
                return Some(debug);
            }
        }
    }
    None
}

/// When something of a process (its maps, its JIT list) was read, and when it is worth reading again: see
/// [`REREAD_FLOOR`].
#[derive(Debug, Clone, Copy)]
struct Reads {
    /// When it was last read (CLOCK_MONOTONIC ns, taken before reading it); `None`: never, or forgotten.
    at_ns: Option<u64>,
    /// The least time between two reads for samples: REREAD_FLOOR, doubled by each read that found nothing new.
    wait: Duration,
}

impl Default for Reads {
    fn default() -> Reads {
        Reads { at_ns: None, wait: REREAD_FLOOR }
    }
}

impl Reads {
    fn at(read_ns: u64) -> Reads {
        Reads { at_ns: Some(read_ns), ..Reads::default() }
    }

    /// Whether to read again for an address of a sample taken at `taken_ns` (`None`: an address to name).
    fn due(&self, taken_ns: Option<u64>) -> bool {
        let Some(read_ns) = self.at_ns else { return true };
        let since = Duration::from_nanos(monotonic_ns().saturating_sub(read_ns));
        match taken_ns {
            Some(taken) => taken > read_ns && since >= self.wait,
            None => since >= REREAD_INTERVAL,
        }
    }

    /// Read it at the next sample that asks, whatever the time (what was read of it is gone).
    fn forget(&mut self) {
        self.at_ns = None;
    }

    /// It is read from `read_ns` on (also when the read then fails: not tried again for samples before it).
    fn read(&mut self, read_ns: u64) {
        self.at_ns = Some(read_ns);
    }

    /// What the read found: something it did not have (`new`: the next read may come soon), or nothing (the next
    /// waits twice as long as this one did).
    fn found(&mut self, new: bool) {
        self.wait = if new { REREAD_FLOOR } else { (self.wait * 2).min(REREAD_INTERVAL) };
    }
}

/// The recorder's own vDSO, parsed: the kernel maps the same image into every process.
fn own_vdso() -> Option<ElfInfo> {
    // SAFETY: getauxval only reads this process's auxiliary vector.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base == 0 {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let e = parse_maps(&maps).into_iter().find(|e| e.start == base && e.path == "[vdso]")?;
    let len = usize::try_from(e.end - e.start).ok()?;
    // SAFETY: /proc/self/maps says [start, end) is the vDSO mapping, which the kernel maps readable for the life
    // of the process and nothing writes or unmaps; the bytes are only read, and copied before parsing.
    let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, len) }.to_vec();
    ElfInfo::parse_bytes(&bytes).ok()
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use std::hint::black_box;
    use std::process::Command;
    use std::sync::Mutex;

    /// Registers and a copy of the stack, as the BPF program takes them at a sample.
    struct Capture {
        regs: UserRegs,
        stack: Vec<u8>,
    }

    /// The end of this process's mapping holding `addr` (a thread's stack).
    fn mapping_end(addr: u64) -> u64 {
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        parse_maps(&maps).iter().find(|e| e.start <= addr && addr < e.end).map(|e| e.end).expect("stack mapping")
    }

    /// Captures this thread's registers and a copy of up to `len` bytes of its stack (all of it when `len` is
    /// `usize::MAX`).
    #[inline(never)]
    fn capture_here(len: usize) -> Capture {
        let (ip, sp, bp): (u64, u64, u64);
        // SAFETY: only reads three registers into outputs.
        unsafe {
            core::arch::asm!(
                "lea {ip}, [rip]",
                "mov {sp}, rsp",
                "mov {bp}, rbp",
                ip = out(reg) ip,
                sp = out(reg) sp,
                bp = out(reg) bp,
                options(nomem, nostack, preserves_flags),
            );
        }
        let n = len.min(usize::try_from(mapping_end(sp) - sp).expect("size"));
        let mut stack = vec![0u8; n];
        // SAFETY: [sp, sp + n) lies in this thread's stack mapping (from /proc/self/maps), which is readable; the
        // frames there are this function's and its suspended callers', and their bytes are only copied.
        unsafe { std::ptr::copy_nonoverlapping(sp as *const u8, stack.as_mut_ptr(), n) };
        Capture { regs: UserRegs { ip, sp, bp }, stack }
    }

    #[inline(never)]
    fn pyperf_test_inner(len: usize) -> Capture {
        black_box(capture_here(black_box(len)))
    }

    #[inline(never)]
    fn pyperf_test_middle(len: usize) -> Capture {
        black_box(pyperf_test_inner(black_box(len)))
    }

    #[inline(never)]
    fn pyperf_test_outer(len: usize) -> Capture {
        black_box(pyperf_test_middle(black_box(len)))
    }

    #[inline(never)]
    fn pyperf_test_recurse(depth: usize, len: usize) -> Capture {
        if depth == 0 {
            return black_box(pyperf_test_outer(len));
        }
        black_box(pyperf_test_recurse(black_box(depth - 1), len))
    }

    fn names(u: &mut NativeUnwinder, pid: u32, frames: &[u64]) -> Vec<String> {
        frames.iter().enumerate().map(|(i, &a)| u.symbol(pid, a, i > 0).name).collect()
    }

    const PREFIX: &str = "pyperf::native::unwind::tests::";

    /// Code mapped after the maps were read (a JIT's): a sample taken in it after that read re-reads them soon
    /// (REREAD_FLOOR), however long the first read's parsing took; one taken before the read does not re-read.
    /// (The re-read was refused for REREAD_INTERVAL from the end of the parsing: samples in JIT code compiled
    /// while the recorder waited for debug files were cut, `[native: truncated]` `[unknown]`, 12% of them in
    /// tests/jit.rs on a busy machine.)
    #[test]
    fn code_mapped_after_the_read_is_found_by_a_later_sample() {
        struct Page(*mut libc::c_void);
        impl Drop for Page {
            fn drop(&mut self) {
                // SAFETY: the mapping made below, no longer used.
                unsafe { libc::munmap(self.0, 4096) };
            }
        }
        let pid = std::process::id();
        let mut u = NativeUnwinder::new();
        u.add_process(pid).expect("own maps");
        let read_ns = u.processes[&pid].maps_read.at_ns.expect("read");
        // SAFETY: a new anonymous mapping, nobody else's memory; unmapped by the guard.
        let page = Page(unsafe {
            let prot = libc::PROT_READ | libc::PROT_EXEC;
            libc::mmap(std::ptr::null_mut(), 4096, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        });
        assert_ne!(page.0, libc::MAP_FAILED);
        let ip = page.0 as u64 + 16;
        let c = pyperf_test_outer(4096);
        let regs = UserRegs { ip, ..c.regs };
        let mut frames = Vec::new();
        let rereads = |u: &NativeUnwinder| u.counts.maps_rereads;
        // Taken before the maps were read (the floor past): nothing new to find (its code was gone by the read).
        std::thread::sleep(REREAD_FLOOR);
        assert_eq!(u.unwind(pid, regs, &c.stack, read_ns - 1, &mut frames), UnwindEnd::BadAddress);
        assert_eq!(rereads(&u), 0);
        // Taken after: read again, found as generated code without unwind rules (this process registers none):
        // the unwinding stops there, marked.
        let taken = monotonic_ns();
        assert_eq!(u.unwind(pid, regs, &c.stack, taken, &mut frames), UnwindEnd::NoUnwindInfo);
        assert_eq!((rereads(&u), u.counts.jit_stops), (1, 1));
        // Another sample taken before that re-read (the floor past): no more reads.
        std::thread::sleep(REREAD_FLOOR);
        assert_eq!(u.unwind(pid, UserRegs { ip: 8, ..c.regs }, &c.stack, taken, &mut frames), UnwindEnd::BadAddress);
        assert_eq!(rereads(&u), 1);
    }

    /// When a read is due again: for a sample, only if taken after the read and `wait` after it; to name an
    /// address, REREAD_INTERVAL after it.
    #[test]
    fn rereads_are_due_for_later_samples_past_the_wait() {
        let ms = |n: u64| n * 1_000_000;
        let due = |read, wait, taken| Reads { at_ns: Some(read), wait }.due(taken);
        let now = monotonic_ns();
        let read = now - ms(150);
        assert!(!due(read, REREAD_FLOOR, Some(read - 1)), "a sample taken before the read");
        assert!(due(read, REREAD_FLOOR, Some(read + 1)), "a later sample, the wait past");
        assert!(due(read, REREAD_FLOOR, None), "a name, REREAD_INTERVAL past");
        let longer = Duration::from_secs(60);
        assert!(!due(read, longer, Some(read + 1)), "a later sample within a longer wait (nothing new found)");
        // A read a minute ahead of the clock: never past its wait, however slow this test runs.
        let ahead = now + ms(60_000);
        assert!(!due(ahead, REREAD_FLOOR, Some(ahead + 1)), "a later sample within the wait");
        assert!(!due(ahead, REREAD_FLOOR, None), "a name within REREAD_INTERVAL");
        // Never read: due. Reads that find nothing new double the wait, up to REREAD_INTERVAL; new code resets it.
        assert!(Reads::default().due(Some(0)));
        let mut r = Reads::at(read);
        r.found(false);
        assert_eq!(r.wait, 2 * REREAD_FLOOR);
        (0..10).for_each(|_| r.found(false));
        assert_eq!(r.wait, REREAD_INTERVAL);
        r.found(true);
        assert_eq!(r.wait, REREAD_FLOOR);
    }

    #[test]
    fn own_stack_unwinds_in_order_with_rust_names() {
        let pid = std::process::id();
        let mut u = NativeUnwinder::new();
        u.add_process(pid).expect("own maps");
        let mut frames = Vec::new();
        for len in [16384, usize::MAX] {
            let c = pyperf_test_outer(len);
            let end = u.unwind(pid, c.regs, &c.stack, monotonic_ns(), &mut frames);
            let names = names(&mut u, pid, &frames);
            let expected: Vec<String> =
                ["capture_here", "pyperf_test_inner", "pyperf_test_middle", "pyperf_test_outer"]
                    .iter()
                    .map(|n| format!("{PREFIX}{n}"))
                    .collect();
            assert_eq!(names[..4], expected[..], "{end:?} {names:#?}");
            assert!(names[4].starts_with(PREFIX), "{names:#?}");
            if len == usize::MAX {
                // The whole stack: down to the thread's start (the call frame information of clone3, or of _start
                // on the main thread, ends it).
                assert_eq!(end, UnwindEnd::Complete, "{names:#?}");
                assert!(names.iter().any(|n| n.contains("start_thread") || n == "_start"), "{names:#?}");
            } else {
                assert!(matches!(end, UnwindEnd::Complete | UnwindEnd::StackCopyEnd), "{end:?} {names:#?}");
            }
            let s = u.symbol(pid, frames[1], true);
            assert!(s.resolved && s.library.contains("pyperf") && !s.build_id.is_empty(), "{s:?}");
        }
        // The vDSO (no file: the recorder's own image stands in) has call frame information and symbols.
        let vdso = u.processes[&pid].mappings.iter().find(|m| m.key == FileKey::Vdso).expect("vdso").clone();
        assert!(vdso.module.is_some());
        let info = u.files[vdso.file].info.clone().expect("vdso parsed");
        let i = (0..info.symbols.len() as u32).find(|&i| info.symbols.name(i).contains("clock_gettime")).expect("sym");
        let s = u.symbol(pid, info.symbols.start(i).wrapping_add(vdso.bias) + 1, false);
        assert!(s.resolved && s.name.contains("clock_gettime") && &*s.library == "[vdso]", "{s:?}");
        // A copy cut inside the second frame ends there, as a copy end.
        let c = pyperf_test_outer(16384);
        let end = u.unwind(pid, c.regs, &c.stack[..24], monotonic_ns(), &mut frames);
        assert_eq!(end, UnwindEnd::StackCopyEnd, "{frames:x?}");
        // An ip in no mapping.
        assert_eq!(
            u.unwind(pid, UserRegs { ip: 8, ..c.regs }, &c.stack, monotonic_ns(), &mut frames),
            UnwindEnd::BadAddress
        );
        assert_eq!(frames, [8]);
        assert_eq!(u.symbol(pid, 8, false).name, UNKNOWN);
        let counters: HashMap<String, u64> = u.counters().into_iter().collect();
        assert_eq!(counters["native_unwinds"], 4);
        assert_eq!(counters["native_unwind_bad_address"], 1);
        assert!(counters["native_symbol_cache_hits"] > 0, "{counters:?}");
    }

    #[test]
    fn the_unwinder_can_move_to_another_thread() {
        fn send<T: Send>() {}
        send::<NativeUnwinder>();
        send::<super::super::kernel::KernelSymbols>();
    }

    /// Registered JIT code is unwound by its own rule, not by framehop's frame-pointer fallback: the object CPython
    /// 3.15 registered (testdata/jit), its CIE patched from CFA = rbp + 16 to CFA = rsp + 16, must give the return
    /// address at [sp + 8], not the one at [bp + 8].
    #[test]
    fn registered_code_is_unwound_by_its_own_rule() {
        let mut object = include_bytes!("../../testdata/jit/cpython-3.15-executor-2.o").to_vec();
        let cie = object.windows(3).position(|w| w == [0x0c, 0x06, 0x10]).expect("DW_CFA_def_cfa rbp 16 in the CIE");
        let info = ElfInfo::parse_bytes(&object).expect("parses");
        let range = info.unwind.text_svma.clone().expect(".text");
        let code = |info| jit::JitCode { range: range.clone(), object: (0, 0), name: jit::JIT.into(), info };
        let unwind_at = |info: ElfInfo| {
            let module = jit_module(&code(info)).expect("a module");
            let mut unwinder: UnwinderX86_64<Bytes> = UnwinderX86_64::new();
            unwinder.add_module(module);
            let (sp, bp) = (0x1000u64, 0x2000u64);
            // [sp] = a saved rbp, [sp + 8] = the return address by the stack; [bp + 8] the one by frame pointers.
            let read = |addr: u64| match addr {
                a if a == sp => Ok(0x3000),
                a if a == sp + 8 => Ok(0x5555_0000),
                a if a == bp => Ok(0x4000),
                a if a == bp + 8 => Ok(0x6666_0000),
                _ => Err(()),
            };
            let mut regs = UnwindRegsX86_64::new(range.start + 0x10, sp, bp);
            let mut cache = CacheX86_64::new();
            let addr = FrameAddress::from_instruction_pointer(range.start + 0x10);
            unwinder.unwind_frame(addr, &mut regs, &mut cache, &mut { read }).expect("unwinds")
        };
        // As registered (rbp-based): the frame pointer's answer, by the rule.
        assert_eq!(unwind_at(info), Some(0x6666_0000));
        object[cie + 1] = 0x07; // rsp
        let patched = ElfInfo::parse_bytes(&object).expect("parses");
        assert_eq!(unwind_at(patched), Some(0x5555_0000), "the object's rule, not the frame-pointer fallback");
    }

    #[test]
    fn too_deep_stops_at_the_cap() {
        let pid = std::process::id();
        let mut u = NativeUnwinder::new();
        u.add_process(pid).expect("own maps");
        let handle = std::thread::Builder::new()
            .stack_size(16 << 20)
            .spawn(|| pyperf_test_recurse(MAX_FRAMES + 10, usize::MAX))
            .expect("thread");
        let c = handle.join().expect("joined");
        let mut frames = Vec::new();
        assert_eq!(u.unwind(pid, c.regs, &c.stack, monotonic_ns(), &mut frames), UnwindEnd::TooDeep);
        assert_eq!(frames.len(), MAX_FRAMES);
    }

    /// Median cost of an unwind of ~30 frames, and of a symbol lookup.
    #[test]
    fn unwind_cost() {
        let pid = std::process::id();
        let mut u = NativeUnwinder::new();
        u.add_process(pid).expect("own maps");
        let c = pyperf_test_recurse(24, 65536);
        let mut frames = Vec::new();
        let end = u.unwind(pid, c.regs, &c.stack, monotonic_ns(), &mut frames);
        let n = frames.len();
        let t = Instant::now();
        let names = names(&mut u, pid, &frames);
        let first = t.elapsed().as_nanos() / n as u128;
        assert!(n >= 30, "{end:?} {names:#?}");
        assert_eq!(names.iter().filter(|n| n.ends_with("pyperf_test_recurse")).count(), 25, "{names:#?}");
        let mut times = Vec::new();
        for _ in 0..2000 {
            let t = Instant::now();
            black_box(u.unwind(pid, c.regs, &c.stack, monotonic_ns(), &mut frames));
            times.push(t.elapsed().as_nanos());
        }
        times.sort_unstable();
        let unwind = times[times.len() / 2];
        let t = Instant::now();
        let rounds = 200;
        for _ in 0..rounds {
            for (i, &a) in frames.iter().enumerate() {
                black_box(u.symbol(pid, a, i > 0));
            }
        }
        let symbol = t.elapsed().as_nanos() / (rounds * frames.len()) as u128;
        eprintln!(
            "unwind of {n} frames ({end:?}): median {unwind} ns; symbol lookup: {first} ns first, {symbol} ns cached"
        );
        // Generous bounds: a debug build or a loaded machine is slower; this catches an unwinder gone quadratic.
        assert!(unwind < 200_000, "median unwind {unwind} ns");
    }

    /// A small C library built with gcc -O2 -fomit-frame-pointer: frames need call frame information. Returns
    /// (directory, unstripped path, stripped path).
    fn c_library() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
        const SRC: &str = r#"
            typedef void (*cb_t)(void);
            static volatile int pyperf_sink;
            __attribute__((noinline)) static void pyperf_c_hidden(cb_t cb) {
                volatile char buf[72];
                buf[0] = 1;
                cb();
                pyperf_sink += buf[0];
            }
            __attribute__((noinline)) void pyperf_c_inner(cb_t cb) {
                void (*volatile f)(cb_t) = pyperf_c_hidden;
                volatile char buf[40];
                buf[0] = 2;
                f(cb);
                pyperf_sink += buf[0];
            }
            __attribute__((cold, noinline)) void pyperf_c_cold_path(int x) { pyperf_sink += x; }
            __attribute__((noinline)) int pyperf_c_split(int x) {
                volatile char buf[48];
                buf[0] = x;
                if (__builtin_expect(x == 12345, 0)) {
                    pyperf_c_cold_path(x);
                    buf[1] = 3;
                    pyperf_sink += buf[1] * 7;
                }
                return buf[0];
            }
            __attribute__((noinline)) void pyperf_c_outer(cb_t cb) {
                void (*volatile f)(cb_t) = pyperf_c_inner;
                f(cb);
                pyperf_sink++;
            }
        "#;
        let dir = tempfile::tempdir().ok()?;
        let src = dir.path().join("t.c");
        std::fs::write(&src, SRC).ok()?;
        let lib = dir.path().join("libpyperf_t.so");
        let ok = Command::new("gcc")
            .args(["-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-Wl,--build-id", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .ok()?
            .success();
        if !ok {
            return None;
        }
        let stripped = dir.path().join("libpyperf_s.so");
        let ok = Command::new("strip").arg("--strip-all").arg("-o").arg(&stripped).arg(&lib).status().ok()?.success();
        ok.then_some((dir, lib, stripped))
    }

    static CAPTURED: Mutex<Option<Capture>> = Mutex::new(None);

    #[inline(never)]
    extern "C" fn pyperf_test_callback() {
        let c = capture_here(65536);
        *CAPTURED.lock().unwrap_or_else(|e| e.into_inner()) = Some(c);
    }

    /// The file address of function `name` in `info`'s symbols.
    fn address_of(info: &ElfInfo, name: &str) -> Option<u64> {
        (0..info.symbols.len() as u32).find(|&i| info.symbols.name(i) == name).map(|i| info.symbols.start(i))
    }

    /// What a test needs is missing: skipped on a developer's machine, a failure in CI (`CI` set), where
    /// scripts/setup installs it.
    fn absent(what: &str) {
        assert!(std::env::var_os("CI").is_none(), "this test needs {what}, which is missing");
        eprintln!("no {what}: skipped");
    }

    #[test]
    fn unwinds_and_names_through_a_stripped_dlopened_c_library() {
        let Some((dir, lib, stripped)) = c_library() else {
            absent("gcc, strip and objcopy");
            return;
        };
        let pid = std::process::id();
        let mut u = NativeUnwinder::new();
        // Before the dlopen: the library's frames make it re-read the maps.
        u.add_process(pid).expect("own maps");
        let cpath = std::ffi::CString::new(stripped.to_str().expect("utf-8")).expect("path");
        // SAFETY: dlopen of a library this test built; it has no constructors.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen failed");
        // SAFETY: the handle is valid and the name a C string.
        let outer = unsafe { libc::dlsym(handle, c"pyperf_c_outer".as_ptr()) };
        assert!(!outer.is_null());
        // SAFETY: pyperf_c_outer has this signature (see the source above).
        let outer: extern "C" fn(extern "C" fn()) = unsafe { std::mem::transmute(outer) };
        outer(pyperf_test_callback);
        let c = CAPTURED.lock().unwrap_or_else(|e| e.into_inner()).take().expect("captured");
        std::thread::sleep(REREAD_INTERVAL);
        let mut frames = Vec::new();
        let end = u.unwind(pid, c.regs, &c.stack, monotonic_ns(), &mut frames);
        let names = names(&mut u, pid, &frames);
        let full = ElfInfo::open(&lib).expect("parse");
        let hidden = address_of(&full, "pyperf_c_hidden").expect("hidden symbol");
        let hidden_name = format!("libpyperf_s.so+0x{:x}", hidden - full.base_vaddr);
        assert_eq!(
            names[..2],
            [format!("{PREFIX}capture_here"), format!("{PREFIX}pyperf_test_callback")],
            "{names:#?}"
        );
        // The static function has no symbol once stripped: named by the offset of its start, not by a neighbour.
        assert_eq!(names[2], hidden_name, "{names:#?}");
        assert_eq!(names[3..5], ["pyperf_c_inner", "pyperf_c_outer"], "{names:#?}");
        assert!(names[5].starts_with(PREFIX), "{names:#?}");
        assert!(matches!(end, UnwindEnd::Complete | UnwindEnd::StackCopyEnd), "{end:?}");
        let counters: HashMap<String, u64> = u.counters().into_iter().collect();
        assert_eq!(counters["native_maps_rereads"], 1, "{counters:?}");
        // Exact names: the start of the hidden function, one past the end of the inner one (whatever follows is
        // not it), the symbol's build id.
        let base = {
            let p = &u.processes[&pid];
            let m = p.mappings.iter().find(|m| m.path.ends_with("libpyperf_s.so")).expect("mapped");
            m.bias
        };
        let s = u.symbol(pid, hidden + base + 5, false);
        assert_eq!((s.name.as_str(), s.resolved), (hidden_name.as_str(), false));
        assert_eq!(s.build_id, full.build_id);
        assert!(s.library.ends_with("/libpyperf_s.so"));
        let inner = address_of(&full, "pyperf_c_inner").expect("inner");
        assert_eq!(u.symbol(pid, inner + base, false).name, "pyperf_c_inner");
        let i = full.symbols.lookup(inner).expect("covered");
        let inner_end = (inner..inner + 4096).find(|&a| full.symbols.lookup(a) != Some(i)).expect("end");
        assert_ne!(u.symbol(pid, inner_end + base, false).name, "pyperf_c_inner");
        // The separate debug file (found by build id under the process's root) names the hidden function.
        let debug_dir = dir.path().join(format!("usr/lib/debug/.build-id/{}", &full.build_id[..2]));
        std::fs::create_dir_all(&debug_dir).expect("mkdir");
        let debug = debug_dir.join(format!("{}.debug", &full.build_id[2..]));
        let ok =
            Command::new("objcopy").arg("--only-keep-debug").arg(&lib).arg(&debug).status().is_ok_and(|s| s.success());
        assert!(ok, "objcopy");
        let info = ElfInfo::open(&stripped).expect("stripped");
        assert!(!info.has_symtab && info.symbols.lookup(hidden).is_none());
        let file = File::open(&stripped).expect("open");
        let mut refused = 0;
        let info = ElfInfo::parse_file_with(file, &mut |i| {
            find_debug_file(dir.path(), "/nowhere/libpyperf_s.so", &i.build_id, None, &mut refused)
        })
        .expect("parse");
        assert!(info.has_debug_file);
        let i = info.symbols.lookup(hidden + 1).expect("debug symbols");
        assert_eq!(info.symbols.name(i), "pyperf_c_hidden");
        // GCC's cold partition of a function (a local symbol, gone once stripped) gets its name back.
        let cold = address_of(&full, "pyperf_c_split.cold").expect("gcc made a .cold part");
        let info = ElfInfo::open(&stripped).expect("stripped");
        let i = info.symbols.lookup(cold + 2).expect("cold part named");
        assert_eq!((info.symbols.name(i), info.cold_parts), ("pyperf_c_split.cold", 1));
    }

    /// A stripped library whose `.gnu_debuglink` names a debug file next to it: the worker finds and parses it and
    /// the static function is named by it; the debug file's FIFO-named twin is refused and counted.
    #[test]
    fn the_debug_file_worker_names_a_stripped_library() {
        let Some((dir, lib, stripped)) = c_library() else {
            absent("gcc, strip and objcopy");
            return;
        };
        let d = dir.path();
        let linked = d.join("libpyperf_l.so");
        std::fs::copy(&stripped, &linked).expect("copy");
        let debug = d.join("libpyperf_l.debug");
        let run = |c: &mut Command| c.status().is_ok_and(|s| s.success());
        assert!(run(Command::new("objcopy").arg("--only-keep-debug").arg(&lib).arg(&debug)));
        assert!(run(Command::new("objcopy").arg("--add-gnu-debuglink").arg(&debug).arg(&linked)));
        // In the library's .debug/: a FIFO by the same name, looked at after the real one is found (never opened).
        std::fs::create_dir(d.join(".debug")).expect("mkdir");
        let fifo = std::ffi::CString::new(d.join(".debug/libpyperf_l.debug").to_str().expect("utf-8")).expect("path");
        // SAFETY: mkfifo of a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let cpath = std::ffi::CString::new(linked.to_str().expect("utf-8")).expect("path");
        // SAFETY: dlopen of a library this test built; it has no constructors.
        let handle = unsafe { libc::dlopen(cpath.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen failed");
        let pid = std::process::id();
        let mut u = NativeUnwinder::new();
        u.add_process(pid).expect("own maps");
        // Usually in within the unwinding's wait; on a loaded machine it may come later.
        assert!(u.wait_for_debug_files(Duration::from_secs(60)), "the worker never answered");
        let full = ElfInfo::open(&lib).expect("parse");
        let hidden = address_of(&full, "pyperf_c_hidden").expect("hidden symbol");
        let base = {
            let p = &u.processes[&pid];
            let m = p.mappings.iter().find(|m| m.path.ends_with("libpyperf_l.so")).expect("mapped");
            m.bias
        };
        let s = u.symbol(pid, hidden + base + 5, false);
        assert_eq!((s.name.as_str(), s.resolved), ("pyperf_c_hidden", true));
        let counters: HashMap<String, u64> = u.counters().into_iter().collect();
        assert!(counters["native_debug_files"] >= 1, "{counters:?}");
        // A FIFO in the first place looked: refused at once, then the real file found further on.
        std::fs::remove_file(&debug).expect("rm");
        let first = std::ffi::CString::new(debug.to_str().expect("utf-8")).expect("path");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::mkfifo(first.as_ptr(), 0o600) }, 0);
        std::fs::remove_file(d.join(".debug/libpyperf_l.debug")).expect("rm");
        assert!(run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&lib)
            .arg(d.join(".debug/libpyperf_l.debug"))));
        let mut refused = 0;
        let (tx, rx) = std::sync::mpsc::channel();
        let (root, build_id) = (d.to_owned(), full.build_id.to_string());
        std::thread::spawn(move || {
            let found = find_debug_file(&root, "/libpyperf_l.so", &build_id, Some("libpyperf_l.debug"), &mut refused);
            let _ = tx.send((found.is_some(), refused));
        });
        let (found, refused) = rx.recv_timeout(Duration::from_secs(60)).expect("blocked on the FIFO");
        assert!(found && refused >= 1, "found {found}, refused {refused}");
        // SAFETY: the handle came from dlopen above and nothing of the library is in use.
        unsafe { libc::dlclose(handle) };
    }

    /// [`elf::open_in_root`]: only regular files, never blocking, no link followed at the end, the rest resolved
    /// inside the root.
    #[test]
    fn open_in_root_takes_only_regular_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir(root.join("real")).expect("mkdir");
        std::fs::write(root.join("real/f"), b"\x7fELF").expect("write");
        std::os::unix::fs::symlink("/real", root.join("abs")).expect("symlink");
        std::os::unix::fs::symlink(root.join("real/f"), root.join("link")).expect("symlink");
        let fifo = std::ffi::CString::new(root.join("fifo").to_str().expect("utf-8")).expect("path");
        // SAFETY: mkfifo of a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(elf::open_in_root(root, "/real/f", 1 << 20).is_ok());
        // An absolute link on the way is the root's (a container's /usr/lib/debug), not the host's.
        assert!(elf::open_in_root(root, "/abs/f", 1 << 20).is_ok());
        // A link in the last component is followed inside the root too: a build-id link (relative, as Fedora's
        // `.build-id/xx/y.debug -> ../../../../usr/bin/y.debug`) or an absolute one; a link to the host's own path
        // of the file names nothing inside the root.
        std::fs::create_dir_all(root.join("d/.build-id/ab")).expect("mkdir");
        std::os::unix::fs::symlink("../../../real/f", root.join("d/.build-id/ab/cd.debug")).expect("symlink");
        std::os::unix::fs::symlink("/real/f", root.join("abslink")).expect("symlink");
        assert!(elf::open_in_root(root, "/d/.build-id/ab/cd.debug", 1 << 20).is_ok());
        assert!(elf::open_in_root(root, "/abslink", 1 << 20).is_ok());
        assert!(elf::open_in_root(root, "/link", 1 << 20).is_err());
        std::os::unix::fs::symlink("/fifo", root.join("fifolink")).expect("symlink");
        assert!(elf::open_in_root(root, "/real", 1 << 20).is_err());
        assert!(elf::open_in_root(root, "/real/f", 2).is_err());
        assert!(elf::open_in_root(root, "/", 1 << 20).is_err());
        let (tx, rx) = std::sync::mpsc::channel();
        let root = root.to_owned();
        std::thread::spawn(move || {
            let _ = tx.send(
                elf::open_in_root(&root, "/fifo", 1 << 20).is_err()
                    && elf::open_in_root(&root, "/fifolink", 1 << 20).is_err(),
            );
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(60)), Ok(true), "a FIFO blocked or was taken");
    }

    /// Real files' indexes pass the check that keeps damaged ones from framehop (else every unwinding would
    /// search .eh_frame instead of its index).
    #[test]
    fn real_eh_frame_indexes_are_sound() {
        for path in
            [std::env::current_exe().expect("test binary"), PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6")]
        {
            let info = ElfInfo::open(&path).expect("parse");
            let (Some(hdr), Some(eh)) = (&info.unwind.eh_frame_hdr, &info.unwind.eh_frame) else {
                panic!("{}: no .eh_frame_hdr", path.display())
            };
            assert!(eh_frame_hdr_is_sound(hdr, eh), "{}", path.display());
        }
    }

    #[test]
    fn hostile_elf_files_never_panic() {
        let Some((_dir, lib, _)) = c_library() else {
            absent("gcc");
            return;
        };
        let bytes = std::fs::read(&lib).expect("read");
        let mut parsed = 0;
        let mut check = |data: &[u8]| {
            if let Ok(info) = ElfInfo::parse_bytes(data) {
                parsed += 1;
                for a in (0..0x3000).step_by(7) {
                    if let Some(i) = info.symbols.lookup(a) {
                        black_box(info.symbols.name(i));
                    }
                }
                let _ = info.bias(0x7f00_0000_0000, 0x1000);
                // Unwind a stack of garbage through whatever call frame information survived.
                if let Some(module) = module(&info, "x", 0x7f00_0000_0000..0x7f00_0001_0000, 0x7f00_0000_0000) {
                    let mut unwinder = UnwinderX86_64::new();
                    unwinder.add_module(module);
                    let mut cache = CacheX86_64::new();
                    let stack: Vec<u64> =
                        (0..512u64).map(|i| 0x7f00_0000_0000 + i.wrapping_mul(0x9e37_79b9) % 0x4000).collect();
                    let mut read = |a: u64| stack.get(((a.wrapping_sub(0x1000)) / 8) as usize).copied().ok_or(());
                    for ip in (0x7f00_0000_0000u64..0x7f00_0000_4000).step_by(61) {
                        let mut it =
                            unwinder.iter_frames(ip, UnwindRegsX86_64::new(ip, 0x1000, 0x1100), &mut cache, &mut read);
                        for _ in 0..64 {
                            if !matches!(it.next(), Ok(Some(_))) {
                                break;
                            }
                        }
                    }
                }
            }
        };
        for len in (0..bytes.len()).step_by(97) {
            check(&bytes[..len]);
        }
        // Through a file too (the recorder reads files in pieces, not whole).
        let dir = tempfile::tempdir().expect("tmp");
        for len in [0, 3, 64, 200, 1000, bytes.len() / 2, bytes.len() - 1] {
            let path = dir.path().join(format!("cut{len}.so"));
            std::fs::write(&path, &bytes[..len]).expect("write");
            let _ = ElfInfo::open(&path);
        }
        // Corrupt bytes, deterministically (xorshift).
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..300 {
            let mut copy = bytes.clone();
            for _ in 0..16 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % copy.len() as u64) as usize;
                copy[i] = (x >> 32) as u8;
            }
            check(&copy);
        }
        assert!(parsed > 0);
    }

    /// Registers and stack of a process blocked in a system call, as the BPF program reads them: the registers
    /// through ptrace (stopped), the stack from `/proc/PID/mem`. `None` unless it is in system call `nr`.
    fn blocked_in_syscall(pid: u32, nr: &[u64]) -> Option<Capture> {
        use std::os::unix::fs::FileExt as _;
        if !nr.contains(&u64::try_from(crate::proc::task_syscall(pid, pid)?.nr).ok()?) {
            return None;
        }
        let pid = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: attaches to our own child; a null address and data are what PTRACE_ATTACH takes.
        if unsafe { libc::ptrace(libc::PTRACE_ATTACH, pid, 0usize, 0usize) } != 0 {
            return None;
        }
        let mut status = 0;
        // SAFETY: waits for the child's stop; `status` is a valid out pointer.
        unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        // SAFETY: user_regs_struct is plain data; all zeroes is a valid value.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: the child is stopped under ptrace; `regs` is a valid out buffer of the type GETREGS writes.
        let got = unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0usize, &mut regs as *mut libc::user_regs_struct) };
        let capture = (got == 0).then(|| {
            let sp = regs.rsp;
            let maps = read_maps(pid as u32).ok()?;
            let end = parse_maps(&maps).iter().find(|e| e.start <= sp && sp < e.end)?.end;
            let mut stack = vec![0u8; usize::try_from((end - sp).min(65536)).ok()?];
            File::open(format!("/proc/{pid}/mem")).ok()?.read_exact_at(&mut stack, sp).ok()?;
            Some(Capture { regs: UserRegs { ip: regs.rip, sp, bp: regs.rbp }, stack })
        });
        // SAFETY: detaches from the child stopped above.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, pid, 0usize, 0usize) };
        capture.flatten()
    }

    /// The interpreters people run: Debian's, stripped, built with PGO (most of the evaluation loop in its cold
    /// part), no frame pointers. Each level of the recursion goes through C (`map`), so each is an activation of
    /// the evaluation loop.
    #[test]
    fn unwinds_a_sleeping_debian_python_through_its_activations() {
        let root = Path::new("/srv/pyperf-sid");
        let script = "import time\ndef f(n):\n    if n == 0:\n        time.sleep(600)\n    return list(map(f, [n - 1] if n else []))\nf(5)\n";
        let mut ran = 0;
        for v in ["3.13", "3.14", "3.15"] {
            if !root.join(format!("usr/bin/python{v}")).exists() {
                continue;
            }
            let Ok(mut child) =
                Command::new("chroot").arg(root).args([format!("/usr/bin/python{v}").as_str(), "-c", script]).spawn()
            else {
                continue;
            };
            let pid = child.id();
            // A generous limit: a loaded machine can take seconds to start the interpreter.
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut capture = None;
            while Instant::now() < deadline && capture.is_none() {
                std::thread::sleep(Duration::from_millis(20));
                // clock_nanosleep (230) or select (23, older interpreters).
                capture = blocked_in_syscall(pid, &[230, 23, 35]);
            }
            let mut u = NativeUnwinder::new();
            let mut frames = Vec::new();
            let result = capture.map(|c| {
                let end = u.unwind(pid, c.regs, &c.stack, monotonic_ns(), &mut frames);
                let names = names(&mut u, pid, &frames);
                let t = Instant::now();
                for _ in 0..1000 {
                    black_box(u.unwind(pid, c.regs, &c.stack, monotonic_ns(), &mut frames));
                }
                eprintln!("python{v}: {} frames, {} ns per unwind", frames.len(), t.elapsed().as_nanos() / 1000);
                (end, names)
            });
            let _ = child.kill();
            let _ = child.wait();
            let (end, names) = result.expect("python blocked in its sleep");
            let evals = names.iter().filter(|n| n.starts_with("_PyEval_EvalFrameDefault")).count();
            assert_eq!(end, UnwindEnd::Complete, "python{v}: {names:#?}");
            // The module's (running f(5) too: Python-to-Python calls stay in one activation), then f(4)..f(0),
            // each called from C. One frame each: a call leaves from either the hot or the cold part of the loop.
            assert_eq!(evals, 6, "python{v}: {names:#?}");
            assert!(names.iter().any(|n| n == "Py_RunMain" || n == "Py_BytesMain"), "python{v}: {names:#?}");
            ran += 1;
        }
        if ran == 0 {
            absent("the Debian interpreters under /srv/pyperf-sid (scripts/setup)");
        }
    }

    #[test]
    fn processes_in_a_chroot_use_their_own_files() {
        let root = Path::new("/srv/pyperf-sid");
        if !root.join("bin/sleep").exists() {
            absent("the chroot at /srv/pyperf-sid (scripts/setup)");
            return;
        }
        let Ok(mut child) = Command::new("chroot").arg(root).args(["/bin/sleep", "600"]).spawn() else { return };
        let pid = child.id();
        // Wait for chroot to exec sleep and for the dynamic loader to map its libc (right after the exec only sleep
        // and the loader are mapped: a CI run caught that); a generous limit for a loaded machine.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            let maps = read_maps(pid).unwrap_or_default();
            if exe.ends_with("sleep") && maps.contains("libc.so") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut u = NativeUnwinder::new();
        let added = u.add_process(pid);
        let _ = child.kill();
        let _ = child.wait();
        added.expect("maps");
        let p = &u.processes[&pid];
        assert!(
            p.mappings.iter().any(|m| m.path.contains("libc.so")),
            "{:?}",
            p.mappings.iter().map(|m| &m.path).collect::<Vec<_>>()
        );
        for m in &p.mappings {
            let f = &u.files[m.file];
            assert!(f.info.is_some(), "{} unusable", m.path);
            assert!(m.module.is_some(), "{} has no unwind info", m.path);
        }
    }
}
