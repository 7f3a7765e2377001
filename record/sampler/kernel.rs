//! Where the kernel fields the BPF programs read lie in the running kernel (struct pyperf_kernel_layout), from its
//! BTF. libbpf's CO-RE would find the same offsets, but it parses and indexes all of the kernel's BTF (5 MB,
//! ~150k types) at every start and then searches it once per local type: ~15 ms of a ~40 ms start-up. This reads
//! one pass of type headers and looks at four structs.
//!
//! BTF format: Documentation/bpf/btf.rst (a header, then type records, then a string table).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::abi::types::pyperf_kernel_layout;

/// What is wrong with the kernel's BTF (or with what pyperf expects to find in it).
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The file cannot be opened or read.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// Not BTF, or BTF that this parser does not understand.
    #[error("not valid BTF: {0}")]
    Malformed(&'static str),
    /// A struct or field pyperf reads is absent or not of the expected kind.
    #[error("no {0} of the expected kind in the kernel's BTF")]
    Missing(&'static str),
}

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;

/// The kernel's BTF, read-only: mapped where the kernel allows it (6.16+: one mmap, no copy), else read.
enum Bytes {
    Mapped { ptr: *const u8, len: usize },
    Read(Vec<u8>),
}

impl Bytes {
    fn open(path: &Path) -> io::Result<Bytes> {
        let mut f = File::open(path)?;
        let len = f.metadata()?.len() as usize;
        if len > 0 {
            // SAFETY: a fresh private read-only mapping of an open file; checked for failure below, unmapped
            // once in Drop. The kernel refuses shared or writable mappings of it.
            let ptr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_POPULATE,
                    f.as_raw_fd(),
                    0,
                )
            };
            if ptr != libc::MAP_FAILED {
                return Ok(Bytes::Mapped { ptr: ptr as *const u8, len });
            }
        }
        // Older kernels: sysfs hands it out a page per read.
        let mut v = Vec::with_capacity(len);
        f.read_to_end(&mut v)?;
        Ok(Bytes::Read(v))
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            // SAFETY: the mapping is `len` readable bytes and lives as long as `self`.
            Bytes::Mapped { ptr, len } => unsafe { std::slice::from_raw_parts(*ptr, *len) },
            Bytes::Read(v) => v,
        }
    }
}

impl Drop for Bytes {
    fn drop(&mut self) {
        if let Bytes::Mapped { ptr, len } = *self {
            // SAFETY: unmaps the mapping made in `open`, once; no slice of it outlives `self`.
            unsafe { libc::munmap(ptr as *mut libc::c_void, len) };
        }
    }
}

/// The kernel layout from the BTF at `path` (the kernel's: /sys/kernel/btf/vmlinux).
pub fn read_layout(path: &Path) -> Result<pyperf_kernel_layout, LayoutError> {
    parse(Bytes::open(path)?.as_slice())
}

/// The NUL-terminated string at `off` of a string section (empty if out of bounds).
fn name_at(strings: &[u8], off: u32) -> &[u8] {
    let rest = strings.get(off as usize..).unwrap_or_default();
    &rest[..rest.iter().position(|&c| c == 0).unwrap_or(rest.len())]
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

struct Btf<'a> {
    types: &'a [u8],
    strings: &'a [u8],
    /// Byte offset in `types` of each type id (id 0, void, has none: offsets[id - 1]).
    offsets: Vec<u32>,
    /// The first `struct task_struct` with members (a forward declaration has none): looked up by name, as are
    /// the two below, the others are reached through their members.
    task_struct: Option<u32>,
    /// `struct perf_event` and `struct bpf_perf_event_data_kern` (a perf_event program's real context), likewise.
    perf_event: Option<u32>,
    perf_ctx: Option<u32>,
}

/// One type record's header.
#[derive(Clone, Copy)]
struct Type {
    kind: u32,
    vlen: usize,
    kind_flag: bool,
    /// Size (INT, STRUCT, UNION, ENUM) or referenced type (PTR, TYPEDEF, modifiers).
    size_type: u32,
    /// Offset in `types` of the record's trailing data.
    data: usize,
}

