//! Finding the CPython interpreter inside a running process.
//!
//! [`inspect`] looks at the target's memory map for the ELF object that holds the interpreter
//! (a `libpython*.so`, or the executable itself when Python is linked statically into it, under
//! any name), reads its symbols with the `object` crate (`.symtab`, or `.dynsym` when `.symtab`
//! is stripped), computes the load bias from the mapping and the program headers, and reads the
//! interpreter version from the binary itself (the `Py_Version` constant on 3.11+, else the
//! `PY_VERSION` string that `Py_GetVersion` formats), never from the file name.
//!
//! Which [`Row`] (struct offsets and the other per-version facts) is used is [`versions::select`]'s choice,
//! from the version and, from 3.13 on, the interpreter's own `_Py_DebugOffsets` (the start of `_PyRuntime`, read
//! from the binary's initialised data). Debug (`Py_DEBUG`) builds and PyPy are refused here with one clear line.
//!
//! Files are opened through `/proc/PID/root/...` so processes in other mount namespaces
//! (containers) resolve to the right file; `/proc/PID/map_files/...` is the fallback for files
//! that were deleted or replaced after the process mapped them.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSection, ObjectSegment, ReadRef};

type Elf<'d, R> = ElfFile64<'d, object::Endianness, R>;

use super::debug_offsets as dbg;
use super::layout::version_from_hex;
use super::versions::{self, supported_versions, Row, Unsupported};
use crate::proc::{self, MapsEntry};

impl Unsupported {
    /// The error for process `pid`.
    pub fn for_pid(self, pid: u32) -> InspectError {
        InspectError::Unsupported { pid, what: self.what, why: self.why }
    }
}

/// Why a process could not be profiled.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("no such process: {0}")]
    /// The pid names no process (or it exited).
    NoSuchProcess(u32),
    #[error("process {0} is not a Python process (no libpython or CPython interpreter symbols found)")]
    /// No CPython interpreter in its memory map.
    NotPython(u32),
    /// `what` names the interpreter (`Python 3.5.10`, `Python 3.13.0 free-threaded`, `PyPy`);
    /// `why`, when not empty, says more (starts with ": ").
    #[error("process {pid} runs {what}, which pyperf does not support ({}){why}", supported_versions())]
    Unsupported {
        /// The process.
        pid: u32,
        /// The interpreter.
        what: String,
        /// Empty, or ": " and the reason.
        why: String,
    },
    #[error("{}", permission_denied(*.0))]
    /// Not allowed to look at the process.
    PermissionDenied(u32),
    /// The process may be looked at, but the file holding its interpreter may not be read (a directory on the way
    /// is closed to this user, e.g. /root for pyenv's interpreters).
    #[error(
        "permission denied reading {}, the interpreter of process {pid}: run as root, or grant CAP_DAC_READ_SEARCH too",
        path.display()
    )]
    BinaryUnreadable {
        /// The process.
        pid: u32,
        /// The file, as the process maps it.
        path: PathBuf,
    },
    #[error("process {pid}: cannot read {path}: {source}")]
    /// Reading one of its /proc files or its interpreter failed.
    Io {
        /// The process.
        pid: u32,
        /// What could not be read.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Why the kernel refused to let pyperf look at `pid`: without CAP_SYS_PTRACE, that; with it (root), the process
/// is guarded beyond it (it holds capabilities pyperf lacks, e.g. a container's or sandbox's init, or a security
/// module protects it), and "run as root" would be wrong.
fn permission_denied(pid: u32) -> String {
    let ptrace = crate::privileges::effective().is_some_and(|eff| eff & (1 << 19) != 0);
    if ptrace {
        format!(
            "process {pid} cannot be inspected: the kernel denies it even with CAP_SYS_PTRACE (the process holds \
             capabilities pyperf lacks, or a security module protects it)"
        )
    } else {
        format!("permission denied inspecting process {pid} (run as root or with CAP_SYS_PTRACE)")
    }
}

/// Addresses in the target's address space (load bias applied) of the interpreter globals the
/// sampler needs. Which ones exist depends on the version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PythonAddrs {
    /// `_PyRuntime` (3.7+).
    pub runtime: Option<u64>,
    /// `interp_head` (pre-3.7, `.symtab` only on stripped builds).
    pub interp_head: Option<u64>,
    /// `_PyThreadState_Current` (pre-3.7).
    pub tstate_current: Option<u64>,
    /// `autoTLSkey` (pre-3.7 static).
    pub auto_tls_key: Option<u64>,
    /// `gil_locked` (pre-3.7 static).
    pub gil_locked: Option<u64>,
    /// `gil_last_holder` (pre-3.7 static).
    pub gil_last_holder: Option<u64>,
    /// &PyCode_Type: user space checks that what it reads at a code address is still a code object.
    pub code_type: Option<u64>,
    /// `interpreter_lock` (2.7 static, `.symtab` only): the GIL, NULL until a thread is started.
    pub interpreter_lock: Option<u64>,
    /// &_Py_NoneStruct: 3.13+ C-stack entry frames hold it in `f_executable`.
    pub none: Option<u64>,
    /// &PyType_Type: for the `cls` heuristic (`RawFrame::first_local_type == &PyType_Type`).
    pub type_type: Option<u64>,
    /// 3.6: the statics `gil_mutex`, `gil_cond`, `switch_mutex`, `switch_cond` (`.symtab` only), as the range
    /// `[start, end)` they fill when they lie together: a thread blocked in futex(2) there waits for the GIL.
    pub gil_wait: Option<(u64, u64)>,
    /// `collecting` (2.7/3.6 static of gcmodule.c, `.symtab` only): 1 while the cyclic garbage collector runs.
    pub gc_collecting: Option<u64>,
}

