//! Reading another process's memory: the [`ReadMem`] trait every reader of CPython objects takes (tests give it
//! fake memory), and [`ProcMem`], the real one. Imports nothing of the crate.

/// Reads another process's memory.
pub trait ReadMem {
    /// Fills `buf` from address `addr`; false if any byte is unreadable.
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool;

    /// Reads each `(addr, len)` of `reqs`: the bytes of each that could be read whole, `None` for the others. The
    /// default reads them one by one; [`ProcMem`] reads up to [`BATCH`] of them in one system call.
    fn read_many(&self, reqs: &[(u64, usize)]) -> Vec<Option<Vec<u8>>> {
        reqs.iter()
            .map(|&(addr, len)| {
                let mut b = vec![0u8; len];
                self.read(addr, &mut b).then_some(b)
            })
            .collect()
    }

    /// Accounts for `units` of work other than reads ([`super::objects::Metered`]); false once a budget is spent.
    /// Memory without a budget accepts any.
    fn charge(&self, _units: u64) -> bool {
        true
    }
}

/// Most reads [`ProcMem::read_many`] does in one process_vm_readv(2) (the kernel's UIO_MAXIOV).
pub const BATCH: usize = 1024;

/// Another process's memory. /proc/PID/mem where it can be opened (root): the open file stays bound to that
/// process's memory, so a reused pid can never be read by mistake. Else process_vm_readv(2), which CAP_SYS_PTRACE
/// alone allows (/proc/PID/mem is mode 0600 and another user's would also need CAP_DAC_OVERRIDE); one system
/// call per read either way, and no ptrace stop.
pub enum ProcMem {
    /// An open /proc/PID/mem, and the pid (for batches of reads, [`ReadMem::read_many`]).
    File(std::fs::File, libc::pid_t),
    /// The pid, for process_vm_readv.
    Pid(libc::pid_t),
}

impl ProcMem {
    /// Memory of process `pid`, checked readable at `probe`, an address mapped in it (e.g. the interpreter's
    /// `_PyRuntime`), so that missing permission is an error now, not unresolved frames later.
    pub fn open(pid: u32, probe: u64) -> std::io::Result<ProcMem> {
        let mem = match std::fs::File::open(format!("/proc/{pid}/mem")) {
            Ok(f) => ProcMem::File(f, pid as libc::pid_t),
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
            ProcMem::File(f, _) => std::os::unix::fs::FileExt::read_at(f, buf, addr),
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

    /// Ranges near one another (objects of one size share an allocator pool: a thousand tasks lie on a few dozen
    /// pages) are read as one span: the kernel's cost is per range and page pinned, not per byte. A span that cannot
    /// be read whole (it crossed into an unmapped page) is read again range by range.
    fn read_many(&self, reqs: &[(u64, usize)]) -> Vec<Option<Vec<u8>>> {
        let mut order: Vec<usize> = (0..reqs.len()).collect();
        order.sort_unstable_by_key(|&i| reqs[i].0);
        // Spans: (start, end, the requests in it).
        let mut spans: Vec<(u64, u64, Vec<usize>)> = Vec::new();
        for i in order {
            let (addr, len) = reqs[i];
            let end = addr.saturating_add(len as u64);
            match spans.last_mut() {
                Some(s) if addr <= s.1.saturating_add(SPAN_GAP) && end.saturating_sub(s.0) <= SPAN_MAX => {
                    s.1 = s.1.max(end);
                    s.2.push(i);
                }
                _ => spans.push((addr, end, vec![i])),
            }
        }
        let got = self.read_ranges(&spans.iter().map(|s| (s.0, (s.1 - s.0) as usize)).collect::<Vec<_>>());
        let mut out: Vec<Option<Vec<u8>>> = vec![None; reqs.len()];
        let mut again: Vec<usize> = Vec::new();
        for (span, bytes) in spans.iter().zip(got) {
            match bytes {
                Some(b) => {
                    for &i in &span.2 {
                        let at = (reqs[i].0 - span.0) as usize;
                        out[i] = b.get(at..at + reqs[i].1).map(<[u8]>::to_vec);
                    }
                }
                None if span.2.len() == 1 => {}
                None => again.extend(&span.2),
            }
        }
        if !again.is_empty() {
            let each = self.read_ranges(&again.iter().map(|&i| reqs[i]).collect::<Vec<_>>());
            for (i, b) in again.into_iter().zip(each) {
                out[i] = b;
            }
        }
        out
    }
}

/// Ranges at most this far apart are read as one span ([`ProcMem::read_many`]).
const SPAN_GAP: u64 = 1024;
/// Longest span.
const SPAN_MAX: u64 = 64 << 10;

impl ProcMem {
    /// process_vm_readv(2) of up to [`BATCH`] ranges a call. It stops at the first range it cannot read whole (the
    /// count it returns says where): that range is `None`, the call goes on from the next one. (For a reused pid the
    /// caller's checks of what it reads apply as for any read: these reads are by pid.)
    fn read_ranges(&self, reqs: &[(u64, usize)]) -> Vec<Option<Vec<u8>>> {
        let pid = match self {
            ProcMem::File(_, pid) | ProcMem::Pid(pid) => *pid,
        };
        let mut out: Vec<Option<Vec<u8>>> = reqs.iter().map(|&(_, len)| Some(vec![0u8; len])).collect();
        let mut i = 0;
        while i < reqs.len() {
            let end = (i + BATCH).min(reqs.len());
            let mut local: Vec<libc::iovec> = Vec::with_capacity(end - i);
            let mut remote: Vec<libc::iovec> = Vec::with_capacity(end - i);
            for (k, &(addr, len)) in reqs[i..end].iter().enumerate() {
                let buf = out[i + k].as_mut().map_or(std::ptr::null_mut(), |b| b.as_mut_ptr());
                local.push(libc::iovec { iov_base: buf.cast(), iov_len: len });
                remote.push(libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len });
            }
            // SAFETY: each local iovec describes a buffer of `out` of exactly its length, alive and not otherwise
            // borrowed during the call; the remote ones are only read, by the kernel, which checks them.
            let n = unsafe {
                libc::process_vm_readv(pid, local.as_ptr(), local.len() as _, remote.as_ptr(), remote.len() as _, 0)
            };
            if n < 0 {
                let e = std::io::Error::last_os_error().raw_os_error();
                if e == Some(libc::ESRCH) || e == Some(libc::EPERM) {
                    // Gone, or not ours to read: nothing more will be.
                    out[i..].iter_mut().for_each(|o| *o = None);
                    break;
                }
            }
            // Whole ranges read before the first one that failed.
            let mut left = if n < 0 { 0 } else { n as usize };
            let mut k = i;
            while k < end && left >= reqs[k].1 {
                left -= reqs[k].1;
                k += 1;
            }
            if k < end {
                out[k] = None;
                k += 1;
            }
            i = k;
        }
        out
    }
}

/// A little-endian u64 at `addr`.
pub fn read_u64<R: ReadMem>(mem: &R, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read(addr, &mut b).then(|| u64::from_le_bytes(b))
}
