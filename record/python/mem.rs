//! Reading another process's memory: the [`ReadMem`] trait every reader of CPython objects takes (tests give it
//! fake memory), and [`ProcMem`], the real one. Imports nothing of the crate.

/// Reads another process's memory.
pub trait ReadMem {
    /// Fills `buf` from address `addr`; false if any byte is unreadable.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    /// Accounts for `units` of work other than reads ([`super::objects::Metered`]); false once a budget is spent.
    /// Memory without a budget accepts any.
    fn charge(&self, _units: u64) -> bool {
        true
    }
}

/// Another process's memory. /proc/PID/mem where it can be opened (root): the open file stays bound to that
/// process's memory, so a reused pid can never be read by mistake. Else process_vm_readv(2), which CAP_SYS_PTRACE
/// alone allows (/proc/PID/mem is mode 0600 and another user's would also need CAP_DAC_OVERRIDE); one system
/// call per read either way, and no ptrace stop.
pub enum ProcMem {
    /// An open /proc/PID/mem.
    File(std::fs::File),
    /// The pid, for process_vm_readv.
    Pid(libc::pid_t),
}

impl ProcMem {
    /// Memory of process `pid`, checked readable at `probe`, an address mapped in it (e.g. the interpreter's
    /// `_PyRuntime`), so that missing permission is an error now, not unresolved frames later.
    pub fn open(pid: u32, probe: u64) -> std::io::Result<ProcMem> {
        let mem = match std::fs::File::open(format!("/proc/{pid}/mem")) {
            Ok(f) => ProcMem::File(f),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => ProcMem::Pid(pid as libc::pid_t),
            Err(e) => return Err(e),
        };
        let mut b = [0u8; 1];
        match mem.read_raw(probe, &mut b) {
            Ok(1) => Ok(mem),
            Ok(_) => Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("nothing at {probe:#x}"))),
            Err(e) => Err(e),
        }
    }

    fn read_raw(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            ProcMem::File(f) => std::os::unix::fs::FileExt::read_at(f, buf, addr),
            ProcMem::Pid(pid) => {
                let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
                let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
                // SAFETY: `local` describes `buf`, writable for its length; the remote range is only read, by the
                // kernel, which checks it against the target's mappings.
                let n = unsafe { libc::process_vm_readv(*pid, &local, 1, &remote, 1, 0) };
                if n < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(n as usize)
            }
        }
    }
}

impl ReadMem for ProcMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        buf.is_empty() || matches!(self.read_raw(addr, buf), Ok(n) if n == buf.len())
    }
}

/// A little-endian u64 at `addr`.
pub fn read_u64<R: ReadMem>(mem: &R, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read(addr, &mut b).then(|| u64::from_le_bytes(b))
}