/// A process found to run a supported CPython interpreter.
#[derive(Debug, Clone)]
pub struct PythonProcess {
    /// The process.
    pub pid: u32,
    /// `(major, minor, micro)`, read from the interpreter binary.
    pub version: (u8, u8, u8),
    /// The ELF object holding the interpreter (libpython or the executable), as the target
    /// names it in its memory map.
    pub interpreter: PathBuf,
    /// The target's executable (`/proc/PID/exe`), for information.
    pub executable: PathBuf,
    /// GNU build id of [`Self::interpreter`], lower-case hex.
    pub build_id: Option<String>,
    /// Command line (`/proc/PID/cmdline`).
    pub cmdline: Vec<String>,
    /// Load bias of the interpreter object (0 for a non-PIE executable).
    pub load_bias: u64,
    /// Resolved global addresses, bias applied.
    pub addrs: PythonAddrs,
    /// What pyperf knows about this interpreter's version (offsets included).
    pub row: &'static Row,
}

impl PythonProcess {
    /// An address the interpreter surely maps (its runtime state or interpreter list): where a memory handle is
    /// checked readable ([`crate::mem::ProcMem::open`]).
    pub fn mapped_addr(&self) -> u64 {
        self.addrs.runtime.or(self.addrs.interp_head).or(self.addrs.code_type).unwrap_or(0)
    }

    /// What a recording of this process should warn about: a Python newer than pyperf knows, read through the
    /// `_Py_DebugOffsets` layout of a known version.
    pub fn warning(&self) -> Option<String> {
        let versions::Source::Newer { as_of } = self.row.source else { return None };
        Some(format!(
            "Python {} is newer than pyperf knows ({}): read through its _Py_DebugOffsets with the layout of {}.{}, \
             which it passed; stacks may be wrong if the interpreter changed in ways its debug offsets do not show",
            self.version_string(),
            supported_versions(),
            as_of.0,
            as_of.1
        ))
    }

    /// `"3.11.7"`.
    pub fn version_string(&self) -> String {
        let (a, b, c) = self.version;
        format!("{a}.{b}.{c}")
    }
}

impl fmt::Display for PythonProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} (Python {}, {})", self.pid, self.version_string(), self.interpreter.display())
    }
}

const WANTED: &[&str] = &[
    "_PyRuntime",
    "Py_Version",
    "Py_GetVersion",
    "interp_head",
    "_PyThreadState_Current",
    "autoTLSkey",
    "gil_locked",
    "gil_last_holder",
    "PyCode_Type",
    "interpreter_lock",
    "_Py_NoneStruct",
    "PyType_Type",
    "gil_mutex",
    "gil_cond",
    "switch_mutex",
    "switch_cond",
    "collecting",
    // Only in Py_REF_DEBUG (debug) builds, whose object header and structs differ.
    "_Py_NegativeRefcount",
    // PyPy's libpypy*-c.so.
    "pypy_setup_home",
];