impl<'a> Btf<'a> {
    fn new(b: &'a [u8]) -> Result<Btf<'a>, LayoutError> {
        let magic = b.get(..2).map(|m| u16::from_le_bytes([m[0], m[1]]));
        if magic != Some(BTF_MAGIC) {
            // Big-endian BTF (magic byte-swapped) describes another machine than this one.
            return Err(LayoutError::Malformed("bad magic (not little-endian BTF)"));
        }
        let field = |at| u32_at(b, at).map(|v| v as usize).ok_or(LayoutError::Malformed("truncated header"));
        let hdr_len = field(4)?;
        let (type_off, type_len, str_off, str_len) = (field(8)?, field(12)?, field(16)?, field(20)?);
        let section = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off)?;
            b.get(start..start.checked_add(len)?)
        };
        let types = section(type_off, type_len).ok_or(LayoutError::Malformed("type section out of bounds"))?;
        let strings = section(str_off, str_len).ok_or(LayoutError::Malformed("string section out of bounds"))?;
        let mut offsets = Vec::with_capacity(type_len / 24);
        let (mut task_struct, mut perf_event, mut perf_ctx) = (None, None, None);
        let mut at = 0usize;
        while at < types.len() {
            let info = u32_at(types, at + 4).ok_or(LayoutError::Malformed("truncated type"))?;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            if kind == KIND_STRUCT && vlen > 0 {
                let slot = match name_at(strings, u32_at(types, at).unwrap_or(0)) {
                    b"task_struct" => Some(&mut task_struct),
                    b"perf_event" => Some(&mut perf_event),
                    b"bpf_perf_event_data_kern" => Some(&mut perf_ctx),
                    _ => None,
                };
                if let Some(slot @ None) = slot {
                    *slot = Some(offsets.len() as u32 + 1);
                }
            }
            let extra = match kind {
                // INT, ARRAY, VAR, DECL_TAG: one fixed record.
                1 | 14 | 17 => 4,
                3 => 12,
                // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG: none.
                2 | 7..=12 | 16 | 18 => 0,
                // STRUCT, UNION (members), DATASEC (variables), ENUM64: 12 bytes each.
                4 | 5 | 15 | 19 => 12 * vlen,
                // ENUM, FUNC_PROTO (parameters): 8 bytes each.
                6 | 13 => 8 * vlen,
                _ => return Err(LayoutError::Malformed("unknown type kind")),
            };
            offsets.push(at as u32);
            at += 12 + extra;
        }
        if at != types.len() {
            return Err(LayoutError::Malformed("truncated type"));
        }
        Ok(Btf { types, strings, offsets, task_struct, perf_event, perf_ctx })
    }

    fn get(&self, id: u32) -> Option<Type> {
        let at = *self.offsets.get((id as usize).checked_sub(1)?)? as usize;
        let info = u32_at(self.types, at + 4)?;
        Some(Type {
            kind: (info >> 24) & 0x1f,
            vlen: (info & 0xffff) as usize,
            kind_flag: info >> 31 == 1,
            size_type: u32_at(self.types, at + 8)?,
            data: at + 12,
        })
    }

    fn name(&self, name_off: u32) -> &'a [u8] {
        name_at(self.strings, name_off)
    }

    /// `id` without typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Option<(u32, Type)> {
        for _ in 0..32 {
            let t = self.get(id)?;
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => id = t.size_type,
                _ => return Some((id, t)),
            }
        }
        None
    }

    /// Byte offset and type of member `name` of struct or union `id`, also inside its anonymous members (as C
    /// names them). Bit fields are refused: the programs read whole bytes.
    fn member(&self, id: u32, name: &str) -> Option<(u32, u32)> {
        let (_, t) = self.resolve(id)?;
        if t.kind != KIND_STRUCT && t.kind != KIND_UNION {
            return None;
        }
        for i in 0..t.vlen {
            let m = t.data + 12 * i;
            let (name_off, ty, off) = (u32_at(self.types, m)?, u32_at(self.types, m + 4)?, u32_at(self.types, m + 8)?);
            let (bits, bitfield) = if t.kind_flag { (off & 0xff_ffff, off >> 24) } else { (off, 0) };
            if name_off == 0 {
                if let Some((inner, ty)) = self.member(ty, name) {
                    return Some((bits / 8 + inner, ty));
                }
            } else if self.name(name_off) == name.as_bytes() {
                return (bitfield == 0 && bits % 8 == 0).then_some((bits / 8, ty));
            }
        }
        None
    }

    /// Offset of `strct.name`, which must be an integer of `size` bytes.
    fn int(&self, strct: u32, name: &'static str, size: u32) -> Result<u32, LayoutError> {
        let (off, ty) = self.member(strct, name).ok_or(LayoutError::Missing(name))?;
        match self.resolve(ty) {
            Some((_, t)) if t.kind == KIND_INT && t.size_type == size => Ok(off),
            _ => Err(LayoutError::Missing(name)),
        }
    }

    /// Offset of `strct.name`, a pointer, and the type it points to.
    fn ptr(&self, strct: u32, name: &'static str) -> Result<(u32, u32), LayoutError> {
        let (off, ty) = self.member(strct, name).ok_or(LayoutError::Missing(name))?;
        match self.resolve(ty) {
            Some((_, t)) if t.kind == KIND_PTR => Ok((off, t.size_type)),
            _ => Err(LayoutError::Missing(name)),
        }
    }

    /// `id`, which must be a struct (through typedefs), and its size.
    fn strct(&self, id: u32, what: &'static str) -> Result<(u32, u32), LayoutError> {
        match self.resolve(id) {
            Some((id, t)) if t.kind == KIND_STRUCT => Ok((id, t.size_type)),
            _ => Err(LayoutError::Missing(what)),
        }
    }
}

