//! Reading Python objects out of another process's memory: `str` (2.7's byte strings and every PEP 393 layout),
//! `int`, `dict` (2.7's open-addressing table, the compact tables of 3.6-3.10 and 3.11+, split tables) and instance
//! attributes (`tp_dictoffset`, 3.11's and 3.12's managed dicts, 3.13+ inline values): what naming threads needs
//! ([`super::threads`]), and the string decoding code objects use ([`super::code`]).
//!
//! The target runs while it is read. So every object's type is checked (by its `tp_flags`) before its layout is
//! trusted, every size is bounded, and a dict is read as a [`Dict`]: its items and the bytes they were read from,
//! which [`Objects::unchanged`] reads again. A reader that finds them changed drops what it read rather than
//! combine two states of the dict: a torn read gives nothing, never a wrong answer. Every address computed from a
//! pointer read from the target is checked for overflow ([`at`]): the target's memory may hold anything.
//!
//! The target also decides how much there is to read (a dict of 60 000 attributes, 4 000 entries of one object):
//! [`Metered`] counts the work a pass does and makes every read fail once its budget is spent.

use std::cell::Cell;
use std::collections::HashMap;

use super::layout::Layout;
use super::versions::{
    InstanceDicts, Row, Strings, MANAGED_DICT_BEFORE, MANAGED_VALUES_BEFORE_311, TPFLAGS_DICT_SUBCLASS,
    TPFLAGS_HEAPTYPE, TPFLAGS_INLINE_VALUES, TPFLAGS_INT_SUBCLASS, TPFLAGS_LONG_SUBCLASS, TPFLAGS_MANAGED_DICT,
    TPFLAGS_STRING_SUBCLASS, TPFLAGS_UNICODE_SUBCLASS,
};
use crate::mem::ReadMem;

/// Most entries (used or deleted) of a dict read; a larger one is not read. Bounds one read of its table to 1.5 MiB.
pub const MAX_DICT_ENTRIES: u64 = 1 << 16;
/// Most entries of an instance's attribute dict read ([`Objects::attributes`] of a `Thread`: a few dozen).
pub const MAX_INSTANCE_ENTRIES: u64 = 512;

/// Longest key compared by text, in bytes (attribute and module names are far shorter).
const MAX_KEY_BYTES: usize = 256;
/// Bytes read at once at a key's address: its header and, for short ASCII keys, its text (one read per key).
const KEY_BLOCK: usize = 128;

/// `base + off`: an address computed from `base`, a pointer read from the target (any value), and `off`, an offset
/// (of a layout: < 0 when the member does not exist). `None` when the offset is negative or the sum overflows.
pub fn at(base: u64, off: impl TryInto<u64>) -> Option<u64> {
    base.checked_add(off.try_into().ok()?)
}

/// How much work a [`Metered`] memory allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Bytes read.
    pub bytes: u64,
    /// Operations: reads (a system call each) and dict keys compared ([`ReadMem::charge`]).
    pub ops: u64,
}

/// A [`ReadMem`] that counts the work done through it: the bytes read, and the reads and what callers
/// [`ReadMem::charge`] as operations. Once either part of its [`Budget`] is spent, every read fails (and
/// [`Metered::exhausted`] says so): a pass over a hostile process's objects ends, whatever they hold.
pub struct Metered<'m, M> {
    mem: &'m M,
    budget: Budget,
    bytes: Cell<u64>,
    ops: Cell<u64>,
}

impl<'m, M: ReadMem> Metered<'m, M> {
    /// `mem`, with `budget` to spend.
    pub fn new(mem: &'m M, budget: Budget) -> Self {
        Metered { mem, budget, bytes: Cell::new(0), ops: Cell::new(0) }
    }

    /// Whether the budget ran out (some read or charge was refused).
    pub fn exhausted(&self) -> bool {
        self.bytes.get() > self.budget.bytes || self.ops.get() > self.budget.ops
    }

    /// What was spent so far (refused work included).
    pub fn spent(&self) -> Budget {
        Budget { bytes: self.bytes.get(), ops: self.ops.get() }
    }
}

impl<M: ReadMem> ReadMem for Metered<'_, M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        self.bytes.set(self.bytes.get().saturating_add(buf.len() as u64));
        self.charge(1) && !self.exhausted() && self.mem.read(addr, buf)
    }

    fn charge(&self, ops: u64) -> bool {
        self.ops.set(self.ops.get().saturating_add(ops));
        !self.exhausted()
    }
}