/// The range `[start, end)` that 3.6's GIL statics fill (each a `pthread_mutex_t` of 40 or a `pthread_cond_t` of
/// 48 bytes), when all are known and lie within 512 bytes; else none (no GIL-wait attribution, never a wrong one).
fn statics_range(addrs: &[Option<u64>]) -> Option<(u64, u64)> {
    const LARGEST: u64 = 48;
    let all: Vec<u64> = addrs.iter().copied().collect::<Option<_>>()?;
    let (lo, hi) = (*all.iter().min()?, all.iter().max()?.checked_add(LARGEST)?);
    (hi - lo <= 512).then_some((lo, hi))
}

/// Finds and describes the Python interpreter running in process `pid`.
pub fn inspect(pid: u32) -> Result<PythonProcess, InspectError> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let io_err = |path: &Path, e: io::Error| match e.kind() {
        io::ErrorKind::NotFound => InspectError::NoSuchProcess(pid),
        io::ErrorKind::PermissionDenied => InspectError::PermissionDenied(pid),
        _ if e.raw_os_error() == Some(libc::ESRCH) => InspectError::NoSuchProcess(pid),
        _ => InspectError::Io { pid, path: path.to_owned(), source: e },
    };

    let maps_path = proc_dir.join("maps");
    let maps = fs::read_to_string(&maps_path).map_err(|e| io_err(&maps_path, e))?;
    let mappings = file_maps(&maps);
    let exe_path = proc_dir.join("exe");
    let executable = fs::read_link(&exe_path).map_err(|e| io_err(&exe_path, e))?;
    let cmdline_path = proc_dir.join("cmdline");
    let cmdline = fs::read(&cmdline_path)
        .map_err(|e| io_err(&cmdline_path, e))?
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();

    // Candidates: every mapped libpython first, then the executable (Python linked into a
    // binary of any name is recognised by its symbols, not its name).
    let mut candidates: Vec<String> = Vec::new();
    for m in &mappings {
        let base = m.path.rsplit('/').next().unwrap_or("");
        let lib = base.starts_with("libpython") || base.starts_with("libpypy");
        if lib && base.contains(".so") && !candidates.contains(&m.path) {
            candidates.push(m.path.clone());
        }
    }
    let exe_str = executable.to_string_lossy().trim_end_matches(" (deleted)").to_string();
    if mappings.iter().any(|m| m.path == exe_str) && !candidates.contains(&exe_str) {
        candidates.push(exe_str);
    }

    for path in candidates {
        let file_maps: Vec<&MapsEntry> = mappings.iter().filter(|m| m.path == path).collect();
        let info = match binary_info(pid, &path, &file_maps) {
            Ok(info) => info,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                return Err(InspectError::BinaryUnreadable { pid, path: PathBuf::from(&path) })
            }
            Err(_) => continue,
        };
        let Some(info) = info.as_ref() else { continue };
        let syms = &info.syms;
        if syms.contains_key("pypy_setup_home") {
            return Err(Unsupported::new("PyPy", "pyperf reads CPython's interpreter state only").for_pid(pid));
        }
        let is_interp = info.runtime.is_some()
            || (syms.contains_key("interp_head") || syms.contains_key("_PyThreadState_Current"))
                && syms.contains_key("Py_GetVersion");
        if !is_interp {
            continue;
        }
        let Some(bias) = load_bias(&info.segments, &file_maps) else { continue };
        let version = info.version.ok_or(InspectError::NotPython(pid))?;
        let (major, minor, micro) = version;
        let vstr = format!("{major}.{minor}.{micro}");
        if syms.contains_key("_Py_NegativeRefcount") {
            return Err(Unsupported::new(format!("Python {vstr} debug build"), "Py_DEBUG changes the object layout")
                .for_pid(pid));
        }
        let row = versions::select(version, info.debug_block.as_deref()).map_err(|u| u.for_pid(pid))?;
        let at = |name: &str| syms.get(name).map(|&a| a.wrapping_add(bias));
        let addrs = PythonAddrs {
            runtime: info.runtime.map(|a| a.wrapping_add(bias)),
            interp_head: at("interp_head"),
            tstate_current: at("_PyThreadState_Current"),
            auto_tls_key: at("autoTLSkey"),
            gil_locked: at("gil_locked"),
            gil_last_holder: at("gil_last_holder"),
            code_type: at("PyCode_Type"),
            interpreter_lock: at("interpreter_lock"),
            none: at("_Py_NoneStruct"),
            type_type: at("PyType_Type"),
            gil_wait: statics_range(&["gil_mutex", "gil_cond", "switch_mutex", "switch_cond"].map(at)),
            gc_collecting: at("collecting"),
        };
        if addrs.runtime.is_none() && addrs.interp_head.is_none() {
            // Pre-3.7 with a stripped .symtab: interp_head is static, nothing to walk.
            return Err(Unsupported::new(
                format!("Python {vstr}"),
                "its symbol table is stripped (no interp_head: the threads cannot be found)",
            )
            .for_pid(pid));
        }
        let build_id = info.build_id.clone();
        return Ok(PythonProcess {
            pid,
            version,
            interpreter: PathBuf::from(path),
            executable,
            build_id,
            cmdline,
            load_bias: bias,
            addrs,
            row,
        });
    }
    Err(InspectError::NotPython(pid))
}

