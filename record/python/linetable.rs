//! Offline decoding of CPython line tables: (code object, raw instruction position reported by BPF)
//! -> the line being executed, exactly as the interpreter itself reports it
//! (`PyCode_Addr2Line`, which `PyFrame_GetLineNumber` and tracebacks use), for CPython 2.7 and 3.6 - 3.13.
//!
//! The tables come from another process's memory, so every decoder
//! accepts arbitrary bytes: it never panics, never reads outside `table`, and its loops are bounded by
//! the table length (every iteration consumes at least one byte).
//!
//! Encodings (CPython sources: Objects/lnotab_notes.txt, Objects/locations.md, Objects/codeobject.c):
//! * 2.7 (and 3.0 - 3.5) `co_lnotab`: byte pairs (address increment, line increment), both unsigned.
//!   Increments larger than 255 are split into several pairs (address first: `255,0, 45,255, 0,45`).
//! * 3.6 - 3.9 `co_lnotab`: the same, but the line increment is a signed byte (-128..127), split in
//!   chunks of 127 / -128.
//! * 3.10 `co_linetable` (PEP 626): byte pairs (byte length of the range, unsigned; signed line delta,
//!   -128 = the range has no line number). Zero-length ranges only carry line deltas.
//! * 3.11 - 3.13 `co_linetable` "location table": entries of a header byte `1 CCCC LLL` (L = code units
//!   covered - 1, C = kind) and kind-specific varint payload; kind 15 = no location, 13/14 carry a
//!   signed-varint line delta, 10-12 a delta of C-10, 0-9 none. Entries cover the CACHE code units too.

/// How a frame's raw instruction position (what BPF reads) becomes a byte offset into the bytecode
/// ([`instr_byte_offset`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instr {
    /// `PyFrameObject.f_lasti`, in bytes (<= 3.9); -1 before the first instruction.
    LastiBytes,
    /// `PyFrameObject.f_lasti`, in 2-byte code units (3.10).
    LastiUnits,
    /// A pointer into the code object's `co_code_adaptive` (`prev_instr` 3.11-3.12, `instr_ptr` 3.13+): BPF
    /// sends it minus the code object's address.
    FromCode,
}

/// Which line-table encoding a CPython version uses (the version's [`super::versions::Row::line_table`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LineTable {
    /// `co_lnotab` with unsigned line increments: 2.7 (also 3.0 - 3.5, not verified/mapped here).
    Lnotab27,
    /// `co_lnotab` with signed line increments: 3.6 - 3.9.
    Lnotab36,
    /// PEP 626 `co_linetable` of 3.10.
    Linetable310,
    /// Location table (`co_linetable`) of 3.11 - 3.13.
    Locations311,
}

/// The line CPython reports for the instruction at byte offset `offset` of a code object, i.e.
/// `PyCode_Addr2Line(code, offset)`.
///
/// `table`: the bytes of `co_lnotab` (<= 3.9) or `co_linetable` (3.10+); `first_line`: `co_firstlineno`;
/// `offset`: byte offset from the start of the bytecode (`co_code` / `co_code_adaptive`) of the
/// instruction being executed, as returned by [`instr_byte_offset`]. Any offset is accepted, including
/// odd ones and offsets of CACHE entries or EXTENDED_ARG prefixes (they map to their instruction's line).
///
/// Returns `None` where CPython has no line: 3.10+ "no line number" ranges (e.g. some exception
/// handling / cleanup code), offsets past the end of a 3.10+ table (CPython returns -1), and negative
/// line numbers (only possible with corrupt tables). The caller falls back to `first_line`.
/// For <= 3.9 an offset past the end of the table gets the last line, as in CPython.
pub fn line_at(kind: LineTable, first_line: u32, table: &[u8], offset: u32) -> Option<u32> {
    // CPython keeps lines in C `int`s: reinterpret and wrap like it does.
    let first = first_line as i32;
    let line = match kind {
        LineTable::Lnotab27 => lnotab(first, table, offset, false),
        LineTable::Lnotab36 => lnotab(first, table, offset, true),
        LineTable::Linetable310 => linetable310(first, table, offset),
        LineTable::Locations311 => locations311(first, table, offset),
    };
    u32::try_from(line).ok()
}

