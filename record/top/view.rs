//! What `pyperf top` shows: a header (targets, rates, GIL and idle shares) and functions by own or total share,
//! from a [`Live`] state. Plain text lines, the same for the terminal view and the periodic table. Every name that
//! comes from a target (functions, files, threads, processes, the command) is escaped as in every human-facing
//! output ([`escape_text`]: with `top -a` any user's program names them, and the view writes them to a terminal),
//! and lines are cut by terminal columns ([`fit_width`]: CJK and emoji take two).

use std::fmt::Write as _;

use pyperf_report::names::{escape_text, fit_width};

use crate::sink::live::{Counts, Live, ThreadKey, ThreadSums};

/// Sort key of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sort {
    /// Own (leaf) time, most first.
    Own,
    /// Total (on the stack) time, most first.
    Total,
    /// Function name.
    Name,
}

/// Which time the table counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// On CPU.
    Cpu,
    /// On CPU and off CPU (with --off-cpu).
    Wall,
    /// Off CPU only (with --off-cpu).
    OffCpu,
}

/// Which threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    /// Every thread.
    All,
    /// The threads of one process.
    Process(u32),
    /// One thread (pid, tid).
    Thread(u32, u32),
}

impl Filter {
    fn keeps(self, k: ThreadKey) -> bool {
        match self {
            Filter::All => true,
            Filter::Process(p) => k.0 == p,
            Filter::Thread(p, t) => k == (p, t),
        }
    }
}

/// The user's choices.
#[derive(Debug, Clone, Copy)]
pub struct ViewState {
    /// Sort key.
    pub sort: Sort,
    /// Time counted.
    pub mode: Mode,
    /// The recent window (else since the start).
    pub recent: bool,
    /// Threads shown.
    pub filter: Filter,
    /// The table is frozen.
    pub paused: bool,
}

impl ViewState {
    /// Sorted by own time, over the recent window, all threads; wall-clock time when off-CPU intervals come.
    pub fn new(off_cpu: bool) -> ViewState {
        ViewState {
            sort: Sort::Own,
            mode: if off_cpu { Mode::Wall } else { Mode::Cpu },
            recent: true,
            filter: Filter::All,
            paused: false,
        }
    }

    /// The next (`forward`) or previous filter: all, then each process followed by each of its threads.
    pub fn cycle_filter(&mut self, live: &Live, forward: bool) {
        let mut list = vec![Filter::All];
        let mut last_pid = None;
        for (pid, tid) in live.threads() {
            if last_pid != Some(pid) {
                list.push(Filter::Process(pid));
                last_pid = Some(pid);
            }
            list.push(Filter::Thread(pid, tid));
        }
        let i = list.iter().position(|f| *f == self.filter).unwrap_or(0);
        let n = list.len();
        self.filter = list[if forward { (i + 1) % n } else { (i + n - 1) % n }];
    }

    /// Handles a key; false for quit.
    pub fn key(&mut self, k: u8, live: &mut Live) -> bool {
        match k {
            b'q' | b'Q' | 3 /* Ctrl-C */ | 4 /* Ctrl-D */ => return false,
            b'o' => self.sort = Sort::Own,
            b't' => self.sort = Sort::Total,
            b'n' => self.sort = Sort::Name,
            b's' => {
                self.sort = match self.sort {
                    Sort::Own => Sort::Total,
                    Sort::Total => Sort::Name,
                    Sort::Name => Sort::Own,
                }
            }
            b'w' => self.recent = !self.recent,
            b'f' => self.cycle_filter(live, true),
            b'F' => self.cycle_filter(live, false),
            b'a' => self.filter = Filter::All,
            b'p' | b' ' => self.paused = !self.paused,
            b'r' => live.reset(),
            b'm' if live.off_cpu => {
                self.mode = match self.mode {
                    Mode::Wall => Mode::Cpu,
                    Mode::Cpu => Mode::OffCpu,
                    Mode::OffCpu => Mode::Wall,
                }
            }
            _ => {}
        }
        true
    }
}

fn own(c: &Counts, m: Mode) -> u64 {
    match m {
        Mode::Cpu => c.own,
        Mode::Wall => c.own + c.own_off,
        Mode::OffCpu => c.own_off,
    }
}

fn total(c: &Counts, m: Mode) -> u64 {
    match m {
        Mode::Cpu => c.total,
        Mode::Wall => c.total + c.total_off,
        Mode::OffCpu => c.total_off,
    }
}

