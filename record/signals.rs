//! SIGINT and SIGTERM end a recording cleanly: the loop sees the flag, drains the ring buffer, writes the trailer.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handlers of SIGINT and SIGTERM.
pub fn install() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = handler as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            // No SA_RESTART: a blocking poll returns with EINTR and the loop notices the flag at once.
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// A signal asked the recording to stop.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
