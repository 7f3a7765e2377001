//! Code a process generates at run time (CPython's JIT, other JITs), which no file holds.
//!
//! It lies in anonymous executable mappings. A JIT can describe it through GDB's JIT interface: the global
//! `__jit_debug_descriptor` ([`super::elf::JIT_DESCRIPTOR_SYMBOL`], found by the ELF reader) heads a list of
//! entries, each an ELF object in the process's memory naming one piece of code (its `.text` range, a symbol) with
//! its call frame information (`.eh_frame`, absolute addresses). CPython 3.15 on x86-64 Linux registers each
//! executor so (`py::jit:executor`, whose frame rule is the frame pointer its entry shim set up and the JIT code
//! never clobbers). Registered code is unwound like a file's; code that is not (3.14's JIT, which uses rbp as a
//! general register and registers nothing) has no rule: the unwinding stops there, and the frame is marked `[jit]`,
//! never guessed past. What is known of one interpreter's generated code (the names of its JIT's code, its
//! trampolines) comes in a [`GeneratedCode`] (record/python/jit.rs for CPython).

use std::ops::Range;

use super::elf::ElfInfo;
use crate::mem::ReadMem;
use crate::proc::MapsEntry;

/// The name (and library) of a frame in generated code: CPython's executors, and any code not registered.
pub const JIT: &str = pyperf_format::symbol_flags::JIT_FILE;
/// What the unwinder knows of an interpreter's generated code (record/python/jit.rs gives CPython's).
#[derive(Debug)]
pub struct GeneratedCode {
    /// How the names its JIT registers code under start: such code is shown as [`JIT`] ("": none).
    pub symbol_prefix: &'static str,
    /// Its trampolines: code of known shapes whose frame at their return site is known.
    pub trampolines: &'static [TrampolineShape],
    /// The name of a trampoline's frames.
    pub trampoline_name: &'static str,
}

/// One shape of a trampoline: `before` then `after` around its return site (the address after its call).
#[derive(Debug, PartialEq, Eq)]
pub struct TrampolineShape {
    /// The instructions before the return site, at most [`BEFORE`] bytes.
    pub before: &'static [u8],
    /// The instructions from the return site on, at most [`AFTER`] bytes.
    pub after: &'static [u8],
    /// Whether rbp was saved at the stack pointer of the return site.
    pub saves_bp: bool,
    /// The caller's stack pointer minus the return site's (the return address is 8 bytes below it).
    pub frame_size: u64,
}

/// How many bytes before a return address are read to check a trampoline's shape.
pub const BEFORE: usize = 6;
/// How many bytes from a return address on are read to check a trampoline's shape.
pub const AFTER: usize = 5;

impl GeneratedCode {
    /// No knowledge: every piece of unregistered generated code ends the unwinding.
    pub const NONE: GeneratedCode = GeneratedCode { symbol_prefix: "", trampolines: &[], trampoline_name: JIT };

    /// The index of the trampoline shape whose return site is at `code[BEFORE]`: `code` holds the [`BEFORE`] bytes
    /// before a return address and the [`AFTER`] bytes from it.
    pub fn shape_at(&self, code: &[u8]) -> Option<usize> {
        let (before, after) = (code.get(..BEFORE)?, code.get(BEFORE..)?);
        self.trampolines.iter().position(|s| before.ends_with(s.before) && after.starts_with(s.after))
    }
}

/// Entries followed, at most (a list that loops, or a huge one, ends here).
pub const MAX_ENTRIES: usize = 16_384;
/// Largest in-memory object read for one entry (CPython's are about 1-3 KiB).
pub const MAX_OBJECT: u64 = 64 << 10;
/// Bytes of objects read in one read of the list, at most (the entries past it are refused): a process cannot make
/// the recorder read or hold more than this for it.
pub const MAX_READ: u64 = 16 << 20;
/// Longest name kept for registered code (longer ones are cut).
const MAX_NAME: usize = 256;
/// The only version of the interface there is.
const VERSION: u32 = 1;

