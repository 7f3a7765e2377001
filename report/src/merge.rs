//! Several recordings reported as one (`pyperf report -i A.pyp -i B.pyp`): the workers of one job, the hosts of a
//! fleet, repeated runs.
//!
//! Each recording is loaded alone (same options, same filter), then the profiles are merged:
//! - **Time.** Every recording's times move to one clock: the earliest recording's start is 0, and a recording
//!   that started later by the wall clock (`start_time_unix_ns`) is shifted by the difference. Timelines
//!   (speedscope, Firefox Profiler) show the recordings side by side as they ran; recordings made days apart leave
//!   the gap between them empty.
//! - **Processes stay apart.** Each recording's processes and threads remain their own, even when two recordings
//!   have the same pid (two hosts, or a pid reused between runs): such processes are labelled with their recording
//!   (`python3 [pid 123, b.pyp]`). Equal stacks of different processes add up, as they do within one recording.
//! - **Differences are warnings.** Samples of different events (`cpu-clock` and `cycles`) count different things,
//!   and samples at different rates stand for different times (a sample counts one in `--mode cpu` whatever its
//!   rate; `--mode wall` weighs each by its own period): both are added up, with a warning. What cannot be added
//!   up at all is refused: `--mode off-cpu`/`wall` of a recording without off-CPU data (named), `-` twice.
//! - Trailer counters are added up; each recording's warnings keep their recording's name.

use std::collections::{BTreeSet, HashMap};

use pyperf_format::{Merger, Rate, Tables};

use crate::error::ReportError;
use crate::profile::{OffCpuTime, Profile, StackCount, StateCounts, TaskWaitTime, ALL_THREADS};

fn rate_text(rate: Rate) -> String {
    match rate {
        Rate::Frequency(hz) => format!("{hz} Hz"),
        Rate::Period(n) => format!("one sample every {n} events"),
    }
}

fn add_states(into: &mut StateCounts, from: &StateCounts, shift: u64) {
    into.samples = into.samples.saturating_add(from.samples);
    into.stolen = into.stolen.saturating_add(from.stolen);
    for (a, b) in [
        (&mut into.gil, &from.gil),
        (&mut into.thread_state, &from.thread_state),
        (&mut into.pthread_id, &from.pthread_id),
        (&mut into.status, &from.status),
    ] {
        for (x, y) in a.iter_mut().zip(b) {
            *x = x.saturating_add(*y);
        }
    }
    if let Some((lo, hi)) = from.time_range {
        let (lo, hi) = (lo.saturating_add(shift), hi.saturating_add(shift));
        into.time_range = Some(match into.time_range {
            Some((a, b)) => (a.min(lo), b.max(hi)),
            None => (lo, hi),
        });
    }
}

/// Adds `from`'s counts per interpreter id to `into`'s, kept sorted by id.
fn add_per_interpreter(into: &mut Vec<(u32, u64)>, from: &[(u32, u64)]) {
    for &(id, n) in from {
        match into.iter_mut().find(|(i, _)| *i == id) {
            Some(e) => e.1 = e.1.saturating_add(n),
            None => into.push((id, n)),
        }
    }
    into.sort_unstable();
}

/// Adds `part`'s counts per span to `into`, most first.
fn add_per_span(into: &mut Vec<(pyperf_format::SpanLink, u64)>, part: &[(pyperf_format::SpanLink, u64)]) {
    let mut sums: HashMap<pyperf_format::SpanLink, u64> = into.drain(..).collect();
    for &(l, n) in part {
        let m = sums.entry(l).or_insert(0);
        *m = m.saturating_add(n);
    }
    into.extend(sums);
    into.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
}

fn add_off_cpu(into: &mut OffCpuTime, from: &OffCpuTime) {
    for (a, b) in [
        (&mut into.intervals, from.intervals),
        (&mut into.sampled, from.sampled),
        (&mut into.before_start, from.before_start),
        (&mut into.open_at_end, from.open_at_end),
        (&mut into.weight_ns, from.weight_ns),
        (&mut into.runnable_ns, from.runnable_ns),
        (&mut into.blocked_ns, from.blocked_ns),
        (&mut into.disk_ns, from.disk_ns),
        (&mut into.gil_ns, from.gil_ns),
        (&mut into.other_ns, from.other_ns),
        (&mut into.gc_ns, from.gc_ns),
    ] {
        *a = a.saturating_add(b);
    }
}

