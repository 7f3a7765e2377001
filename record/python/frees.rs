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
//!
//! [`FreesPlan`] decides per process which of these the recording uses and when a uprobe goes in. It attaches
//! through [`Uprobes`] (the sampler, in the session): nothing here imports the sampler.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::detect::{file_maps, mapped_file_path, PythonProcess};
use super::objects::at;
use crate::abi::{types, ProcConfig};
use crate::mem::{read_u64, ProcMem, ReadMem};
use crate::proc::{self, MapsEntry};

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
    let maps = proc::maps(p.pid).map_err(|e| format!("its maps: {e}"))?;
    let maps = file_maps(&maps);
    let m = dealloc_mapping(&maps, address).ok_or_else(|| format!("code_dealloc {address:#x} not in a mapped file"))?;
    let same_file: Vec<&MapsEntry> = maps.iter().filter(|o| o.path == m.path && o.inode == m.inode).collect();
    Ok(CodeFrees::Dealloc {
        binary: mapped_file_path(p.pid, &m.path, &same_file),
        offset: address - m.start + m.offset,
        address,
    })
}

/// Why [`code_frees`] fails for a process set up before its runtime made the main interpreter (`record --
/// python` finds it a few milliseconds after the exec): [`FreesPlan`] looks again.
const NO_INTERPRETER_YET: &str = "no interpreter yet";

/// How long [`FreesPlan`] looks for a main interpreter that does not exist yet (an embedding program may start
/// Python late; until then, and after, every check word is read).
pub const INTERPRETER_WAIT: Duration = Duration::from_secs(10);