/// One piece of registered code.
pub struct JitCode {
    /// Its addresses (the object's `.text`).
    pub range: Range<u64>,
    /// Where its object lies in the process, and its size: the same code registered again has another.
    pub object: (u64, u64),
    /// What its frames are called.
    pub name: String,
    /// The object, parsed (its call frame information, at the code's own addresses).
    pub info: ElfInfo,
}

/// Why the list could not be read (the code it would have named is then unwound as unregistered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    /// The descriptor is unreadable, or not version 1.
    Descriptor,
}

/// What a read found: the code (sorted by address, none overlapping) and how many entries were refused.
#[derive(Default)]
pub struct Registered {
    /// The registered code.
    pub code: Vec<JitCode>,
    /// Entries whose object was unreadable, did not parse, or named code outside the anonymous executable
    /// mappings (or the list ended early at an unreadable entry).
    pub refused: u64,
}

/// Whether a maps entry is code generated at run time: executable, anonymous (no file; `[anon:NAME]` is an
/// anonymous mapping a process named), not one of the kernel's special mappings.
pub fn is_generated_code(e: &MapsEntry) -> bool {
    e.exec && e.inode == 0 && (e.path.is_empty() || e.path.starts_with("[anon:"))
}

/// The name of a frame in registered code named `symbol` ("" when the object has none): [`JIT`] for the
/// interpreter's (names starting with `prefix`), and for a name that looks like one of pyperf's pseudo-frames
/// (`[...]`); else the name, control characters replaced and cut at [`MAX_NAME`] characters.
pub fn frame_name(symbol: &str, prefix: &str) -> String {
    let interpreters = !prefix.is_empty() && symbol.starts_with(prefix);
    if symbol.is_empty() || interpreters || symbol.starts_with('[') {
        JIT.to_string()
    } else {
        symbol.chars().take(MAX_NAME).map(|c| if c.is_control() { '?' } else { c }).collect()
    }
}

/// Reads the list of the descriptor at `descriptor` in `mem`, keeping the entries whose code lies in one of
/// `anon` (the process's anonymous executable mappings, sorted).
pub fn read_registered(
    mem: &dyn ReadMem,
    descriptor: u64,
    anon: &[Range<u64>],
    code: &GeneratedCode,
) -> Result<Registered, ReadError> {
    let mut d = [0u8; 24];
    if !mem.read(descriptor, &mut d) || u32_at(&d, 0) != VERSION {
        return Err(ReadError::Descriptor);
    }
    let mut out = Registered::default();
    let mut entry = u64_at(&d, 16);
    let mut budget = MAX_READ;
    for _ in 0..MAX_ENTRIES {
        if entry == 0 {
            break;
        }
        let mut e = [0u8; 32];
        if !mem.read(entry, &mut e) {
            out.refused += 1;
            break;
        }
        let (next, object, size) = (u64_at(&e, 0), u64_at(&e, 16), u64_at(&e, 24));
        let found = (size <= budget).then(|| read_object(mem, object, size, anon, code.symbol_prefix)).flatten();
        budget = budget.saturating_sub(size.min(MAX_OBJECT));
        match found {
            Some(found) => out.code.push(found),
            None => out.refused += 1,
        }
        entry = next;
    }
    out.code.sort_by_key(|c| c.range.start);
    // Objects whose code overlaps (an entry freed and its code reused while the list was read, or a lie): none of
    // them is trusted, their code has no rule.
    let mut keep = vec![true; out.code.len()];
    for i in 1..out.code.len() {
        if out.code[i].range.start < out.code[i - 1].range.end {
            keep[i] = false;
            keep[i - 1] = false;
        }
    }
    let before = out.code.len();
    let mut k = keep.into_iter();
    out.code.retain(|_| k.next().unwrap_or(false));
    out.refused += (before - out.code.len()) as u64;
    Ok(out)
}