/// Convert the raw per-frame position BPF reports into the byte offset [`line_at`] takes, by the version's
/// [`Instr`] kind:
///
/// * <= 3.9: `raw` is `PyFrameObject.f_lasti` (C int): byte offset of the instruction being executed
///   (while an instruction has an EXTENDED_ARG prefix, it is the prefix's offset).
/// * 3.10: `f_lasti` counts 2-byte code units: the result is `raw * 2` (CPython:
///   `PyCode_Addr2Line(co, f->f_lasti * sizeof(_Py_CODEUNIT))`); EXTENDED_ARG prefixes as above.
/// * 3.11 / 3.12: BPF sends `prev_instr - code_object_address` (bytes); the result subtracts
///   `code_adaptive_offset` = `offsetof(PyCodeObject, co_code_adaptive)` (= `code.__class__.__basicsize__`).
///   `prev_instr` is the instruction being executed; during an inlined Python-to-Python call (CALL,
///   property LOAD_ATTR, ...) it points at the instruction's LAST CACHE entry, which the table maps to
///   the instruction's line. (With an EXTENDED_ARG prefix it points at the real instruction.)
/// * 3.13: the same with `instr_ptr`, which points at the instruction currently executing (or about to
///   begin), NOT at the next one: CPython uses it as is (`_PyInterpreterFrame_LASTI` is
///   `instr_ptr - _PyCode_CODE(co)`), so nothing is subtracted besides `code_adaptive_offset`.
///   `instr_ptr - 2` would be wrong (the test shows it gives other lines).
///
/// `code_adaptive_offset` is ignored before 3.11.
///
/// Returns `None` when the frame has not started executing yet (<= 3.10: `f_lasti == -1`;
/// 3.11 / 3.12: `prev_instr == co_code_adaptive - 1 unit`), where CPython reports `co_firstlineno`
/// (`PyCode_Addr2Line` with a negative offset): the caller should use `first_line`. Also `None` for impossible
/// values (corrupt reads).
pub fn instr_byte_offset(kind: Instr, raw: u32, code_adaptive_offset: u32) -> Option<u32> {
    match kind {
        Instr::LastiBytes => u32::try_from(raw as i32).ok(),
        Instr::LastiUnits => u32::try_from(raw as i32).ok()?.checked_mul(2),
        Instr::FromCode => {
            // Pointer difference in code units, as CPython computes it (rounds an odd byte count down).
            let units = raw.checked_sub(code_adaptive_offset)? / 2;
            units.checked_mul(2)
        }
    }
}

/// `PyCode_Addr2Line` of 2.7 (`signed == false`) and 3.6 - 3.9 (`signed == true`):
///
/// ```c
/// while (--size >= 0) { addr += *p++; if (addr > addrq) break; line += (signed char)*p; p++; }
/// ```
/// `size` is `len / 2`: an odd trailing byte is ignored.
fn lnotab(first: i32, table: &[u8], offset: u32, signed: bool) -> i32 {
    let mut line = first;
    let mut addr: u64 = 0;
    for pair in table.chunks_exact(2) {
        addr += u64::from(pair[0]);
        if addr > u64::from(offset) {
            break;
        }
        let delta = if signed { i32::from(pair[1] as i8) } else { i32::from(pair[1]) };
        line = line.wrapping_add(delta);
    }
    line
}

