//! Where pyperf learns that a process frees code objects.
//!
//! The BPF program names each frame's code object by its address and a check word read from the object (see
//! `struct py_offsets` in bpf/pyperf.h). That read is most of a deep stack's cost, so the program keeps check words
//! in a cache (`struct pyperf_check_entry`), which holds only while no code object of the process has been freed:
//! an address then still holds the object it held. What counts the frees:
//!
//! - 3.14+: the interpreter itself (`PyInterpreterState._code_object_generation`, which `code_dealloc` increments
//!   before it frees anything); the program reads the main interpreter's count once per sample.
//! - Before: a uprobe on `code_dealloc`, the `tp_dealloc` of `PyCode_Type` through which every code object is
//!   freed (`pyperf_code_freed`). Its address is read from the process (relocated), its file and offset from the
//!   process's memory map.

use std::path::PathBuf;

use super::code::{read_u64, ReadMem};
use super::detect::{mapped_file_path, parse_maps, Mapping, PythonProcess};
use super::objects::at;

/// How the frees of a process's code objects are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeFrees {
    /// 3.14+: the count is in the main interpreter, at `interp` + `Layout::interp_code_gen`.
    Counter {
        /// The main interpreter (the first created: the last of the list). Only it lives as long as the process.
        interp: u64,
    },
    /// A uprobe at `offset` of the file at `binary` counts them (`code_dealloc`, at `address` in the process).
    Dealloc {
        /// The file, as pyperf can open it: through the process's root, or its map_files entry.
        binary: PathBuf,
        /// File offset of `code_dealloc`.
        offset: u64,
        /// Its address in the process.
        address: u64,
    },
}

/// How `p`'s frees of code objects can be counted, reading its memory through `mem`; an error says why they
/// cannot (the program then reads every check word, as without a cache).
pub fn code_frees<M: ReadMem>(p: &PythonProcess, mem: &M, interp_head_addr: u64) -> Result<CodeFrees, String> {
    let l = p.row.layout;
    if l.interp_code_gen >= 0 {
        return main_interpreter(mem, interp_head_addr, l.interp_next).map(|interp| CodeFrees::Counter { interp });
    }
    let code_type = p.addrs.code_type.ok_or("no PyCode_Type symbol")?;
    let slot = at(code_type, l.type_dealloc).ok_or("no tp_dealloc offset")?;
    let address = read_u64(mem, slot).filter(|&a| a != 0).ok_or("PyCode_Type.tp_dealloc unreadable")?;
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", p.pid)).map_err(|e| format!("its maps: {e}"))?;
    let maps = parse_maps(&maps);
    let m = dealloc_mapping(&maps, address).ok_or_else(|| format!("code_dealloc {address:#x} not in a mapped file"))?;
    let same_file: Vec<&Mapping> = maps.iter().filter(|o| o.path == m.path && o.inode == m.inode).collect();
    Ok(CodeFrees::Dealloc {
        binary: mapped_file_path(p.pid, &m.path, &same_file),
        offset: address - m.start + m.offset,
        address,
    })
}

/// The main interpreter: the last of the list that starts at `*head_addr` (each new interpreter goes first).
fn main_interpreter<M: ReadMem>(mem: &M, head_addr: u64, next: i32) -> Result<u64, String> {
    let mut interp = read_u64(mem, head_addr).filter(|&a| a != 0).ok_or("no interpreter yet")?;
    // A bound against a list read while it changes: no process has this many interpreters.
    for _ in 0..1024 {
        let n = at(interp, next).and_then(|a| read_u64(mem, a)).ok_or("the interpreter list is unreadable")?;
        if n == 0 {
            return Ok(interp);
        }
        interp = n;
    }
    Err("the interpreter list does not end".into())
}

/// The executable file mapping of `maps` that holds `addr`: where a uprobe can go.
fn dealloc_mapping(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    maps.iter().find(|m| m.start <= addr && addr < m.end && m.exec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::testing::FakeMem;
    use std::collections::HashMap;

    /// Memory holding these words (address, value), each alone.
    fn words(words: HashMap<u64, u64>) -> FakeMem {
        let mem = FakeMem::default();
        for (at, v) in words {
            mem.put_at(at, v.to_le_bytes().to_vec());
        }
        mem
    }

    #[test]
    fn the_main_interpreter_is_the_last_of_the_list() {
        // head -> 0x3000 (newest subinterpreter) -> 0x2000 -> 0x1000 (main), `next` at +8.
        let mem = words(HashMap::from([(0x50, 0x3000), (0x3008, 0x2000), (0x2008, 0x1000), (0x1008, 0)]));
        assert_eq!(main_interpreter(&&mem, 0x50, 8), Ok(0x1000));
        let alone = words(HashMap::from([(0x50, 0x1000), (0x1008, 0)]));
        assert_eq!(main_interpreter(&&alone, 0x50, 8), Ok(0x1000));
        // Not created yet, or a link unreadable: no count, no guess.
        assert!(main_interpreter(&&words(HashMap::from([(0x50, 0)])), 0x50, 8).is_err());
        assert!(main_interpreter(&&words(HashMap::from([(0x50, 0x3000), (0x3008, 0x2000)])), 0x50, 8).is_err());
        // A cycle (a list read while it changes) ends.
        let cycle = words(HashMap::from([(0x50, 0x1000), (0x1008, 0x2000), (0x2008, 0x1000)]));
        assert!(main_interpreter(&&cycle, 0x50, 8).is_err());
    }

    #[test]
    fn code_dealloc_is_found_in_the_executable_mapping_of_its_file() {
        let maps = parse_maps(
            "\
5583a0a00000-5583a0a2b000 r--p 00000000 fd:01 1234 /usr/bin/python3.11
5583a0a2b000-5583a0d00000 r-xp 0002b000 fd:01 1234 /usr/bin/python3.11
7f0000000000-7f0000021000 rw-p 00000000 00:00 0 \n\
7f1000000000-7f1000100000 r-xp 00010000 fd:01 99 /opt/my python/libpython3.9.so.1.0 (deleted)
",
        );
        let m = dealloc_mapping(&maps, 0x5583a0a2c010).expect("in the text");
        assert_eq!(
            (m.start, m.offset, m.inode, m.path.as_str()),
            (0x5583a0a2b000, 0x2b000, 1234, "/usr/bin/python3.11")
        );
        assert_eq!(0x5583a0a2c010 - m.start + m.offset, 0x2c010);
        // A path with a space, deleted since.
        let m = dealloc_mapping(&maps, 0x7f1000000100).expect("in the library");
        assert_eq!(m.path, "/opt/my python/libpython3.9.so.1.0");
        // Read-only data, anonymous memory, nothing: not a place for a uprobe.
        assert_eq!(dealloc_mapping(&maps, 0x5583a0a00010), None);
        assert_eq!(dealloc_mapping(&maps, 0x7f0000000010), None);
        assert_eq!(dealloc_mapping(&maps, 0x10), None);
    }
}
