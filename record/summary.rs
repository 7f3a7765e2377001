//! What a recording says on stderr when it ends: the totals line, the off-CPU and native lines, and with
//! `--bpf-stats` the BPF programs' own cost. Text only, from numbers the session gathers: it imports nothing of the
//! crate.

use std::fmt::Write as _;
use std::time::Duration;

/// The numbers of the summary.
pub struct Totals<'a> {
    /// How long it recorded.
    pub elapsed: Duration,
    /// Samples written.
    pub samples: u64,
    /// Samples the ring buffer had no room for.
    pub lost: u64,
    /// Samples whose stack was cut at the program's depth limit.
    pub truncated: u64,
    /// Frames whose code object could not be read.
    pub lost_symbols: u64,
    /// Failed reads of target memory.
    pub errors: u64,
    /// With `--off-cpu`.
    pub off_cpu: Option<OffCpuTotals>,
    /// The native stacks' counters (`native_merged`, ...; none without `--native` / `--kernel`).
    pub native: &'a [(String, u64)],
}

/// Off-CPU intervals.
pub struct OffCpuTotals {
    /// Written.
    pub intervals: u64,
    /// Short ones kept by the draw.
    pub sampled: u64,
    /// Short ones dropped by it.
    pub short: u64,
    /// Lost (the ring buffer was full).
    pub lost: u64,
}

/// The summary's lines (no final newline).
pub fn text(t: &Totals<'_>) -> String {
    let all = t.samples + t.lost;
    let pct = |n: u64| if all == 0 { 0.0 } else { 100.0 * n as f64 / all as f64 };
    let mut out = String::new();
    let _ = write!(
        out,
        "pyperf: {:.1} s, {} samples, {} lost ({:.2}%), {} truncated stacks ({:.2}%), {} lost symbols, {} errors",
        t.elapsed.as_secs_f64(),
        t.samples,
        t.lost,
        pct(t.lost),
        t.truncated,
        pct(t.truncated),
        t.lost_symbols,
        t.errors,
    );
    if let Some(o) = &t.off_cpu {
        let _ = write!(
            out,
            "\npyperf: {} off-CPU intervals ({} short ones sampled, {} dropped, {} lost)",
            o.intervals, o.sampled, o.short, o.lost
        );
    }
    let count = |name: &str| t.native.iter().find(|c| c.0 == name).map(|c| c.1);
    if let (Some(merged), Some(partial), Some(unmerged), Some(cut), Some(none)) = (
        count("native_merged"),
        count("native_merged_partial_unwind"),
        count("native_unmerged"),
        count("native_unmerged_python_incomplete"),
        count("native_no_stack"),
    ) {
        let _ = write!(
            out,
            "\npyperf: native stacks: {} merged ({} of them unwound part way), {} not merged (marked), {} without a \
             stack copy",
            merged + partial,
            partial,
            unmerged + cut,
            none
        );
    }
    out
}

/// `--bpf-stats`: the sampling program's (run ns, runs), if measured, over the `samples` it took; the off-CPU
/// programs' (name, run ns, runs) over the `switches` (intervals of followed threads that ended).
pub fn bpf_lines(sampling: Option<(u64, u64)>, samples: u64, off: &[(&str, u64, u64)], switches: u64) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some((run_ns, runs)) = sampling {
        // Every perf event runs the program, also on CPUs running other processes; those runs return after one map
        // lookup. Per target sample counts all of it against the samples taken.
        lines.push(format!(
            "pyperf: BPF {} runs, {:.0} ns per run, {:.0} ns per target sample ({} samples)",
            runs,
            run_ns as f64 / runs.max(1) as f64,
            run_ns as f64 / samples.max(1) as f64,
            samples
        ));
    }
    if !off.is_empty() {
        let each: Vec<String> = off
            .iter()
            .map(|(name, ns, n)| format!("{name} {n} runs, {:.0} ns per run", *ns as f64 / (*n).max(1) as f64))
            .collect();
        // Per off-CPU interval of a followed thread: all three programs' time, over the intervals that ended.
        let total: u64 = off.iter().map(|(_, ns, _)| ns).sum();
        lines.push(format!(
            "pyperf: BPF off-CPU: {}; {:.0} ns per followed switch ({} switches)",
            each.join(", "),
            total as f64 / switches.max(1) as f64,
            switches
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_each_total_once_and_shares_of_all_samples() {
        let mut t = Totals {
            elapsed: Duration::from_millis(2_450),
            samples: 990,
            lost: 10,
            truncated: 5,
            lost_symbols: 2,
            errors: 1,
            off_cpu: None,
            native: &[],
        };
        assert_eq!(
            text(&t),
            "pyperf: 2.5 s, 990 samples, 10 lost (1.00%), 5 truncated stacks (0.50%), 2 lost symbols, 1 errors"
        );
        let native: Vec<(String, u64)> = [
            ("native_merged", 90),
            ("native_merged_partial_unwind", 4),
            ("native_unmerged", 3),
            ("native_unmerged_python_incomplete", 2),
            ("native_no_stack", 1),
        ]
        .iter()
        .map(|&(k, v)| (k.to_string(), v))
        .collect();
        t.off_cpu = Some(OffCpuTotals { intervals: 40, sampled: 7, short: 300, lost: 0 });
        t.native = &native;
        let lines: Vec<String> = text(&t).lines().map(String::from).collect();
        assert_eq!(lines[1], "pyperf: 40 off-CPU intervals (7 short ones sampled, 300 dropped, 0 lost)");
        assert_eq!(
            lines[2],
            "pyperf: native stacks: 94 merged (4 of them unwound part way), 5 not merged (marked), 1 without a stack \
             copy"
        );
        // Nothing sampled: no division by zero.
        let empty = Totals { samples: 0, lost: 0, truncated: 0, off_cpu: None, native: &[], ..t };
        assert!(text(&empty).contains("0 lost (0.00%), 0 truncated stacks (0.00%)"));
    }

    #[test]
    fn bpf_costs_per_run_sample_and_switch() {
        let lines =
            bpf_lines(Some((5_000_000, 10_000)), 1_000, &[("switch", 300_000, 1_000), ("wakeup", 100_000, 500)], 200);
        assert_eq!(lines[0], "pyperf: BPF 10000 runs, 500 ns per run, 5000 ns per target sample (1000 samples)");
        assert_eq!(
            lines[1],
            "pyperf: BPF off-CPU: switch 1000 runs, 300 ns per run, wakeup 500 runs, 200 ns per run; 2000 ns per \
             followed switch (200 switches)"
        );
        assert!(bpf_lines(None, 0, &[], 0).is_empty(), "not measured: nothing said");
    }
}