/// 3.10 `_PyCode_CheckLineNumber` after `_PyCode_InitAddressRange` (ranges `[ar_start, ar_end)` in bytes,
/// `ar_end` starting at 0; advance until `ar_end > offset`; zero-length ranges only add their delta).
fn linetable310(first: i32, table: &[u8], offset: u32) -> i32 {
    let target = u64::from(offset);
    let mut computed = first;
    let mut ar_line = -1;
    let mut end: u64 = 0;
    let mut i = 0;
    while end <= target {
        // at_end(): CPython returns -1 when the table is exhausted.
        let Some(&len) = table.get(i) else { return -1 };
        // An odd trailing byte pairs with the bytes object's NUL terminator in CPython.
        let ldelta = table.get(i + 1).map_or(0, |&b| b as i8);
        i += 2;
        end += u64::from(len);
        if ldelta == -128 {
            ar_line = -1;
        } else {
            computed = computed.wrapping_add(i32::from(ldelta));
            ar_line = computed;
        }
    }
    ar_line
}

/// 3.11 - 3.13 `_PyCode_CheckLineNumber` with `advance()` / `get_line_delta()` / `scan_varint()`.
fn locations311(first: i32, table: &[u8], offset: u32) -> i32 {
    let target = u64::from(offset);
    let mut computed = first;
    let mut ar_line = -1;
    let mut end: u64 = 0;
    let mut i = 0;
    while end <= target {
        let Some(&head) = table.get(i) else { return -1 };
        let kind = (head >> 3) & 15;
        let delta = match kind {
            10..=12 => i32::from(kind) - 10,
            13 | 14 => signed_varint(table, i + 1),
            _ => 0, // 0-9 short forms, 15 no location
        };
        computed = computed.wrapping_add(delta);
        // is_no_line_marker(): the whole byte >> 3 == 0x1f (so bit 7 must be set too).
        ar_line = if head >> 3 == 0x1f { -1 } else { computed };
        end += (u64::from(head & 7) + 1) * 2;
        // The next entry starts at the next byte with bit 7 set (bounded by the table end).
        i += 1;
        while table.get(i).is_some_and(|&b| b & 0x80 == 0) {
            i += 1;
        }
    }
    ar_line
}

/// `scan_varint`: 6-bit chunks, least significant first, bit 6 = more. A read past the end of the
/// table yields 0, which is what CPython reads there (the bytes object's NUL terminator) and ends the
/// number. Chunks beyond 32 bits are dropped (undefined behaviour in C).
fn varint(table: &[u8], mut i: usize) -> u32 {
    let mut read = table.get(i).copied().unwrap_or(0);
    let mut val = u32::from(read & 63);
    let mut shift = 0u32;
    while read & 64 != 0 {
        i += 1;
        read = table.get(i).copied().unwrap_or(0);
        shift += 6;
        if shift < 32 {
            val |= u32::from(read & 63) << shift;
        }
    }
    val
}