impl Profile {
    /// Checks that the recordings `parts` (each named as the user gave it) can be reported as one; returns the
    /// warnings to give when they differ in ways that still add up.
    pub fn check_combinable(parts: &[(String, &Profile)]) -> Result<Vec<String>, ReportError> {
        let mut warnings = Vec::new();
        let Some((first_name, first)) = parts.first() else { return Ok(warnings) };
        for (name, p) in &parts[1..] {
            if p.header.event != first.header.event && p.mode != crate::Mode::OffCpu {
                warnings.push(format!(
                    "{first_name} samples {} and {name} samples {}: their samples count different things, added up \
                     here as samples; report them separately to compare",
                    crate::names::escape_text(&first.header.event),
                    crate::names::escape_text(&p.header.event)
                ));
            }
            // A recording before 1.11 did not flag the periods its late samples stood for (steal): its CPU view
            // counts them, a later one's leaves them out.
            let added =
                |p: &Profile| p.tables.stats.as_ref().and_then(|s| s.counter("clock_periods_added")).unwrap_or(0);
            let pair = [(first_name, *first), (name, *p)];
            let old = pair.iter().find(|(_, p)| p.version < (1, 11) && added(p) > 0);
            let new = pair.iter().find(|(_, p)| p.version >= (1, 11));
            if let (Some((old_name, old)), Some((new_name, new)), crate::Mode::Cpu) = (old, new, p.mode) {
                warnings.push(format!(
                    "{old_name} (format {}.{}) counts the {} periods its late samples stood for (a hypervisor's \
                     steal) as CPU samples; {new_name} (format {}.{}) leaves such periods out of --mode cpu",
                    old.version.0,
                    old.version.1,
                    added(old),
                    new.version.0,
                    new.version.1
                ));
            }
            if p.header.rate != first.header.rate && p.mode == crate::Mode::Cpu {
                warnings.push(format!(
                    "{first_name} was recorded at {} and {name} at {}: in --mode cpu a sample counts one whatever its \
                     rate",
                    rate_text(first.header.rate),
                    rate_text(p.header.rate)
                ));
            }
        }
        Ok(warnings)
    }