fn parse(b: &[u8]) -> Result<pyperf_kernel_layout, LayoutError> {
    let btf = Btf::new(b)?;
    let task = btf.task_struct.ok_or(LayoutError::Missing("struct task_struct"))?;
    let (task_thread_pid, pid_ty) = btf.ptr(task, "thread_pid")?;
    let (pid, _) = btf.strct(pid_ty, "struct pid")?;
    let (task_mm, mm_ty) = btf.ptr(task, "mm")?;
    let (mm, _) = btf.strct(mm_ty, "struct mm_struct")?;
    let (pid_numbers, numbers_ty) = btf.member(pid, "numbers").ok_or(LayoutError::Missing("numbers"))?;
    let upid = match btf.resolve(numbers_ty) {
        Some((_, t)) if t.kind == KIND_ARRAY => u32_at(btf.types, t.data).ok_or(LayoutError::Missing("numbers"))?,
        _ => return Err(LayoutError::Missing("numbers")),
    };
    let (upid, upid_size) = btf.strct(upid, "struct upid")?;
    let (se, se_ty) = btf.member(task, "se").ok_or(LayoutError::Missing("se"))?;
    Ok(pyperf_kernel_layout {
        task_pid: btf.int(task, "pid", 4)?,
        task_tgid: btf.int(task, "tgid", 4)?,
        task_thread_pid,
        task_start_time: btf.int(task, "start_time", 8)?,
        task_mm,
        task_fsbase: fsbase(&btf, task)?,
        pid_level: btf.int(pid, "level", 4)?,
        pid_numbers,
        upid_size,
        upid_nr: btf.int(upid, "nr", 4)?,
        mm_start_stack: btf.int(mm, "start_stack", 8)?,
        task_runtime: se + btf.int(se_ty, "sum_exec_runtime", 8)?,
        task_runtime_at_pick: se + btf.int(se_ty, "prev_sum_exec_runtime", 8)?,
        perf_ctx_event: perf_ctx_event(&btf).unwrap_or(0),
        perf_timer_expires: perf_timer_expires(&btf).unwrap_or(0),
        task_run_delay: run_delay(&btf, task).unwrap_or(0),
    })
}

/// `bpf_perf_event_data_kern.event`: where a perf_event program's context holds its event. None where this kernel
/// lays it out otherwise (its samples then stand for one period each: the catch-up is optional, recording is not).
fn perf_ctx_event(btf: &Btf) -> Option<u32> {
    let (off, ty) = btf.member(btf.perf_ctx?, "event")?;
    (btf.resolve(ty)?.1.kind == KIND_PTR).then_some(off)
}