/// The main interpreter: the last of the list that starts at `*head_addr` (each new interpreter goes first).
fn main_interpreter<M: ReadMem>(mem: &M, head_addr: u64, next: i32) -> Result<u64, String> {
    let mut interp = read_u64(mem, head_addr).filter(|&a| a != 0).ok_or(NO_INTERPRETER_YET)?;
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
fn dealloc_mapping(maps: &[MapsEntry], addr: u64) -> Option<&MapsEntry> {
    maps.iter().find(|m| m.start <= addr && addr < m.end && m.exec)
}

/// `config` with the check-word cache's count of freed code objects : the main
/// interpreter's own, or the uprobe's. The sampler numbers the registration (`cache_id`), which turns the cache on.
pub fn with_frees(mut config: ProcConfig, frees: &CodeFrees) -> ProcConfig {
    match frees {
        CodeFrees::Counter { interp } => {
            config.gen_kind = types::pyperf_gen_kind::GEN_INTERP.0 as u8;
            config.gen_interp = *interp;
        }
        CodeFrees::Dealloc { .. } => config.gen_kind = types::pyperf_gen_kind::GEN_UPROBE.0 as u8,
    }
    config
}

/// A process is given its uprobe on `code_dealloc` once it is this old: detaching a uprobe waits for a grace period
/// (~0.1 s), which a short command (`record -- python -c ...`) should not pay at its end, and its few samples are
/// cheap enough without the cache.
pub const UPROBE_AFTER: Duration = Duration::from_millis(500);

/// What [`FreesPlan`] needs of the sampler.
pub trait Uprobes {
    /// Attaches the uprobe that counts `pid`'s frees at `offset` of `binary`.
    fn watch_code_frees(&mut self, pid: u32, binary: &Path, offset: u64) -> Result<(), String>;
    /// Gives `pid` a new configuration row (the cache on).
    fn update_process(&mut self, pid: u32, config: &ProcConfig) -> Result<(), String>;
}

/// What a process waits for before its frees are counted.
enum Due {
    /// Its uprobe, once it is [`UPROBE_AFTER`] old.
    Uprobe(CodeFrees),
    /// Its main interpreter (3.14+), which did not exist when it was set up: looked for at each scan until
    /// `until`. `next` is `Layout::interp_next`.
    Interpreter { next: i32, until: Instant },
}

/// Which processes' frees are counted, and the uprobes still to attach: the check-word cache of each followed
/// process. Without a count every check word is read: costs more on deep stacks, as correct.
pub struct FreesPlan {
    /// Uprobes may be put in targets (`--no-uprobe` says no).
    uprobes: bool,
    /// Processes whose frees will be counted later: when to look, their configuration row, what they wait for.
    due: HashMap<u32, (Instant, ProcConfig, Due)>,
    /// A process whose frees could not be counted was reported (once per recording).
    said: bool,
}

impl FreesPlan {
    /// A plan that may attach uprobes when `uprobes` (not with `--no-uprobe`).
    pub fn new(uprobes: bool) -> FreesPlan {
        FreesPlan { uprobes, due: HashMap::new(), said: false }
    }

    /// `config` with the check-word cache on, when `p`'s frees can be counted now (before 3.14 this attaches a
    /// uprobe to its `code_dealloc`, if the process is `age` old already; a younger one gets it from
    /// [`FreesPlan::attach_due`]). Else `config` as it is.
    pub fn config(
        &mut self,
        p: &PythonProcess,
        config: ProcConfig,
        age: Duration,
        probes: &mut dyn Uprobes,
    ) -> ProcConfig {
        let frees = ProcMem::open(p.pid, config.interp_head_addr)
            .map_err(|e| format!("cannot read its memory: {e}"))
            .and_then(|mem| code_frees(p, &mem, config.interp_head_addr));
        match frees {
            Ok(f @ CodeFrees::Counter { .. }) => with_frees(config, &f),
            // --no-uprobe: every check word is read.
            Ok(CodeFrees::Dealloc { .. }) if !self.uprobes => config,
            Ok(f @ CodeFrees::Dealloc { .. }) => {
                // A process that has run UPROBE_AFTER already (`-p` of a service) gets it now; a younger one when it
                // is that old, and until then every check word is read.
                if age >= UPROBE_AFTER {
                    match watch(probes, p.pid, &f) {
                        Ok(()) => return with_frees(config, &f),
                        Err(why) => self.cannot_count(p.pid, &why),
                    }
                } else {
                    self.due.insert(p.pid, (Instant::now() + (UPROBE_AFTER - age), config, Due::Uprobe(f)));
                }
                config
            }
            // Set up as it starts (a command pyperf runs): the interpreter comes within milliseconds. Until it is
            // found every check word is read (a setup before it, in 2 to 4 ms since #29, left the cache off for the
            // whole run: tests/symbols.rs `reuse_sid_3_14` under load).
            Err(why) if why == NO_INTERPRETER_YET => {
                let (now, next) = (Instant::now(), p.row.layout.interp_next);
                self.due.insert(p.pid, (now, config, Due::Interpreter { next, until: now + INTERPRETER_WAIT }));
                config
            }
            Err(why) => {
                self.cannot_count(p.pid, &why);
                config
            }
        }
    }

    /// Attaches the uprobes due at `now`, looks for the main interpreters not found yet, and turns the check-word
    /// cache on for the processes whose frees are now counted.
    pub fn attach_due(&mut self, now: Instant, probes: &mut dyn Uprobes) {
        let due: Vec<u32> = self.due.iter().filter(|(_, (due, _, _))| now >= *due).map(|(&pid, _)| pid).collect();
        for pid in due {
            let Some((_, config, wait)) = self.due.remove(&pid) else { continue };
            let frees = match wait {
                Due::Uprobe(frees) => frees,
                Due::Interpreter { next, until } => {
                    let head = config.interp_head_addr;
                    let found = ProcMem::open(pid, head)
                        .map_err(|e| format!("cannot read its memory: {e}"))
                        .and_then(|mem| main_interpreter(&mem, head, next));
                    match found {
                        Ok(interp) => CodeFrees::Counter { interp },
                        Err(why) if why == NO_INTERPRETER_YET && now < until => {
                            // Again at the next scan.
                            self.due.insert(pid, (now, config, Due::Interpreter { next, until }));
                            continue;
                        }
                        Err(why) => {
                            self.cannot_count(pid, &why);
                            continue;
                        }
                    }
                }
            };
            let on = watch(probes, pid, &frees).and_then(|()| probes.update_process(pid, &with_frees(config, &frees)));
            if let Err(why) = on {
                self.cannot_count(pid, &why);
            }
        }
    }

    /// `pid` is gone: no uprobe for it.
    pub fn forget(&mut self, pid: u32) {
        self.due.remove(&pid);
    }

    /// Says once per recording that a process's frees of code objects cannot be counted.
    fn cannot_count(&mut self, pid: u32, why: &str) {
        if !self.said {
            self.said = true;
            crate::say!(
                "pyperf: note: process {pid}: its frees of code objects cannot be counted ({why}): each sample reads \
                 every frame's code object, which costs more on deep stacks"
            );
        }
    }
}

/// Attaches the uprobe that counts `pid`'s frees, if they need one.
fn watch(probes: &mut dyn Uprobes, pid: u32, frees: &CodeFrees) -> Result<(), String> {
    match frees {
        CodeFrees::Dealloc { binary, offset, .. } => probes.watch_code_frees(pid, binary, *offset),
        CodeFrees::Counter { .. } => Ok(()),
    }
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

    /// The sampler's side of a plan: what was asked of it.
    #[derive(Default)]
    struct Probes(Vec<(u32, ProcConfig)>);

    impl Uprobes for Probes {
        fn watch_code_frees(&mut self, _: u32, _: &Path, _: u64) -> Result<(), String> {
            Err("no uprobes here".into())
        }
        fn update_process(&mut self, pid: u32, config: &ProcConfig) -> Result<(), String> {
            self.0.push((pid, *config));
            Ok(())
        }
    }

    /// A process set up before its main interpreter existed (3.14+: the count is the interpreter's) gets the cache
    /// once a later scan finds the interpreter, and is given up on after the wait. Read in this process's memory:
    /// a head pointer, 0 until an "interpreter" whose `next` (at +8) is 0.
    #[test]
    fn an_interpreter_created_after_the_setup_is_found_by_a_later_scan() {
        let pid = std::process::id();
        let interp = Box::new([0u64; 2]);
        let mut head = Box::new(0u64);
        let head_addr = &*head as *const u64 as u64;
        let config = ProcConfig { interp_head_addr: head_addr, ..Default::default() };
        let mut plan = FreesPlan::new(true);
        let t0 = Instant::now();
        let until = t0 + INTERPRETER_WAIT;
        plan.due.insert(pid, (t0, config, Due::Interpreter { next: 8, until }));
        let mut probes = Probes::default();
        plan.attach_due(t0, &mut probes);
        assert!(probes.0.is_empty() && plan.due.contains_key(&pid), "no interpreter yet: looked for again");
        // SAFETY: `head` is a live, aligned u64 this test owns; volatile so that the store is in memory when
        // /proc/self/mem reads it.
        unsafe { std::ptr::write_volatile(&mut *head, interp.as_ptr() as u64) };
        plan.attach_due(t0 + Duration::from_millis(20), &mut probes);
        assert!(plan.due.is_empty());
        let [(p, on)] = probes.0.as_slice() else { panic!("{} updates", probes.0.len()) };
        assert_eq!((*p, on.gen_kind), (pid, types::pyperf_gen_kind::GEN_INTERP.0 as u8));
        assert_eq!(on.gen_interp, interp.as_ptr() as u64);

        // Never created: given up after the wait (every check word is read), not looked for forever.
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(&mut *head, 0) };
        let mut plan = FreesPlan::new(true);
        plan.due.insert(pid, (t0, config, Due::Interpreter { next: 8, until }));
        let mut probes = Probes::default();
        plan.attach_due(until - Duration::from_millis(1), &mut probes);
        assert!(plan.due.contains_key(&pid));
        plan.attach_due(until, &mut probes);
        assert!(plan.due.is_empty() && probes.0.is_empty() && plan.said);
    }

    #[test]
    fn code_dealloc_is_found_in_the_executable_mapping_of_its_file() {
        let maps = file_maps(
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