/// Reads a str: PEP 393 `str` on 3.x (compact ASCII, compact 1/2/4-byte kinds, legacy), `PyStringObject` (bytes,
/// taken as UTF-8) on 2.7. Returns the text, cut on a character boundary at `max` bytes, and whether it was cut.
/// The object's type is not checked: the caller knows it is a str ([`Objects::str_value`] checks).
pub fn read_str<M: ReadMem>(mem: &M, row: &Row, obj: u64, max: usize) -> Option<(String, bool)> {
    let l = row.layout;
    if row.strings == Strings::Py2Bytes {
        // PyString: bytes, UTF-8 in practice (source identifiers are ASCII, file names the file system's).
        let bytes = read_bytes(mem, l, obj, max + 1)?;
        return Some(utf8_cut(&bytes, max));
    }
    let mut head = [0u8; 8];
    if !mem.read(at(obj, l.unicode_length)?, &mut head) {
        return None;
    }
    let length = u64::from_le_bytes(head) as usize;
    let mut st = [0u8; 4];
    if !mem.read(at(obj, l.unicode_state)?, &mut st) {
        return None;
    }
    let state = u32::from_le_bytes(st);
    let kind = (state >> l.unicode_kind_shift) & 7;
    let compact = (state >> l.unicode_compact_shift) & 1 == 1;
    let ascii = (state >> l.unicode_ascii_shift) & 1 == 1;
    let data = if compact && ascii {
        at(obj, l.ascii_data)?
    } else if compact {
        at(obj, l.compact_data)?
    } else {
        // Legacy (non-compact) string, e.g. an instance of a str subclass: the data pointer follows the compact
        // header.
        let mut p = [0u8; 8];
        if !mem.read(at(obj, l.compact_data)?, &mut p) {
            return None;
        }
        u64::from_le_bytes(p)
    };
    // Read at most what `max` UTF-8 bytes can need, then cut on a character boundary.
    let chars = length.min(max);
    let width = match kind {
        1 | 2 | 4 => kind as usize,
        _ => return None,
    };
    let mut raw = vec![0u8; chars * width];
    if !mem.read(data, &mut raw) {
        return None;
    }
    Some(decode_units(&raw, width, length > chars, max))
}

/// Text of `raw`, code units of `width` bytes, cut at `max` UTF-8 bytes; `more`: the string goes on after `raw`.
fn decode_units(raw: &[u8], width: usize, more: bool, max: usize) -> (String, bool) {
    let mut text = String::with_capacity(raw.len() / width);
    for unit in raw.chunks_exact(width) {
        let cp = match width {
            1 => unit[0] as u32,
            2 => u16::from_le_bytes([unit[0], unit[1]]) as u32,
            _ => u32::from_le_bytes([unit[0], unit[1], unit[2], unit[3]]),
        };
        let ch = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
        if text.len() + ch.len_utf8() > max {
            return (text, true);
        }
        text.push(ch);
    }
    (text, more)
}

/// Reads a bytes object's content (PyBytes, or PyString on 2.7), at most `max` bytes.
pub fn read_bytes<M: ReadMem>(mem: &M, l: &Layout, obj: u64, max: usize) -> Option<Vec<u8>> {
    let mut size = [0u8; 8];
    if !mem.read(at(obj, l.bytes_size)?, &mut size) {
        return None;
    }
    let n = (i64::from_le_bytes(size).max(0) as usize).min(max);
    let mut out = vec![0u8; n];
    if n > 0 && !mem.read(at(obj, l.bytes_data)?, &mut out) {
        return None;
    }
    Some(out)
}

/// A NUL-terminated UTF-8 C string of at most `max` bytes, read page by page (a string near the end of a mapping must
/// not fail because of a read past it). Returns the text and whether it was cut.
pub fn read_cstr<M: ReadMem>(mem: &M, addr: u64, max: usize) -> Option<(String, bool)> {
    const PAGE: u64 = 4096;
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut next = addr;
    while out.len() <= max {
        let n = ((PAGE - next % PAGE) as usize).min(max + 1 - out.len()).min(256);
        let mut chunk = vec![0u8; n];
        if !mem.read(next, &mut chunk) {
            return None;
        }
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Some((utf8_cut(&out, max).0, false));
        }
        out.extend_from_slice(&chunk);
        // The end of the address space ends the string: unterminated.
        next = at(next, n)?;
    }
    Some((utf8_cut(&out, max).0, true))
}

/// At most `max` bytes of UTF-8 text, cut on a character boundary: (text, was cut). Invalid sequences become
/// U+FFFD; a character split by the cut is dropped rather than shown as U+FFFD.
pub fn utf8_cut(bytes: &[u8], max: usize) -> (String, bool) {
    let mut end = bytes.len().min(max);
    if end < bytes.len() {
        // Back up over the start of a character the cut splits (at most 3 bytes).
        if let Err(e) = std::str::from_utf8(&bytes[..end]) {
            if e.error_len().is_none() && end - e.valid_up_to() < 4 {
                end = e.valid_up_to();
            }
        }
    }
    let (s, cut) = cut_str(String::from_utf8_lossy(&bytes[..end]).into_owned(), max);
    (s, cut || end < bytes.len())
}

/// `s` cut to at most `max` bytes on a character boundary: (text, was cut).
pub fn cut_str(mut s: String, max: usize) -> (String, bool) {
    if s.len() <= max {
        return (s, false);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    (s, true)
}

/// What reading a type's instances needs to know of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeInfo {
    /// Its address.
    pub addr: u64,
    /// `tp_flags`.
    pub flags: u64,
    /// `tp_basicsize`.
    pub basicsize: i64,
    /// `tp_dictoffset`.
    pub dictoffset: i64,
    /// `ht_cached_keys` of a heap type (3.x), else 0.
    pub cached_keys: u64,
}