/// The code one entry's object describes, if it parses and its `.text` lies in one anonymous executable mapping.
fn read_object(mem: &dyn ReadMem, addr: u64, size: u64, anon: &[Range<u64>], prefix: &str) -> Option<JitCode> {
    if size == 0 || size > MAX_OBJECT {
        return None;
    }
    let mut bytes = vec![0u8; usize::try_from(size).ok()?];
    if !mem.read(addr, &mut bytes) {
        return None;
    }
    let info = ElfInfo::parse_bytes(&bytes).ok()?;
    let range = info.unwind.text_svma.clone()?;
    let i = anon.partition_point(|m| m.start <= range.start);
    let inside = i.checked_sub(1).and_then(|i| anon.get(i)).is_some_and(|m| range.end <= m.end);
    if range.is_empty() || !inside || info.unwind.eh_frame.is_none() {
        return None;
    }
    let symbol = info.symbols.lookup(range.start).map(|i| info.symbols.name(i)).unwrap_or("");
    let name = frame_name(symbol, prefix);
    Some(JitCode { range, object: (addr, size), name, info })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    /// Memory made of regions at addresses.
    #[derive(Default)]
    struct Fake(RefCell<BTreeMap<u64, Vec<u8>>>);

    impl Fake {
        fn put(&self, addr: u64, bytes: Vec<u8>) {
            self.0.borrow_mut().insert(addr, bytes);
        }
    }

    impl ReadMem for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
            let regions = self.0.borrow();
            let Some((start, bytes)) = regions.range(..=addr).next_back() else { return false };
            let off = (addr - start) as usize;
            match bytes.get(off..off + buf.len()) {
                Some(s) => {
                    buf.copy_from_slice(s);
                    true
                }
                None => false,
            }
        }
    }

    /// Two objects CPython 3.15.2 (Debian sid) registered for its executors with `PYTHON_JIT=1`, read from a
    /// running process's list: `.text` (the code) at 0x7fedd8026000 (0x2f bytes) and 0x7fedd8024000 (0x5cf), an
    /// `.eh_frame` whose CIE says CFA = rbp + 16, a symbol `py::jit:executor`.
    const SMALL: &[u8] = include_bytes!("../../testdata/jit/cpython-3.15-executor.o");
    const LARGE: &[u8] = include_bytes!("../../testdata/jit/cpython-3.15-executor-2.o");
    const ANON: Range<u64> = 0x7fed_d802_4000..0x7fed_d802_8000;
    /// What CPython's rows say (record/python/jit.rs), as the unwinder is given it.
    const CPY: GeneratedCode = GeneratedCode { symbol_prefix: "py::jit", trampolines: &[], trampoline_name: "[t]" };

    fn descriptor(mem: &Fake, at: u64, first: u64) {
        let mut d = vec![0u8; 24];
        d[0..4].copy_from_slice(&1u32.to_le_bytes());
        d[16..24].copy_from_slice(&first.to_le_bytes());
        mem.put(at, d);
    }

    fn entry(mem: &Fake, at: u64, next: u64, object: u64, size: usize) {
        let mut e = vec![0u8; 32];
        e[0..8].copy_from_slice(&next.to_le_bytes());
        e[16..24].copy_from_slice(&object.to_le_bytes());
        e[24..32].copy_from_slice(&(size as u64).to_le_bytes());
        mem.put(at, e);
    }

    #[test]
    fn registered_code_is_read_sorted_and_named() {
        let mem = Fake::default();
        mem.put(0x5000, SMALL.to_vec());
        mem.put(0x9000, LARGE.to_vec());
        entry(&mem, 0x1000, 0x1100, 0x5000, SMALL.len());
        entry(&mem, 0x1100, 0, 0x9000, LARGE.len());
        descriptor(&mem, 0x100, 0x1000);
        let r = read_registered(&mem, 0x100, &[ANON], &CPY).expect("reads");
        assert_eq!(r.refused, 0);
        let got: Vec<_> = r.code.iter().map(|c| (c.range.clone(), c.name.as_str())).collect();
        assert_eq!(got, [(0x7fed_d802_4000..0x7fed_d802_45cf, JIT), (0x7fed_d802_6000..0x7fed_d802_602f, JIT)]);
        assert!(r.code.iter().all(|c| c.info.unwind.eh_frame.is_some()));
        // The same code registered twice (an entry freed and reused while the list was read, or a lie): neither
        // kept.
        entry(&mem, 0x1100, 0x1200, 0x9000, LARGE.len());
        entry(&mem, 0x1200, 0, 0x9000, LARGE.len());
        let r = read_registered(&mem, 0x100, &[ANON], &CPY).expect("reads");
        assert_eq!((r.code.len(), r.refused), (1, 2));
        assert_eq!(r.code[0].range.start, 0x7fed_d802_6000);
        // Code outside the anonymous executable mappings (a file's, or unmapped since) is refused.
        let upper = 0x7fed_d802_6000..0x7fed_d802_7000;
        let r = read_registered(&mem, 0x100, std::slice::from_ref(&upper), &CPY).expect("reads");
        assert_eq!((r.code.len(), r.refused), (1, 2));
        // Names: CPython's and pseudo-frame look-alikes are [jit]; others kept, cleaned and cut.
        assert_eq!(frame_name("py::jit:executor", CPY.symbol_prefix), JIT);
        assert_eq!(frame_name("[perf trampoline]", CPY.symbol_prefix), JIT);
        assert_eq!(frame_name("", CPY.symbol_prefix), JIT);
        assert_eq!(frame_name("jitted\x1b]0;x", CPY.symbol_prefix), "jitted?]0;x");
        assert_eq!(frame_name("a\u{1b}b\nc", CPY.symbol_prefix), "a?b?c");
        assert_eq!(frame_name(&"f".repeat(1000), CPY.symbol_prefix).len(), MAX_NAME);
        assert_eq!(frame_name("py::jit:x", ""), "py::jit:x", "no prefix given: no name is the interpreter's");
    }

    /// Hostile or torn lists: an object for code outside the anonymous mappings, garbage, a huge size, a loop, a
    /// descriptor of another version. None is taken, none hangs.
    #[test]
    fn hostile_lists_are_refused_and_bounded() {
        let mem = Fake::default();
        let mut damaged = LARGE.to_vec();
        damaged[0x28..0x30].fill(0xff); // e_shoff: the section headers are nowhere
        mem.put(0x5000, damaged);
        mem.put(0x6000, vec![0x7f, b'E', b'L', b'F', 0, 0, 0, 0]);
        entry(&mem, 0x1000, 0x1100, 0x5000, LARGE.len());
        entry(&mem, 0x1100, 0x1200, 0x6000, 8);
        entry(&mem, 0x1200, 0x1000, 0x6000, 1 << 40); // loops back to the first
        descriptor(&mem, 0x100, 0x1000);
        let r = read_registered(&mem, 0x100, &[ANON], &CPY).expect("reads");
        assert!(r.code.is_empty());
        assert_eq!(r.refused as usize, MAX_ENTRIES);
        let mut d = vec![0u8; 24];
        d[0..4].copy_from_slice(&2u32.to_le_bytes());
        mem.put(0x200, d);
        assert_eq!(read_registered(&mem, 0x200, &[ANON], &CPY).err(), Some(ReadError::Descriptor));
        assert_eq!(read_registered(&mem, 0xdead_0000, &[ANON], &CPY).err(), Some(ReadError::Descriptor));
    }

    #[test]
    fn generated_code_is_anonymous_executable_memory() {
        let e =
            |path: &str, inode, exec| MapsEntry { start: 0, end: 1, exec, offset: 0, dev: 0, inode, path: path.into() };
        assert!(is_generated_code(&e("", 0, true)));
        assert!(is_generated_code(&e("[anon:jit]", 0, true)));
        assert!(!is_generated_code(&e("", 0, false)));
        assert!(!is_generated_code(&e("[vdso]", 0, true)));
        assert!(!is_generated_code(&e("[vsyscall]", 0, true)));
        assert!(!is_generated_code(&e("/usr/lib/libc.so.6", 1234, true)));
    }
}