fn base(s: &ThreadSums, m: Mode) -> u64 {
    match m {
        Mode::Cpu => s.weight - s.off_cpu,
        Mode::Wall => s.weight,
        Mode::OffCpu => s.off_cpu,
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

/// The lines of the view, at most `rows` (the table is cut to fit), each at most `width` terminal columns. `what`
/// names the targets; `elapsed_s` is the time since the start.
pub fn render(live: &Live, st: &ViewState, what: &str, elapsed_s: f64, width: usize, rows: usize) -> Vec<String> {
    let keep = |k: ThreadKey| st.filter.keeps(k);
    let sums = live.sums(st.recent, &keep);
    // The time the sums cover, for the sample rate.
    let covered = (elapsed_s - live.since_s as f64).max(1e-3);
    let period_s = if st.recent { covered.min(live.window as f64) } else { covered };
    let mut out = Vec::new();
    let filter = match st.filter {
        Filter::All => "all threads".to_string(),
        Filter::Process(p) => {
            format!("process {} [{p}]", escape_text(live.processes.get(&p).map_or("?", |s| s.as_str())))
        }
        Filter::Thread(p, t) => {
            format!("thread {} [{t}] of [{p}]", escape_text(live.thread_names.get(&(p, t)).map_or("?", |s| s.as_str())))
        }
    };
    let period = if st.recent { format!("last {} s", live.window) } else { "since start".to_string() };
    let mode = match st.mode {
        Mode::Cpu => "CPU",
        Mode::Wall => "wall (CPU + off-CPU)",
        Mode::OffCpu => "off-CPU",
    };
    let sort = match st.sort {
        Sort::Own => "own",
        Sort::Total => "total",
        Sort::Name => "name",
    };
    out.push(format!("pyperf top - {}", escape_text(what)));
    out.push(format!(
        "{elapsed_s:.0} s - {period} - {mode} time - sort: {sort} - {filter}{}",
        if st.paused { " - PAUSED" } else { "" }
    ));
    let threads = live.threads().into_iter().filter(|&k| keep(k)).count();
    let processes = {
        let mut p: Vec<u32> = live.threads().into_iter().filter(|&k| keep(k)).map(|k| k.0).collect();
        p.dedup();
        p.len()
    };
    let cpu = sums.weight - sums.off_cpu;
    let mut line = format!(
        "Samples {:.0}/s, threads {threads}, processes {processes}; of CPU time: GIL held {:.1}%, idle {:.1}%",
        sums.samples as f64 / period_s,
        pct(sums.gil_held.min(cpu), cpu),
        pct(sums.idle, cpu),
    );
    if live.off_cpu {
        let _ = write!(
            line,
            "; of wall time: off-CPU {:.1}%, GIL wait {:.1}%",
            pct(sums.off_cpu, sums.weight),
            pct(sums.gil_wait, sums.weight)
        );
    }
    if live.threads_forgotten > 0 && !st.recent && st.filter != Filter::All {
        let _ = write!(line, " (per-thread sums of {} threads seen longest ago dropped)", live.threads_forgotten);
    }
    out.push(line);
    out.push(String::new());
    let seconds = live.sample_weight > 1;
    let unit = if seconds { "s" } else { "samples" };
    out.push(format!(
        "{:>6} {:>7} {:>10} {:>10} {:>5}  FUNCTION (FILE:LINE)",
        "%OWN",
        "%TOTAL",
        format!("OWN {unit}"),
        format!("TOTAL {unit}"),
        "%GIL"
    ));
    let whole = base(&sums, st.mode);
    let mut rows_v: Vec<(u32, Counts)> =
        sums.functions.iter().map(|(f, c)| (*f, *c)).filter(|(_, c)| total(c, st.mode) > 0).collect();
    let name = |f: u32| &live.functions[f as usize].name;
    match st.sort {
        Sort::Own => rows_v.sort_by(|a, b| {
            own(&b.1, st.mode)
                .cmp(&own(&a.1, st.mode))
                .then(total(&b.1, st.mode).cmp(&total(&a.1, st.mode)))
                .then(name(a.0).cmp(name(b.0)))
        }),
        Sort::Total => rows_v.sort_by(|a, b| {
            total(&b.1, st.mode)
                .cmp(&total(&a.1, st.mode))
                .then(own(&b.1, st.mode).cmp(&own(&a.1, st.mode)))
                .then(name(a.0).cmp(name(b.0)))
        }),
        Sort::Name => rows_v.sort_by(|a, b| name(a.0).cmp(name(b.0)).then(a.0.cmp(&b.0))),
    }
    let room = rows.saturating_sub(out.len());
    let time = |w: u64| if seconds { format!("{:.2}", w as f64 / 1e9) } else { w.to_string() };
    for (f, c) in rows_v.iter().take(room) {
        let func = &live.functions[*f as usize];
        let (name, file) = (escape_text(&func.name), escape_text(&func.file));
        let place = if file.is_empty() {
            name
        } else if func.line > 0 {
            format!("{name} ({file}:{})", func.line)
        } else {
            format!("{name} ({file})")
        };
        let gil = if c.total > 0 { format!("{:.0}", pct(c.gil, c.total)) } else { "-".to_string() };
        out.push(format!(
            "{:>6.1} {:>7.1} {:>10} {:>10} {:>5}  {place}",
            pct(own(c, st.mode), whole),
            pct(total(c, st.mode), whole),
            time(own(c, st.mode)),
            time(total(c, st.mode)),
            gil
        ));
    }
    if rows_v.is_empty() {
        out.push("  (no samples yet)".to_string());
    }
    out.into_iter().map(|l| fit_width(&l, width)).collect()
}

/// The key help line of the terminal view.
pub fn help(off_cpu: bool) -> String {
    format!(
        "q quit  o/t/n sort by own/total/name  w recent/since start  f/F next/previous thread or process  a all  \
         p pause  r reset{}",
        if off_cpu { "  m CPU/wall/off-CPU" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pyperf_format::Symbol;

    #[test]
    fn sorted_and_cut() {
        let mut l = Live::new(5, 1_000_000, "x86_64");
        l.symbol(0, &Symbol { scope: String::new(), name: "main".into(), file: "m.py".into(), line: 3, flags: 0 });
        l.symbol(1, &Symbol { scope: "C".into(), name: "hot".into(), file: "m.py".into(), line: 9, flags: 0 });
        let s = pyperf_format::GilState::ThisThread;
        for _ in 0..3 {
            l.add_for_test(0, (1, 1), &[0, 1], s);
        }
        l.add_for_test(0, (1, 2), &[0], s);
        let mut st = ViewState::new(false);
        let lines = render(&l, &st, "pid 1", 1.0, 200, 30);
        assert!(lines[5].ends_with("C.hot (m.py:9)"), "{lines:#?}");
        let cols: Vec<&str> = lines[5].split_whitespace().collect();
        assert_eq!(&cols[..2], ["75.0", "75.0"], "{lines:#?}");
        st.sort = Sort::Total;
        let lines = render(&l, &st, "pid 1", 1.0, 200, 30);
        assert!(lines[5].ends_with("main (m.py:3)") && lines[5].contains("100.0"), "{lines:#?}");
        st.filter = Filter::Thread(1, 2);
        let lines = render(&l, &st, "pid 1", 1.0, 200, 30);
        assert!(!lines.iter().any(|l| l.contains("C.hot")), "{lines:#?}");
        // Cut to the rows and width given.
        assert!(render(&l, &ViewState::new(false), "x", 1.0, 20, 5).iter().all(|l| l.chars().count() <= 20));
        assert_eq!(render(&l, &ViewState::new(false), "x", 1.0, 200, 5).len(), 5);
    }

    /// Names with terminal controls, bidi overrides, newlines and backslashes are shown escaped, on one line each;
    /// wide names are cut by columns.
    #[test]
    fn hostile_and_wide_names() {
        let mut l = Live::new(5, 1_000_000, "x86_64");
        let names = [
            "title\u{1b}]0;PWNED\u{7}",
            "csi\u{9b}31m",
            "bidi\u{202e}x",
            "fake\n 99.9 FAKEROW",
            r"lit\x1b",
            &format!("wide_{}", "計算".repeat(60)),
            "emoji_\u{1f525}\u{1f525}",
        ];
        for (i, n) in names.iter().enumerate() {
            let file = if i == 0 { "/tmp/f\u{1b}[2J.py" } else { "m.py" };
            l.symbol(
                i as u32,
                &Symbol { scope: String::new(), name: n.to_string(), file: file.into(), line: 1, flags: 0 },
            );
            l.add_for_test(0, (1, 1), &[i as u32], pyperf_format::GilState::ThisThread);
        }
        let lines = render(&l, &ViewState::new(false), "py\u{1b}[2J x", 1.0, 100, 40);
        let all = lines.join("\n");
        for l in &lines {
            assert!(!l.chars().any(pyperf_report::names::is_unsafe), "{l:?}");
            assert!(pyperf_report::names::display_width(l) <= 100, "{l:?}");
        }
        assert_eq!(lines.len(), 5 + names.len(), "one line a function: {lines:#?}");
        for want in
            [r"title\x1b]0;PWNED\x07 (/tmp/f\x1b[2J.py:1)", r"csi\x9b31m", r"bidi\u{202e}x", r"fake\n 99.9 FAKEROW"]
        {
            assert!(all.contains(want), "{want} in {lines:#?}");
        }
        assert!(all.contains(r"lit\\x1b"), "{lines:#?}");
        assert!(lines[0].ends_with(r"py\x1b[2J x"), "{lines:#?}");
        let wide = lines.iter().find(|l| l.contains("wide_")).expect("the wide name");
        assert!(wide.ends_with('~') && pyperf_report::names::display_width(wide) >= 99, "{wide}");
        assert!(all.contains("emoji_\u{1f525}\u{1f525}"), "{lines:#?}");
    }
}
