//! What the recorder needs of one ELF file (an executable, a shared object, the vDSO): its loadable segments (to
//! turn run-time addresses into file addresses), its unwind sections (`.eh_frame` and its index), its function
//! symbols and its build id.
//!
//! Files are read through [`object::read::ReadCache`], not mapped: a file truncated or rewritten while the
//! recorder looks at it gives errors, not a SIGBUS, and only the parts needed are read (a separate debug file can
//! be hundreds of megabytes). Everything kept is owned, so the file is closed once parsed. Nothing here trusts the
//! file: every offset and size is checked, and a malformed file gives an error or fewer symbols, never a panic.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader, SectionHeader, Sym};
use object::read::{ReadCache, ReadRef, StringTable};
use object::{Endianness, Object};

/// Why a file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ElfError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a 64-bit ELF file, or a malformed one.
    #[error("not a usable 64-bit ELF file: {0}")]
    Parse(#[from] object::read::Error),
}

/// One `PT_LOAD` segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    /// `p_vaddr`.
    pub vaddr: u64,
    /// `p_memsz`.
    pub memsz: u64,
    /// `p_offset`.
    pub offset: u64,
    /// `p_filesz`.
    pub filesz: u64,
    /// Whether the segment is executable (`PF_X`).
    pub exec: bool,
}

/// A section's contents and its address in the file (stated virtual memory address, "svma").
#[derive(Debug, Clone)]
pub struct SectionData {
    /// `sh_addr..sh_addr + sh_size`.
    pub svma: std::ops::Range<u64>,
    /// The bytes, shared with every process that maps the file.
    pub data: Arc<[u8]>,
}

/// The sections an unwinder needs: DWARF call frame information and the addresses it is relative to.
#[derive(Debug, Clone, Default)]
pub struct UnwindSections {
    /// `.eh_frame`.
    pub eh_frame: Option<SectionData>,
    /// `.eh_frame_hdr` (the binary search table over `.eh_frame`).
    pub eh_frame_hdr: Option<SectionData>,
    /// `.debug_frame` (only used without `.eh_frame`).
    pub debug_frame: Option<SectionData>,
    /// Address range of `.text` (base of `DW_EH_PE_textrel` pointers).
    pub text_svma: Option<std::ops::Range<u64>>,
    /// Address range of `.got` (base of `DW_EH_PE_datarel` pointers).
    pub got_svma: Option<std::ops::Range<u64>>,
}

impl UnwindSections {
    /// Whether there is call frame information at all.
    pub fn is_empty(&self) -> bool {
        self.eh_frame.is_none() && self.debug_frame.is_none()
    }
}

/// One function symbol: it covers `[start, end)` in file addresses.
#[derive(Debug, Clone, Copy)]
struct Func {
    start: u64,
    end: u64,
    /// Index into [`Symbols::names`].
    name: u32,
    /// Preference among symbols at the same address (global before weak before local).
    rank: u8,
}

/// The function symbols of a file, sorted by address, with their names as the file has them (not demangled).
#[derive(Debug, Default)]
pub struct Symbols {
    funcs: Vec<Func>,
    /// `max_end[i]`: the largest end of `funcs[..=i]`, to know how far back an enclosing symbol may start.
    max_end: Vec<u64>,
    names: Vec<Box<str>>,
}

/// How far back a lookup walks over symbols that end before the address, looking for one that encloses it
/// (nested symbols are rare; this bounds the cost on a file full of overlapping ones).
const MAX_WALK_BACK: usize = 64;

impl Symbols {
    /// Number of function symbols.
    pub fn len(&self) -> usize {
        self.funcs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.funcs.is_empty()
    }

    /// The symbol covering file address `svma`: its index (for [`Symbols::name`]), or `None` when no symbol's
    /// `[value, value + size)` holds it (never the nearest one).
    pub fn lookup(&self, svma: u64) -> Option<u32> {
        let after = self.funcs.partition_point(|f| f.start <= svma);
        let mut i = after;
        let mut steps = 0;
        while i > 0 && steps < MAX_WALK_BACK {
            i -= 1;
            steps += 1;
            // Nothing at or before i reaches svma: stop.
            if self.max_end[i] <= svma {
                return None;
            }
            let f = &self.funcs[i];
            if svma < f.end {
                return u32::try_from(i).ok();
            }
        }
        None
    }

