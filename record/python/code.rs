//! Reading code objects: the code object address, instruction position and check word the BPF walker reports
//! for a frame become a name, a file and a line.
//!
//! BPF sends, per frame, the code object's address, a raw instruction position and a check word read from the
//! code object at sample time. The first time a (pid, address, check) is seen, we read the code object through
//! /proc/PID/mem, decode its names and keep its line table; later frames cost a hash lookup. The check word
//! catches a code object freed and another allocated at the same address between the sample and our read: then
//! the frame is reported as unresolved rather than with a wrong name.
//!
//! Names are the interpreter's: `co_name` and, on 3.11+, the scope from `co_qualname` (`Class.method`,
//! `outer.<locals>.inner`). Before 3.11 code objects know no class: the self/cls heuristic names a method
//! whose first argument is `self` after `type(self)` and one whose first argument is `cls` after `cls`, from
//! the first argument BPF read at sample time ([`FirstLocal`]). Strings are decoded from every layout CPython
//! uses: compact ASCII, compact 1/2/4-byte kinds, legacy (non-compact) `str` of 3.6 - 3.11, and 2.7's byte
//! strings; names longer than [`MAX_NAME_BYTES`] and paths longer than [`MAX_FILE_BYTES`] are cut on a
//! character boundary and flagged.
//!
//! Frames the interpreter itself does not show are hidden ([`Resolution::Hidden`]): on 3.11+ a frame whose
//! instruction is before the code object's `_co_firsttraceable` is "incomplete" (CPython's
//! `_PyFrame_IsIncomplete`: pushed but not started, or a shim such as 3.13's `__init__` trampoline).

use std::collections::HashMap;
use std::sync::Arc;

use pyperf_format::{symbol_flags, Symbol};

use super::layout::Layout;
use super::linetable;
use super::objects::{self, at, cut_str};
use super::versions::{Row, Strings, TPFLAGS_TYPE_SUBCLASS};
use crate::mem::{read_u64, ReadMem};

/// Longest function name kept, in bytes; longer names (and file names) are cut and flagged.
pub const MAX_NAME_BYTES: usize = 1024;
/// Longest file name kept, in bytes.
pub const MAX_FILE_BYTES: usize = 4096;

/// What BPF read of a frame's first local variable at sample time (<= 3.10 only, for the self/cls
/// heuristic; all zero on 3.11+ and when the code object takes no argument): `f_localsplus[0]` and its type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FirstLocal {
    /// The object (the instance bound to `self`, or the class bound to `cls`). Never dereferenced unless
    /// `type_addr` shows it is a class: an instance may have been freed since the sample.
    pub object: u64,
    /// `Py_TYPE(object)`, read at sample time.
    pub type_addr: u64,
}

impl FirstLocal {
    /// Nothing read (3.11+, or no first argument).
    pub const NONE: FirstLocal = FirstLocal { object: 0, type_addr: 0 };
}

/// What a frame resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// A Python frame, as the interpreter names it.
    Frame(Symbol),
    /// A frame the interpreter does not show (not started yet, or a shim): leave it out of the stack.
    Hidden,
    /// The code object is gone or unreadable.
    Lost,
}

/// The first argument of a code object, as far as the self/cls heuristic cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Receiver {
    None,
    /// `co_varnames[0] == "self"`: the class is `type(self)`.
    SelfArg,
    /// `co_varnames[0] == "cls"`: the class is the argument itself, when it is a class.
    ClsArg,
}

/// What we keep of a code object.
#[derive(Debug)]
pub struct CodeInfo {
    /// `Class` or `outer.<locals>` (from `co_qualname`, 3.11+), else empty.
    pub scope: String,
    /// `co_name`.
    pub name: String,
    /// `co_filename`.
    pub file: String,
    /// `co_firstlineno`.
    pub first_line: u32,
    /// `pyperf_format::symbol_flags` (names cut).
    pub flags: u32,
    receiver: Receiver,
    /// 3.11+: `_co_firsttraceable`, in code units.
    first_traceable: Option<u32>,
    table: Vec<u8>,
}

/// Per-process decoder of code objects.
pub struct CodeReader<M> {
    mem: M,
    row: &'static Row,
    layout: &'static Layout,
    /// &PyCode_Type in the target, when known.
    code_type: Option<u64>,
    first_traceable: Option<i32>,
    cache: HashMap<(u64, u32), Option<Arc<CodeInfo>>>,
    /// Class object -> its name (`tp_name`), `None` when it is not a class or not readable.
    classes: HashMap<u64, Option<Arc<str>>>,
    /// Type object -> is it a metaclass (`cls` frames look this up per sample).
    metatypes: HashMap<u64, bool>,
    /// (code, check) -> the program's copy, until the code object is first resolved.
    snapshots: HashMap<(u64, u32), Snapshot>,
    from_snapshots: u64,
}

/// A read from the program's copy where it holds the bytes, else from the live process (a read that straddles the
/// copy's end fails: half of it would be from another instant).
struct CopyFirst<'a, M> {
    copy: &'a Snapshot,
    live: &'a M,
}

