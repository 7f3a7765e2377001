//! Kernel frames' names from `/proc/kallsyms`, read once at the start of a recording.
//!
//! kallsyms gives start addresses only. A symbol is taken to run up to the next one of its region (the kernel
//! image, or one module), and never further than [`MAX_DISTANCE`] from its start; past the end of a region, below
//! the first symbol, or past `_etext` / `_einittext`, an address is "[unknown kernel]" rather than a guess.

use std::collections::HashMap;

/// The name of a kernel address no symbol covers.
pub const UNKNOWN: &str = "[unknown kernel]";
/// The "file" of the kernel image's symbols (as perf shows it).
pub const KERNEL: &str = "[kernel.kallsyms]";
/// An address further than this past the start of its symbol is not taken to be in it.
pub const MAX_DISTANCE: u64 = 1 << 20;

/// Symbols after which the kernel image has no text until the next symbol.
const END_MARKERS: &[&str] = &["_etext", "_einittext"];

/// Why `/proc/kallsyms` gave no usable symbols.
#[derive(Debug, thiserror::Error)]
pub enum KernelSymbolsError {
    /// The file could not be read.
    #[error("cannot read /proc/kallsyms: {0}; kernel frames will be shown as {UNKNOWN}")]
    Io(#[from] std::io::Error),
    /// Every address is 0: `kernel.kptr_restrict` (with `kernel.perf_event_paranoid` above 1) hides them from a
    /// process without CAP_SYSLOG, as pyperf run with only CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE is.
    #[error(
        "kernel frames will be unnamed ({UNKNOWN}): /proc/kallsyms hides kernel addresses from pyperf; run as root, \
         grant CAP_SYSLOG too, or set kernel.kptr_restrict=0 and kernel.perf_event_paranoid=1"
    )]
    Hidden,
    /// No text symbol at all.
    #[error("/proc/kallsyms has no text symbols; kernel frames will be shown as {UNKNOWN}")]
    Empty,
}

/// The kernel's text symbols, sorted by address.
#[derive(Debug)]
pub struct KernelSymbols {
    addrs: Vec<u64>,
    /// Parallel to `addrs`: (name, region: index into `regions`).
    entries: Vec<(Box<str>, u32)>,
    /// `[kernel.kallsyms]` first, then `[module]` names.
    regions: Vec<String>,
}

impl KernelSymbols {
    /// Reads `/proc/kallsyms`.
    pub fn load() -> Result<KernelSymbols, KernelSymbolsError> {
        let text = std::fs::read_to_string("/proc/kallsyms")?;
        Self::parse(&text)
    }