    /// Name of symbol `index` (from [`Symbols::lookup`]), raw.
    pub fn name(&self, index: u32) -> &str {
        let Some(f) = self.funcs.get(index as usize) else { return "" };
        self.names.get(f.name as usize).map_or("", |n| n)
    }

    /// Start address of symbol `index`.
    pub fn start(&self, index: u32) -> u64 {
        self.funcs.get(index as usize).map_or(0, |f| f.start)
    }

    /// Reads the function symbols of a symbol table: `FUNC` symbols defined in a section, of non-zero size.
    fn from_table<'data, R: ReadRef<'data>>(
        file: &ElfFile64<'data, Endianness, R>,
        table: &object::read::elf::SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
    ) -> Symbols {
        let endian = file.endian();
        let strings = string_table(file, table);
        let mut out = Symbols::default();
        for sym in table.symbols() {
            if sym.st_type() != elf::STT_FUNC || sym.st_shndx(endian) == elf::SHN_UNDEF {
                continue;
            }
            let start = sym.st_value(endian);
            let size = sym.st_size(endian);
            let Some(end) = start.checked_add(size) else { continue };
            if size == 0 {
                continue;
            }
            let Ok(name) = strings.get(sym.st_name(endian)) else { continue };
            if name.is_empty() {
                continue;
            }
            let rank = match sym.st_bind() {
                elf::STB_GLOBAL => 0,
                elf::STB_WEAK => 1,
                _ => 2,
            };
            if !out.push(start, end, String::from_utf8_lossy(name).into(), rank) {
                break;
            }
        }
        out.finish();
        out
    }

    /// Adds a symbol (call [`Symbols::finish`] after the last). False when the table is full.
    fn push(&mut self, start: u64, end: u64, name: Box<str>, rank: u8) -> bool {
        let Ok(index) = u32::try_from(self.names.len()) else { return false };
        self.names.push(name);
        self.funcs.push(Func { start, end, name: index, rank });
        true
    }

    /// Sorts the symbols and drops duplicates: at one address, the preferred name first (then the longer symbol,
    /// then by name, so the choice does not depend on the table's order).
    fn finish(&mut self) {
        let names = &self.names;
        let name = |f: &Func| names.get(f.name as usize);
        self.funcs.sort_by(|a, b| {
            a.start.cmp(&b.start).then(a.rank.cmp(&b.rank)).then(b.end.cmp(&a.end)).then_with(|| name(a).cmp(&name(b)))
        });
        self.funcs.dedup_by(|later, first| later.start == first.start);
        let mut max = 0;
        self.max_end = self
            .funcs
            .iter()
            .map(|f| {
                max = max.max(f.end);
                max
            })
            .collect();
    }
}

/// What the recorder keeps of one ELF file.
#[derive(Debug, Default)]
pub struct ElfInfo {
    /// The `PT_LOAD` segments.
    pub loads: Vec<Load>,
    /// The lowest `p_vaddr` of the `PT_LOAD` segments (page aligned): "lib+0xoffset" names are relative to it.
    pub base_vaddr: u64,
    /// The GNU build id, lower-case hex ("" without one).
    pub build_id: Arc<str>,
    /// Unwind sections.
    pub unwind: UnwindSections,
    /// Function symbols (`.symtab`, else the separate debug file's, else `.dynsym`).
    pub symbols: Symbols,
    /// The `.gnu_debuglink` file name, if any.
    pub debuglink: Option<String>,
    /// Whether the file has a `.symtab` of its own (else a separate debug file is worth looking for).
    pub has_symtab: bool,
    /// Whether the symbols came from a separate debug file.
    pub has_debug_file: bool,
    /// Code ranges that have call frame information but no symbol (static functions of a stripped file), sorted:
    /// an address in one is named by the range's start, so a function's samples stay together.
    pub unnamed: Vec<(u64, u64)>,
    /// How many `.cold` parts were named from their jumps (see [`ElfInfo::parse_file_with`]).
    pub cold_parts: usize,
    /// File address of `__jit_debug_descriptor` (GDB's JIT interface: the list of the code a JIT generated, with
    /// its call frame information; see [`super::jit`]) when the file defines it.
    pub jit_descriptor: Option<u64>,
}