/// `task_struct.sched_info.run_delay` (CONFIG_SCHED_INFO): the thread's total wait in run queues, ns.
fn run_delay(btf: &Btf, task: u32) -> Option<u32> {
    let (info, ty) = btf.member(task, "sched_info")?;
    Some(info + btf.int(ty, "run_delay", 8).ok()?)
}

/// `perf_event.hw.hrtimer.node.expires`: when a cpu-clock event's timer is due (a ktime_t, 8 bytes).
fn perf_timer_expires(btf: &Btf) -> Option<u32> {
    let (hw, hw_ty) = btf.member(btf.perf_event?, "hw")?;
    let (timer, timer_ty) = btf.member(hw_ty, "hrtimer")?;
    let (node, node_ty) = btf.member(timer_ty, "node")?;
    Some(hw + timer + node + btf.int(node_ty, "expires", 8).ok()?)
}

/// task_struct.thread.fsbase: the thread pointer, which glibc's pthread_self() returns (x86-64 only).
#[cfg(target_arch = "x86_64")]
fn fsbase(btf: &Btf, task: u32) -> Result<u32, LayoutError> {
    let (thread, ty) = btf.member(task, "thread").ok_or(LayoutError::Missing("thread"))?;
    Ok(thread + btf.int(ty, "fsbase", 8)?)
}

