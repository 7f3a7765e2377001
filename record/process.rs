//! Finding the CPython interpreter inside a running process.
//!
//! [`inspect`] looks at the target's memory map for the ELF object that holds the interpreter
//! (a `libpython*.so`, or the executable itself when Python is linked statically into it, under
//! any name), reads its symbols with the `object` crate (`.symtab`, or `.dynsym` when `.symtab`
//! is stripped), computes the load bias from the mapping and the program headers, and reads the
//! interpreter version from the binary itself (the `Py_Version` constant on 3.11+, else the
//! `PY_VERSION` string that `Py_GetVersion` formats), never from the file name.
//!
//! Which layout (struct offsets) is used: the compiled-in table of [`crate::layouts`] for 2.7 and
//! 3.6-3.12. From 3.13 on, the interpreter's own `_Py_DebugOffsets` (the start of `_PyRuntime`,
//! read from the binary's initialised data) is the source: on 3.13 it must agree with the table
//! (else the process is refused), and a later 3.x is profiled from it alone when it passes the
//! sanity checks of [`layout_from_debug_offsets`]. Free-threaded (`Py_GIL_DISABLED`), debug
//! (`Py_DEBUG`) builds, versions before 2.7 / 3.6 and PyPy are refused with one clear line.
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
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ReadRef};

type Elf<'d, R> = ElfFile64<'d, object::Endianness, R>;

use crate::layouts::{self, Layout};

/// Why a process could not be profiled.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("process {0} is not a Python process (no libpython or CPython interpreter symbols found)")]
    NotPython(u32),
    /// `what` names the interpreter (`Python 3.5.10`, `Python 3.13.0 free-threaded`, `PyPy`);
    /// `why`, when not empty, says more (starts with ": ").
    #[error("process {pid} runs {what}, which pyperf does not support ({}){why}", supported_versions())]
    Unsupported { pid: u32, what: String, why: String },
    #[error("permission denied inspecting process {0} (run as root or with CAP_SYS_PTRACE)")]
    PermissionDenied(u32),
    #[error("process {pid}: cannot read {path}: {source}")]
    Io {
        pid: u32,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
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
}

/// A process found to run a supported CPython interpreter.
#[derive(Debug, Clone)]
pub struct PythonProcess {
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
    /// Per-version struct offsets.
    pub layout: &'static Layout,
}

impl PythonProcess {
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

/// One line of /proc/PID/maps that maps a file.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    path: String,
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
    // Only in Py_REF_DEBUG (debug) builds, whose object header and structs differ.
    "_Py_NegativeRefcount",
    // PyPy's libpypy*-c.so.
    "pypy_setup_home",
];

/// The supported versions, for messages: `2.7, 3.6-3.13`.
pub fn supported_versions() -> String {
    let mut parts: Vec<String> = Vec::new();
    let v = layouts::SUPPORTED;
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1].0 == v[i].0 && v[j + 1].1 == v[j].1 + 1 {
            j += 1;
        }
        parts.push(if i == j {
            format!("{}.{}", v[i].0, v[i].1)
        } else {
            format!("{}.{}-{}.{}", v[i].0, v[i].1, v[j].0, v[j].1)
        });
        i = j + 1;
    }
    parts.join(", ")
}

/// Why an interpreter is refused, before the pid is known (see [`InspectError::Unsupported`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub what: String,
    pub why: String,
}

impl Unsupported {
    fn new(what: impl Into<String>, why: impl Into<String>) -> Unsupported {
        let why = why.into();
        Unsupported { what: what.into(), why: if why.is_empty() { why } else { format!(": {why}") } }
    }