/// A dict as read: its items (key, value: object addresses), in table order, and the memory they were read from
/// (address, bytes), for [`Objects::unchanged`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dict {
    /// (key, value) of every live entry.
    pub items: Vec<(u64, u64)>,
    regions: Vec<(u64, Vec<u8>)>,
}

/// The entries of a dict's keys object as read ([`Objects::entries`]).
struct Entries {
    at: u64,
    bytes: Vec<u8>,
    /// Bytes of an entry, and where its key and value are in it.
    esize: u64,
    key_at: usize,
    value_at: usize,
    nentries: u64,
    regions: Vec<(u64, Vec<u8>)>,
}

/// A step of the way from an instance to one of its attributes ([`Objects::attribute_path`]), relative to the
/// address reached so far (the instance at first); bpf/pyperf.h `enum pyperf_span_op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrStep {
    /// Go to the pointer at `+off`, which must not be 0.
    Deref(i64),
    /// The word at `+off` must have bit 0 set (3.12's tagged values pointer); go to it plus one.
    DerefTagged(i64),
    /// The word at `+off` must be 0.
    CheckNull(i64),
    /// The byte at `+off` must be 1.
    CheckByte(i64),
}

/// Reads objects of one process, with the facts of its interpreter's row. Keeps what it learnt of types and key
/// texts: use one per pass over the process's objects, not longer (a freed type's or string's address may be
/// reused).
pub struct Objects<'m, M> {
    mem: &'m M,
    row: &'static Row,
    /// Object -> its type's address. An object reached through a dict that reads the same afterwards
    /// ([`Objects::unchanged`]) lived all along, so its type did not change.
    obj_types: HashMap<u64, u64>,
    types: HashMap<u64, Option<TypeInfo>>,
    type_names: HashMap<u64, Option<String>>,
    keys: HashMap<u64, Option<String>>,
}

impl<'m, M: ReadMem> Objects<'m, M> {
    /// A reader of `mem`, a process whose interpreter `row` describes.
    pub fn new(mem: &'m M, row: &'static Row) -> Self {
        Objects {
            mem,
            row,
            obj_types: HashMap::new(),
            types: HashMap::new(),
            type_names: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    /// The little-endian u64 at `addr`.
    pub fn u64_at(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        self.mem.read(addr, &mut b).then(|| u64::from_le_bytes(b))
    }

    /// `n` bytes at `addr`.
    pub fn bytes(&self, addr: u64, n: usize) -> Option<Vec<u8>> {
        let mut b = vec![0u8; n];
        self.mem.read(addr, &mut b).then_some(b)
    }

    fn layout(&self) -> &'static Layout {
        self.row.layout
    }

    /// The row of the interpreter whose objects these are.
    pub fn row(&self) -> &'static Row {
        self.row
    }