const PAGE: u64 = 4096;
/// Entries of `.eh_frame` looked at, at most (a hostile file cannot make parsing take forever).
const MAX_FDES: usize = 4_000_000;
/// Executable segments larger than this are not scanned for jumps to cold parts.
const MAX_SCAN: u64 = 1 << 30;

impl ElfInfo {
    /// Parses a file held in memory.
    pub fn parse_bytes(data: &[u8]) -> Result<ElfInfo, ElfError> {
        Self::parse_with(data, &mut |_| None)
    }

    /// Opens and parses the file at `path` (symbols of its own only).
    pub fn open(path: &Path) -> Result<ElfInfo, ElfError> {
        let file = File::open(path).map_err(|source| ElfError::Io { path: path.to_owned(), source })?;
        Self::parse_file_with(file, &mut |_| None)
    }

    /// Parses an open file. Without a `.symtab`, `debug` may give the parsed separate debug file whose symbols
    /// are then used. Then, for code with call frame information but no symbol: the ranges are kept
    /// ([`ElfInfo::unnamed`]), and GCC's cold partitions of functions (`f.cold`, whose symbol stripping removed:
    /// they are local) get their name back when exactly one named function jumps to them, none calls them, and
    /// their code does not start as a function does (with the return address on top of the stack). Debian's
    /// stripped interpreters run most of `_PyEval_EvalFrameDefault` in its cold part.
    pub fn parse_file_with(
        file: File,
        debug: &mut dyn FnMut(&ElfInfo) -> Option<ElfInfo>,
    ) -> Result<ElfInfo, ElfError> {
        let cache = ReadCache::new(file);
        Self::parse_with(&cache, debug)
    }

    fn parse_with<'data, R: ReadRef<'data>>(
        data: R,
        debug: &mut dyn FnMut(&ElfInfo) -> Option<ElfInfo>,
    ) -> Result<ElfInfo, ElfError> {
        let mut info = Self::parse(data)?;
        if !info.has_symtab {
            if let Some(d) = debug(&info) {
                info.use_debug_symbols(d);
            }
        }
        info.analyse_frames(data);
        Ok(info)
    }

    fn parse<'data, R: ReadRef<'data>>(data: R) -> Result<ElfInfo, ElfError> {
        let file = ElfFile64::<Endianness, R>::parse(data)?;
        let endian = file.endian();
        let mut info = ElfInfo::default();
        for ph in file.elf_program_headers() {
            if ph.p_type(endian) != elf::PT_LOAD {
                continue;
            }
            info.loads.push(Load {
                vaddr: ph.p_vaddr(endian),
                memsz: ph.p_memsz(endian),
                offset: ph.p_offset(endian),
                filesz: ph.p_filesz(endian),
                exec: ph.p_flags(endian).0 & elf::PF_X.0 != 0,
            });
        }
        info.base_vaddr = info.loads.iter().map(|l| l.vaddr).min().unwrap_or(0) & !(PAGE - 1);
        if let Ok(Some(id)) = file.build_id() {
            info.build_id = hex(id).into();
        }
        if let Ok(Some((name, _crc))) = file.gnu_debuglink() {
            info.debuglink = std::str::from_utf8(name).ok().map(str::to_owned);
        }
        info.unwind = unwind_sections(&file);
        let symtab = file.elf_symbol_table();
        info.has_symtab = !symtab.is_empty();
        info.symbols = Symbols::from_table(&file, symtab);
        if info.symbols.is_empty() {
            info.symbols = Symbols::from_table(&file, file.elf_dynamic_symbol_table());
        }
        info.jit_descriptor = object_symbol(&file, file.elf_dynamic_symbol_table(), JIT_DESCRIPTOR_SYMBOL)
            .or_else(|| object_symbol(&file, symtab, JIT_DESCRIPTOR_SYMBOL));
        Ok(info)
    }