#[cfg(not(target_arch = "x86_64"))]
fn fsbase(_: &Btf, _: u32) -> Result<u32, LayoutError> {
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little BTF builder: enough kinds for the structs pyperf reads.
    #[derive(Default)]
    struct Builder {
        types: Vec<u8>,
        strings: Vec<u8>,
        n: u32,
    }

    impl Builder {
        fn new() -> Builder {
            Builder { strings: vec![0], ..Default::default() }
        }
        fn s(&mut self, name: &str) -> u32 {
            if name.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(name.as_bytes());
            self.strings.push(0);
            off
        }
        fn head(&mut self, name: &str, kind: u32, vlen: u32, flag: bool, size_type: u32) -> u32 {
            let name = self.s(name);
            let info = (kind << 24) | vlen | (u32::from(flag) << 31);
            for v in [name, info, size_type] {
                self.types.extend_from_slice(&v.to_le_bytes());
            }
            self.n += 1;
            self.n
        }
        fn int(&mut self, name: &str, size: u32) -> u32 {
            let id = self.head(name, KIND_INT, 0, false, size);
            self.types.extend_from_slice(&(size * 8).to_le_bytes());
            id
        }
        fn ptr(&mut self, to: u32) -> u32 {
            self.head("", KIND_PTR, 0, false, to)
        }
        fn typedef(&mut self, name: &str, to: u32) -> u32 {
            self.head(name, KIND_TYPEDEF, 0, false, to)
        }
        fn array(&mut self, elem: u32, n: u32, index: u32) -> u32 {
            let id = self.head("", KIND_ARRAY, 0, false, 0);
            for v in [elem, index, n] {
                self.types.extend_from_slice(&v.to_le_bytes());
            }
            id
        }
        /// Members: (name, type, byte offset, bit-field size).
        fn compound(&mut self, kind: u32, name: &str, size: u32, members: &[(&str, u32, u32, u32)]) -> u32 {
            let flag = members.iter().any(|m| m.3 != 0);
            let id = self.head(name, kind, members.len() as u32, flag, size);
            for &(n, ty, off, bits) in members {
                let n = self.s(n);
                let off = if flag { (bits << 24) | (off * 8) } else { off * 8 };
                for v in [n, ty, off] {
                    self.types.extend_from_slice(&v.to_le_bytes());
                }
            }
            id
        }
        fn bytes(&self) -> Vec<u8> {
            let mut b = Vec::new();
            let hdr = [24u32, 0, self.types.len() as u32, self.types.len() as u32, self.strings.len() as u32];
            b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
            b.extend_from_slice(&[1, 0]);
            for v in hdr {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend_from_slice(&self.types);
            b.extend_from_slice(&self.strings);
            b
        }
    }

    /// A kernel with the fields where a test puts them: `start_stack` in an anonymous struct (as mm_struct has
    /// it since 6.x), `level` behind a typedef, a forward declaration of task_struct first.
    fn kernel(fsbase_bits: u32) -> Builder {
        let mut b = Builder::new();
        let int = b.int("int", 4);
        let uint = b.int("unsigned int", 4);
        let ul = b.int("long unsigned int", 8);
        let u64t = b.typedef("u64", ul);
        let level_t = b.typedef("level_t", uint);
        b.head("task_struct", KIND_STRUCT, 0, false, 0); // forward-declared use before the definition
        let upid = b.compound(KIND_STRUCT, "upid", 16, &[("nr", int, 0, 0), ("ns", ul, 8, 0)]);
        let numbers = b.array(upid, 1, int);
        let pid = b.compound(
            KIND_STRUCT,
            "pid",
            48,
            &[("count", int, 0, 0), ("level", level_t, 4, 0), ("numbers", numbers, 32, 0)],
        );
        let anon = b.compound(KIND_STRUCT, "", 64, &[("mmap_base", ul, 0, 0), ("start_stack", ul, 24, 0)]);
        let mm = b.compound(KIND_STRUCT, "mm_struct", 128, &[("anon", 0, 0, 0), ("", anon, 64, 0)]);
        let thread = b.compound(KIND_STRUCT, "thread_struct", 64, &[("sp", ul, 0, 0), ("fsbase", ul, 16, fsbase_bits)]);
        let se = b.compound(
            KIND_STRUCT,
            "sched_entity",
            256,
            &[("load", ul, 0, 0), ("sum_exec_runtime", u64t, 72, 0), ("prev_sum_exec_runtime", u64t, 88, 0)],
        );
        let (ppid, pmm) = (b.ptr(pid), b.ptr(mm));
        b.compound(
            KIND_STRUCT,
            "task_struct",
            4096,
            &[
                ("pid", int, 1000, 0),
                ("tgid", int, 1004, 0),
                ("mm", pmm, 900, 0),
                ("thread_pid", ppid, 1368, 0),
                ("start_time", u64t, 1552, 0),
                ("thread", thread, 3112, 0),
                ("se", se, 128, 0),
            ],
        );
        b
    }

    #[test]
    fn finds_every_field_also_in_anonymous_members_and_through_typedefs() {
        let l = parse(&kernel(0).bytes()).expect("parses");
        assert_eq!(
            (l.task_pid, l.task_tgid, l.task_mm, l.task_thread_pid, l.task_start_time),
            (1000, 1004, 900, 1368, 1552)
        );
        if cfg!(target_arch = "x86_64") {
            assert_eq!(l.task_fsbase, 3112 + 16);
        }
        assert_eq!((l.pid_level, l.pid_numbers, l.upid_size, l.upid_nr), (4, 32, 16, 0));
        assert_eq!(l.mm_start_stack, 64 + 24, "inside mm_struct's anonymous struct");
        assert_eq!((l.task_runtime, l.task_runtime_at_pick), (128 + 72, 128 + 88), "inside task_struct.se");
    }

    #[test]
    fn refuses_what_it_cannot_read_exactly() {
        if cfg!(target_arch = "x86_64") {
            let e = parse(&kernel(8).bytes()).expect_err("a bit field is not the 8-byte fsbase");
            assert_eq!(e.to_string(), "no fsbase of the expected kind in the kernel's BTF");
        }
        let mut bad = kernel(0).bytes();
        bad[0] ^= 0xff;
        assert!(matches!(parse(&bad), Err(LayoutError::Malformed(_))));
        let good = kernel(0).bytes();
        for cut in [3, 23, good.len() - 200] {
            assert!(parse(&good[..cut]).is_err(), "truncated at {cut}");
        }
        let mut b = Builder::new();
        b.int("int", 4);
        assert_eq!(
            parse(&b.bytes()).expect_err("no task_struct").to_string(),
            "no struct task_struct of the expected kind in the kernel's BTF"
        );
    }

    /// Member `name` of `ty` as libbpf's own BTF parser sees it (anonymous members included): the reference.
    fn libbpf_member(
        btf: &libbpf_rs::btf::Btf,
        ty: libbpf_rs::btf::TypeId,
        name: &str,
    ) -> Option<(u32, libbpf_rs::btf::TypeId)> {
        use libbpf_rs::btf::types::{Composite, MemberAttr};
        let t: libbpf_rs::btf::BtfType = btf.type_by_id(ty)?;
        let c = Composite::try_from(t.skip_mods_and_typedefs()).ok()?;
        for m in c.iter() {
            let off = match m.attr {
                MemberAttr::Normal { offset } | MemberAttr::BitField { offset, .. } => offset / 8,
            };
            match m.name {
                None => {
                    if let Some((o, t)) = libbpf_member(btf, m.ty, name) {
                        return Some((off + o, t));
                    }
                }
                Some(n) if n == name => return Some((off, m.ty)),
                Some(_) => {}
            }
        }
        None
    }

    /// The running kernel's BTF (CI's machines have one: recording needs it) gives the offsets libbpf finds.
    #[test]
    fn this_kernel_as_libbpf_reads_it() {
        use libbpf_rs::btf::types::{Ptr, Struct};
        use libbpf_rs::btf::{HasSize, ReferencesType};
        let l = read_layout(Path::new("/sys/kernel/btf/vmlinux")).expect("this kernel's BTF parses");
        let btf = libbpf_rs::btf::Btf::from_vmlinux().expect("libbpf reads this kernel's BTF");
        let strct = |name: &str| btf.type_by_name::<Struct>(name).expect(name).type_id();
        let off = |ty, name: &str| libbpf_member(&btf, ty, name).expect(name);
        let pointee = |ty| btf.type_by_id::<Ptr>(ty).expect("a pointer").referenced_type().type_id();
        let (task, pid, upid, mm) = (strct("task_struct"), strct("pid"), strct("upid"), strct("mm_struct"));
        assert_eq!(l.task_pid, off(task, "pid").0);
        assert_eq!(l.task_tgid, off(task, "tgid").0);
        assert_eq!(l.task_start_time, off(task, "start_time").0);
        let (thread_pid, ty) = off(task, "thread_pid");
        assert_eq!((l.task_thread_pid, pointee(ty)), (thread_pid, pid));
        let (task_mm, ty) = off(task, "mm");
        assert_eq!((l.task_mm, pointee(ty)), (task_mm, mm));
        if cfg!(target_arch = "x86_64") {
            let (thread, ty) = off(task, "thread");
            assert_eq!(l.task_fsbase, thread + off(ty, "fsbase").0);
        }
        assert_eq!((l.pid_level, l.pid_numbers), (off(pid, "level").0, off(pid, "numbers").0));
        let upid_size = btf.type_by_id::<Struct>(upid).expect("upid").size() as u32;
        assert_eq!((l.upid_nr, l.upid_size), (off(upid, "nr").0, upid_size));
        assert_eq!(l.mm_start_stack, off(mm, "start_stack").0);
        let (se, ty) = off(task, "se");
        assert_eq!(l.task_runtime, se + off(ty, "sum_exec_runtime").0);
        assert_eq!(l.task_runtime_at_pick, se + off(ty, "prev_sum_exec_runtime").0);
        // The cpu-clock catch-up's two offsets: found in this kernel, where libbpf finds them.
        assert_eq!(l.perf_ctx_event, off(strct("bpf_perf_event_data_kern"), "event").0);
        let (hw, ty) = off(strct("perf_event"), "hw");
        let (timer, ty) = off(ty, "hrtimer");
        let (node, ty) = off(ty, "node");
        assert_eq!(l.perf_timer_expires, hw + timer + node + off(ty, "expires").0);
        assert!(l.perf_ctx_event > 0 && l.perf_timer_expires > 0);
        let (info, ty) = off(task, "sched_info");
        assert_eq!(l.task_run_delay, info + off(ty, "run_delay").0);
    }
}