    /// The memory read.
    pub fn mem(&self) -> &'m M {
        self.mem
    }

    /// The type of the object at `obj` (0: none).
    pub fn type_of(&mut self, obj: u64) -> Option<TypeInfo> {
        if obj == 0 {
            return None;
        }
        let t = match self.obj_types.get(&obj) {
            Some(&t) => t,
            None => {
                let t = self.u64_at(at(obj, self.layout().object_type)?)?;
                self.obj_types.insert(obj, t);
                t
            }
        };
        self.type_info(t)
    }

    /// `n` bytes at `obj` (at least through its type pointer) and its type, read from them: what most objects read
    /// here need, in one read.
    fn typed_block(&mut self, obj: u64, n: usize) -> Option<(TypeInfo, Vec<u8>)> {
        if obj == 0 {
            return None;
        }
        let type_at = usize::try_from(self.layout().object_type).ok()?;
        let block = self.bytes(obj, n.max(type_at + 8))?;
        let t = u64_in(&block, type_at)?;
        self.obj_types.insert(obj, t);
        Some((self.type_info(t)?, block))
    }

    /// What type `t` is, read once.
    fn type_info(&mut self, t: u64) -> Option<TypeInfo> {
        if let Some(known) = self.types.get(&t) {
            return known.clone();
        }
        let info = self.read_type(t);
        self.types.insert(t, info.clone());
        info
    }

    fn read_type(&self, t: u64) -> Option<TypeInfo> {
        let l = self.layout();
        let flags_at = self.row.type_flags;
        let end = [flags_at, l.type_basicsize, l.type_dictoffset].into_iter().max()? + 8;
        let head = self.bytes(t, usize::try_from(end).ok()?)?;
        let flags = u64_in(&head, flags_at)?;
        let cached_keys = if flags & TPFLAGS_HEAPTYPE != 0 && l.heaptype_cached_keys >= 0 {
            self.u64_at(at(t, l.heaptype_cached_keys)?)?
        } else {
            0
        };
        Some(TypeInfo {
            addr: t,
            flags,
            basicsize: u64_in(&head, l.type_basicsize)? as i64,
            dictoffset: u64_in(&head, l.type_dictoffset)? as i64,
            cached_keys,
        })
    }

    /// `tp_name` of type `t`, at most 64 bytes (remembered: every `Thread` of a pass asks).
    pub fn type_name(&mut self, t: &TypeInfo) -> Option<String> {
        if let Some(known) = self.type_names.get(&t.addr) {
            return known.clone();
        }
        let p = self.u64_at(at(t.addr, self.layout().type_name)?);
        let name = p.and_then(|p| read_cstr(self.mem, p, 64)).filter(|(_, cut)| !cut).map(|(s, _)| s);
        self.type_names.insert(t.addr, name.clone());
        name
    }

    /// The text of a str object (2.7: a byte string) of at most `max` bytes: (text, was cut). `None` when the
    /// object is not a str or cannot be read.
    pub fn str_value(&mut self, obj: u64, max: usize) -> Option<(String, bool)> {
        let want =
            if self.row.strings == Strings::Py2Bytes { TPFLAGS_STRING_SUBCLASS } else { TPFLAGS_UNICODE_SUBCLASS };
        // Most strs read here are short ASCII: header and text in one block. One near the end of its mapping is
        // read the long way.
        let (ty, block) = match self.typed_block(obj, KEY_BLOCK) {
            Some((ty, block)) => (ty, Some(block)),
            None => (self.type_of(obj)?, None),
        };
        if ty.flags & want == 0 {
            return None;
        }
        if let Some(short) = block.and_then(|b| self.short_ascii(&b)).filter(|t| t.len() <= max) {
            return Some((short, false));
        }
        read_str(self.mem, self.row, obj, max)
    }

    /// The text of a key (a str of at most [`MAX_KEY_BYTES`]), remembered by address: keys are compared by text many
    /// times over (every `Thread` shares its attribute names).
    fn key_text(&mut self, obj: u64) -> Option<String> {
        if let Some(known) = self.keys.get(&obj) {
            return known.clone();
        }
        let text = self.str_value(obj, MAX_KEY_BYTES).filter(|(_, cut)| !cut).map(|(t, _)| t);
        self.keys.insert(obj, text.clone());
        text
    }

    /// The text of a short compact ASCII str (3.x) or byte string (2.7) from `block`, its first [`KEY_BLOCK`] bytes
    /// (its type checked by the caller): most keys and names are. `None` for anything else (read the long way).
    fn short_ascii(&self, block: &[u8]) -> Option<String> {
        let l = self.layout();
        let (len, data) = if self.row.strings == Strings::Py2Bytes {
            (u64_in(block, l.bytes_size)? as usize, off(l.bytes_data)? as usize)
        } else {
            let state = u32::from_le_bytes(block.get(off(l.unicode_state)? as usize..)?.get(..4)?.try_into().ok()?);
            let compact = (state >> l.unicode_compact_shift) & 1 == 1;
            let ascii = (state >> l.unicode_ascii_shift) & 1 == 1;
            if !(compact && ascii) {
                return None;
            }
            (u64_in(block, l.unicode_length)? as usize, off(l.ascii_data)? as usize)
        };
        let text = block.get(data..data.checked_add(len)?)?;
        text.is_ascii().then(|| String::from_utf8_lossy(text).into_owned())
    }

    /// The value of a non-negative int object (2.7: `int`) below 2^64; `None` for anything else.
    pub fn int_value(&mut self, obj: u64) -> Option<u64> {
        self.int_value_wide(obj).and_then(|v| u64::try_from(v).ok())
    }

    /// The value of a non-negative int object (2.7: `int`) below 2^150 (five 30-bit digits: a 128-bit trace id);
    /// `None` for anything else.
    pub fn int_value_wide(&mut self, obj: u64) -> Option<u128> {
        let l = self.layout();
        // The header and two digits (what a tid or an ident needs), in one read: every int object is that long
        // (allocations are 16-byte aligned: 1-digit ints take 32 bytes too).
        let py2 = self.row.strings == Strings::Py2Bytes;
        let len = if py2 { l.int_value.max(l.object_type) + 8 } else { l.long_digits + 8 };
        let (ty, head) = self.typed_block(obj, usize::try_from(len).ok()?)?;
        if l.int_value >= 0 && ty.flags & TPFLAGS_INT_SUBCLASS != 0 {
            return u64::try_from(u64_in(&head, l.int_value)? as i64).ok().map(u128::from);
        }
        if py2 || ty.flags & TPFLAGS_LONG_SUBCLASS == 0 {
            // 2.7's `long` is not read: what is read here (pthread ids) are `int`s there.
            return None;
        }
        let ndigits = if l.long_tag >= 0 {
            let tag = u64_in(&head, l.long_tag)?;
            match tag & 3 {
                0 => tag >> 3,
                1 => return Some(0),
                _ => return None,
            }
        } else {
            u64::try_from(u64_in(&head, l.bytes_size)? as i64).ok()?
        };
        // 30-bit digits: five hold any u128.
        if ndigits > 5 {
            return None;
        }
        let digits_at = usize::try_from(l.long_digits).ok()?;
        let want = 4 * ndigits as usize;
        let raw = match head.get(digits_at..digits_at + want) {
            Some(d) => d.to_vec(),
            None => self.bytes(at(obj, l.long_digits)?, want)?,
        };
        let mut v: u128 = 0;
        for (i, d) in raw.chunks_exact(4).enumerate() {
            let digit = u32::from_le_bytes([d[0], d[1], d[2], d[3]]);
            // The fifth digit holds bits 120-149: above 2^128 is not read.
            if digit >> 30 != 0 || (i == 4 && digit >> 8 != 0) {
                return None;
            }
            v |= u128::from(digit) << (30 * i);
        }
        Some(v)
    }

    /// The dict object at `obj`, type checked, of at most [`MAX_DICT_ENTRIES`] entries.
    pub fn dict(&mut self, obj: u64) -> Option<Dict> {
        self.dict_of_at_most(obj, MAX_DICT_ENTRIES)
    }

    /// The dict object at `obj`, type checked, if it has at most `max` entries (used or deleted; 2.7: slots, at
    /// most 4 per entry).
    fn dict_of_at_most(&mut self, obj: u64, max: u64) -> Option<Dict> {
        let l = self.layout();
        // The object through ma_keys / ma_values (3.x) or ma_table (2.7), type and all, in one read.
        let fields = if l.dict_table >= 0 { [l.dict_table, l.dict_mask] } else { [l.dict_keys, l.dict_values] };
        let end = usize::try_from(fields[0].max(fields[1])).ok()? + 8;
        let (ty, block) = self.typed_block(obj, end)?;
        if ty.flags & TPFLAGS_DICT_SUBCLASS == 0 {
            return None;
        }
        // From ma_used on: not ob_refcnt (changes all the time) nor ob_type (read already).
        let start = at(obj, 16)?;
        let head = block.get(16..end)?.to_vec();
        if l.dict_table >= 0 {
            self.dict27(start, head, max)
        } else {
            self.dict3(start, head, max)
        }
    }

    /// 2.7: an open-addressing table of `ma_mask + 1` (hash, key, value) slots; a live slot has a key and a value
    /// (a deleted one keeps a dummy key and no value). `head`: the dict object from byte 16 (at `start`) on.
    fn dict27(&self, start: u64, head: Vec<u8>, max: u64) -> Option<Dict> {
        let l = self.layout();
        let mask = u64_in(&head, l.dict_mask - 16)?;
        let table = u64_in(&head, l.dict_table - 16)?;
        let slots = mask.checked_add(1)?;
        if !slots.is_power_of_two() || slots > MAX_DICT_ENTRIES.min(max.saturating_mul(4)) || table == 0 {
            return None;
        }
        let esize = off(l.dict_entry_size)?;
        let entries = self.bytes(table, (slots * esize) as usize)?;
        let items: Vec<(u64, u64)> = entries
            .chunks_exact(esize as usize)
            .map(|e| (u64_in(e, 8).unwrap_or(0), u64_in(e, 16).unwrap_or(0)))
            .filter(|&(k, v)| k != 0 && v != 0)
            .collect();
        if items.len() as u64 > max {
            return None;
        }
        Some(Dict { items, regions: vec![(start, head), (table, entries)] })
    }

    /// 3.x: `ma_keys` (the entries, after the index table) and `ma_values` (a split table's values).
    /// `head`: the dict object from byte 16 (at `start`) on: ma_used, the version tag (<= 3.12: changes with every
    /// change), ma_keys, ma_values.
    fn dict3(&self, start: u64, head: Vec<u8>, max: u64) -> Option<Dict> {
        let l = self.layout();
        let keys = u64_in(&head, l.dict_keys - 16)?;
        let values = u64_in(&head, l.dict_values - 16)?;
        let mut d = Dict { items: Vec::new(), regions: vec![(start, head)] };
        self.table(keys, values, max, &mut d)?;
        Some(d)
    }

    /// The entries of keys object `keys`, if it has at most `max` (used or deleted), and the regions that say them.
    fn entries(&self, keys: u64, max: u64) -> Option<Entries> {
        let l = self.layout();
        if keys == 0 {
            return None;
        }
        // From dk_size / dk_log2_size to the index table: not dk_refcnt (shared keys change it with every instance).
        let head_at = at(keys, l.dictkeys_size.max(l.dictkeys_log2_size))?;
        let indices = at(keys, l.dictkeys_indices)?;
        let head = self.bytes(head_at, indices.checked_sub(head_at)? as usize)?;
        let field =
            |o: i32| -> Option<usize> { usize::try_from(u64::try_from(o).ok()?.checked_sub(head_at - keys)?).ok() };
        let nentries = u64::try_from(u64_in(&head, field(l.dictkeys_nentries)?)? as i64).ok()?;
        let (index_bytes, kind) = if l.dictkeys_log2_size >= 0 {
            let log2_size = *head.get(field(l.dictkeys_log2_size)?)?;
            let log2_index_bytes = *head.get(field(l.dictkeys_log2_index_bytes)?)?;
            let kind = *head.get(field(l.dictkeys_kind)?)?;
            // An index is 1 to 8 bytes: log2 of the index table's bytes is log2_size + 0..3.
            if log2_size > 32 || !(log2_size..=log2_size + 3).contains(&log2_index_bytes) || kind > 2 {
                return None;
            }
            (1u64 << log2_index_bytes, kind)
        } else {
            let size = u64_in(&head, field(l.dictkeys_size)?)?;
            if !size.is_power_of_two() || size > 1 << 32 {
                return None;
            }
            let width = match size {
                0..=0xff => 1,
                0x100..=0xffff => 2,
                0x1_0000..=0xffff_ffff => 4,
                _ => 8,
            };
            (size * width, 0)
        };
        if nentries > MAX_DICT_ENTRIES.min(max) || nentries > index_bytes {
            return None;
        }
        // Kind 0 (general): (hash, key, value); 1 (unicode) and 2 (split), 3.11+: (key, value).
        let (esize, key_at, value_at) =
            if kind == 0 { (off(l.dict_entry_size)?, 8, 16) } else { (off(l.dict_unicode_entry_size)?, 0, 8) };
        let entries_at = at(indices, index_bytes)?;
        let bytes = self.bytes(entries_at, (nentries * esize) as usize)?;
        // Where the head changes with an entry: the sizes and counts, not dk_version (3.11+, set whenever the
        // specializer asks, with no change to the entries).
        let regions = if l.dictkeys_log2_size >= 0 {
            let counted = field(l.dictkeys_nentries)?;
            let sizes_end = field(l.dictkeys_kind)? + 1;
            [
                (head_at, head.get(..sizes_end)?.to_vec()),
                (at(head_at, counted)?, head.get(counted..counted.checked_add(8)?)?.to_vec()),
            ]
            .to_vec()
        } else {
            vec![(head_at, head)]
        };
        Some(Entries { at: entries_at, bytes, esize, key_at, value_at, nentries, regions })
    }

    /// The items of keys object `keys` with, if `values` is not 0, a split table's values at `values` (what
    /// `ma_values` points to), if it has at most `max` entries; adds them and the regions read to `d`.
    fn table(&self, keys: u64, values: u64, max: u64, d: &mut Dict) -> Option<()> {
        let l = self.layout();
        let Entries { at: entries_at, bytes: entries, esize, key_at, value_at, nentries, regions } =
            self.entries(keys, max)?;
        d.regions.extend(regions);
        let mut split = None;
        if values != 0 {
            let array = at(values, l.dictvalues_values.max(0))?;
            let mut n = nentries;
            if l.dictvalues_capacity >= 0 {
                // 3.13+: the values array says how many it holds.
                let header = self.bytes(values, 8)?;
                n = n.min(u64::from(*header.get(off(l.dictvalues_capacity)? as usize)?));
                d.regions.push((values, header));
            }
            let vals = self.bytes(array, 8 * n as usize)?;
            split = Some(vals.clone());
            d.regions.push((array, vals));
        }
        for (i, e) in entries.chunks_exact(esize as usize).enumerate() {
            let key = u64_in(e, key_at).unwrap_or(0);
            let value = match &split {
                Some(vals) => {
                    vals.get(8 * i..8 * i + 8).map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or([0; 8])))
                }
                None => u64_in(e, value_at).unwrap_or(0),
            };
            if key != 0 && value != 0 {
                d.items.push((key, value));
            }
        }
        d.regions.push((entries_at, entries));
        Some(())
    }

    /// The attributes of the object at `obj` (its `__dict__`, wherever this version keeps it), or `None`: also when
    /// they are more than `max` ([`MAX_INSTANCE_ENTRIES`] for a `Thread`, [`MAX_DICT_ENTRIES`] for a module), or
    /// this version's rows do not say where they are (a Python newer than pyperf knows).
    pub fn attributes(&mut self, obj: u64, max: u64) -> Option<Dict> {
        let t = self.type_of(obj)?;
        let scheme = self.row.thread_names?.instance_dicts;
        if scheme == InstanceDicts::DictOffset || t.flags & TPFLAGS_MANAGED_DICT == 0 {
            // A dict pointer inside the object (> 0; < 0 counts from the end of a variable-size object: not read).
            if t.dictoffset <= 0 || t.dictoffset > 1 << 20 {
                return None;
            }
            return self.dict_at(at(obj, t.dictoffset)?, max);
        }
        match scheme {
            InstanceDicts::DictOffset => None,
            InstanceDicts::Managed311 => {
                let slot = obj.checked_sub(MANAGED_VALUES_BEFORE_311)?;
                let words = self.bytes(slot, 16)?;
                let (values, dict) = (u64_in(&words, 0)?, u64_in(&words, 8)?);
                let mut d = if values != 0 {
                    self.shared(&t, values, max)?
                } else if dict != 0 {
                    self.dict_of_at_most(dict, max)?
                } else {
                    return None;
                };
                d.regions.push((slot, words));
                Some(d)
            }
            InstanceDicts::Tagged312 => {
                let slot = obj.checked_sub(MANAGED_DICT_BEFORE)?;
                let word = self.u64_at(slot)?;
                let mut d = if word & 1 == 1 {
                    self.shared(&t, word.checked_add(1)?, max)?
                } else if word != 0 {
                    self.dict_of_at_most(word, max)?
                } else {
                    return None;
                };
                d.regions.push((slot, word.to_le_bytes().to_vec()));
                Some(d)
            }
            InstanceDicts::Inline313 => {
                let slot = obj.checked_sub(MANAGED_DICT_BEFORE)?;
                let dict = self.u64_at(slot)?;
                let mut d = if dict != 0 {
                    self.dict_of_at_most(dict, max)?
                } else if t.flags & TPFLAGS_INLINE_VALUES != 0 {
                    if t.basicsize <= 0 || t.basicsize > 1 << 20 {
                        return None;
                    }
                    let values = at(obj, t.basicsize)?;
                    let header = self.bytes(values, 8)?;
                    // Not valid: the values moved to a dict, which the pointer read above did not show yet.
                    if *header.get(off(self.layout().dictvalues_valid)? as usize)? == 0 {
                        return None;
                    }
                    self.shared(&t, values, max)?
                } else {
                    return None;
                };
                d.regions.push((slot, dict.to_le_bytes().to_vec()));
                Some(d)
            }
        }
    }

    /// How instances of `obj`'s type keep attribute `name`, as steps from the instance to it ([`AttrStep`], the last
    /// a [`AttrStep::Deref`] that yields it), checked on `obj`: the steps reach the object its `__dict__` holds.
    /// Only where the attribute has a fixed place in every instance of the type: a split table (its keys shared by
    /// the type, 3.6+) or 3.13's inline values; `None` for a dict of the instance's own, whose order may differ.
    pub fn attribute_path(&mut self, obj: u64, name: &str) -> Option<Vec<AttrStep>> {
        let t = self.type_of(obj)?;
        let scheme = self.row.thread_names?.instance_dicts;
        let l = self.layout();
        let values_at = i64::from(l.dictvalues_values.max(0));
        let steps = if scheme == InstanceDicts::DictOffset || t.flags & TPFLAGS_MANAGED_DICT == 0 {
            if t.dictoffset <= 0 || t.dictoffset > 1 << 20 || l.dict_keys < 0 {
                return None;
            }
            let dict = self.u64_at(at(obj, t.dictoffset)?)?;
            let keys = self.u64_at(at(dict, l.dict_keys)?)?;
            let i = self.key_index(keys, name)? as i64;
            vec![
                AttrStep::Deref(t.dictoffset),
                AttrStep::Deref(i64::from(l.dict_values)),
                AttrStep::Deref(values_at + 8 * i),
            ]
        } else {
            let i = self.key_index(t.cached_keys, name)? as i64;
            match scheme {
                InstanceDicts::DictOffset => return None,
                InstanceDicts::Managed311 => {
                    vec![AttrStep::Deref(-(MANAGED_VALUES_BEFORE_311 as i64)), AttrStep::Deref(values_at + 8 * i)]
                }
                InstanceDicts::Tagged312 => {
                    vec![AttrStep::DerefTagged(-(MANAGED_DICT_BEFORE as i64)), AttrStep::Deref(values_at + 8 * i)]
                }
                InstanceDicts::Inline313 => {
                    if t.flags & TPFLAGS_INLINE_VALUES == 0 || t.basicsize <= 0 || t.basicsize > 1 << 20 {
                        return None;
                    }
                    vec![
                        AttrStep::CheckNull(-(MANAGED_DICT_BEFORE as i64)),
                        AttrStep::CheckByte(t.basicsize + i64::from(l.dictvalues_valid)),
                        AttrStep::Deref(t.basicsize + values_at + 8 * i),
                    ]
                }
            }
        };
        let by_path = self.follow(obj, &steps)?;
        let attrs = self.attributes(obj, MAX_INSTANCE_ENTRIES)?;
        (self.lookup(&attrs, name)? == by_path).then_some(steps)
    }

    /// Where `steps` lead from `base`, if every step holds.
    pub fn follow(&self, base: u64, steps: &[AttrStep]) -> Option<u64> {
        let mut p = base;
        let addr = |p: u64, off: i64| p.checked_add_signed(off);
        for step in steps {
            match *step {
                AttrStep::Deref(off) => p = self.u64_at(addr(p, off)?).filter(|&w| w != 0)?,
                AttrStep::DerefTagged(off) => p = self.u64_at(addr(p, off)?).filter(|&w| w & 1 == 1)?.checked_add(1)?,
                AttrStep::CheckNull(off) => {
                    self.u64_at(addr(p, off)?).filter(|&w| w == 0)?;
                }
                AttrStep::CheckByte(off) => {
                    self.bytes(addr(p, off)?, 1).filter(|b| b[0] == 1)?;
                }
            }
        }
        Some(p)
    }

    /// The index of the entry of keys object `keys` whose key is the str `name`.
    fn key_index(&mut self, keys: u64, name: &str) -> Option<usize> {
        let e = self.entries(keys, MAX_INSTANCE_ENTRIES)?;
        let keys: Vec<u64> =
            e.bytes.chunks_exact(e.esize as usize).map(|entry| u64_in(entry, e.key_at).unwrap_or(0)).collect();
        keys.into_iter().position(|k| k != 0 && self.key_text(k).as_deref() == Some(name))
    }

    /// The dict (of at most `max` entries) whose pointer is at `slot` (an object's `tp_dictoffset` slot), with that
    /// slot among its regions.
    fn dict_at(&mut self, slot: u64, max: u64) -> Option<Dict> {
        let p = self.u64_at(slot)?;
        let mut d = self.dict_of_at_most(p, max)?;
        d.regions.push((slot, p.to_le_bytes().to_vec()));
        Some(d)
    }

    /// The split table of an instance of `t` whose values are at `values`: keys shared through `ht_cached_keys`.
    fn shared(&self, t: &TypeInfo, values: u64, max: u64) -> Option<Dict> {
        let mut d = Dict::default();
        self.table(t.cached_keys, values, max, &mut d)?;
        Some(d)
    }

    /// The value of the item of `d` whose key is the str `key`, if any.
    pub fn lookup(&mut self, d: &Dict, key: &str) -> Option<u64> {
        self.lookup_hinted(d, key, &mut None)
    }

    /// [`Objects::lookup`] that first tries the item at `hint` (where the key was last time: dicts that change
    /// little keep their order), and leaves where it found the key there. Saves reading the text of every key
    /// before it (a module's globals are hundreds).
    pub fn lookup_hinted(&mut self, d: &Dict, key: &str, hint: &mut Option<usize>) -> Option<u64> {
        if let Some(&(k, v)) = hint.and_then(|i| d.items.get(i)) {
            if self.key_text(k).as_deref() == Some(key) {
                return Some(v);
            }
        }
        // Each key compared costs, also one whose text is known: a dict of many keys must not be free to search.
        let i = d
            .items
            .iter()
            .take_while(|_| self.mem.charge(1))
            .position(|&(k, _)| self.key_text(k).as_deref() == Some(key));
        *hint = i;
        Some(d.items.get(i?)?.1)
    }

    /// Whether the memory `d` was read from still holds what it held: then the items are what the dict held over
    /// the whole time between the two reads (modulo a change and its exact undoing in between).
    pub fn unchanged(&self, d: &Dict) -> bool {
        d.regions.iter().all(|(at, bytes)| self.bytes(*at, bytes.len()).as_deref() == Some(bytes.as_slice()))
    }
}