    pub fn for_pid(self, pid: u32) -> InspectError {
        InspectError::Unsupported { pid, what: self.what, why: self.why }
    }
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
    let mappings = parse_maps(&maps);
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
        let file_maps: Vec<&Mapping> = mappings.iter().filter(|m| m.path == path).collect();
        let info = match binary_info(pid, &path, &file_maps) {
            Ok(info) => info,
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(InspectError::PermissionDenied(pid)),
            Err(_) => continue,
        };
        let Some(info) = info.as_ref() else { continue };
        let syms = &info.syms;
        if syms.contains_key("pypy_setup_home") {
            return Err(Unsupported::new("PyPy", "pyperf reads CPython's interpreter state only").for_pid(pid));
        }
        let is_interp = syms.contains_key("_PyRuntime")
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
        let layout = select_layout(version, info.debug_block.as_deref()).map_err(|u| u.for_pid(pid))?;
        let at = |name: &str| syms.get(name).map(|&a| a.wrapping_add(bias));
        let addrs = PythonAddrs {
            runtime: at("_PyRuntime"),
            interp_head: at("interp_head"),
            tstate_current: at("_PyThreadState_Current"),
            auto_tls_key: at("autoTLSkey"),
            gil_locked: at("gil_locked"),
            gil_last_holder: at("gil_last_holder"),
            code_type: at("PyCode_Type"),
            interpreter_lock: at("interpreter_lock"),
            none: at("_Py_NoneStruct"),
            type_type: at("PyType_Type"),
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
            layout,
        });
    }
    Err(InspectError::NotPython(pid))
}

fn parse_maps(maps: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in maps.lines() {
        // start-end perms offset dev inode path
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(_perms), Some(off), Some(_dev), Some(inode), Some(rest)) =
            (it.next(), it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        if inode == "0" {
            continue;
        }
        let path = rest.trim_start();
        if !path.starts_with('/') {
            continue;
        }
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset)) =
            (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        let path = path.strip_suffix(" (deleted)").unwrap_or(path).to_string();
        out.push(Mapping { start, end, offset, path });
    }
    out
}

/// Opens a file the target has mapped: through its root (containers), else through map_files (deleted or
/// replaced files).
fn open_mapped_file(pid: u32, path: &str, maps: &[&Mapping]) -> io::Result<fs::File> {
    let rooted = format!("/proc/{pid}/root{path}");
    match fs::File::open(&rooted) {
        Ok(f) => Ok(f),
        Err(e) => {
            for m in maps {
                if m.offset == 0 {
                    if let Ok(f) = fs::File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)) {
                        return Ok(f);
                    }
                }
            }
            Err(e)
        }
    }
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
struct BinaryInfo {
    syms: HashMap<&'static str, u64>,
    version: Option<(u8, u8, u8)>,
    /// The `_Py_DebugOffsets` block at the start of `_PyRuntime`, as in the file.
    debug_block: Option<Vec<u8>>,
    build_id: Option<String>,
    segments: Vec<Segment>,
}

/// Binaries already analysed, by file identity: every process of one interpreter shares one analysis, so `-a` on a
/// host with many Python processes reads and parses libpython once, not once per process.
static BINARIES: Mutex<Vec<(FileId, Analysis)>> = Mutex::new(Vec::new());

/// (device, inode, size, mtime) of a file.
type FileId = (u64, u64, u64, i64);
/// `None`: not a 64-bit ELF file.
type Analysis = std::sync::Arc<Option<BinaryInfo>>;

/// Analyses the ELF file `path` mapped by `pid`; `None` if it is not a 64-bit ELF file. Reads only the parts of
/// the file it looks at (headers, symbol tables, a few bytes of data), not the whole file: libpython is tens of
/// megabytes.
fn binary_info(pid: u32, path: &str, maps: &[&Mapping]) -> io::Result<Analysis> {
    use std::os::unix::fs::MetadataExt;
    let file = open_mapped_file(pid, path, maps)?;
    let meta = file.metadata()?;
    let key = (meta.dev(), meta.ino(), meta.size(), meta.mtime());
    let mut cache = BINARIES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, info)) = cache.iter().find(|(k, _)| *k == key) {
        return Ok(info.clone());
    }
    let data = object::read::ReadCache::new(file);
    let info = std::sync::Arc::new(ElfFile64::<object::Endianness, _>::parse(&data).ok().map(|elf| {
        let syms = find_symbols(&elf);
        let version = read_version(&elf, &syms);
        let debug_block = syms
            .get("_PyRuntime")
            .and_then(|&rt| data_at(&elf, rt, layouts::debug_offsets::SIZE as u64))
            .map(<[u8]>::to_vec);
        let build_id = elf.build_id().ok().flatten().map(hex);
        let segments = elf
            .segments()
            .map(|s| {
                let (file_offset, file_size) = s.file_range();
                Segment { file_offset, file_size, address: s.address() }
            })
            .collect();
        BinaryInfo { syms, version, debug_block, build_id, segments }
    }));
    // Bounded: a host has few distinct interpreter binaries; forget the oldest beyond that.
    if cache.len() >= 64 {
        cache.remove(0);
    }
    cache.push((key, info.clone()));
    Ok(info)
}

