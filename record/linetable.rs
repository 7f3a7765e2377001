//! Offline decoding of CPython line tables: (code object, raw instruction position reported by BPF)
//! -> the line being executed, exactly as the interpreter itself reports it
//! (`PyCode_Addr2Line`, which `PyFrame_GetLineNumber` and tracebacks use), for CPython 2.7 and 3.6 - 3.13.
//!
//! std only (no crate dependencies); the tables come from another process's memory, so every decoder
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

/// Which line-table encoding a CPython version uses.
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

impl LineTable {
    /// The encoding of CPython `major.minor`; `None` for versions this module has not been verified
    /// against (only 2.7 and 3.6 - 3.13 are).
    pub fn for_version(major: u8, minor: u8) -> Option<LineTable> {
        match (major, minor) {
            (2, 7) => Some(LineTable::Lnotab27),
            (3, 6..=9) => Some(LineTable::Lnotab36),
            (3, 10) => Some(LineTable::Linetable310),
            (3, 11..=13) => Some(LineTable::Locations311),
            _ => None,
        }
    }
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

/// Convert the raw per-frame position BPF reports into the byte offset [`line_at`] takes.
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
/// (`PyCode_Addr2Line` with a negative offset): the caller should use `first_line`. Also `None` for
/// versions [`LineTable::for_version`] does not know and for impossible values (corrupt reads).
pub fn instr_byte_offset(major: u8, minor: u8, raw: u32, code_adaptive_offset: u32) -> Option<u32> {
    match (major, minor) {
        (2, 7) | (3, 6..=9) => u32::try_from(raw as i32).ok(),
        (3, 10) => u32::try_from(raw as i32).ok()?.checked_mul(2),
        (3, 11..=13) => {
            // Pointer difference in code units, as CPython computes it (rounds an odd byte count down).
            let units = raw.checked_sub(code_adaptive_offset)? / 2;
            units.checked_mul(2)
        }
        _ => None,
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
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// Every version the recorder supports must be checked against its real interpreter.
    const REQUIRED: &[(u8, u8)] = &[(2, 7), (3, 6), (3, 7), (3, 8), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13)];

    use crate::testenv::pyenv_root;

    fn script_path() -> PathBuf {
        let base = match option_env!("CARGO_MANIFEST_DIR") {
            Some(d) => PathBuf::from(d),
            None => std::env::current_dir().expect("current dir"),
        };
        let p = base.join("testdata/linetable_dump.py");
        assert!(p.is_file(), "{} not found (run the test from the repository root)", p.display());
        p
    }

    /// (major, minor, interpreter) for every pyenv version directory named X.Y.Z.
    fn interpreters(root: &Path) -> Vec<(u8, u8, PathBuf)> {
        let mut res = Vec::new();
        let Ok(dir) = std::fs::read_dir(root.join("versions")) else { return res };
        for ent in dir.flatten() {
            let name = ent.file_name().to_string_lossy().to_string();
            let mut parts = name.split('.');
            let (Some(a), Some(b)) = (parts.next(), parts.next()) else { continue };
            let (Ok(major), Ok(minor)) = (a.parse::<u8>(), b.parse::<u8>()) else { continue };
            let python = ent.path().join("bin/python");
            if python.exists() {
                res.push((major, minor, python));
            }
        }
        res.sort();
        res
    }

    struct Code {
        first_line: u32,
        table: Vec<u8>,
        name: String,
        lines: Vec<i64>,
    }

    fn unhex(s: &str) -> Vec<u8> {
        if s == "-" {
            return Vec::new();
        }
        (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex")).collect()
    }

    fn expected(line: i64) -> Option<u32> {
        u32::try_from(line).ok()
    }

    /// Runs the dump script with one interpreter and checks every answer; returns a summary line.
    fn check_interpreter(major: u8, minor: u8, python: &Path, script: &Path) -> Result<String, String> {
        let who = format!("{major}.{minor} ({})", python.display());
        let kind = LineTable::for_version(major, minor).ok_or(format!("{who}: no LineTable"))?;
        let out = Command::new(python).arg(script).output().map_err(|e| format!("{who}: cannot run: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mismatches: Vec<&str> = stdout.lines().filter(|l| l.starts_with("MISMATCH")).collect();
        if !out.status.success() || !mismatches.is_empty() {
            return Err(format!(
                "{who}: dump script failed ({}):\n{}\n{}",
                out.status,
                mismatches.join("\n"),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut codes: Vec<Code> = Vec::new();
        let mut frames: Vec<(usize, u32, u32, Option<u32>)> = Vec::new();
        let mut version = None;
        let mut end = None;
        let mut lines = stdout.lines();
        while let Some(l) = lines.next() {
            let f: Vec<&str> = l.split(' ').collect();
            match f[0] {
                "VERSION" => version = Some((f[1].parse::<u8>().unwrap(), f[2].parse::<u8>().unwrap())),
                "CODE" => {
                    assert_eq!(f[1].parse::<usize>().unwrap(), codes.len(), "{who}: code ids");
                    let n: usize = f[3].parse().unwrap();
                    let next = lines.next().unwrap_or("");
                    let ls: Vec<i64> = next.split(' ').skip(1).map(|x| x.parse().expect("line number")).collect();
                    assert!(next.starts_with("LINES") && ls.len() == n, "{who}: bad LINES after {l}");
                    codes.push(Code {
                        first_line: f[2].parse::<i64>().unwrap() as u32,
                        table: unhex(f[4]),
                        name: f.get(5).unwrap_or(&"?").to_string(),
                        lines: ls,
                    });
                }
                "FRAME" => frames.push((
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                    f[3].parse().unwrap(),
                    if f[4] == "None" { None } else { Some(f[4].parse().unwrap()) },
                )),
                "END" => end = Some((f[1].parse::<usize>().unwrap(), f[2].parse::<usize>().unwrap())),
                _ => return Err(format!("{who}: unexpected output line {l:?}")),
            }
        }
        if version != Some((major, minor)) {
            return Err(format!("{who}: interpreter reports version {version:?}"));
        }
        if end != Some((codes.len(), frames.len())) {
            return Err(format!("{who}: truncated output (END {end:?})"));
        }

        let mut errors = Vec::new();
        // [real, synthetic] x [offsets, offsets without line]
        let mut counts = [[0usize; 2]; 2];
        for (id, c) in codes.iter().enumerate() {
            let synthetic = usize::from(c.name == "<synthetic>");
            for (off, &want) in c.lines.iter().enumerate() {
                counts[synthetic][0] += 1;
                counts[synthetic][1] += usize::from(want < 0);
                let got = line_at(kind, c.first_line, &c.table, off as u32);
                if got != expected(want) && errors.len() < 20 {
                    errors.push(format!(
                        "code #{id} {} (first {}) offset {off}: CPython {want}, line_at {got:?}",
                        c.name, c.first_line
                    ));
                }
            }
        }
        // End-to-end: the raw value BPF reads -> instr_byte_offset -> line_at == frame.f_lineno.
        // A not-started frame (None) is reported by CPython as co_firstlineno.
        let resolve =
            |c: &Code, raw: u32, adaptive: u32, shift: i64| match instr_byte_offset(major, minor, raw, adaptive) {
                None => Some(c.first_line),
                Some(off) => {
                    let off = u32::try_from(i64::from(off) + shift).ok()?;
                    line_at(kind, c.first_line, &c.table, off)
                }
            };
        let mut refuted_prev = 0;
        for &(id, raw, adaptive, lineno) in &frames {
            let c = codes.get(id).ok_or(format!("{who}: frame of unknown code {id}"))?;
            let got = resolve(c, raw, adaptive, 0);
            if got != lineno && errors.len() < 40 {
                errors.push(format!(
                    "frame in {} raw {raw} adaptive {adaptive}: f_lineno {lineno:?}, resolved {got:?}",
                    c.name
                ));
            }
            refuted_prev += usize::from(resolve(c, raw, adaptive, -2) != lineno);
        }
        if !errors.is_empty() {
            return Err(format!("{who}: {} mismatches:\n  {}", errors.len(), errors.join("\n  ")));
        }
        if frames.len() < 20 || codes.len() < 50 {
            return Err(format!("{who}: too little data ({} codes, {} frames)", codes.len(), frames.len()));
        }
        // 3.13's instr_ptr is the executing instruction: "instr_ptr - 2" must be visibly wrong.
        if (major, minor) == (3, 13) && refuted_prev == 0 {
            return Err(format!("{who}: the frames do not distinguish instr_ptr from instr_ptr - 2"));
        }
        let [[real, real_none], [synth, synth_none]] = counts;
        Ok(format!(
            "{major}.{minor}: {} code objects: {real} offsets of compiled code ({real_none} without line), \
             {synth} of synthetic tables ({synth_none} without line); {} live frames OK \
             ({refuted_prev} of them would resolve differently at offset - 2)",
            codes.len(),
            frames.len()
        ))
    }

    #[test]
    fn matches_every_cpython_interpreter() {
        let root = pyenv_root();
        let script = script_path();
        let found = interpreters(&root);
        let missing: Vec<String> = REQUIRED
            .iter()
            .filter(|(a, b)| !found.iter().any(|(x, y, _)| (x, y) == (a, b)))
            .map(|(a, b)| format!("{a}.{b}"))
            .collect();
        assert!(
            missing.is_empty(),
            "missing pyenv interpreters for CPython {} under {}/versions (install them, e.g. \
             `pyenv install 3.X`): every supported version must be tested",
            missing.join(", "),
            root.display()
        );
        // Every installed interpreter of a supported version (unknown newer ones are reported).
        let todo: Vec<(u8, u8, PathBuf)> = found
            .into_iter()
            .filter(|(a, b, p)| {
                let known = LineTable::for_version(*a, *b).is_some();
                if !known {
                    eprintln!("linetable: skipping {} (version {a}.{b} not supported)", p.display());
                }
                known
            })
            .collect();
        // Two at a time (the machine is small).
        let mut results = Vec::new();
        for pair in todo.chunks(2) {
            let handles: Vec<_> = pair
                .iter()
                .cloned()
                .map(|(a, b, p)| {
                    let s = script.clone();
                    std::thread::spawn(move || check_interpreter(a, b, &p, &s))
                })
                .collect();
            for h in handles {
                results.push(h.join().expect("checker thread"));
            }
        }
        let mut failed = Vec::new();
        for r in results {
            match r {
                Ok(summary) => eprintln!("linetable: {summary}"),
                Err(e) => failed.push(e),
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    }

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
            for (major, minor) in [(2u8, 7u8), (3, 0), (3, 6), (3, 9), (3, 10), (3, 11), (3, 12), (3, 13), (3, 14)] {
                let _ = instr_byte_offset(major, minor, raw, adaptive);
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
        assert_eq!(instr_byte_offset(3, 9, 42, 0), Some(42));
        assert_eq!(instr_byte_offset(2, 7, u32::MAX, 0), None); // f_lasti == -1: not started
        assert_eq!(instr_byte_offset(3, 10, 21, 0), Some(42));
        assert_eq!(instr_byte_offset(3, 10, u32::MAX, 0), None);
        assert_eq!(instr_byte_offset(3, 11, 184 + 42, 184), Some(42));
        assert_eq!(instr_byte_offset(3, 12, 190, 192), None); // prev_instr before the first unit
        assert_eq!(instr_byte_offset(3, 13, 200, 200), Some(0)); // instr_ptr used as is
        assert_eq!(instr_byte_offset(3, 14, 200, 200), None);
        assert_eq!(LineTable::for_version(3, 5), None);
        assert_eq!(LineTable::for_version(3, 12), Some(Locations311));
    }
}