impl<M: ReadMem> ReadMem for CopyFirst<'_, M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        if self.copy.read(addr, buf) {
            return true;
        }
        let end = addr.saturating_add(buf.len() as u64);
        let overlaps = self.copy.regions.iter().any(|(start, bytes)| addr < start + bytes.len() as u64 && end > *start);
        !overlaps && self.live.read(addr, buf)
    }
}

/// Most code snapshots kept waiting for their sample.
const MAX_SNAPSHOTS: usize = 4096;

/// A code object and the objects it names, as the BPF program copied them at a sample (`struct pyperf_code_snap`):
/// regions of the target's memory at that instant. Reads outside them fail: nothing else of the process is known
/// from that instant.
#[derive(Debug, Default)]
pub struct Snapshot {
    regions: Vec<(u64, Vec<u8>)>,
}

impl Snapshot {
    /// Adds `bytes` copied from `addr`.
    pub fn add(&mut self, addr: u64, bytes: &[u8]) {
        if addr != 0 && !bytes.is_empty() {
            self.regions.push((addr, bytes.to_vec()));
        }
    }
}

impl ReadMem for Snapshot {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        self.regions.iter().any(|(start, bytes)| {
            let Some(off) = addr.checked_sub(*start).and_then(|o| usize::try_from(o).ok()) else { return false };
            match bytes.get(off..).and_then(|b| b.get(..buf.len())) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    true
                }
                None => false,
            }
        })
    }
}

impl<M: ReadMem> CodeReader<M> {
    /// A reader of the code objects of a process whose interpreter is described by `row`; `code_type` is
    /// `&PyCode_Type` there, if known.
    pub fn new(mem: M, row: &'static Row, code_type: Option<u64>) -> Self {
        let layout = row.layout;
        let first_traceable = row.first_traceable.filter(|&o| o + 4 <= layout.code_size);
        CodeReader {
            mem,
            row,
            layout,
            code_type,
            first_traceable,
            cache: HashMap::new(),
            classes: HashMap::new(),
            metatypes: HashMap::new(),
            snapshots: HashMap::new(),
            from_snapshots: 0,
        }
    }

    /// Number of distinct code objects seen.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Keeps the program's copy of a code object (a `PYPERF_EVENT_CODE` record, just before the sample that holds
    /// it), for when the object is gone by the time it is read.
    pub fn add_snapshot(&mut self, code: u64, check: u32, snapshot: Snapshot) {
        if self.cache.contains_key(&(code, check)) {
            return;
        }
        // Each is taken by the sample that follows it; a bound for those whose sample never came (ring full).
        if self.snapshots.len() >= MAX_SNAPSHOTS {
            self.snapshots.clear();
        }
        self.snapshots.insert((code, check), snapshot);
    }

    /// Code objects named from the program's copy (they were gone when read).
    pub fn from_snapshots(&self) -> u64 {
        self.from_snapshots
    }

    /// Resolves one frame: the code object at `code` (whose check word BPF computed as `check`), executing
    /// the raw instruction position `instr`, with the first local BPF read (<= 3.10; [`FirstLocal::NONE`] else).
    ///
    /// The result depends on the frame's class ([`CodeReader::class_key`]) besides (code, check, instr): a
    /// caller caching results must key them by all four.
    pub fn resolve(&mut self, code: u64, instr: u32, check: u32, first_local: FirstLocal) -> Resolution {
        let Some(info) = self.code_info(code, check) else { return Resolution::Lost };
        let offset = self.instr_offset(instr);
        if let Some(first) = info.first_traceable {
            // CPython's _PyFrame_IsIncomplete: not started (no offset) or stopped before the first traceable
            // instruction (3.13's __init__ shim sits at offset 0 of a code object whose first traceable is 4).
            if offset.is_none_or(|o| o / 2 < first) {
                return Resolution::Hidden;
            }
        }
        let line = offset
            .and_then(|o| linetable::line_at(self.row.line_table, info.first_line, &info.table, o))
            .unwrap_or(info.first_line);
        let class = self.class_of(&info, first_local).and_then(|c| self.class_name(c));
        Resolution::Frame(Symbol {
            scope: match class {
                Some(c) => c.to_string(),
                None => info.scope.clone(),
            },
            name: info.name.clone(),
            file: info.file.clone(),
            line,
            flags: info.flags,
        })
    }

    /// The check word of the live code object at `code` (what BPF computes for a sampled frame), for frames read
    /// from memory by user space (a suspended coroutine's); `None` when it is not a readable code object.
    pub fn live_check(&self, code: u64) -> Option<u32> {
        let l = self.layout;
        let end =
            [l.code_firstlineno + 4, l.code_filename + 8, l.code_name + 8, l.object_type + 8].into_iter().max()?;
        let mut obj = vec![0u8; usize::try_from(end).ok()?];
        if code == 0 || !self.mem.read(code, &mut obj) {
            return None;
        }
        if self.code_type.is_some_and(|t| field_ptr(&obj, l.object_type) != Some(t)) {
            return None;
        }
        Some(code_check(
            field_u32(&obj, l.code_firstlineno)?,
            field_ptr(&obj, l.code_filename)?,
            field_ptr(&obj, l.code_name)?,
        ))
    }

