//! `pyperf dump --native`: the user registers of every thread of a process as its last entry into the kernel saved
//! them, read by a BPF task iterator (bpf/regs.bpf.c) without stopping anything. For a thread blocked in a system
//! call they are where it waits in user space, frame pointer included (which /proc/PID/task/TID/syscall lacks).

use std::collections::HashMap;
use std::io::Read;
use std::mem::MaybeUninit;

use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Iter, IterOpts};

use crate::abi::regs_skel::types::pyperf_task_regs;
use crate::abi::regs_skel::RegsSkelBuilder;

/// One thread's saved user registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer.
    pub sp: u64,
    /// Frame pointer.
    pub bp: u64,
    /// The system call it is in (-1 or less: none).
    pub syscall: i64,
}

/// The saved user registers of each thread of `pid`, by tid.
pub fn task_regs(pid: u32) -> Result<HashMap<u32, TaskRegs>, String> {
    super::log::capture();
    let mut storage = MaybeUninit::uninit();
    let mut open = RegsSkelBuilder::default().open(&mut storage).map_err(|e| format!("opening: {e}"))?;
    if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
        ro.target_tgid = pid;
    }
    let skel = open.load().map_err(|e| format!("loading: {e}"))?;
    let link =
        skel.progs.pyperf_task_regs.attach_iter_with_opts(IterOpts::None).map_err(|e| format!("attaching: {e}"))?;
    let mut iter = Iter::new(&link).map_err(|e| format!("iterating: {e}"))?;
    let mut bytes = Vec::new();
    iter.read_to_end(&mut bytes).map_err(|e| format!("reading: {e}"))?;
    let size = std::mem::size_of::<pyperf_task_regs>();
    let mut out = HashMap::new();
    for chunk in bytes.chunks_exact(size) {
        let Ok(r) = plain::from_bytes::<pyperf_task_regs>(chunk) else { continue };
        out.insert(r.tid as u32, TaskRegs { ip: r.ip, sp: r.sp, bp: r.bp, syscall: r.orig_ax });
    }
    Ok(out)
}