/// An offset that exists (>= 0), as u64.
fn off(o: i32) -> Option<u64> {
    u64::try_from(o).ok()
}

/// The little-endian u64 at byte `pos` of `b`.
pub fn u64_in(b: &[u8], pos: impl TryInto<usize>) -> Option<u64> {
    let pos = pos.try_into().ok()?;
    Some(u64::from_le_bytes(b.get(pos..pos.checked_add(8)?)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_from_target_pointers_do_not_overflow() {
        assert_eq!(at(0x1000, 16), Some(0x1010));
        assert_eq!(at(u64::MAX - 15, 16i32), None);
        assert_eq!(at(u64::MAX, 0), Some(u64::MAX));
        assert_eq!(at(0x1000, -1i32), None, "an absent member");
        assert_eq!(at(u64::MAX - 1, 1i64 << 20), None);
    }

    /// A metered memory refuses every read once its bytes or its operations are spent, and says so.
    #[test]
    fn a_spent_budget_refuses_reads() {
        struct Zeros;
        impl ReadMem for Zeros {
            fn read(&self, _: u64, buf: &mut [u8]) -> bool {
                buf.fill(0);
                true
            }
        }
        let m = Metered::new(&Zeros, Budget { bytes: 100, ops: 3 });
        let mut b = [1u8; 40];
        assert!(m.read(0, &mut b) && m.read(0, &mut b) && !m.exhausted());
        assert!(!m.read(0, &mut b), "120 bytes > 100");
        assert!(m.exhausted() && !m.read(0, &mut [0u8; 1]));
        let m = Metered::new(&Zeros, Budget { bytes: 100, ops: 3 });
        assert!(m.charge(2) && m.read(0, &mut [0u8; 1]) && !m.charge(1));
        assert!(m.exhausted());
    }

    #[test]
    fn code_units_decode_and_cut_on_character_boundaries() {
        assert_eq!(decode_units(b"abc", 1, false, 10), ("abc".to_string(), false));
        assert_eq!(decode_units(b"abc", 1, true, 10), ("abc".to_string(), true));
        assert_eq!(decode_units(&[0xe9, 0, 0x61, 0], 2, false, 2), ("é".to_string(), true));
        assert_eq!(decode_units(&[0x00, 0xd8, 0, 0], 2, false, 8), ("\u{fffd}\0".to_string(), false));
    }
}