/// The file mappings of a /proc/PID/maps text (anonymous and special ones left out), each file's path as it was
/// mapped (without the " (deleted)" of a file deleted since).
pub(super) fn file_maps(maps: &str) -> Vec<MapsEntry> {
    let mut out = proc::parse_maps(maps);
    out.retain(|m| m.inode != 0 && m.path.starts_with('/'));
    for m in &mut out {
        if let Some(p) = m.path.strip_suffix(" (deleted)") {
            m.path.truncate(p.len());
        }
    }
    out
}

/// Opens a file the target has mapped: through its own root (containers: the same path on the host may be another
/// file, or none), when the file there is the mapped one (same inode); else through map_files, which is the mapping
/// itself (a file deleted or replaced since, or a path the host names differently, as for a chroot); else, where
/// map_files is closed (it needs CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE), the rooted path as it is.
fn open_mapped_file(pid: u32, path: &str, maps: &[&MapsEntry]) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // The rooted path is the target's to replace: a FIFO put there must not block the open forever.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(mapped_file_path(pid, path, maps))?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file (replaced since it was mapped)"));
    }
    Ok(file)
}

/// The path [`open_mapped_file`] opens (also what a uprobe on the file is attached through, see
/// [`super::frees`]): `/proc/PID/root/PATH` when it is the mapped file, else a `/proc/PID/map_files` entry of one
/// of `maps` that can be followed, else the rooted path as it is.
pub fn mapped_file_path(pid: u32, path: &str, maps: &[&MapsEntry]) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let rooted = PathBuf::from(format!("/proc/{pid}/root{path}"));
    if let Ok(md) = fs::metadata(&rooted) {
        if maps.iter().any(|m| m.inode == md.ino()) {
            return rooted;
        }
    }
    for m in maps.iter().filter(|m| m.offset == 0) {
        let entry = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end));
        if fs::metadata(&entry).is_ok() {
            return entry;
        }
    }
    rooted
}

/// A PT_LOAD segment: where its bytes are in the file and where they go in memory.
#[derive(Debug, Clone, Copy)]
struct Segment {
    file_offset: u64,
    file_size: u64,
    address: u64,
}

/// What pyperf needs from an interpreter binary, independent of the process that maps it.
#[derive(Debug)]
pub struct BinaryInfo {
    /// The symbols pyperf looks for that the file defines: name -> link-time address.
    pub syms: HashMap<&'static str, u64>,
    /// The interpreter version the binary says it is.
    pub version: Option<(u8, u8, u8)>,
    /// Link-time address of `_PyRuntime`: the start of the `.PyRuntime` section where there is one (3.13+
    /// distribution builds put it there so that tools find it without symbols), else the symbol.
    pub runtime: Option<u64>,
    /// Where [`BinaryInfo::runtime`] came from: the `.PyRuntime` section (true) or the symbol.
    pub runtime_from_section: bool,
    /// The first [`dbg::READ_SIZE`] bytes at `_PyRuntime`, as in the file: the `_Py_DebugOffsets` block from
    /// 3.13 on.
    pub debug_block: Option<Vec<u8>>,
    /// GNU build id, lower-case hex.
    pub build_id: Option<String>,
    segments: Vec<Segment>,
}