/// Defined symbols of interest, by name -> link-time address. `.symtab` wins over `.dynsym`.
fn find_symbols<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>) -> HashMap<&'static str, u64> {
    let mut out = HashMap::new();
    for sym in elf.symbols().chain(elf.dynamic_symbols()) {
        if sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        if let Some(w) = WANTED.iter().find(|w| **w == name) {
            out.entry(*w).or_insert(sym.address());
        }
    }
    out
}

/// Load bias = runtime address - link-time address, from a mapping of the file and the PT_LOAD
/// segment that covers the mapping's file offset. 0 for a non-PIE executable.
fn load_bias(segments: &[Segment], maps: &[&Mapping]) -> Option<u64> {
    for m in maps {
        for seg in segments {
            // Mappings start on page boundaries: the segment's offset rounded down.
            let page_off = seg.file_offset & !0xfff;
            if m.offset >= page_off && m.offset < seg.file_offset + seg.file_size.max(1) {
                let vaddr_at_map = seg.address - (seg.file_offset - m.offset);
                return Some(m.start.wrapping_sub(vaddr_at_map));
            }
        }
    }
    None
}

/// Bytes of the file backing link-time address `addr` (from the segment containing it).
fn data_at<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, addr: u64, size: u64) -> Option<&'d [u8]> {
    elf.segments().find_map(|s| s.data_range(addr, size).ok().flatten())
}