    /// The class a frame is named after, or 0: what a cache of [`CodeReader::resolve`] results must key by,
    /// besides (code, check, instr). Costs nothing on 3.11+ and for frames without a first argument.
    pub fn class_key(&mut self, code: u64, check: u32, first_local: FirstLocal) -> u64 {
        if first_local.type_addr == 0 {
            return 0;
        }
        match self.code_info(code, check) {
            Some(info) => self.class_of(&info, first_local).unwrap_or(0),
            None => 0,
        }
    }

    fn code_info(&mut self, code: u64, check: u32) -> Option<Arc<CodeInfo>> {
        match self.cache.get(&(code, check)) {
            Some(hit) => hit.clone(),
            None => {
                // The copy the program took at the sample, else the live object. The copy first: the objects it names
                // may have been freed since and their memory reused (a check word compares pointers only).
                // While the object lives, what is not in the copy comes from the process (<= 3.10: the self/cls
                // heuristic's `co_varnames[0]`); once it is gone, only the copy is read.
                let alive = self.code_object(&self.mem, code, check).is_some();
                let copied = self.snapshots.remove(&(code, check)).and_then(|copy| match alive {
                    true => self.read_code(&CopyFirst { copy: &copy, live: &self.mem }, code, check),
                    false => self.read_code(&copy, code, check),
                });
                let info = match copied {
                    Some(c) => {
                        // Counted when only the copy could name it.
                        self.from_snapshots += u64::from(!alive);
                        Some(c)
                    }
                    None if alive => self.read_code(&self.mem, code, check),
                    None => None,
                };
                let info = info.map(Arc::new);
                self.cache.insert((code, check), info.clone());
                info
            }
        }
    }

    /// The class object of the self/cls heuristic: `type(self)`, or `cls` when BPF saw a class there.
    fn class_of(&mut self, info: &CodeInfo, first: FirstLocal) -> Option<u64> {
        if first.type_addr == 0 {
            return None;
        }
        match info.receiver {
            Receiver::None => None,
            Receiver::SelfArg => Some(first.type_addr),
            // `cls` is a class when its type is a metaclass; then the object is long-lived and may be read.
            Receiver::ClsArg => (first.object != 0 && self.is_metatype(first.type_addr)).then_some(first.object),
        }
    }

    /// Is `t` (a type object) `type` or a subclass of it? Types are long-lived: cached.
    fn is_metatype(&mut self, t: u64) -> bool {
        if let Some(&hit) = self.metatypes.get(&t) {
            return hit;
        }
        let mut flags = [0u8; 8];
        let meta = at(t, self.row.type_flags).is_some_and(|a| self.mem.read(a, &mut flags))
            && u64::from_le_bytes(flags) & TPFLAGS_TYPE_SUBCLASS != 0;
        self.metatypes.insert(t, meta);
        meta
    }

    /// `tp_name` of the class object `class`, once it is checked to be one (its type is a metaclass).
    fn class_name(&mut self, class: u64) -> Option<Arc<str>> {
        if let Some(hit) = self.classes.get(&class) {
            return hit.clone();
        }
        let name = self.read_class_name(class).map(Arc::from);
        self.classes.insert(class, name.clone());
        name
    }