impl BinaryInfo {
    /// Analyses an ELF file; `None` if it is not a 64-bit ELF file. Reads only the parts of the file it looks at
    /// (headers, symbol tables, a few bytes of data), not the whole file: libpython is tens of megabytes.
    pub fn read<F: object::read::ReadCacheOps>(file: F) -> Option<BinaryInfo> {
        let data = object::read::ReadCache::new(file);
        let elf = ElfFile64::<object::Endianness, _>::parse(&data).ok()?;
        let syms = find_symbols(&elf);
        let version = read_version(&elf, &syms);
        let section = elf.section_by_name(".PyRuntime").map(|s| s.address()).filter(|&a| a != 0);
        let runtime = section.or_else(|| syms.get("_PyRuntime").copied());
        let debug_block = runtime.and_then(|rt| data_at(&elf, rt, dbg::READ_SIZE as u64)).map(<[u8]>::to_vec);
        let build_id = elf.build_id().ok().flatten().map(hex);
        let segments = elf
            .segments()
            .map(|s| {
                let (file_offset, file_size) = s.file_range();
                Segment { file_offset, file_size, address: s.address() }
            })
            .collect();
        Some(BinaryInfo {
            syms,
            version,
            runtime,
            runtime_from_section: section.is_some(),
            debug_block,
            build_id,
            segments,
        })
    }
}

/// Binaries already analysed, by file identity: every process of one interpreter shares one analysis, so `-a` on a
/// host with many Python processes reads and parses libpython once, not once per process.
static BINARIES: Mutex<Vec<(FileId, Analysis)>> = Mutex::new(Vec::new());

/// (device, inode, size, mtime) of a file.
type FileId = (u64, u64, u64, i64);
/// `None`: not a 64-bit ELF file.
type Analysis = std::sync::Arc<Option<BinaryInfo>>;

/// [`BinaryInfo::read`] of the file `path` mapped by `pid`, once per file.
fn binary_info(pid: u32, path: &str, maps: &[&MapsEntry]) -> io::Result<Analysis> {
    use std::os::unix::fs::MetadataExt;
    let file = open_mapped_file(pid, path, maps)?;
    let meta = file.metadata()?;
    let key = (meta.dev(), meta.ino(), meta.size(), meta.mtime());
    let mut cache = BINARIES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, info)) = cache.iter().find(|(k, _)| *k == key) {
        return Ok(info.clone());
    }
    let info = std::sync::Arc::new(BinaryInfo::read(file));
    // Bounded: a host has few distinct interpreter binaries; forget the oldest beyond that.
    if cache.len() >= 64 {
        cache.remove(0);
    }
    cache.push((key, info.clone()));
    Ok(info)
}

/// Defined symbols of interest, by name -> link-time address. `.symtab` wins over `.dynsym`.
fn find_symbols<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>) -> HashMap<&'static str, u64> {
    use object::read::elf::Sym;
    let endian = elf.endian();
    let mut out = HashMap::new();
    for table in [elf.elf_symbol_table(), elf.elf_dynamic_symbol_table()] {
        // One read for the whole string table (was two system calls per name: ~15 ms for pyenv's python3.11).
        let strings = crate::native::elf::string_table(elf, table);
        for sym in table.symbols() {
            let address = sym.st_value(endian);
            if sym.is_undefined(endian) || address == 0 {
                continue;
            }
            let Ok(name) = strings.get(sym.st_name(endian)) else { continue };
            let Ok(name) = std::str::from_utf8(name) else { continue };
            if let Some(w) = WANTED.iter().find(|w| **w == name) {
                out.entry(*w).or_insert(address);
            }
        }
    }
    out
}

/// Load bias = runtime address - link-time address, from a mapping of the file and the PT_LOAD
/// segment that covers the mapping's file offset. 0 for a non-PIE executable.
fn load_bias(segments: &[Segment], maps: &[&MapsEntry]) -> Option<u64> {
    for m in maps {
        for seg in segments {
            // Mappings start on page boundaries: the segment's offset rounded down.
            let page_off = seg.file_offset & !0xfff;
            if m.offset >= page_off && m.offset < seg.file_offset.saturating_add(seg.file_size.max(1)) {
                // Wrapping: a mapping may start past the segment's offset, and a hostile file's fields overflow.
                let vaddr_at_map = seg.address.wrapping_sub(seg.file_offset).wrapping_add(m.offset);
                return Some(m.start.wrapping_sub(vaddr_at_map));
            }
        }
    }
    None
}

