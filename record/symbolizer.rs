//! From the frames the BPF program reports (code object addresses) to symbols: one [`CodeReader`] per followed
//! process, a per-frame cache, and a symbol table of its own.
//!
//! Symbol ids are dense, in first-seen order, and equal symbols get equal ids whatever process they came from.
//! A sink learns each symbol once, before the first sample that uses it; the symbolizer knows nothing of sinks.

use std::collections::HashMap;

use pyperf_format::Symbol;

use crate::abi::RawFrame;
use crate::python::code::{unresolved, CodeReader, FirstLocal, ProcMem, Resolution};
use crate::python::PythonProcess;
use crate::sampler::RawSample;

/// `frame_ids` value of a frame the interpreter does not show (see [`Resolution::Hidden`]).
const HIDDEN: u32 = u32::MAX;

/// What BPF read of the frame's first argument, for the <= 3.10 self/cls heuristic (0 on 3.11+).
fn first_local(f: &RawFrame) -> FirstLocal {
    FirstLocal { object: f.first_local, type_addr: f.first_local_type }
}

/// Raw frames to symbol ids.
#[derive(Default)]
pub struct Symbolizer {
    readers: HashMap<u32, CodeReader<ProcMem>>,
    /// (pid, code, check, instr, class) -> symbol id, or [`HIDDEN`]: the per-frame cost after the first sight
    /// is this lookup (and on <= 3.10, for frames with an argument, the class lookup of `CodeReader::class_key`).
    frame_ids: HashMap<(u32, u64, u32, u32, u64), u32>,
    symbol_ids: HashMap<Symbol, u32>,
    stack: Vec<u32>,
    lost_symbols: u64,
}

impl Symbolizer {
    /// An empty symbolizer.
    pub fn new() -> Symbolizer {
        Symbolizer { stack: Vec::with_capacity(1024), ..Symbolizer::default() }
    }

    /// Starts symbolizing for `p`: opens its memory (forgetting what was cached for an earlier process of the
    /// same pid).
    pub fn add_process(&mut self, p: &PythonProcess) -> std::io::Result<()> {
        // Any address the interpreter surely maps: its runtime state or interpreter list.
        let probe = p.addrs.runtime.or(p.addrs.interp_head).or(p.addrs.code_type).unwrap_or(0);
        let mem = ProcMem::open(p.pid, probe)?;
        self.frame_ids.retain(|k, _| k.0 != p.pid);
        self.readers.insert(p.pid, CodeReader::new(mem, p.row, p.addrs.code_type));
        Ok(())
    }

    /// Stops symbolizing for a process that exited (its pid may be reused).
    pub fn remove_process(&mut self, pid: u32) {
        self.readers.remove(&pid);
        self.frame_ids.retain(|k, _| k.0 != pid);
    }

    /// Frames whose code object could not be read (shown as `[unknown code 0x...]`).
    pub fn lost_symbols(&self) -> u64 {
        self.lost_symbols
    }

    /// The symbol ids of `s`'s frames, root first, hidden frames left out. A symbol seen for the first time is
    /// handed to `new_symbol` (with its id) before this returns.
    pub fn symbolize(&mut self, s: &RawSample<'_>, new_symbol: &mut dyn FnMut(u32, &Symbol)) -> &[u32] {
        self.stack.clear();
        // Once per sample, not per frame.
        let mut reader = self.readers.get_mut(&s.pid);
        // BPF walks leaf to root; sinks want root first.
        for f in s.frames.iter().rev() {
            let first = first_local(f);
            let class = match reader.as_deref_mut() {
                Some(r) if first.type_addr != 0 => r.class_key(f.code, f.check, first),
                _ => 0,
            };
            let key = (s.pid, f.code, f.check, f.instr, class);
            let id = match self.frame_ids.get(&key) {
                Some(&id) => id,
                None => {
                    let resolved = match reader.as_deref_mut() {
                        Some(r) => r.resolve(f.code, f.instr, f.check, first),
                        None => Resolution::Lost,
                    };
                    match resolved {
                        Resolution::Frame(sym) => {
                            let id = intern(&mut self.symbol_ids, sym, new_symbol);
                            self.frame_ids.insert(key, id);
                            id
                        }
                        Resolution::Hidden => {
                            self.frame_ids.insert(key, HIDDEN);
                            HIDDEN
                        }
                        // An unresolved frame may resolve later (a transient read failure): don't cache it.
                        Resolution::Lost => {
                            self.lost_symbols += 1;
                            intern(&mut self.symbol_ids, unresolved(f.code), new_symbol)
                        }
                    }
                }
            };
            if id != HIDDEN {
                self.stack.push(id);
            }
        }
        &self.stack
    }
}

/// The id of `sym`, a new one (announced to `new_symbol`) if it was not seen before.
fn intern(ids: &mut HashMap<Symbol, u32>, sym: Symbol, new_symbol: &mut dyn FnMut(u32, &Symbol)) -> u32 {
    if let Some(&id) = ids.get(&sym) {
        return id;
    }
    let id = ids.len() as u32;
    new_symbol(id, &sym);
    ids.insert(sym, id);
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_symbols_share_an_id_and_are_announced_once() {
        let mut ids = HashMap::new();
        let mut seen = Vec::new();
        let mut note = |id: u32, s: &Symbol| seen.push((id, s.name.clone()));
        let a = intern(&mut ids, unresolved(0x10), &mut note);
        let b = intern(&mut ids, unresolved(0x20), &mut note);
        let c = intern(&mut ids, unresolved(0x10), &mut note);
        assert_eq!((a, b, c), (0, 1, 0));
        assert_eq!(seen, vec![(0, "[unknown code 0x10]".to_string()), (1, "[unknown code 0x20]".to_string())]);
    }

    #[test]
    fn frames_of_an_unknown_process_are_lost_not_guessed() {
        let frames = [RawFrame { code: 0x1000, instr: 4, check: 7, first_local: 0, first_local_type: 0 }; 2];
        let s = RawSample {
            pid: 42,
            tid: 42,
            cpu: 0,
            time_ns: 0,
            comm: [0; 16],
            thread_state: 0,
            gil: 0,
            pthread_id: 0,
            status: 0,
            frames: &frames,
        };
        let mut sym = Symbolizer::new();
        let mut announced = 0;
        let ids = sym.symbolize(&s, &mut |_, s| {
            assert!(s.flags & pyperf_format::symbol_flags::UNRESOLVED != 0);
            announced += 1;
        });
        assert_eq!(ids, &[0, 0]);
        assert_eq!(announced, 1);
        assert_eq!(sym.lost_symbols(), 2);
    }
}
