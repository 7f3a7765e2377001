//! SIGINT, SIGTERM and SIGHUP (a closed terminal) end a recording cleanly: the loop sees the count go up, drains the ring buffer, writes the
//! trailer. Every further one hurries the end of a command pyperf started (straight to SIGKILL), so that pyperf's
//! own Ctrl-C always works.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static RECEIVED: AtomicUsize = AtomicUsize::new(0);
static FROM_TERMINAL: AtomicBool = AtomicBool::new(false);

/// `si_code` of a signal the kernel sent itself: the terminal's Ctrl-C (sent to the whole foreground process
/// group, the command pyperf started included); kill(2) gives SI_USER.
const SI_KERNEL: libc::c_int = 0x80;

extern "C" fn on_signal(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t (checked for null all the same).
    let code = unsafe { info.as_ref() }.map_or(0, |i| i.si_code);
    FROM_TERMINAL.store(code == SI_KERNEL, Ordering::SeqCst);
    RECEIVED.fetch_add(1, Ordering::SeqCst);
}

/// Installs the handlers of SIGINT, SIGTERM and SIGHUP. SIGHUP is SIGTERM here: a closed terminal or ssh session
/// must not lose the recording (by default it killed pyperf before the trailer was written).
pub fn install() {
    let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe.
        unsafe {
            // `nohup pyperf ...` (or a shell's `trap '' HUP`) ignores SIGHUP on purpose: kept so, as shells do.
            let mut old: libc::sigaction = std::mem::zeroed();
            if sig == libc::SIGHUP
                && libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            // No SA_RESTART: a blocking poll returns with EINTR and the loop notices the signal at once.
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Stops the recording as a signal would (the live view's `q`): a command pyperf started gets SIGINT.
pub fn request_stop() {
    FROM_TERMINAL.store(false, Ordering::SeqCst);
    RECEIVED.fetch_add(1, Ordering::SeqCst);
}

/// A signal asked the recording to stop.
pub fn stop_requested() -> bool {
    received() > 0
}

/// SIGINT, SIGTERM and SIGHUP received so far.
pub fn received() -> usize {
    RECEIVED.load(Ordering::SeqCst)
}

/// The last one came from the terminal (Ctrl-C), which sent it to the command pyperf started as well.
pub fn last_from_terminal() -> bool {
    FROM_TERMINAL.load(Ordering::SeqCst)
}