    /// Takes the symbols of a separate debug file (`.symtab` of `objcopy --only-keep-debug` output) when the
    /// build ids match (or this file has none).
    pub fn use_debug_symbols(&mut self, debug: ElfInfo) -> bool {
        if !self.build_id.is_empty() && debug.build_id != self.build_id {
            return false;
        }
        if debug.symbols.is_empty() {
            return false;
        }
        self.symbols = debug.symbols;
        self.has_debug_file = true;
        true
    }

    /// The start of the unnamed code range holding `svma` (see [`ElfInfo::unnamed`]).
    pub fn unnamed_start(&self, svma: u64) -> Option<u64> {
        let i = self.unnamed.partition_point(|r| r.0 <= svma).checked_sub(1)?;
        let (start, end) = self.unnamed[i];
        (svma < end).then_some(start)
    }

    /// Finds the code ranges with call frame information but no symbol, and names cold parts.
    fn analyse_frames<'data, R: ReadRef<'data>>(&mut self, data: R) {
        use gimli::{CfaRule, CieOrFde, EhFrame, LittleEndian, UnwindSection as _};
        let Some(eh) = self.unwind.eh_frame.as_ref() else { return };
        let mut bases = gimli::BaseAddresses::default().set_eh_frame(eh.svma.start);
        if let Some(hdr) = &self.unwind.eh_frame_hdr {
            bases = bases.set_eh_frame_hdr(hdr.svma.start);
        }
        if let Some(text) = &self.unwind.text_svma {
            bases = bases.set_text(text.start);
        }
        if let Some(got) = &self.unwind.got_svma {
            bases = bases.set_got(got.start);
        }
        let mut eh_frame = EhFrame::new(&eh.data, LittleEndian);
        eh_frame.set_address_size(8);
        let mut ctx = Box::new(gimli::UnwindContext::new());
        let mut entries = eh_frame.entries(&bases);
        let mut unnamed = Vec::new();
        // Unnamed ranges whose code does not start as a function does: cold parts, maybe.
        let mut parts: HashMap<u64, u64> = HashMap::new();
        let mut budget = MAX_FDES;
        while let Ok(Some(entry)) = entries.next() {
            budget -= 1;
            if budget == 0 {
                break;
            }
            let CieOrFde::Fde(partial) = entry else { continue };
            let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else { continue };
            let start = fde.initial_address();
            let Some(end) = start.checked_add(fde.len()) else { continue };
            if start == 0 || start >= end || self.symbols.lookup(start).is_some() {
                continue;
            }
            unnamed.push((start, end));
            let entry = match fde.unwind_info_for_address(&eh_frame, &bases, &mut ctx, start) {
                Ok(row) => matches!(row.cfa(), CfaRule::RegisterAndOffset { register, offset: 8 }
                    if *register == gimli::X86_64::RSP),
                // Unknown: not a cold part then.
                Err(_) => true,
            };
            if !entry {
                parts.insert(start, end);
            }
        }
        unnamed.sort_unstable();
        unnamed.dedup_by(|later, first| later.0 < first.1);
        if !parts.is_empty() && !self.symbols.is_empty() {
            self.name_cold_parts(data, &parts);
            unnamed.retain(|r| self.symbols.lookup(r.0).is_none());
        }
        self.unnamed = unnamed;
    }