    fn read_class_name(&mut self, class: u64) -> Option<String> {
        let l = self.layout;
        let meta = self.read_u64(at(class, l.object_type)?)?;
        if !self.is_metatype(meta) {
            return None;
        }
        let ptr = self.read_u64(at(class, l.type_name)?)?;
        let (name, cut) = self.read_cstr(ptr, MAX_NAME_BYTES)?;
        // 2.7 old-style classes: instances are all of type `instance`, classes of type `classobj`.
        let old_style = self.row.strings == Strings::Py2Bytes && (name == "instance" || name == "classobj");
        if cut || name.is_empty() || old_style {
            return None;
        }
        Some(name)
    }

    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.mem.read(addr, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// A NUL-terminated UTF-8 C string of at most `max` bytes ([`objects::read_cstr`]).
    fn read_cstr(&self, addr: u64, max: usize) -> Option<(String, bool)> {
        objects::read_cstr(&self.mem, addr, max)
    }

    /// Byte offset of the instruction in the bytecode; `None` when the frame has not started.
    fn instr_offset(&self, instr: u32) -> Option<u32> {
        linetable::instr_byte_offset(self.row.instr, instr, self.layout.code_code.max(0) as u32)
    }

    /// The code object's bytes at `code` in `mem`, if it is still the one BPF saw: freed and replaced since the
    /// sample was taken, its name would be someone else's, so it must still be a code object with the same line,
    /// file and name pointers (the check word).
    fn code_object<R: ReadMem>(&self, mem: &R, code: u64, check: u32) -> Option<Vec<u8>> {
        let l = self.layout;
        let size = usize::try_from(l.code_size).ok()?;
        let mut obj = vec![0u8; size];
        if code == 0 || !mem.read(code, &mut obj) {
            return None;
        }
        if self.code_type.is_some_and(|t| field_ptr(&obj, l.object_type) != Some(t)) {
            return None;
        }
        let first_line = field_u32(&obj, l.code_firstlineno)?;
        let file_ptr = field_ptr(&obj, l.code_filename)?;
        let name_ptr = field_ptr(&obj, l.code_name)?;
        (code_check(first_line, file_ptr, name_ptr) == check).then_some(obj)
    }

    fn read_code<R: ReadMem>(&self, mem: &R, code: u64, check: u32) -> Option<CodeInfo> {
        let l = self.layout;
        let obj = self.code_object(mem, code, check)?;
        let first_line = field_u32(&obj, l.code_firstlineno)?;
        let file_ptr = field_ptr(&obj, l.code_filename)?;
        let name_ptr = field_ptr(&obj, l.code_name)?;
        let mut flags = 0;
        let (name, cut) = objects::read_str(mem, self.row, name_ptr, MAX_NAME_BYTES)?;
        if cut {
            flags |= symbol_flags::NAME_CUT;
        }
        let (file, cut) = objects::read_str(mem, self.row, file_ptr, MAX_FILE_BYTES)?;
        if cut {
            flags |= symbol_flags::FILE_CUT;
        }
        let mut receiver = Receiver::None;
        let scope = match field_ptr(&obj, l.code_qualname) {
            Some(q) => {
                // Long enough for the scope of a name cut at MAX_NAME_BYTES; the scope itself is cut there.
                let (qualname, cut) = objects::read_str(mem, self.row, q, 2 * MAX_NAME_BYTES + 1)?;
                let scope =
                    if cut { String::new() } else { scope_of(&qualname, &name, flags & symbol_flags::NAME_CUT != 0) };
                let (scope, scope_cut) = cut_str(scope, MAX_NAME_BYTES);
                if cut || scope_cut {
                    flags |= symbol_flags::NAME_CUT;
                }
                scope
            }
            None => {
                if field_i32(&obj, l.code_argcount).is_some_and(|n| n >= 1) {
                    receiver = self.receiver(mem, &obj);
                }
                String::new()
            }
        };
        let first_traceable = self.first_traceable.and_then(|o| field_i32(&obj, o)).map(|n| n.max(0) as u32);
        let table = field_ptr(&obj, l.code_linetable)
            .and_then(|p| objects::read_bytes(mem, self.layout, p, 1 << 20))
            .unwrap_or_default();
        Some(CodeInfo { scope, name, file, first_line, flags, receiver, first_traceable, table })
    }

    /// `co_varnames[0]` of a code object taking at least one argument: `self`, `cls` or something else.
    fn receiver<R: ReadMem>(&self, mem: &R, obj: &[u8]) -> Receiver {
        let l = self.layout;
        let first = field_ptr(obj, l.code_varnames)
            .and_then(|t| {
                let mut n = [0u8; 8];
                let len = mem.read(at(t, l.bytes_size)?, &mut n).then(|| i64::from_le_bytes(n))?;
                (len >= 1).then(|| read_u64(mem, at(t, l.tuple_item)?))?
            })
            .and_then(|v| objects::read_str(mem, self.row, v, 8));
        match first {
            Some((s, false)) if s == "self" => Receiver::SelfArg,
            Some((s, false)) if s == "cls" => Receiver::ClsArg,
            _ => Receiver::None,
        }
    }

    /// Reads a str ([`objects::read_str`]): the text and whether it was cut at `max` bytes.
    #[cfg(test)]
    fn read_str(&self, obj: u64, max: usize) -> Option<(String, bool)> {
        objects::read_str(&self.mem, self.row, obj, max)
    }
}

/// The symbol shown when a code object cannot be read: named by address so that distinct ones stay distinct,
/// flagged so that it is never mistaken for a real name.
pub fn unresolved(code: u64) -> Symbol {
    Symbol {
        scope: String::new(),
        name: format!("[unknown code {code:#x}]"),
        file: String::new(),
        line: 0,
        flags: symbol_flags::UNRESOLVED,
    }
}

/// The check word BPF computes per code object (pyperf_code_check in bpf/walk.bpf.h; keep them equal).
pub fn code_check(first_line: u32, filename: u64, name: u64) -> u32 {
    let fold = |p: u64| (p as u32) ^ ((p >> 32) as u32);
    first_line.wrapping_add(fold(filename).wrapping_mul(31)).wrapping_add(fold(name).wrapping_mul(1009))
}

/// `Class.method` -> `Class`; `outer.<locals>.inner` -> `outer.<locals>`; `f` -> ``. `name_cut`: `name` is the
/// first bytes of the real name, which the qualname holds in full: the scope ends before the last `.` that
/// comes before where `name` starts.
fn scope_of(qualname: &str, name: &str, name_cut: bool) -> String {
    if name_cut {
        return match qualname.rfind(&format!(".{name}")) {
            Some(i) => qualname[..i].to_string(),
            None => String::new(),
        };
    }
    match qualname.strip_suffix(name) {
        Some(prefix) if prefix.ends_with('.') => prefix[..prefix.len() - 1].to_string(),
        _ => String::new(),
    }
}

fn field_i32(obj: &[u8], off: i32) -> Option<i32> {
    field_u32(obj, off).map(|v| v as i32)
}

fn field_u32(obj: &[u8], off: i32) -> Option<u32> {
    let off = usize::try_from(off).ok()?;
    Some(u32::from_le_bytes(obj.get(off..off + 4)?.try_into().ok()?))
}

fn field_ptr(obj: &[u8], off: i32) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    let p = u64::from_le_bytes(obj.get(off..off + 8)?.try_into().ok()?);
    (p != 0).then_some(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::objects::utf8_cut;
    use crate::python::testing::FakeMem as Mem;
    use crate::python::versions::row_for;

    #[test]
    fn scopes() {
        assert_eq!(scope_of("Worker.run", "run", false), "Worker");
        assert_eq!(scope_of("outer.<locals>.inner", "inner", false), "outer.<locals>");
        assert_eq!(scope_of("f", "f", false), "");
        assert_eq!(scope_of("xf", "f", false), "");
        assert_eq!(scope_of("A.<locals>.long_name_beyond", "long_na", true), "A.<locals>");
        assert_eq!(scope_of("long_name_beyond", "long_na", true), "");
    }

    #[test]
    fn cuts_on_character_boundaries() {
        assert_eq!(utf8_cut("abc".as_bytes(), 3), ("abc".to_string(), false));
        assert_eq!(utf8_cut("aé".as_bytes(), 2), ("a".to_string(), true)); // é split: dropped
        assert_eq!(utf8_cut("a𠮷b".as_bytes(), 4), ("a".to_string(), true));
        assert_eq!(utf8_cut("a𠮷b".as_bytes(), 5), ("a𠮷".to_string(), true));
        // An invalid byte becomes U+FFFD (3 bytes): the result still fits in `max`.
        assert_eq!(utf8_cut(b"a\xffbc", 3), ("a".to_string(), true));
        assert_eq!(utf8_cut(b"a\xffbc", 5), ("a\u{fffd}b".to_string(), true));
        assert_eq!(cut_str("ééé".to_string(), 5), ("éé".to_string(), true));
    }

    /// Python objects in a simulated process's memory, in the layout of `l`.
    trait Objects {
        fn str3(&self, l: &Layout, text: &str, compact: bool) -> u64;
        fn bytes(&self, l: &Layout, b: &[u8]) -> u64;
        fn text(&self, l: &Layout, t: &str) -> u64;
        fn tuple(&self, l: &Layout, items: &[u64]) -> u64;
        fn type_obj(&self, l: &Layout, name: &str, meta: u64, flags: u64) -> u64;
    }

    impl Objects for Mem {
        /// A 3.x str in the layout of `l`: compact (ASCII or not) or legacy, of the smallest kind.
        fn str3(&self, l: &Layout, text: &str, compact: bool) -> u64 {
            let chars: Vec<u32> = text.chars().map(|c| c as u32).collect();
            let max = chars.iter().copied().max().unwrap_or(0);
            let ascii = max < 128;
            let kind: u32 = if max < 256 {
                1
            } else if max < 65536 {
                2
            } else {
                4
            };
            let mut data = Vec::new();
            for &c in &chars {
                data.extend_from_slice(&c.to_le_bytes()[..kind as usize]);
            }
            data.extend_from_slice(&[0; 4]);
            let state = (kind << l.unicode_kind_shift)
                | (u32::from(compact) << l.unicode_compact_shift)
                | (u32::from(ascii) << l.unicode_ascii_shift)
                | 1 << 7; // ready
            let head = if !compact {
                l.compact_data as usize + 8
            } else if ascii {
                l.ascii_data as usize
            } else {
                l.compact_data as usize
            };
            let mut obj = vec![0u8; head + if compact { data.len() } else { 0 }];
            obj[l.unicode_length as usize..][..8].copy_from_slice(&(chars.len() as u64).to_le_bytes());
            obj[l.unicode_state as usize..][..4].copy_from_slice(&state.to_le_bytes());
            if compact {
                obj[head..].copy_from_slice(&data);
                self.put(obj)
            } else {
                let d = self.put(data);
                obj[l.compact_data as usize..][..8].copy_from_slice(&d.to_le_bytes());
                self.put(obj)
            }
        }

        /// PyBytesObject / 2.7 PyStringObject.
        fn bytes(&self, l: &Layout, b: &[u8]) -> u64 {
            let mut obj = vec![0u8; l.bytes_data as usize + b.len() + 1];
            obj[l.bytes_size as usize..][..8].copy_from_slice(&(b.len() as u64).to_le_bytes());
            obj[l.bytes_data as usize..][..b.len()].copy_from_slice(b);
            self.put(obj)
        }

        fn text(&self, l: &Layout, t: &str) -> u64 {
            if l.version.0 == 2 {
                self.bytes(l, t.as_bytes())
            } else {
                self.str3(l, t, true)
            }
        }

        fn tuple(&self, l: &Layout, items: &[u64]) -> u64 {
            let mut obj = vec![0u8; l.tuple_item as usize + 8 * items.len()];
            obj[l.bytes_size as usize..][..8].copy_from_slice(&(items.len() as u64).to_le_bytes());
            for (i, it) in items.iter().enumerate() {
                obj[l.tuple_item as usize + 8 * i..][..8].copy_from_slice(&it.to_le_bytes());
            }
            self.put(obj)
        }

        /// A type object named `name` whose type is `meta` (0: itself), with tp_flags `flags`.
        fn type_obj(&self, l: &Layout, name: &str, meta: u64, flags: u64) -> u64 {
            let mut cname = name.as_bytes().to_vec();
            cname.push(0);
            let name_at = self.put(cname);
            let t = self.put(vec![0u8; 400]);
            let meta = if meta == 0 { t } else { meta };
            self.set(t, l.object_type, &meta.to_le_bytes());
            self.set(t, l.type_name, &name_at.to_le_bytes());
            self.set(t, 168, &flags.to_le_bytes());
            t
        }
    }

    struct Code {
        addr: u64,
        check: u32,
    }

    /// A code object named `name` at line `first` of `file`, with `args.0` arguments, the first `args.1`.
    fn code(mem: &Mem, l: &Layout, code_type: u64, name: &str, file: &str, first: u32, args: (i32, &str)) -> Code {
        let (argc, arg0) = args;
        let name_p = mem.text(l, name);
        let file_p = mem.text(l, file);
        let v0 = mem.text(l, arg0);
        let varnames = mem.tuple(l, &[v0]);
        let table = mem.bytes(l, &[]);
        let c = mem.put(vec![0u8; l.code_size as usize]);
        mem.set(c, l.object_type, &code_type.to_le_bytes());
        mem.set(c, l.code_firstlineno, &first.to_le_bytes());
        mem.set(c, l.code_argcount, &argc.to_le_bytes());
        mem.set(c, l.code_name, &name_p.to_le_bytes());
        mem.set(c, l.code_filename, &file_p.to_le_bytes());
        mem.set(c, l.code_varnames, &varnames.to_le_bytes());
        mem.set(c, l.code_linetable, &table.to_le_bytes());
        if l.code_qualname >= 0 {
            let q = mem.text(l, name);
            mem.set(c, l.code_qualname, &q.to_le_bytes());
        }
        Code { addr: c, check: code_check(first, file_p, name_p) }
    }

    fn frame(r: Resolution) -> Symbol {
        match r {
            Resolution::Frame(s) => s,
            other => panic!("{other:?}"),
        }
    }

    /// Pointers from the target (a code object's name and file, a class BPF saw) near the end of the address space:
    /// the frame is lost, never a panic (a debug build's overflow check) nor a guess.
    #[test]
    fn pointers_near_the_end_of_the_address_space_are_lost_frames() {
        for v in [(2, 7), (3, 6), (3, 10), (3, 11), (3, 12), (3, 13)] {
            let row = row_for(v.0, v.1).unwrap();
            let l = row.layout;
            let mem = Mem::default();
            // The last page of the address space, full of 0xff.
            mem.put_at(u64::MAX - 4095, vec![0xff; 4096]);
            let code_type = mem.type_obj(l, "code", 0, 0);
            let meta = mem.type_obj(l, "type", 0, TPFLAGS_TYPE_SUBCLASS);
            let c = code(&mem, l, code_type, "f", "a.py", 3, (1, "cls"));
            for bad in [u64::MAX - 3, u64::MAX - 16] {
                mem.set(c.addr, l.code_name, &bad.to_le_bytes());
                mem.set(c.addr, l.code_filename, &bad.to_le_bytes());
                let check = code_check(3, bad, bad);
                let mut r = CodeReader::new(&mem, row, Some(code_type));
                assert_eq!(r.resolve(c.addr, 0, check, FirstLocal::NONE), Resolution::Lost, "{v:?}");
            }
            // A class at the very end (its type and name lie past it), and a type pointer there.
            let c = code(&mem, l, code_type, "g", "a.py", 5, (1, "cls"));
            let mut r = CodeReader::new(&mem, row, Some(code_type));
            for first in [
                FirstLocal { object: u64::MAX - 7, type_addr: meta },
                FirstLocal { object: 0x10, type_addr: u64::MAX - 7 },
            ] {
                let _ = r.class_key(c.addr, c.check, first);
                if let Resolution::Frame(f) = r.resolve(c.addr, 0, c.check, first) {
                    assert_eq!(f.scope, "", "{v:?}: no class read");
                }
            }
        }
    }

    #[test]
    fn strings_of_every_layout() {
        for v in [(3, 6), (3, 9), (3, 11), (3, 12), (3, 13)] {
            let row = row_for(v.0, v.1).unwrap();
            let l = row.layout;
            let mem = Mem::default();
            let texts = ["plain", "calcul_é", "計算_名前", "chemin_𝔘/𠮷.py", ""];
            let mut objs = Vec::new();
            for t in texts {
                objs.push((t, mem.str3(l, t, true)));
                if v < (3, 12) {
                    objs.push((t, mem.str3(l, t, false))); // legacy
                }
            }
            let r = CodeReader::new(&mem, row, None);
            for &(t, o) in &objs {
                assert_eq!(r.read_str(o, 1024), Some((t.to_string(), false)), "{v:?} {t:?}");
                // Cut on a character boundary, and said so.
                let (cut, was_cut) = r.read_str(o, 7).unwrap();
                assert_eq!(was_cut, t.len() > 7, "{v:?} {t:?}");
                assert!(t.starts_with(&cut) && cut.len() <= 7 && cut.len() + 3 >= t.len().min(7), "{t:?} -> {cut:?}");
            }
        }
        // 2.7: byte strings, cut on a UTF-8 character boundary.
        let row = row_for(2, 7).unwrap();
        let l = row.layout;
        let mem = Mem::default();
        let o = mem.bytes(l, "chemin_ü_𝔘/f.py".as_bytes());
        let r = CodeReader::new(&mem, row, None);
        assert_eq!(r.read_str(o, 100), Some(("chemin_ü_𝔘/f.py".to_string(), false)));
        assert_eq!(r.read_str(o, 12), Some(("chemin_ü_".to_string(), true)));
    }

    #[test]
    fn self_and_cls_name_the_class_before_3_11() {
        for v in [(2, 7), (3, 6), (3, 10)] {
            let row = row_for(v.0, v.1).unwrap();
            let l = row.layout;
            let mem = Mem::default();
            let code_type = mem.put(vec![0u8; 64]);
            let meta = mem.type_obj(l, "type", 0, TPFLAGS_TYPE_SUBCLASS);
            let worker = mem.type_obj(l, "Worker", meta, 0);
            let instance = mem.type_obj(l, "instance", meta, 0);
            let method = code(&mem, l, code_type, "step", "/w.py", 10, (1, "self"));
            let cm = code(&mem, l, code_type, "make", "/w.py", 20, (1, "cls"));
            let plain = code(&mem, l, code_type, "helper", "/w.py", 30, (1, "n"));
            let noarg = code(&mem, l, code_type, "local_self", "/w.py", 40, (0, "self"));
            let obj = mem.put(vec![0u8; 64]);
            let mut r = CodeReader::new(&mem, row, Some(code_type));
            let inst = FirstLocal { object: obj, type_addr: worker };
            let class = FirstLocal { object: worker, type_addr: meta };
            let q = |r: &mut CodeReader<&Mem>, c: &Code, fl| {
                frame(r.resolve(c.addr, u32::MAX, c.check, fl)).qualified_name()
            };
            assert_eq!(q(&mut r, &method, inst), "Worker.step", "{v:?}");
            assert_eq!(r.class_key(method.addr, method.check, inst), worker);
            assert_eq!(q(&mut r, &cm, class), "Worker.make");
            assert_eq!(r.class_key(cm.addr, cm.check, class), worker);
            // cls bound to an instance (a misnamed argument): not a class, no name.
            assert_eq!(q(&mut r, &cm, inst), "make");
            assert_eq!(r.class_key(cm.addr, cm.check, inst), 0);
            assert_eq!(q(&mut r, &plain, inst), "helper");
            assert_eq!(q(&mut r, &noarg, inst), "local_self");
            assert_eq!(q(&mut r, &method, FirstLocal::NONE), "step");
            assert_eq!(r.class_key(method.addr, method.check, FirstLocal::NONE), 0);
            // 2.7 old-style instances are all of type `instance`: no class name.
            let old = FirstLocal { object: obj, type_addr: instance };
            assert_eq!(q(&mut r, &method, old), if v.0 == 2 { "step" } else { "instance.step" });
            // A wrong check word or a freed code object: lost, never a wrong name.
            assert_eq!(r.resolve(method.addr, 0, method.check ^ 1, inst), Resolution::Lost);
            mem.set(method.addr, l.object_type, &0u64.to_le_bytes());
            let mut r = CodeReader::new(&mem, row, Some(code_type));
            assert_eq!(r.resolve(method.addr, 0, method.check, inst), Resolution::Lost);
        }
    }

    #[test]
    fn qualified_names_and_long_names_from_3_11() {
        let row = row_for(3, 12).unwrap();
        let l = row.layout;
        let mem = Mem::default();
        let code_type = mem.put(vec![0u8; 64]);
        let c = code(&mem, l, code_type, "inner", "/w.py", 5, (0, "x"));
        let q = mem.text(l, "outer.<locals>.inner");
        mem.set(c.addr, l.code_qualname, &q.to_le_bytes());
        let long = "n".repeat(1500);
        let lc = code(&mem, l, code_type, &long, &format!("/{}.py", "d".repeat(5000)), 7, (0, "x"));
        let lq = mem.text(l, &format!("Cls.{long}"));
        mem.set(lc.addr, l.code_qualname, &lq.to_le_bytes());
        let mut r = CodeReader::new(&mem, row, Some(code_type));
        let at = l.code_code as u32; // first instruction
        let s = frame(r.resolve(c.addr, at, c.check, FirstLocal::NONE));
        assert_eq!((s.scope.as_str(), s.name.as_str(), s.flags), ("outer.<locals>", "inner", 0));
        let s = frame(r.resolve(lc.addr, at, lc.check, FirstLocal::NONE));
        assert_eq!((s.scope.as_str(), s.name.len(), s.file.len()), ("Cls", MAX_NAME_BYTES, MAX_FILE_BYTES));
        assert_eq!(s.flags, symbol_flags::NAME_CUT | symbol_flags::FILE_CUT);
    }

    /// A code object freed before the recorder reads it is named from the program's copy, for its own check word
    /// only; a copy never names another code object, and one missing leaves the frame lost.
    #[test]
    fn freed_code_is_named_from_its_snapshot() {
        for v in [(2, 7), (3, 9), (3, 12), (3, 14)] {
            let row = row_for(v.0, v.1).unwrap();
            let l = row.layout;
            // The first instruction (3.11+ hide a frame that has not started).
            let at = if v >= (3, 11) { l.code_code as u32 } else { 0 };
            let live = Mem::default();
            let code_type = live.put(vec![0u8; 64]);
            let c = code(&live, l, code_type, "gone", "/gone.py", 3, (0, "x"));
            // What the program copies: the code object and the first bytes of the objects it names.
            let obj = |m: &Mem, addr: u64, n: usize| m.region(addr)[..n].to_vec();
            let ptr = |m: &Mem, off: i32| {
                u64::from_le_bytes(m.region(c.addr)[off as usize..off as usize + 8].try_into().unwrap())
            };
            let snapshot = |m: &Mem| {
                let mut snap = Snapshot::default();
                snap.add(c.addr, &obj(m, c.addr, l.code_size as usize));
                let mut fields = vec![l.code_name, l.code_filename, l.code_linetable];
                if l.code_qualname >= 0 {
                    fields.push(l.code_qualname);
                }
                for off in fields {
                    let p = ptr(m, off);
                    snap.add(p, &obj(m, p, 256));
                }
                snap
            };
            // The process's memory now: the code object is gone.
            let freed = Mem::default();
            let mut r = CodeReader::new(&freed, row, Some(code_type));
            r.add_snapshot(c.addr, c.check ^ 1, snapshot(&live));
            assert_eq!(
                r.resolve(c.addr, at, c.check, FirstLocal::NONE),
                Resolution::Lost,
                "{v:?}: another check's copy"
            );

            let mut r = CodeReader::new(&freed, row, Some(code_type));
            r.add_snapshot(c.addr, c.check, snapshot(&live));
            let s = frame(r.resolve(c.addr, at, c.check, FirstLocal::NONE));
            assert_eq!((s.name.as_str(), s.file.as_str(), s.line), ("gone", "/gone.py", 3), "{v:?}");
            assert_eq!(r.from_snapshots(), 1);
            // Cached: the copy was used once and dropped.
            assert!(r.snapshots.is_empty());
            assert_eq!(frame(r.resolve(c.addr, at, c.check, FirstLocal::NONE)).name, "gone");

            // Alive: named the same (from the copy), not counted as named only thanks to it.
            let mut r = CodeReader::new(&live, row, Some(code_type));
            r.add_snapshot(c.addr, c.check, snapshot(&live));
            assert_eq!(frame(r.resolve(c.addr, at, c.check, FirstLocal::NONE)).name, "gone");
            assert_eq!(r.from_snapshots(), 0, "{v:?}");

            // The file name object freed and its memory reused since the sample: the copy still names it right.
            let later = live.clone();
            let file = ptr(&live, l.code_filename);
            later.regions.borrow_mut().get_mut(&file).expect("file object").fill(0xee);
            let mut r = CodeReader::new(&later, row, Some(code_type));
            r.add_snapshot(c.addr, c.check, snapshot(&live));
            assert_eq!(frame(r.resolve(c.addr, at, c.check, FirstLocal::NONE)).file, "/gone.py", "{v:?}");
        }
    }

    #[test]
    fn frames_the_interpreter_hides() {
        for v in [(3, 11), (3, 12), (3, 13)] {
            let row = row_for(v.0, v.1).unwrap();
            let l = row.layout;
            let mem = Mem::default();
            let code_type = mem.put(vec![0u8; 64]);
            let shim = code(&mem, l, code_type, "__init__", "__init__", 0, (0, "x"));
            let ft = row.first_traceable.unwrap();
            mem.set(shim.addr, ft, &4i32.to_le_bytes());
            let mut r = CodeReader::new(&mem, row, Some(code_type));
            let base = l.code_code as u32;
            // The 3.13 __init__ shim waits at its first instruction; a frame not started (3.11 / 3.12: before
            // the first unit) is hidden too; from the first traceable instruction on, it is a frame.
            assert_eq!(r.resolve(shim.addr, base, shim.check, FirstLocal::NONE), Resolution::Hidden);
            assert_eq!(r.resolve(shim.addr, base + 6, shim.check, FirstLocal::NONE), Resolution::Hidden);
            assert_eq!(r.resolve(shim.addr, base - 2, shim.check, FirstLocal::NONE), Resolution::Hidden);
            assert!(matches!(r.resolve(shim.addr, base + 8, shim.check, FirstLocal::NONE), Resolution::Frame(_)));
        }
        // Before 3.11 a frame not started yet is shown at its first line, as the interpreter does.
        let row = row_for(3, 10).unwrap();
        let l = row.layout;
        let mem = Mem::default();
        let code_type = mem.put(vec![0u8; 64]);
        let c = code(&mem, l, code_type, "f", "/f.py", 12, (0, "x"));
        let mut r = CodeReader::new(&mem, row, Some(code_type));
        assert_eq!(frame(r.resolve(c.addr, u32::MAX, c.check, FirstLocal::NONE)).line, 12);
    }
}