/// The `size` bytes of the file backing link-time address `addr` (in the file part of the loaded segment holding
/// it), read alone: `ObjectSegment::data_range` reads the whole segment first, megabytes of a static interpreter
/// for a 4-byte version, which made finding a new process take 60 ms (a debug build) and lose the start of a
/// command pyperf runs.
fn data_at<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, addr: u64, size: u64) -> Option<&'d [u8]> {
    data_up_to(elf, addr, size).filter(|d| d.len() as u64 == size)
}

/// Up to `max` bytes of the file from link-time address `addr` on, as many as its segment's file part holds.
fn data_up_to<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, addr: u64, max: u64) -> Option<&'d [u8]> {
    use object::read::elf::ProgramHeader;
    let endian = elf.endian();
    let (offset, left) = elf.elf_program_headers().iter().find_map(|ph| {
        if ph.p_type(endian) != object::elf::PT_LOAD {
            return None;
        }
        let (vaddr, filesz) = (ph.p_vaddr(endian), ph.p_filesz(endian));
        let into = addr.checked_sub(vaddr).filter(|&d| d < filesz)?;
        Some((ph.p_offset(endian).checked_add(into)?, filesz - into))
    })?;
    elf.data().read_bytes_at(offset, left.min(max)).ok()
}

fn read_version<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, syms: &HashMap<&'static str, u64>) -> Option<(u8, u8, u8)> {
    // 3.11+: `const unsigned long Py_Version = PY_VERSION_HEX;`
    if let Some(&addr) = syms.get("Py_Version") {
        if let Some(b) = data_at(elf, addr, 4) {
            let hex = u32::from_le_bytes(b.try_into().ok()?);
            let v = version_from_hex(hex);
            if v.0 >= 3 {
                return Some(v);
            }
        }
    }
    // Older: Py_GetVersion() formats "%.80s (%.80s) %.80s" with PY_VERSION; find the string it
    // loads with a RIP-relative LEA.
    if let Some(&func) = syms.get("Py_GetVersion") {
        if let Some(v) = version_from_code(elf, func) {
            return Some(v);
        }
    }
    version_from_rodata(elf)
}

fn version_from_code<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, func: u64) -> Option<(u8, u8, u8)> {
    // Up to 192 bytes of the function body.
    let text = data_up_to(elf, func, 192)?;
    for i in 0..text.len().saturating_sub(7) {
        // lea r64, [rip + disp32]: REX.W (0x48 or 0x4c), 0x8d, modrm with mod=00 rm=101 (position-independent code).
        let target = if (text[i] == 0x48 || text[i] == 0x4c) && text[i + 1] == 0x8d && text[i + 2] & 0xc7 == 0x05 {
            let disp = i32::from_le_bytes(text[i + 3..i + 7].try_into().ok()?);
            func.wrapping_add(i as u64 + 7).wrapping_add(disp as i64 as u64)
        } else if (0xb8..=0xbf).contains(&text[i]) {
            // mov r32, imm32 (0xb8 + reg, also after a REX.B prefix): an absolute address, as a non-PIE
            // executable loads its strings (Debian 11's python3.9).
            u64::from(u32::from_le_bytes(text[i + 1..i + 5].try_into().ok()?))
        } else {
            continue;
        };
        if let Some(s) = c_string_at(elf, target) {
            if let Some(v) = parse_version(s) {
                return Some(v);
            }
        }
    }
    None
}

fn c_string_at<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, addr: u64) -> Option<&'d [u8]> {
    let rest = data_up_to(elf, addr, 64)?;
    let end = rest.iter().position(|&b| b == 0)?;
    Some(&rest[..end])
}

/// Last resort: a lone `X.Y.Z` string in .rodata next to the `Py_GetVersion` format string.
fn version_from_rodata<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>) -> Option<(u8, u8, u8)> {
    let data = elf.section_by_name(".rodata")?.data().ok()?;
    if !data.windows(19).any(|w| w == b"%.80s (%.80s) %.80s") {
        return None;
    }
    let mut found: Option<(u8, u8, u8)> = None;
    for s in data.split(|&b| b == 0) {
        if let Some(v) = parse_version(s) {
            if v.0 == 2 || v.0 == 3 {
                match found {
                    None => found = Some(v),
                    Some(f) if f == v => {}
                    Some(_) => return None, // ambiguous
                }
            }
        }
    }
    found
}