    /// Parses the text of a `/proc/kallsyms`: text symbols (`t`, `T`, `w`, `W`), module names in brackets.
    pub fn parse(text: &str) -> Result<KernelSymbols, KernelSymbolsError> {
        let mut regions = vec![KERNEL.to_string()];
        let mut region_ids: HashMap<&str, u32> = HashMap::new();
        // (address, preference, name, region)
        let mut syms: Vec<(u64, u8, &str, u32)> = Vec::new();
        let mut any = false;
        let mut nonzero = false;
        for line in text.lines() {
            let mut fields = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else { continue };
            let Ok(addr) = u64::from_str_radix(addr, 16) else { continue };
            let pref = match kind {
                "T" | "W" => 0,
                "t" | "w" => 1,
                _ => continue,
            };
            any = true;
            if addr == 0 {
                continue;
            }
            nonzero = true;
            let region = match fields.next() {
                Some(m) if m.starts_with('[') && m.ends_with(']') && m.len() > 2 => {
                    let next = u32::try_from(regions.len()).unwrap_or(u32::MAX);
                    *region_ids.entry(m).or_insert_with(|| {
                        regions.push(m.to_string());
                        next
                    })
                }
                _ => 0,
            };
            // Padding before each function (`__pfx_`, kernels built with call depth tracking or CFI) is the
            // function's own: the real name wins at the same address.
            let pref = if name.starts_with("__pfx_") { pref + 2 } else { pref };
            syms.push((addr, pref, name, region));
        }
        if any && !nonzero {
            return Err(KernelSymbolsError::Hidden);
        }
        if syms.is_empty() {
            return Err(KernelSymbolsError::Empty);
        }
        syms.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(b.2)));
        syms.dedup_by(|later, first| later.0 == first.0);
        let addrs = syms.iter().map(|s| s.0).collect();
        let entries = syms.iter().map(|s| (Box::from(s.2), s.3)).collect();
        Ok(KernelSymbols { addrs, entries, regions })
    }

    /// Number of symbols.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether there are none (never, for a parsed table).
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// The function at `addr` and its region: `("do_syscall_64", "[kernel.kallsyms]")`, `("nf_hook", "[nf_tables]")`,
    /// or `("[unknown kernel]", "[kernel.kallsyms]")` when no symbol covers it.
    pub fn symbol(&self, addr: u64) -> (String, String) {
        match self.lookup(addr) {
            Some(i) => {
                let (name, region) = &self.entries[i];
                (name.to_string(), self.regions.get(*region as usize).map_or(KERNEL, |r| r).to_string())
            }
            None => (UNKNOWN.to_string(), KERNEL.to_string()),
        }
    }

    fn lookup(&self, addr: u64) -> Option<usize> {
        let i = self.addrs.partition_point(|&a| a <= addr).checked_sub(1)?;
        // The next symbol ends this one (only text symbols are kept, and regions do not interleave); the last
        // symbol of a region runs to the region's end, which kallsyms does not give: the distance cap bounds it.
        let name = &self.entries[i].0;
        if END_MARKERS.contains(&&**name) || addr - self.addrs[i] > MAX_DISTANCE {
            return None;
        }
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAKE: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81001000 t __pfx_do_thing
ffffffff81001010 T do_thing
ffffffff81002000 D some_data
ffffffff81003000 T other
ffffffff81004000 T _etext
ffffffffc0001000 t mod_fn\t[mymod]
ffffffffc0002000 t mod_fn2\t[mymod]
";

    #[test]
    fn resolves_inside_and_refuses_outside() {
        let k = KernelSymbols::parse(FAKE).expect("parses");
        assert_eq!(k.symbol(0xffffffff81001011), ("do_thing".to_string(), KERNEL.to_string()));
        assert_eq!(k.symbol(0xffffffff81001008).0, "__pfx_do_thing");
        // Data symbols do not end text symbols (only text is kept); `other` runs to _etext.
        assert_eq!(k.symbol(0xffffffff81003fff).0, "other");
        assert_eq!(k.symbol(0xffffffff81004000).0, UNKNOWN);
        assert_eq!(k.symbol(0xffffffff80000000).0, UNKNOWN);
        assert_eq!(k.symbol(0xffffffffc0001004), ("mod_fn".to_string(), "[mymod]".to_string()));
        assert_eq!(k.symbol(0xffffffffc0002100), ("mod_fn2".to_string(), "[mymod]".to_string()));
        // Far past the last symbol of a module: not a guess.
        assert_eq!(k.symbol(0xffffffffc0002000 + MAX_DISTANCE + 1).0, UNKNOWN);
        assert_eq!(k.symbol(0), (UNKNOWN.to_string(), KERNEL.to_string()));
    }

    #[test]
    fn hidden_addresses_are_an_error_with_a_hint() {
        let hidden = FAKE.lines().map(|l| format!("0000000000000000{}\n", &l[16..])).collect::<String>();
        let err = KernelSymbols::parse(&hidden).expect_err("hidden");
        assert!(matches!(err, KernelSymbolsError::Hidden));
        let msg = err.to_string();
        assert!(msg.contains("kptr_restrict") && msg.contains(UNKNOWN) && !msg.contains('\n'), "{msg}");
        assert!(matches!(KernelSymbols::parse("garbage\n\n"), Err(KernelSymbolsError::Empty)));
    }

    #[test]
    fn real_kallsyms_resolves_do_syscall_64() {
        let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else { return };
        let Some(addr) = text.lines().find_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let (a, _, n) = (f.next()?, f.next()?, f.next()?);
            (n == "do_syscall_64").then(|| u64::from_str_radix(a, 16).ok()).flatten()
        }) else {
            return;
        };
        if addr == 0 {
            // Hidden from this user: the error path is tested above.
            assert!(matches!(KernelSymbols::parse(&text), Err(KernelSymbolsError::Hidden)));
            return;
        }
        let k = KernelSymbols::load().expect("kallsyms");
        assert_eq!(k.symbol(addr + 1), ("do_syscall_64".to_string(), KERNEL.to_string()));
        assert_eq!(k.symbol(addr).0, "do_syscall_64");
        let t = std::time::Instant::now();
        let n = 100_000u64;
        let mut hits = 0;
        for i in 0..n {
            hits += usize::from(k.symbol(addr + (i % 64)).0 == "do_syscall_64");
        }
        eprintln!("kallsyms: {} symbols, {:.0} ns per lookup", k.len(), t.elapsed().as_nanos() as f64 / n as f64);
        assert_eq!(hits as u64, n);
    }
}
