//! Turning the code object addresses the BPF walker reports into names, files and lines.
//!
//! BPF sends, per frame, the code object's address, a raw instruction position and a check word read from the
//! code object at sample time. The first time a (pid, address, check) is seen, we read the code object through
//! /proc/PID/mem, decode its names and keep its line table; later frames cost a hash lookup. The check word
//! catches a code object freed and another allocated at the same address between the sample and our read: then
//! the frame is reported as unresolved rather than with a wrong name.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use pyperf_format::{symbol_flags, Symbol};

use crate::layouts::Layout;
use crate::linetable::{self, LineTable};

/// Longest function name and file name kept, in bytes; longer ones are cut and flagged.
pub const MAX_NAME_BYTES: usize = 1024;
pub const MAX_FILE_BYTES: usize = 4096;

/// Reads another process's memory.
pub trait ReadMem {
    /// Fills `buf` from address `addr`; false if any byte is unreadable.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;
}

/// /proc/PID/mem: one pread per read, no ptrace stop.
pub struct ProcMem(File);

impl ProcMem {
    pub fn open(pid: u32) -> std::io::Result<ProcMem> {
        File::open(format!("/proc/{pid}/mem")).map(ProcMem)
    }
}

impl ReadMem for ProcMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        matches!(self.0.read_at(buf, addr), Ok(n) if n == buf.len())
    }
}

/// What we keep of a code object.
#[derive(Debug)]
pub struct CodeInfo {
    pub scope: String,
    pub name: String,
    pub file: String,
    pub first_line: u32,
    pub flags: u32,
    table: Vec<u8>,
}

/// Per-process decoder of code objects.
pub struct CodeReader<M> {
    mem: M,
    layout: &'static Layout,
    /// &PyCode_Type in the target, when known.
    code_type: Option<u64>,
    version: (u8, u8),
    table_kind: Option<LineTable>,
    cache: HashMap<(u64, u32), Option<Arc<CodeInfo>>>,
}

impl<M: ReadMem> CodeReader<M> {
    pub fn new(mem: M, layout: &'static Layout, code_type: Option<u64>) -> Self {
        let version = layout.version;
        let table_kind = LineTable::for_version(version.0, version.1);
        CodeReader { mem, layout, code_type, version, table_kind, cache: HashMap::new() }
    }

    /// Number of distinct code objects seen.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    /// Resolves one frame to a symbol. `None` when the code object is gone or unreadable.
    pub fn resolve(&mut self, code: u64, instr: u32, check: u32) -> Option<Symbol> {
        let info = match self.cache.get(&(code, check)) {
            Some(hit) => hit.clone(),
            None => {
                let info = self.read_code(code, check).map(Arc::new);
                self.cache.insert((code, check), info.clone());
                info
            }
        }?;
        let line = self.line(&info, instr).unwrap_or(info.first_line);
        Some(Symbol {
            scope: info.scope.clone(),
            name: info.name.clone(),
            file: info.file.clone(),
            line,
            flags: info.flags,
        })
    }

    fn line(&self, info: &CodeInfo, instr: u32) -> Option<u32> {
        let kind = self.table_kind?;
        let offset =
            linetable::instr_byte_offset(self.version.0, self.version.1, instr, self.layout.code_code.max(0) as u32)?;
        linetable::line_at(kind, info.first_line, &info.table, offset)
    }

    fn read_code(&self, code: u64, check: u32) -> Option<CodeInfo> {
        let l = self.layout;
        let size = usize::try_from(l.code_size).ok()?;
        let mut obj = vec![0u8; size];
        if code == 0 || !self.mem.read(code, &mut obj) {
            return None;
        }
        // Freed and replaced since the sample was taken? Then its name would be someone else's: the object
        // must still be a code object with the same line, file and name pointers as BPF saw.
        if self.code_type.is_some_and(|t| field_ptr(&obj, l.object_type) != Some(t)) {
            return None;
        }
        let first_line = field_u32(&obj, l.code_firstlineno)?;
        let file_ptr = field_ptr(&obj, l.code_filename)?;
        let name_ptr = field_ptr(&obj, l.code_name)?;
        if code_check(first_line, file_ptr, name_ptr) != check {
            return None;
        }
        let mut flags = 0;
        let (name, cut) = self.read_str(name_ptr, MAX_NAME_BYTES)?;
        if cut {
            flags |= symbol_flags::NAME_CUT;
        }
        let (file, cut) = self.read_str(file_ptr, MAX_FILE_BYTES)?;
        if cut {
            flags |= symbol_flags::FILE_CUT;
        }
        let scope = match field_ptr(&obj, l.code_qualname) {
            Some(q) => {
                let (qualname, cut) = self.read_str(q, MAX_NAME_BYTES)?;
                if cut {
                    flags |= symbol_flags::NAME_CUT;
                }
                scope_of(&qualname, &name)
            }
            None => String::new(),
        };
        let table = field_ptr(&obj, l.code_linetable).and_then(|p| self.read_bytes(p, 1 << 20)).unwrap_or_default();
        Some(CodeInfo { scope, name, file, first_line, flags, table })
    }

