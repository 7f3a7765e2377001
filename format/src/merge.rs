//! Several recordings' tables as one (`pyperf report -i A.pyp -i B.pyp`).

use std::collections::HashMap;

use crate::model::*;
use crate::reader::Tables;

/// Where one recording's ids went in the merged tables: [`Tables::append`]'s answer.
#[derive(Debug, Clone, Default)]
pub struct Remap {
    /// New symbol id of each of its symbol ids.
    pub symbols: Vec<u32>,
    /// New stack node of each of its nodes (entry 0: the empty stack, node 0 again).
    pub nodes: Vec<u32>,
    /// Index in the merged `processes` of its first process record (they keep their order).
    pub first_process: u32,
}

/// Interning state for [`Tables::append`]: built from the tables appended to so far.
#[derive(Debug, Default)]
pub struct Merger {
    symbols: HashMap<Symbol, u32>,
    nodes: HashMap<(u32, u32), u32>,
    /// Tables appended so far.
    parts: usize,
}

impl Tables {
    /// Adds `other`'s symbols, stack nodes, process records, thread names, warnings, libraries, source files (the
    /// first of a path kept) and trailer to these tables, its times moved `shift_ns` later (a recording that started that much after the first). Equal symbols
    /// and equal stacks become one; process records stay apart (the report tells recordings' processes apart by
    /// record). Counters of the trailers are added up; the duration is the merged span. `merger` must be the same
    /// for every call on these tables, and these tables empty at the first.
    pub fn append(&mut self, merger: &mut Merger, other: &Tables, shift_ns: u64) -> Remap {
        let mut remap = Remap { first_process: self.processes.len() as u32, ..Remap::default() };
        remap.symbols = other
            .symbols
            .iter()
            .map(|s| {
                let next = self.symbols.len() as u32;
                *merger.symbols.entry(s.clone()).or_insert_with(|| {
                    self.symbols.push(s.clone());
                    next
                })
            })
            .collect();
        remap.nodes.reserve(other.nodes.len() + 1);
        remap.nodes.push(0);
        for &(parent, symbol) in &other.nodes {
            // A checked table's parents come before their children; anything else hangs off the root.
            let parent = remap.nodes.get(parent as usize).copied().unwrap_or(0);
            let symbol = remap.symbols.get(symbol as usize).copied().unwrap_or(0);
            let next = self.nodes.len() as u32 + 1;
            let node = *merger.nodes.entry((parent, symbol)).or_insert_with(|| {
                self.nodes.push((parent, symbol));
                next
            });
            remap.nodes.push(node);
        }
        self.processes.extend(other.processes.iter().map(|p| {
            let mut p = p.clone();
            p.first_seen_ns = p.first_seen_ns.saturating_add(shift_ns);
            p
        }));
        self.thread_names.extend(other.thread_names.iter().map(|n| {
            let mut n = n.clone();
            n.time_ns = n.time_ns.saturating_add(shift_ns);
            n
        }));
        self.name_index.take();
        self.warnings.extend(other.warnings.iter().cloned());
        self.complete_symbol_table = other.complete_symbol_table && (merger.parts == 0 || self.complete_symbol_table);
        merger.parts += 1;
        if self.off_cpu_min_ns.is_none() {
            self.off_cpu_min_ns = other.off_cpu_min_ns;
        }
        self.task_sweep |= other.task_sweep;
        for (path, file) in &other.sources {
            self.sources.entry(path.clone()).or_insert_with(|| file.clone());
        }
        for (path, id) in &other.libraries {
            self.libraries.entry(path.clone()).or_insert_with(|| id.clone());
        }
        self.stats = match (self.stats.take(), &other.stats) {
            (None, None) => None,
            (mine, theirs) => {
                let mut s = mine.unwrap_or_default();
                if let Some(t) = theirs {
                    s.samples = s.samples.saturating_add(t.samples);
                    s.lost_samples = s.lost_samples.saturating_add(t.lost_samples);
                    s.truncated_stacks = s.truncated_stacks.saturating_add(t.truncated_stacks);
                    s.lost_symbols = s.lost_symbols.saturating_add(t.lost_symbols);
                    s.errors = s.errors.saturating_add(t.errors);
                    s.duration_ns = s.duration_ns.max(t.duration_ns.saturating_add(shift_ns));
                    for (name, n) in &t.counters {
                        match s.counters.iter_mut().find(|(k, _)| k == name) {
                            Some((_, v)) => *v = v.saturating_add(*n),
                            None => s.counters.push((name.clone(), *n)),
                        }
                    }
                }
                Some(s)
            }
        };
        remap
    }
}
