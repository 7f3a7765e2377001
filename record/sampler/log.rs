//! libbpf's log: captured (bounded) while the program loads, so that a failed load can show the verifier's
//! reason; printed as it comes with `PYPERF_LIBBPF_DEBUG` set.

use std::sync::Mutex;

use libbpf_rs::PrintLevel;

/// libbpf's log during load (including the verifier's), shown when loading fails.
pub(super) static LIBBPF_LOG: Mutex<String> = Mutex::new(String::new());
const LOG_CAP: usize = 256 * 1024;

/// Sends libbpf's messages to [`libbpf_print`] (kept, shown only on failure or with `PYPERF_LIBBPF_DEBUG`), before
/// any BPF object is opened: libbpf's own default prints its warnings to stderr (e.g. `dump --native` without
/// every privilege printed them among the user's output).
pub(super) fn capture() {
    libbpf_rs::set_print(Some((PrintLevel::Debug, libbpf_print as libbpf_rs::PrintCallback)));
}

pub(super) fn libbpf_print(level: PrintLevel, msg: String) {
    if std::env::var_os("PYPERF_LIBBPF_DEBUG").is_some() {
        crate::say_raw!("libbpf: {msg}");
    }
    let _ = level; // everything is kept (bounded): the verifier log comes at warn level
    let mut log = LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner());
    if log.len() + msg.len() > LOG_CAP {
        let cut = (log.len() + msg.len()).saturating_sub(LOG_CAP).min(log.len());
        let cut = (cut..=log.len()).find(|&i| log.is_char_boundary(i)).unwrap_or(log.len());
        log.drain(..cut);
    }
    log.push_str(&msg);
}

/// What to show when loading fails: the verifier's log (its last lines carry the reason) if
/// libbpf printed one, else the tail of libbpf's messages.
pub(super) fn libbpf_log_tail(lines: usize) -> String {
    let log = LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner());
    let text = match (log.rfind("-- BEGIN PROG LOAD LOG --"), log.rfind("-- END PROG LOAD LOG --")) {
        (Some(b), Some(e)) if b < e => &log[b..e],
        _ => &log[..],
    };
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = all.len().saturating_sub(lines);
    all[start..].join("\n")
}

pub(super) fn has_verifier_log() -> bool {
    LIBBPF_LOG.lock().unwrap_or_else(|e| e.into_inner()).contains("-- BEGIN PROG LOAD LOG --")
}
