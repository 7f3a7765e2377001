//! The terminal of `pyperf top`: raw input (keys one by one, no echo, Ctrl-C as a key), the alternate screen, a
//! hidden cursor; all put back by [`Terminal`]'s drop, by a panic, and by [`restore_now`] from any exit path.

use std::io::Write;
use std::sync::Mutex;

/// The settings to put back (None: nothing changed).
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);

/// Leaves the alternate screen, shows the cursor, restores the terminal's settings. Idempotent.
pub fn restore_now() {
    let saved = SAVED.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(t) = saved {
        // SAFETY: tcsetattr on stdin with settings tcgetattr gave for it.
        unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSAFLUSH, &t) };
        let mut out = std::io::stdout();
        let _ = out.write_all(b"\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
    }
}

/// The terminal in the live view's mode while it lives.
pub struct Terminal {
    _private: (),
}

impl Terminal {
    /// Switches stdin to raw input and stdout to the alternate screen. Fails when stdin is not a terminal.
    pub fn enter() -> std::io::Result<Terminal> {
        // SAFETY: a zeroed termios is a valid buffer for tcgetattr, which fills it.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `t` is a valid, writable termios.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let saved = t;
        // Keys one at a time, not echoed; Ctrl-C and Ctrl-Z arrive as keys (quit, ignored) rather than as signals
        // to the whole foreground group (which would hit a command top started before top could clean up).
        t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        t.c_iflag &= !(libc::IXON | libc::ICRNL);
        t.c_cc[libc::VMIN] = 0;
        t.c_cc[libc::VTIME] = 0;
        // SAFETY: stdin, with settings derived from its own.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSAFLUSH, &t) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        *SAVED.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_now();
            hook(info);
        }));
        let mut out = std::io::stdout();
        out.write_all(b"\x1b[?1049h\x1b[?25l\x1b[2J")?;
        out.flush()?;
        Ok(Terminal { _private: () })
    }

    /// The next key pressed within `timeout_ms`, if any.
    pub fn key(&self, timeout_ms: i32) -> Option<u8> {
        let mut fds = libc::pollfd { fd: libc::STDIN_FILENO, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut fds, 1, timeout_ms) };
        if n <= 0 || fds.revents & libc::POLLIN == 0 {
            if fds.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                // The terminal went away: quit.
                return Some(b'q');
            }
            return None;
        }
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into a valid buffer.
        let r = unsafe { libc::read(libc::STDIN_FILENO, b.as_mut_ptr().cast(), 1) };
        (r == 1).then_some(b[0])
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        restore_now();
    }
}

/// (columns, rows) of the terminal on stdout, if it is one.
pub fn size() -> Option<(usize, usize)> {
    // SAFETY: a zeroed winsize is a valid buffer for TIOCGWINSZ.
    let mut w: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes a winsize.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut w) };
    (r == 0 && w.ws_col > 0 && w.ws_row > 0).then_some((usize::from(w.ws_col), usize::from(w.ws_row)))
}