    /// Names the cold parts among `parts` (start -> end) from the jumps to their start in the executable
    /// segments: `f.cold` when all jumps from named code are from `f` and no call targets it. The bytes are
    /// scanned, not disassembled: a false match needs a 4-byte displacement to land exactly on a part's start,
    /// and at worst makes a part ambiguous (left unnamed), since any call or a second source rules it out.
    fn name_cold_parts<'data, R: ReadRef<'data>>(&mut self, data: R, parts: &HashMap<u64, u64>) {
        let (Some(&lo), Some(&hi)) = (parts.keys().min(), parts.keys().max()) else { return };
        // Part start -> the only named function seen jumping to it (None: called, or several sources).
        let mut sources: HashMap<u64, Option<u32>> = HashMap::new();
        for load in self.loads.iter().filter(|l| l.exec && l.filesz <= MAX_SCAN) {
            let Ok(bytes) = data.read_bytes_at(load.offset, load.filesz) else { continue };
            for i in 0..bytes.len().saturating_sub(5) {
                let (len, call) = match bytes[i] {
                    0xe9 => (5, false),
                    0xe8 => (5, true),
                    0x0f if bytes[i + 1] & 0xf0 == 0x80 => (6, false),
                    _ => continue,
                };
                let Some(disp) = bytes.get(i + len - 4..i + len) else { continue };
                let disp = i32::from_le_bytes([disp[0], disp[1], disp[2], disp[3]]);
                let from = load.vaddr.wrapping_add(i as u64);
                let target = from.wrapping_add(len as u64).wrapping_add_signed(i64::from(disp));
                if target < lo || target > hi || !parts.contains_key(&target) {
                    continue;
                }
                if call {
                    sources.insert(target, None);
                    continue;
                }
                // Jumps from unnamed code (the part itself) say nothing.
                let Some(f) = self.symbols.lookup(from) else { continue };
                sources
                    .entry(target)
                    .and_modify(|s| {
                        if *s != Some(f) {
                            *s = None
                        }
                    })
                    .or_insert(Some(f));
            }
        }
        let mut named = 0;
        for (start, f) in sources {
            let (Some(f), Some(&end)) = (f, parts.get(&start)) else { continue };
            let name = format!("{}.cold", self.symbols.name(f));
            if self.symbols.push(start, end, name.into(), 3) {
                named += 1;
            }
        }
        if named > 0 {
            self.symbols.finish();
        }
        self.cold_parts = named;
    }

    /// The load bias of a mapping of this file at `start` of file offset `offset`: run-time address minus file
    /// address. The file address of `offset` comes from the `PT_LOAD` segment holding it (executable ones first),
    /// so PIE executables, shared objects and segments whose `p_vaddr - p_offset` is not 0 all come out right.
    pub fn bias(&self, start: u64, offset: u64) -> u64 {
        let holds = |l: &&Load| {
            let aligned = l.offset & !(PAGE - 1);
            aligned <= offset && offset < l.offset.saturating_add(l.filesz.max(1))
        };
        let load = self.loads.iter().filter(|l| l.exec).find(holds).or_else(|| self.loads.iter().find(holds));
        let svma = match load {
            Some(l) => l.vaddr.wrapping_sub(l.offset).wrapping_add(offset),
            // No segment holds it (odd file): assume file addresses equal file offsets, as in most .so files.
            None => offset,
        };
        start.wrapping_sub(svma)
    }
}

/// The unwind sections of `file` (by name; a file without section headers has none).
fn unwind_sections<'data, R: ReadRef<'data>>(file: &ElfFile64<'data, Endianness, R>) -> UnwindSections {
    let endian = file.endian();
    let data = file.data();
    let table = file.elf_section_table();
    let mut out = UnwindSections::default();
    for sh in table.iter() {
        let Ok(name) = table.section_name(endian, sh) else { continue };
        let addr = sh.sh_addr(endian);
        let size = sh.sh_size(endian);
        let Some(end) = addr.checked_add(size) else { continue };
        let svma = addr..end;
        let section = |out: &mut Option<SectionData>| {
            if sh.sh_type(endian) == elf::SHT_NOBITS || out.is_some() {
                return;
            }
            // A compressed section would need inflating: none of these is compressed in practice.
            if sh.sh_flags(endian).0 & elf::SHF_COMPRESSED.0 != 0 {
                return;
            }
            if let Ok(bytes) = sh.data(endian, data) {
                if !bytes.is_empty() {
                    *out = Some(SectionData { svma: svma.clone(), data: Arc::from(bytes) });
                }
            }
        };
        match name {
            b".eh_frame" => section(&mut out.eh_frame),
            b".eh_frame_hdr" => section(&mut out.eh_frame_hdr),
            b".debug_frame" => section(&mut out.debug_frame),
            b".text" => out.text_svma = Some(svma),
            b".got" => out.got_svma = Some(svma),
            _ => {}
        }
    }
    out
}

/// The symbol of GDB's JIT interface descriptor (`struct jit_descriptor`, see [`super::jit`]).
pub const JIT_DESCRIPTOR_SYMBOL: &str = "__jit_debug_descriptor";