    /// The recordings `parts` (each named as the user gave it, for labels and warnings), loaded with the same
    /// options, as one profile (see the module docs). Call [`Profile::check_combinable`] first.
    pub fn merge(parts: Vec<(String, Profile)>) -> Profile {
        let start = parts.iter().map(|(_, p)| p.header.start_time_unix_ns).min().unwrap_or(0);
        // pids that more than one recording has: their processes are labelled with their recording.
        let mut pid_parts: HashMap<u32, BTreeSet<usize>> = HashMap::new();
        for (i, (_, p)) in parts.iter().enumerate() {
            for inst in &p.processes {
                pid_parts.entry(inst.pid).or_default().insert(i);
            }
        }
        let mut parts = parts.into_iter();
        let Some((first_name, mut out)) = parts.next() else {
            unreachable!("merge of no recordings: the command line always gives one")
        };
        let named = |name: &str, warnings: Vec<String>| -> Vec<String> {
            warnings.into_iter().map(|w| format!("{name}: {w}")).collect()
        };
        let first_shift = out.header.start_time_unix_ns - start;
        let mut rest: Vec<(String, Profile)> = parts.collect();
        // The first part becomes the base: its own ids need the same shift and remapping as the others'.
        let mut all = vec![(first_name, std::mem::take(&mut out.tables))];
        let mut base_profiles = Vec::with_capacity(rest.len() + 1);
        out.warnings = named(&all[0].0, std::mem::take(&mut out.warnings));
        let hostnames: BTreeSet<String> = std::iter::once(out.header.hostname.clone())
            .chain(rest.iter().map(|(_, p)| p.header.hostname.clone()))
            .collect();
        let same_workload = rest.iter().all(|(_, p)| p.header.workload == out.header.workload);
        for (name, p) in &mut rest {
            all.push((name.clone(), std::mem::take(&mut p.tables)));
        }
        base_profiles.push(first_shift);
        base_profiles.extend(rest.iter().map(|(_, p)| p.header.start_time_unix_ns - start));

        let mut tables = Tables::default();
        let mut merger = Merger::default();
        let remaps: Vec<_> =
            all.iter().zip(&base_profiles).map(|((_, t), &shift)| tables.append(&mut merger, t, shift)).collect();

        // Move `out`'s own per-thread data into the merged frame of reference first.
        let mut merged = Profile {
            tables,
            warnings: out.warnings,
            processes: Vec::new(),
            threads: Vec::new(),
            stacks: Vec::new(),
            gil_stacks: Vec::new(),
            all: StateCounts::default(),
            matched: StateCounts::default(),
            timeline: None,
            timeline_stacks: Vec::new(),
            timeline_reasons: Vec::new(),
            reasons: vec![String::new()],
            off_cpu_all: OffCpuTime::default(),
            off_cpu_matched: OffCpuTime::default(),
            thread_off_cpu: Vec::new(),
            header: out.header,
            version: out.version,
            filter: out.filter,
            mode: out.mode,
            frames: out.frames,
            recorded_frames: out.recorded_frames,
            diff_base: None,
            sources: Vec::new(),
            task_waits_all: TaskWaitTime::default(),
            task_waits_matched: TaskWaitTime::default(),
            interpreters: Vec::new(),
            interpreters_off_cpu: Vec::new(),
            spans: Vec::new(),
        };
        let first_part = Profile {
            tables: Tables::default(),
            warnings: Vec::new(),
            processes: out.processes,
            threads: out.threads,
            stacks: out.stacks,
            gil_stacks: out.gil_stacks,
            all: out.all,
            matched: out.matched,
            timeline: out.timeline,
            timeline_stacks: out.timeline_stacks,
            timeline_reasons: out.timeline_reasons,
            reasons: out.reasons,
            off_cpu_all: out.off_cpu_all,
            off_cpu_matched: out.off_cpu_matched,
            thread_off_cpu: out.thread_off_cpu,
            header: merged.header.clone(),
            version: merged.version,
            filter: merged.filter.clone(),
            mode: merged.mode,
            frames: merged.frames,
            recorded_frames: merged.recorded_frames,
            diff_base: None,
            sources: Vec::new(),
            task_waits_all: out.task_waits_all,
            task_waits_matched: out.task_waits_matched,
            interpreters: out.interpreters,
            interpreters_off_cpu: out.interpreters_off_cpu,
            spans: out.spans,
        };
        let mut reason_ids: HashMap<String, u32> = HashMap::from([(String::new(), 0)]);
        // (pid, start, part, index in its part) of every process instance, to sort them as the report expects.
        let mut instances = Vec::new();
        let mut thread_process = Vec::new();
        let parts_iter = std::iter::once((all[0].0.clone(), first_part)).chain(rest);
        for (i, (name, mut p)) in parts_iter.enumerate() {
            merged.sources.push(name.clone());
            let shift = base_profiles[i];
            let remap = &remaps[i];
            if i > 0 {
                merged.warnings.extend(named(&name, std::mem::take(&mut p.warnings)));
                merged.version = merged.version.min(p.version);
                merged.recorded_frames.add(p.recorded_frames);
            }
            let reasons: Vec<u32> = p
                .reasons
                .iter()
                .map(|r| {
                    let next = merged.reasons.len() as u32;
                    *reason_ids.entry(r.clone()).or_insert_with(|| {
                        merged.reasons.push(r.clone());
                        next
                    })
                })
                .collect();
            let node = |leaf: u32| remap.nodes.get(leaf as usize).copied().unwrap_or(0);
            let thread_base = merged.threads.len() as u32;
            let process_base = instances.len() as u32;
            for mut inst in p.processes {
                let begin = inst
                    .record
                    .and_then(|r| merged.tables.processes.get((remap.first_process + r) as usize))
                    .map_or(shift, |rec| rec.first_seen_ns);
                inst.record = inst.record.map(|r| r + remap.first_process);
                if pid_parts.get(&inst.pid).is_some_and(|s| s.len() > 1) && inst.label.ends_with(']') {
                    inst.label.insert_str(inst.label.len() - 1, &format!(", {name}"));
                }
                instances.push((inst.pid, begin, i, inst));
            }
            for mut t in p.threads {
                t.first_ns = t.first_ns.saturating_add(shift);
                thread_process.push(process_base + t.process);
                merged.threads.push(t);
            }
            let moved = |s: StackCount| StackCount {
                thread: if s.thread == ALL_THREADS { ALL_THREADS } else { s.thread + thread_base },
                leaf: node(s.leaf),
                reason: reasons.get(s.reason as usize).copied().unwrap_or(0),
                ..s
            };
            merged.stacks.extend(p.stacks.into_iter().map(moved));
            merged.gil_stacks.extend(p.gil_stacks.into_iter().map(|(s, g, l)| (moved(s), g, l)));
            add_states(&mut merged.all, &p.all, shift);
            add_states(&mut merged.matched, &p.matched, shift);
            add_off_cpu(&mut merged.off_cpu_all, &p.off_cpu_all);
            add_off_cpu(&mut merged.off_cpu_matched, &p.off_cpu_matched);
            merged.task_waits_all.add_all(&p.task_waits_all);
            add_per_interpreter(&mut merged.interpreters, &p.interpreters);
            add_per_interpreter(&mut merged.interpreters_off_cpu, &p.interpreters_off_cpu);
            // Spans are the recordings' own (random ids): the same span in two recordings adds up.
            add_per_span(&mut merged.spans, &p.spans);
            merged.task_waits_matched.add_all(&p.task_waits_matched);
            merged.thread_off_cpu.extend(p.thread_off_cpu);
            let stack_base = merged.timeline_stacks.len() as u32;
            merged.timeline_stacks.extend(p.timeline_stacks.iter().map(|&(status, leaf)| (status, node(leaf))));
            merged
                .timeline_reasons
                .extend(p.timeline_reasons.iter().map(|&r| reasons.get(r as usize).copied().unwrap_or(0)));
            if let Some(tl) = p.timeline {
                merged.timeline.get_or_insert_with(Default::default).append(tl, thread_base, shift, stack_base);
            }
        }
        // Process instances by pid, then start, then recording; threads point at their instance's new place.
        let mut order: Vec<usize> = (0..instances.len()).collect();
        order.sort_by_key(|&k| (instances[k].0, instances[k].1, instances[k].2));
        let mut new_index = vec![0u32; instances.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new as u32;
        }
        let mut slots: Vec<Option<crate::ProcessInstance>> = instances.into_iter().map(|x| Some(x.3)).collect();
        merged.processes = order.iter().filter_map(|&k| slots[k].take()).collect();
        for (t, &p) in merged.threads.iter_mut().zip(&thread_process) {
            t.process = new_index.get(p as usize).copied().unwrap_or(0);
        }
        // Equal stacks of several recordings are one entry, as within one recording.
        let key = |s: &StackCount| (s.thread, s.status.as_u8(), s.leaf, s.reason);
        merged.stacks.sort_unstable_by_key(key);
        merged.stacks.dedup_by(|s, kept| {
            let same = key(s) == key(kept);
            if same {
                kept.count = kept.count.saturating_add(s.count);
            }
            same
        });
        crate::profile::sort_gil_stacks(&mut merged.gil_stacks);
        merged.header.start_time_unix_ns = start;
        merged.header.hostname = hostnames.into_iter().collect::<Vec<_>>().join(", ");
        if !same_workload {
            merged.header.workload.clear();
        }
        merged
    }
}