/// Parses a whole `PY_VERSION` string: `3.10.13`, `3.12.0rc1`, `3.9.18+`.
fn parse_version(s: &[u8]) -> Option<(u8, u8, u8)> {
    let s = std::str::from_utf8(s).ok()?;
    let mut parts = s.splitn(3, '.');
    let major: u8 = parts.next()?.parse().ok()?;
    let minor: u8 = parts.next()?.parse().ok()?;
    let rest = parts.next()?;
    let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
    if digits == 0 || digits > 2 {
        return None;
    }
    let suffix = &rest[digits..];
    let ok_suffix = suffix.is_empty()
        || suffix == "+"
        || ["a", "b", "rc", "c"].iter().any(|p| {
            suffix.strip_prefix(p).is_some_and(|n| {
                let n = n.trim_end_matches('+');
                !n.is_empty() && n.len() <= 2 && n.chars().all(|c| c.is_ascii_digit())
            })
        });
    if !ok_suffix || !(2..=3).contains(&major) {
        return None;
    }
    Some((major, minor, rest[..digits].parse().ok()?))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_version(b"3.10.13"), Some((3, 10, 13)));
        assert_eq!(parse_version(b"2.7.18"), Some((2, 7, 18)));
        assert_eq!(parse_version(b"3.12.0rc1"), Some((3, 12, 0)));
        assert_eq!(parse_version(b"3.9.18+"), Some((3, 9, 18)));
        assert_eq!(parse_version(b"1.2.3"), None);
        assert_eq!(parse_version(b"3.10"), None);
        assert_eq!(parse_version(b"3.10.13 (main)"), None);
    }

    #[test]
    fn maps_lines() {
        let m = file_maps(
            "55d0c000-55d0d000 r--p 00000000 08:01 1234   /usr/bin/python3.11\n\
             7f00-8f00 rw-p 00000000 00:00 0 \n\
             7f10-7f20 r-xp 00001000 08:01 99 /lib/libpython3.11.so.1.0 (deleted)\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].start, 0x55d0c000);
        assert_eq!(m[1].path, "/lib/libpython3.11.so.1.0");
        assert_eq!(m[1].offset, 0x1000);
    }

    /// A 64-bit ELF executable: one loaded segment of `segment` bytes at 0x400000 (file offset 0) with `patches`
    /// (address, bytes) written into it, and a `.symtab` of `symbols` (name, address).
    fn tiny_elf(segment: usize, symbols: &[(&str, u64)], patches: &[(u64, &[u8])]) -> Vec<u8> {
        const BASE: u64 = 0x40_0000;
        let mut f = vec![0u8; segment];
        let put = |f: &mut Vec<u8>, at: usize, b: &[u8]| f[at..at + b.len()].copy_from_slice(b);
        // ELF header: 64-bit, little-endian, EXEC, x86-64; one program header at 64, section headers later.
        put(&mut f, 0, b"\x7fELF\x02\x01\x01");
        put(&mut f, 16, &[2, 0, 62, 0, 1, 0, 0, 0]);
        put(&mut f, 32, &64u64.to_le_bytes());
        put(&mut f, 52, &[64, 0, 56, 0, 1, 0, 64, 0, 4, 0, 3, 0]);
        // PT_LOAD, readable: the whole segment.
        put(&mut f, 64, &[1, 0, 0, 0, 4, 0, 0, 0]);
        for (i, v) in [0, BASE, BASE, segment as u64, segment as u64, 0x1000].into_iter().enumerate() {
            put(&mut f, 72 + 8 * i, &v.to_le_bytes());
        }
        for (addr, bytes) in patches {
            put(&mut f, (addr - BASE) as usize, bytes);
        }
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24];
        for (name, addr) in symbols {
            symtab.extend_from_slice(&(strtab.len() as u32).to_le_bytes());
            // GLOBAL OBJECT, defined in section 1.
            symtab.extend_from_slice(&[0x11, 0, 1, 0]);
            symtab.extend_from_slice(&addr.to_le_bytes());
            symtab.extend_from_slice(&8u64.to_le_bytes());
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
        }
        let shstrtab = b"\0.symtab\0.strtab\0.shstrtab\0";
        let mut sections = vec![0u8; 64];
        // (name, type, offset, size, link, entsize)
        let mut add = |f: &mut Vec<u8>, name: u32, kind: u32, data: &[u8], link: u32, entsize: u64| {
            let offset = f.len() as u64;
            f.extend_from_slice(data);
            let mut sh = Vec::new();
            sh.extend_from_slice(&name.to_le_bytes());
            sh.extend_from_slice(&kind.to_le_bytes());
            sh.extend_from_slice(&[0; 16]); // flags, address
            sh.extend_from_slice(&offset.to_le_bytes());
            sh.extend_from_slice(&(data.len() as u64).to_le_bytes());
            sh.extend_from_slice(&link.to_le_bytes());
            sh.extend_from_slice(&1u32.to_le_bytes());
            sh.extend_from_slice(&8u64.to_le_bytes());
            sh.extend_from_slice(&entsize.to_le_bytes());
            sections.extend_from_slice(&sh);
        };
        add(&mut f, 1, 2, &symtab, 2, 24);
        add(&mut f, 9, 3, &strtab, 0, 0);
        add(&mut f, 17, 3, shstrtab, 0, 0);
        let shoff = f.len() as u64;
        f.extend_from_slice(&sections);
        put(&mut f, 40, &shoff.to_le_bytes());
        f
    }

    /// A file that counts the bytes read from it.
    struct Counted(std::io::Cursor<Vec<u8>>, std::rc::Rc<std::cell::Cell<u64>>);
    impl io::Read for Counted {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.read(buf)?;
            self.1.set(self.1.get() + n as u64);
            Ok(n)
        }
    }
    impl io::Seek for Counted {
        fn seek(&mut self, to: io::SeekFrom) -> io::Result<u64> {
            self.0.seek(to)
        }
    }

    fn read_counted(file: Vec<u8>) -> (Option<BinaryInfo>, u64) {
        let n = std::rc::Rc::new(std::cell::Cell::new(0));
        (BinaryInfo::read(Counted(std::io::Cursor::new(file), n.clone())), n.get())
    }

    /// Finding a new process reads the few bytes it needs of the interpreter, not the segments holding them: the
    /// version of a static interpreter (Debian sid's python3.15: a 3 MB read-only segment) read through
    /// `ObjectSegment::data_range` read the whole segment, 60 ms in a debug build, in which `record -- python`
    /// lost the start of the script (tests/symbols.rs saw 20-110 ms of it missing).
    #[test]
    fn the_version_is_read_alone() {
        const MB4: usize = 4 << 20;
        // 3.11+: Py_Version, PY_VERSION_HEX 0x030f02f0.
        let file = tiny_elf(MB4, &[("Py_Version", 0x60_0000)], &[(0x60_0000, &0x030f_02f0u32.to_le_bytes())]);
        let (info, bytes) = read_counted(file);
        assert_eq!(info.expect("an ELF file").version, Some((3, 15, 2)));
        assert!(bytes < 64 << 10, "{bytes} bytes read of a {MB4}-byte segment for the version");

        // Older: the string Py_GetVersion loads (lea rax, [rip + disp32]), 1 MB further.
        let func = 0x50_0000u64;
        let lea = [&[0x48, 0x8d, 0x05][..], &((1u32 << 20) - 7).to_le_bytes()].concat();
        let file =
            tiny_elf(MB4, &[("Py_GetVersion", func)], &[(func, &lea), (func + (1 << 20), b"3.9.18\0".as_slice())]);
        let (info, bytes) = read_counted(file);
        assert_eq!(info.expect("an ELF file").version, Some((3, 9, 18)));
        assert!(bytes < 64 << 10, "{bytes} bytes read of a {MB4}-byte segment for the version");

        // A version string at the very end of the file part of the segment, unterminated: none, no overread.
        let end = 0x40_0000 + MB4 as u64 - 6;
        let lea = [&[0x48, 0x8d, 0x05][..], &((end - func - 7) as u32).to_le_bytes()].concat();
        let file = tiny_elf(MB4, &[("Py_GetVersion", func)], &[(func, &lea), (end, b"3.9.18".as_slice())]);
        let (info, _) = read_counted(file);
        assert_eq!(info.expect("an ELF file").version, None);
    }

    #[test]
    fn no_such_process() {
        assert!(matches!(inspect(u32::MAX - 7), Err(InspectError::NoSuchProcess(_))));
    }

    #[test]
    fn not_python() {
        assert!(matches!(inspect(std::process::id()), Err(InspectError::NotPython(_))));
    }
}