/// The file address of the data object `name` defined in `table`.
fn object_symbol<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    table: &object::read::elf::SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
    name: &str,
) -> Option<u64> {
    let endian = file.endian();
    let strings = string_table(file, table);
    table.symbols().iter().find_map(|sym| {
        let defined = sym.st_type() == elf::STT_OBJECT && sym.st_shndx(endian) != elf::SHN_UNDEF;
        (defined && strings.get(sym.st_name(endian)).ok() == Some(name.as_bytes())).then(|| sym.st_value(endian))
    })
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A separate debug file larger than this is not read (its symbol table is read whole: a crafted file could
/// make that gigabytes).
pub const MAX_DEBUG_FILE: u64 = 2 << 30;

/// Opens `path` as seen from `root` (a process's root, `/proc/PID/root`, or `/`) for reading, where the path
/// comes from the target (its maps, its `.gnu_debuglink`) and so may name anything: never blocks in `open()`
/// (`O_NONBLOCK`: a FIFO or a device would wait for a writer forever), resolves every component, symbolic links
/// included, inside `root` as the process itself sees them (`openat2`'s `RESOLVE_IN_ROOT`: an absolute link in a
/// container must not lead to the host's file; build-id links such as Fedora's `/usr/lib/debug/.build-id/xx/y.debug
/// -> ../../../../usr/bin/y.debug` still work), and gives only a regular file of at most `max_len` bytes. Where the
/// kernel has no `openat2` a link cannot be kept inside `root`, so the last component is not followed there
/// (`O_NOFOLLOW`).
pub fn open_in_root(root: &Path, path: &str, max_len: u64) -> std::io::Result<File> {
    use std::ffi::CString;
    use std::os::fd::{FromRawFd as _, OwnedFd};
    use std::os::unix::ffi::OsStrExt as _;
    let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what.to_string());
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        return Err(invalid("no file name"));
    }
    let c_root = CString::new(root.as_os_str().as_bytes()).map_err(|_| invalid("NUL in the path"))?;
    let c_rel = CString::new(rel).map_err(|_| invalid("NUL in the path"))?;
    // The root itself is the kernel's (the /proc/PID/root magic link): followed.
    // SAFETY: c_root is a NUL-terminated string that outlives the call.
    let dir = unsafe { libc::open(c_root.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if dir < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: dir is a descriptor just opened and owned by nothing else.
    let dir = unsafe { OwnedFd::from_raw_fd(dir) };
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: open_how is plain integers, for which all zeroes is a valid value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = flags as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    use std::os::fd::AsRawFd as _;
    // SAFETY: openat2 with a valid directory descriptor, a NUL-terminated path and an open_how of the size given,
    // all of which outlive the call.
    let mut fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c_rel.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    } as i32;
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        // No openat2 (before Linux 5.6, or filtered by a sandbox): the last component still is not followed.
        if !matches!(err.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) {
            return Err(err);
        }
        // SAFETY: openat with a valid directory descriptor and a NUL-terminated path that outlive the call.
        fd = unsafe { libc::openat(dir.as_raw_fd(), c_rel.as_ptr(), flags | libc::O_NOFOLLOW) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: fd is a descriptor just opened and owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    let md = file.metadata()?;
    if !md.file_type().is_file() {
        return Err(invalid("not a regular file"));
    }
    if md.len() > max_len {
        return Err(invalid("too large"));
    }
    Ok(file)
}

/// Where a separate debug file for a binary may be, as paths inside the process's root: by build id
/// (`/usr/lib/debug/.build-id/ab/cdef….debug`), then by `.gnu_debuglink` next to the binary, in its `.debug/`
/// and under `/usr/lib/debug/<dir>/`, then `/usr/lib/debug/<path>.debug` and `/usr/lib/debug/<path>`. Open them
/// with [`open_in_root`]: they are the target's to choose.
pub fn debug_file_candidates(path: &str, build_id: &str, debuglink: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if build_id.len() > 2 && build_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        out.push(format!("/usr/lib/debug/.build-id/{}/{}.debug", &build_id[..2], &build_id[2..]));
    }
    let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
    if let Some(link) = debuglink.filter(|l| !l.is_empty() && !l.contains('/')) {
        out.push(format!("{dir}/{link}"));
        out.push(format!("{dir}/.debug/{link}"));
        out.push(format!("/usr/lib/debug{dir}/{link}"));
    }
    if path.starts_with('/') {
        out.push(format!("/usr/lib/debug{path}.debug"));
        out.push(format!("/usr/lib/debug{path}"));
    }
    // The binary itself is never its own debug file.
    out.retain(|p| p != path);
    out
}

/// Demangles a C++ (`_Z…`) or Rust (`_R…`, legacy `_ZN…17h<hash>E`) symbol name; others (C) as they are. Rust
/// names lose their hash; C++ names are kept whole (with parameters). GCC clone suffixes (`.cold`, `.part.0`)
/// stay in C names.
pub fn demangle(name: &str) -> String {
    if name.starts_with("_R") || is_rust_legacy(name) {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") && name.len() <= MAX_MANGLED {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let mut out = Capped(String::new());
            if sym.structured_demangle(&mut out, &cpp_demangle::DemangleOptions::default()).is_ok() {
                return out.0;
            }
        }
    }
    name.to_string()
}