fn read_version<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, syms: &HashMap<&'static str, u64>) -> Option<(u8, u8, u8)> {
    // 3.11+: `const unsigned long Py_Version = PY_VERSION_HEX;`
    if let Some(&addr) = syms.get("Py_Version") {
        if let Some(b) = data_at(elf, addr, 4) {
            let hex = u32::from_le_bytes(b.try_into().ok()?);
            let v = layouts::version_from_hex(hex);
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
    let text = elf.segments().find_map(|s| {
        let (a, len) = (s.address(), s.size());
        if func >= a && func < a + len {
            s.data_range(func, (a + len - func).min(192)).ok().flatten()
        } else {
            None
        }
    })?;
    // lea r64, [rip + disp32]: REX.W (0x48 or 0x4c), 0x8d, modrm with mod=00 rm=101.
    for i in 0..text.len().saturating_sub(7) {
        if (text[i] == 0x48 || text[i] == 0x4c) && text[i + 1] == 0x8d && text[i + 2] & 0xc7 == 0x05 {
            let disp = i32::from_le_bytes(text[i + 3..i + 7].try_into().ok()?);
            let target = (func + i as u64 + 7).wrapping_add(disp as i64 as u64);
            if let Some(s) = c_string_at(elf, target) {
                if let Some(v) = parse_version(s) {
                    return Some(v);
                }
            }
        }
    }
    None
}

fn c_string_at<'d, R: ReadRef<'d>>(elf: &Elf<'d, R>, addr: u64) -> Option<&'d [u8]> {
    for sec in elf.sections() {
        let (a, len) = (sec.address(), sec.size());
        if addr >= a && addr < a + len {
            let data = sec.data().ok()?;
            let rest = data.get((addr - a) as usize..)?;
            let end = rest.iter().take(64).position(|&b| b == 0)?;
            return Some(&rest[..end]);
        }
    }
    None
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

/// The layout for an interpreter of `version`, given the first bytes of its `_PyRuntime`
/// (`debug`, 3.13+: they start with `_Py_DebugOffsets`; `None` when the binary has no
/// `_PyRuntime` or it is not in initialised data).
///
/// - Up to 3.12: the compiled-in table, if the version is supported.
/// - 3.13+: `_Py_DebugOffsets` is required; a free-threaded build is refused. On a version with a
///   table (3.13), the debug offsets must agree with it, field by field; on a later one, the layout
///   comes from the debug offsets alone ([`layout_from_debug_offsets`]).
pub fn select_layout(version: (u8, u8, u8), debug: Option<&[u8]>) -> Result<&'static Layout, Unsupported> {
    let (major, minor, micro) = version;
    let what = format!("Python {major}.{minor}.{micro}");
    let first = layouts::debug_offsets::DEBUG_OFFSETS_FIRST;
    if major != 3 || (major, minor) < first {
        return layouts::layout_for(major, minor).ok_or_else(|| Unsupported::new(what, ""));
    }
    let Some(debug) = debug.filter(|d| d.len() >= 24 && d[..8] == layouts::debug_offsets::COOKIE[..]) else {
        return Err(Unsupported::new(what, "no _Py_DebugOffsets at the start of _PyRuntime"));
    };
    if u64_at(debug, layouts::debug_offsets::FREE_THREADED) != Some(0) {
        return Err(Unsupported::new(
            format!("{what} free-threaded (Py_GIL_DISABLED)"),
            "the free-threaded build has a different object layout and no GIL",
        ));
    }
    let hex = u64_at(debug, layouts::debug_offsets::VERSION).unwrap_or(0);
    let dv = layouts::version_from_hex(hex as u32);
    if (dv.0, dv.1) != (major, minor) {
        return Err(Unsupported::new(
            what,
            format!("_Py_DebugOffsets says version {}.{}.{} ({hex:#x})", dv.0, dv.1, dv.2),
        ));
    }
    let newest = layouts::layout_for(first.0, first.1).expect("a table for the first debug-offsets version");
    let newest = layouts::SUPPORTED.iter().rev().find_map(|v| layouts::layout_for(v.0, v.1)).unwrap_or(newest);
    let built = layout_from_debug_offsets(debug, (major, minor), newest).map_err(|why| Unsupported::new(&what, why))?;
    match layouts::layout_for(major, minor) {
        Some(table) => {
            let diff = cross_check(&built, table);
            if diff.is_empty() {
                Ok(table)
            } else {
                Err(Unsupported::new(
                    what,
                    format!("its _Py_DebugOffsets disagree with pyperf's {major}.{minor} table ({})", diff.join(", ")),
                ))
            }
        }
        None => Ok(intern(built)),
    }
}

/// The fields read from the debug offsets that differ between `built` and `table`, as
/// `name debug_offsets=X table=Y`.
fn cross_check(built: &Layout, table: &Layout) -> Vec<String> {
    let ours = table.fields();
    let mut names: Vec<&str> = layouts::debug_offsets::FIELDS.iter().map(|f| f.0).collect();
    names.extend(["gil_locked", "gil_last_holder"]);
    built
        .fields()
        .into_iter()
        .filter(|(n, _)| names.contains(n))
        .filter_map(|(n, v)| {
            let t = ours.iter().find(|f| f.0 == n).map_or(-1, |f| f.1);
            (t != v).then(|| format!("{n} debug_offsets={v} table={t}"))
        })
        .collect()
}

fn u64_at(data: &[u8], pos: i32) -> Option<u64> {
    let pos = usize::try_from(pos).ok()?;
    Some(u64::from_le_bytes(data.get(pos..pos + 8)?.try_into().ok()?))
}

/// Builds a [`Layout`] for `version` from a `_Py_DebugOffsets` block, read at the positions of
/// [`layouts::debug_offsets`]. Values the block does not carry (enum values, bit positions, a few
/// sizes) come from `base`, the newest compiled-in table; `runtime_autotss_key`, which pyperf does
/// not use, is -1. Refuses (with the reason) a block that fails the sanity checks: the
/// ABI-stable sentinel fields must equal `base`'s, and every offset must lie inside the size its
/// struct declares; so a block whose own layout moved is not misread.
pub fn layout_from_debug_offsets(debug: &[u8], version: (u8, u8), base: &Layout) -> Result<Layout, String> {
    use layouts::debug_offsets as d;
    let mut vals: HashMap<&str, i32> = HashMap::new();
    let get = |pos: i32| -> Result<i32, String> {
        let v = u64_at(debug, pos).ok_or_else(|| format!("_Py_DebugOffsets cut short at byte {pos}"))?;
        i32::try_from(v).ok().filter(|v| *v < 1 << 15).ok_or_else(|| format!("implausible offset {v} at byte {pos}"))
    };
    for (field, _, pos) in d::FIELDS {
        vals.insert(field, get(*pos)?);
    }
    let gil = get(d::GIL_STATE.1)?;
    let gil_locked = get(d::GIL_LOCKED.1)? - gil;
    let gil_last_holder = get(d::GIL_HOLDER.1)? - gil;
    let base_fields = base.fields();
    for s in d::SENTINELS {
        let want = base_fields.iter().find(|f| f.0 == *s).map_or(-1, |f| f.1);
        if vals[s] != want {
            return Err(format!(
                "_Py_DebugOffsets not in the layout pyperf reads ({s} = {}, expected {want})",
                vals[s]
            ));
        }
    }
    for (size_member, pos, fields) in d::SIZES {
        // Sizes may be large (sizeof(_PyRuntimeState) is ~280 KB on 3.13): not limited like offsets.
        let size = u64_at(debug, *pos).ok_or_else(|| format!("_Py_DebugOffsets cut short at byte {pos}"))?;
        let size = i64::try_from(size).unwrap_or(i64::MAX);
        for f in *fields {
            if vals[f] < 0 || i64::from(vals[f]) + 4 > size {
                return Err(format!(
                    "_Py_DebugOffsets not in the layout pyperf reads ({f} = {} outside {size_member} = {size})",
                    vals[f]
                ));
            }
        }
    }
    if !(0..=64).contains(&gil_locked) || !(0..=64).contains(&gil_last_holder) {
        return Err(format!("implausible GIL offsets (locked {gil_locked}, last_holder {gil_last_holder})"));
    }
    let v = |name: &str| vals[name];
    Ok(Layout {
        version,
        runtime_interpreters_head: v("runtime_interpreters_head"),
        runtime_autotss_key: -1,
        runtime_debug_offsets: 0,
        interp_next: v("interp_next"),
        interp_tstate_head: v("interp_tstate_head"),
        interp_gil_ptr: v("interp_gil_ptr"),
        gil_locked,
        gil_last_holder,
        tstate_next: v("tstate_next"),
        tstate_interp: v("tstate_interp"),
        tstate_current_frame: v("tstate_current_frame"),
        tstate_thread_id: v("tstate_thread_id"),
        tstate_native_thread_id: v("tstate_native_thread_id"),
        frame_back: v("frame_back"),
        frame_code: v("frame_code"),
        frame_instr: v("frame_instr"),
        frame_owner: v("frame_owner"),
        frame_localsplus: v("frame_localsplus"),
        code_argcount: v("code_argcount"),
        code_firstlineno: v("code_firstlineno"),
        code_filename: v("code_filename"),
        code_name: v("code_name"),
        code_qualname: v("code_qualname"),
        code_varnames: v("code_varnames"),
        code_linetable: v("code_linetable"),
        code_code: v("code_code"),
        code_size: v("code_size"),
        unicode_state: v("unicode_state"),
        unicode_length: v("unicode_length"),
        ascii_data: v("ascii_data"),
        // PyCompactUnicodeObject = PyASCIIObject + utf8_length + utf8 (3.12+).
        compact_data: v("ascii_data") + (base.compact_data - base.ascii_data),
        bytes_size: v("bytes_size"),
        bytes_data: v("bytes_data"),
        tuple_item: v("tuple_item"),
        object_type: v("object_type"),
        type_name: v("type_name"),
        // Not in _Py_DebugOffsets: as in the newest table (3.7+/3.12+ fields that are -1 there stay -1).
        ..*base
    })
}

/// Layouts built at run time live as long as the program; equal ones are shared, so that
/// profiling many processes of one interpreter keeps one copy.
fn intern(l: Layout) -> &'static Layout {
    static BUILT: Mutex<Vec<&'static Layout>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = built.iter().find(|b| ***b == l) {
        return found;
    }
    let leaked: &'static Layout = Box::leak(Box::new(l));
    built.push(leaked);
    leaked
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
        let m = parse_maps(
            "55d0c000-55d0d000 r--p 00000000 08:01 1234   /usr/bin/python3.11\n\
             7f00-8f00 rw-p 00000000 00:00 0 \n\
             7f10-7f20 r-xp 00001000 08:01 99 /lib/libpython3.11.so.1.0 (deleted)\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].start, 0x55d0c000);
        assert_eq!(m[1].path, "/lib/libpython3.11.so.1.0");
        assert_eq!(m[1].offset, 0x1000);
    }

    #[test]
    fn no_such_process() {
        assert!(matches!(inspect(u32::MAX - 7), Err(InspectError::NoSuchProcess(_))));
    }

    #[test]
    fn not_python() {
        assert!(matches!(inspect(std::process::id()), Err(InspectError::NotPython(_))));
    }

    fn message(r: Result<&'static Layout, Unsupported>) -> String {
        r.expect_err("must be refused").for_pid(123).to_string()
    }

    #[test]
    fn supported_versions_text() {
        assert_eq!(supported_versions(), "2.7, 3.6-3.13");
    }

    /// Versions no interpreter here has: one clear line each.
    #[test]
    fn unsupported_versions_say_so() {
        assert_eq!(
            message(select_layout((3, 5, 10), None)),
            "process 123 runs Python 3.5.10, which pyperf does not support (2.7, 3.6-3.13)"
        );
        assert_eq!(
            message(select_layout((2, 6, 9), None)),
            "process 123 runs Python 2.6.9, which pyperf does not support (2.7, 3.6-3.13)"
        );
        assert_eq!(
            message(select_layout((3, 14, 0), None)),
            "process 123 runs Python 3.14.0, which pyperf does not support (2.7, 3.6-3.13): \
             no _Py_DebugOffsets at the start of _PyRuntime"
        );
        assert_eq!(
            message(select_layout((3, 13, 0), Some(&[0u8; 600]))),
            "process 123 runs Python 3.13.0, which pyperf does not support (2.7, 3.6-3.13): \
             no _Py_DebugOffsets at the start of _PyRuntime"
        );
        let pypy = Unsupported::new("PyPy", "pyperf reads CPython's interpreter state only").for_pid(7).to_string();
        assert_eq!(
            pypy,
            "process 7 runs PyPy, which pyperf does not support (2.7, 3.6-3.13): \
             pyperf reads CPython's interpreter state only"
        );
        for v in [(2, 7, 18), (3, 6, 15), (3, 12, 1)] {
            assert_eq!(select_layout(v, None).map(|l| l.version), Ok((v.0, v.1)));
        }
    }

    /// The `_Py_DebugOffsets` block of the pyenv 3.13 interpreter (the static initialiser of
    /// `_PyRuntime` in its .data), read as `inspect` reads it.
    fn debug_block_3_13() -> Vec<u8> {
        let root = std::env::var_os("PYENV_ROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/root/.pyenv"));
        let lib = root.join("versions/3.13.0/lib/libpython3.13.so.1.0");
        let data = fs::read(&lib).unwrap_or_else(|e| panic!("{} (pyenv 3.13.0 is required): {e}", lib.display()));
        let elf = ElfFile64::<object::Endianness>::parse(&*data).expect("ELF");
        let syms = find_symbols(&elf);
        assert_eq!(read_version(&elf, &syms), Some((3, 13, 0)));
        let rt = syms["_PyRuntime"];
        data_at(&elf, rt, layouts::debug_offsets::SIZE as u64).expect("_PyRuntime in .data").to_vec()
    }

    fn put_u64(block: &mut [u8], pos: i32, v: u64) {
        block[pos as usize..pos as usize + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// 3.13: the interpreter's own debug offsets agree with the DWARF-checked table, field by
    /// field, and a disagreement refuses the process, naming the field.
    #[test]
    fn debug_offsets_cross_checked_on_3_13() {
        let block = debug_block_3_13();
        let table = layouts::layout_for(3, 13).unwrap();
        assert!(std::ptr::eq(select_layout((3, 13, 0), Some(&block)).unwrap(), table));
        let built = layout_from_debug_offsets(&block, (3, 13), table).unwrap();
        assert_eq!(cross_check(&built, table), Vec::<String>::new());
        // Every field but the one pyperf does not read from there is the table's.
        assert_eq!(Layout { runtime_autotss_key: table.runtime_autotss_key, ..built }, *table);

        let mut bad = block.clone();
        let pos = layouts::debug_offsets::FIELDS.iter().find(|f| f.0 == "tstate_native_thread_id").unwrap().2;
        put_u64(&mut bad, pos, table.tstate_native_thread_id as u64 + 8);
        assert_eq!(
            message(select_layout((3, 13, 0), Some(&bad))),
            format!(
                "process 123 runs Python 3.13.0, which pyperf does not support (2.7, 3.6-3.13): its _Py_DebugOffsets \
                 disagree with pyperf's 3.13 table (tstate_native_thread_id debug_offsets={} table={})",
                table.tstate_native_thread_id + 8,
                table.tstate_native_thread_id
            )
        );

        let mut ft = block.clone();
        put_u64(&mut ft, layouts::debug_offsets::FREE_THREADED, 1);
        assert_eq!(
            message(select_layout((3, 13, 0), Some(&ft))),
            "process 123 runs Python 3.13.0 free-threaded (Py_GIL_DISABLED), which pyperf does not support \
             (2.7, 3.6-3.13): the free-threaded build has a different object layout and no GIL"
        );

        // Py_Version and the block's version must agree.
        assert!(message(select_layout((3, 14, 0), Some(&block))).contains("_Py_DebugOffsets says version 3.13.0"));
    }

    /// A version after the newest table: the layout comes from the debug offsets alone. Fed the
    /// 3.13 block relabelled 3.14.0, it must give the 3.13 offsets under version 3.14, and a block
    /// whose own layout moved must be refused, not misread.
    #[test]
    fn debug_offsets_alone_for_a_newer_version() {
        let mut block = debug_block_3_13();
        put_u64(&mut block, layouts::debug_offsets::VERSION, 0x030E_00F0);
        let l = select_layout((3, 14, 0), Some(&block)).expect("3.14 from its debug offsets");
        let table = layouts::layout_for(3, 13).unwrap();
        assert_eq!(l.version, (3, 14));
        assert_eq!(cross_check(l, table), Vec::<String>::new());
        assert_eq!(l.runtime_autotss_key, -1);
        assert_eq!(Layout { version: (3, 13), runtime_autotss_key: table.runtime_autotss_key, ..*l }, *table);
        // Interned: a second process of the same interpreter shares it.
        assert!(std::ptr::eq(select_layout((3, 14, 0), Some(&block)).unwrap(), l));

        // A member added to interpreter_state moves everything after it by 8 bytes.
        let mut moved = block[..152].to_vec();
        moved.extend_from_slice(&[0u8; 8]);
        moved.extend_from_slice(&block[152..block.len() - 8]);
        let m = message(select_layout((3, 14, 0), Some(&moved)));
        assert!(m.starts_with("process 123 runs Python 3.14.0, which pyperf does not support"), "{m}");
        assert!(m.contains("_Py_DebugOffsets not in the layout pyperf reads"), "{m}");

        // An offset beyond its struct's declared size.
        let mut big = block.clone();
        let pos = layouts::debug_offsets::FIELDS.iter().find(|f| f.0 == "frame_owner").unwrap().2;
        put_u64(&mut big, pos, 4000);
        let m = message(select_layout((3, 14, 0), Some(&big)));
        assert!(m.contains("frame_owner = 4000 outside interpreter_frame.size"), "{m}");

        // Free-threaded 3.14t is refused by the flag too.
        put_u64(&mut block, layouts::debug_offsets::FREE_THREADED, 1);
        assert!(message(select_layout((3, 14, 0), Some(&block))).contains("free-threaded (Py_GIL_DISABLED)"));
    }
}