/// `scan_signed_varint`: zig-zag style, low bit = sign.
fn signed_varint(table: &[u8], i: usize) -> i32 {
    let uval = varint(table, i);
    let mag = (uval >> 1) as i32;
    if uval & 1 != 0 {
        -mag
    } else {
        mag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small deterministic PRNG (xorshift64*), no crates.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn garbage_never_panics() {
        let kinds = [LineTable::Lnotab27, LineTable::Lnotab36, LineTable::Linetable310, LineTable::Locations311];
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut table = Vec::new();
        for round in 0..20_000u32 {
            table.clear();
            let len = rng.below(if round % 10 == 0 { 4096 } else { 64 }) as usize;
            let flavour = rng.below(4);
            for _ in 0..len {
                let b = rng.next() as u8;
                // Sometimes bias towards continuation bytes / no-line markers / extreme values.
                table.push(match flavour {
                    0 => b,
                    1 => b | 0x40,
                    2 => [0x00, 0x7f, 0x80, 0xff, 0xf8, 0xef, 0xc0][b as usize % 7],
                    _ => b & 0x7f,
                });
            }
            let first = match rng.below(4) {
                0 => 0,
                1 => u32::MAX,
                2 => i32::MAX as u32,
                _ => rng.next() as u32,
            };
            let offset = match rng.below(4) {
                0 => u32::MAX,
                1 => rng.below(8) as u32,
                _ => rng.next() as u32 % 70_000,
            };
            for kind in kinds {
                let _ = line_at(kind, first, &table, offset);
            }
            let raw = rng.next() as u32;
            let adaptive = if rng.below(2) == 0 { rng.next() as u32 } else { 200 };
            for kind in [Instr::LastiBytes, Instr::LastiUnits, Instr::FromCode] {
                let _ = instr_byte_offset(kind, raw, adaptive);
            }
        }
        // Huge varint chains (shift overflow) and tables ending inside a varint.
        let t = [0xf0u8, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f];
        for kind in kinds {
            let _ = line_at(kind, u32::MAX, &t, u32::MAX);
            let _ = line_at(kind, 1, &t[..1], 0);
            let _ = line_at(kind, 1, &[], 0);
        }
    }

    #[test]
    fn hand_made_tables() {
        use LineTable::*;
        // lnotab_notes.txt example: 300 bytes and 300 lines -> 255,0, 45,255, 0,45 (2.7 unsigned).
        let t = [255, 0, 45, 255, 0, 45];
        assert_eq!(line_at(Lnotab27, 1, &t, 0), Some(1));
        assert_eq!(line_at(Lnotab27, 1, &t, 299), Some(1));
        assert_eq!(line_at(Lnotab27, 1, &t, 300), Some(301));
        assert_eq!(line_at(Lnotab27, 1, &t, 100_000), Some(301)); // past the end: last line
                                                                  // 3.6+: signed deltas; 0x80 = -128, and the same bytes unsigned in 2.7.
        let t = [0, 10, 4, 0x80, 2, 5];
        assert_eq!(line_at(Lnotab36, 200, &t, 0), Some(210));
        assert_eq!(line_at(Lnotab36, 200, &t, 4), Some(82));
        assert_eq!(line_at(Lnotab36, 200, &t, 6), Some(87));
        assert_eq!(line_at(Lnotab27, 200, &t, 4), Some(338));
        // 3.10: (length, delta) pairs, -128 = no line, zero-length ranges carry deltas.
        let t = [0, 1, 6, 2, 4, 0x80, 0, 127, 2, 5];
        assert_eq!(line_at(Linetable310, 10, &t, 0), Some(13));
        assert_eq!(line_at(Linetable310, 10, &t, 5), Some(13));
        assert_eq!(line_at(Linetable310, 10, &t, 6), None);
        assert_eq!(line_at(Linetable310, 10, &t, 10), Some(145));
        assert_eq!(line_at(Linetable310, 10, &t, 12), None); // past the end
                                                             // 3.11+: one-line form (+1), no-location, long form with svarint -70 (= 141 -> 0x4d 0x02).
        let t = [0x80 | (11 << 3) | 1, 3, 5, 0x80 | (15 << 3), 0x80 | (14 << 3) | 7, 0x4d, 0x02, 0, 1, 1];
        assert_eq!(line_at(Locations311, 100, &t, 3), Some(101));
        assert_eq!(line_at(Locations311, 100, &t, 4), None);
        assert_eq!(line_at(Locations311, 100, &t, 6), Some(31));
        assert_eq!(line_at(Locations311, 100, &t, 21), Some(31));
        assert_eq!(line_at(Locations311, 100, &t, 22), None); // past the end
                                                              // Offsets.
        use Instr::*;
        assert_eq!(instr_byte_offset(LastiBytes, 42, 0), Some(42));
        assert_eq!(instr_byte_offset(LastiBytes, u32::MAX, 0), None); // f_lasti == -1: not started
        assert_eq!(instr_byte_offset(LastiUnits, 21, 0), Some(42));
        assert_eq!(instr_byte_offset(LastiUnits, u32::MAX, 0), None);
        assert_eq!(instr_byte_offset(FromCode, 184 + 42, 184), Some(42));
        assert_eq!(instr_byte_offset(FromCode, 190, 192), None); // prev_instr before the first unit
        assert_eq!(instr_byte_offset(FromCode, 200, 200), Some(0)); // instr_ptr used as is
    }
}