/// Longer mangled names are shown as they are.
const MAX_MANGLED: usize = 8192;
/// A demangled name longer than this is given up on (back-references can make the output of a crafted name grow
/// exponentially): the mangled name is shown.
const MAX_DEMANGLED: usize = 16384;

/// A `String` that refuses to grow past [`MAX_DEMANGLED`].
struct Capped(String);

impl std::fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.0.len() + s.len() > MAX_DEMANGLED {
            return Err(std::fmt::Error);
        }
        self.0.push_str(s);
        Ok(())
    }
}

/// `_ZN…17h<16 hex>E` (possibly with a `.llvm.…` style suffix): a legacy-mangled Rust symbol.
fn is_rust_legacy(name: &str) -> bool {
    if !name.starts_with("_ZN") {
        return false;
    }
    let end = name.find('.').unwrap_or(name.len());
    let core = &name.as_bytes()[..end];
    core.len() > 20 && core.ends_with(b"E") && {
        let hash = &core[core.len() - 20..core.len() - 1];
        hash.starts_with(b"17h") && hash[3..].iter().all(u8::is_ascii_hexdigit)
    }
}

/// The string table of a symbol table, read in one go: names looked up one by one through a [`ReadCache`] would
/// each be a read of the file (two system calls; thousands per libpython).
pub fn string_table<'data, R: ReadRef<'data>>(
    file: &ElfFile64<'data, Endianness, R>,
    table: &object::read::elf::SymbolTable<'data, elf::FileHeader64<Endianness>, R>,
) -> StringTable<'data, &'data [u8]> {
    let strings = file
        .elf_section_table()
        .section(table.string_section())
        .ok()
        .and_then(|s| s.data(file.endian(), file.data()).ok())
        .unwrap_or(&[]);
    StringTable::new(strings, 0, strings.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_and_cpp_and_keeps_c() {
        assert_eq!(demangle("_ZN4core3ptr13drop_in_place17h0123456789abcdefE"), "core::ptr::drop_in_place");
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("_PyEval_EvalFrameDefault.cold"), "_PyEval_EvalFrameDefault.cold");
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
        // Not a char boundary where the hash would be; a name whose demangling would explode.
        assert_eq!(demangle("_ZN3fooé17h0123456789abcdéE"), "_ZN3fooé17h0123456789abcdéE");
        let bomb = format!("_Z1fIJ{}EEvv", "S_".repeat(200));
        assert!(demangle(&bomb).len() <= MAX_DEMANGLED);
    }

    #[test]
    fn debug_candidates() {
        let c = debug_file_candidates("/usr/lib/libx.so", "abcdef", Some("libx.debug"));
        assert_eq!(c[0], "/usr/lib/debug/.build-id/ab/cdef.debug");
        assert!(c.iter().any(|p| p == "/usr/lib/debug/usr/lib/libx.debug"));
        assert!(debug_file_candidates("/usr/lib/libx.so", "", Some("libx.so")).iter().all(|p| p != "/usr/lib/libx.so"));
    }
}