    /// Reads a str (PyUnicode, or PyString on 2.7). Returns the text and whether it was cut at `max` bytes.
    fn read_str(&self, obj: u64, max: usize) -> Option<(String, bool)> {
        if self.version.0 == 2 {
            let bytes = self.read_bytes(obj, max + 1)?;
            let cut = bytes.len() > max;
            let bytes = &bytes[..bytes.len().min(max)];
            return Some((String::from_utf8_lossy(bytes).into_owned(), cut));
        }
        let l = self.layout;
        let mut head = [0u8; 8];
        if !self.mem.read(obj + l.unicode_length as u64, &mut head) {
            return None;
        }
        let length = u64::from_le_bytes(head) as usize;
        let mut st = [0u8; 4];
        if !self.mem.read(obj + l.unicode_state as u64, &mut st) {
            return None;
        }
        let state = u32::from_le_bytes(st);
        let kind = (state >> l.unicode_kind_shift) & 7;
        let compact = (state >> l.unicode_compact_shift) & 1 == 1;
        let ascii = (state >> l.unicode_ascii_shift) & 1 == 1;
        let width = match kind {
            1 => 1,
            2 => 2,
            4 => 4,
            _ => return None,
        };
        let data = if compact && ascii {
            obj + l.ascii_data as u64
        } else if compact {
            obj + l.compact_data as u64
        } else {
            // Legacy (non-compact) string: the data pointer follows the compact header.
            let mut p = [0u8; 8];
            if !self.mem.read(obj + l.compact_data as u64, &mut p) {
                return None;
            }
            u64::from_le_bytes(p)
        };
        // Read at most what `max` UTF-8 bytes can need, then cut on a character boundary.
        let chars = length.min(max);
        let mut raw = vec![0u8; chars * width];
        if !self.mem.read(data, &mut raw) {
            return None;
        }
        let mut text = String::with_capacity(chars);
        for unit in raw.chunks_exact(width) {
            let cp = match width {
                1 => unit[0] as u32,
                2 => u16::from_le_bytes([unit[0], unit[1]]) as u32,
                _ => u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]),
            };
            let ch = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
            if text.len() + ch.len_utf8() > max {
                return Some((text, true));
            }
            text.push(ch);
        }
        Some((text, length > chars))
    }

    /// Reads a bytes object's content (PyBytes, or PyString on 2.7), at most `max` bytes.
    fn read_bytes(&self, obj: u64, max: usize) -> Option<Vec<u8>> {
        let l = self.layout;
        let mut size = [0u8; 8];
        if !self.mem.read(obj + l.bytes_size as u64, &mut size) {
            return None;
        }
        let n = (i64::from_le_bytes(size).max(0) as usize).min(max);
        let mut out = vec![0u8; n];
        if n > 0 && !self.mem.read(obj + l.bytes_data as u64, &mut out) {
            return None;
        }
        Some(out)
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

/// The check word BPF computes per code object (pyperf_code_check in bpf/pyperf.bpf.c; keep them equal).
pub fn code_check(first_line: u32, filename: u64, name: u64) -> u32 {
    let fold = |p: u64| (p as u32) ^ ((p >> 32) as u32);
    first_line.wrapping_add(fold(filename).wrapping_mul(31)).wrapping_add(fold(name).wrapping_mul(1009))
}

/// `Class.method` -> `Class`; `outer.<locals>.inner` -> `outer.<locals>`; `f` -> ``.
fn scope_of(qualname: &str, name: &str) -> String {
    match qualname.strip_suffix(name) {
        Some(prefix) if prefix.ends_with('.') => prefix[..prefix.len() - 1].to_string(),
        _ => String::new(),
    }
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

    #[test]
    fn scopes() {
        assert_eq!(scope_of("Worker.run", "run"), "Worker");
        assert_eq!(scope_of("outer.<locals>.inner", "inner"), "outer.<locals>");
        assert_eq!(scope_of("f", "f"), "");
        assert_eq!(scope_of("xf", "f"), "");
    }
}
