//! Unit-test support for record/python/ (compiled only for `cargo test`): a simulated target process's memory
//! ([`FakeMem`]) and a [`PythonProcess`] that names no real process ([`process`]). The tests of code objects,
//! thread names and the user-space walker build their objects in it.
//!
//! Imports only `super::code` (the [`ReadMem`] trait), `super::detect` (the process record) and `super::versions`;
//! nothing but the tests of record/python/ may import it.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::PathBuf;

use super::detect::{PythonAddrs, PythonProcess};
use super::versions::Row;
use crate::mem::ReadMem;

/// Where the first region goes: above the first megabyte, like a real process's heap.
const FIRST: u64 = 0x10_0000;
const PAGE: usize = 4096;

/// A simulated target process: disjoint regions, a read must fall inside one. The program "running meanwhile" is
/// simulated two ways: `watch` applies the `pending` writes just before one read (a frame rewritten between two
/// reads), `tick` writes the number of reads so far at an address before every read (a program that never stops).
/// `reads` and `bytes` count what was read (asked for), for tests of what a read costs.
#[derive(Default, Clone)]
pub struct FakeMem {
    /// Each region's bytes by start address.
    pub regions: RefCell<BTreeMap<u64, Vec<u8>>>,
    next: Cell<u64>,
    /// Reads so far.
    pub reads: Cell<u64>,
    /// Bytes asked for so far.
    pub bytes: Cell<u64>,
    /// When to apply [`Self::pending`]: before the `nth` read (the first is 1) of `address`, or of any address
    /// when it is `None`.
    pub watch: Cell<Option<(Option<u64>, u64)>>,
    /// Reads [`Self::watch`] has counted.
    pub watched: Cell<u64>,
    /// Writes (address, bytes) the program makes meanwhile.
    pub pending: RefCell<Vec<(u64, Vec<u8>)>>,
    /// An address where the number of reads so far (u32) is written before every read.
    pub tick: Cell<Option<u64>>,
}

impl ReadMem for FakeMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        let n = self.reads.get() + 1;
        self.reads.set(n);
        self.bytes.set(self.bytes.get() + buf.len() as u64);
        if let Some(t) = self.tick.get() {
            self.write(t, &(n as u32).to_le_bytes());
        }
        if let Some((watched_addr, nth)) = self.watch.get() {
            if watched_addr.is_none_or(|a| a == addr) {
                self.watched.set(self.watched.get() + 1);
                if self.watched.get() == nth {
                    for (at, bytes) in self.pending.borrow().iter() {
                        self.write(*at, bytes);
                    }
                }
            }
        }
        let regions = self.regions.borrow();
        let Some((start, data)) = regions.range(..=addr).next_back() else { return false };
        let off = (addr - start) as usize;
        match data.get(off..off + buf.len()) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

impl ReadMem for &FakeMem {
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        (**self).read(addr, buf)
    }
}

impl FakeMem {
    /// Places `data` at a fresh address, padded to whole pages (memory is readable page by page), with an unmapped
    /// page after it.
    pub fn put(&self, mut data: Vec<u8>) -> u64 {
        data.resize(data.len().div_ceil(PAGE).max(1) * PAGE, 0);
        let at = self.next.get().max(FIRST);
        self.next.set(at + (data.len() + PAGE) as u64);
        self.regions.borrow_mut().insert(at, data);
        at
    }

    /// `size` zero bytes at a fresh address, as [`Self::put`].
    pub fn zeros(&self, size: usize) -> u64 {
        self.put(vec![0u8; size])
    }

    /// `data` at `at` (the top of the address space, say), as it is.
    pub fn put_at(&self, at: u64, data: Vec<u8>) {
        self.regions.borrow_mut().insert(at, data);
    }

    /// A copy of the region that starts at `start`.
    pub fn region(&self, start: u64) -> Vec<u8> {
        self.regions.borrow()[&start].clone()
    }

    /// Overwrites mapped bytes at `at` (what the program writes; panics where nothing is mapped).
    pub fn write(&self, at: u64, bytes: &[u8]) {
        let mut regions = self.regions.borrow_mut();
        let (start, data) = regions.range_mut(..=at).next_back().expect("mapped");
        let off = (at - start) as usize;
        data[off..off + bytes.len()].copy_from_slice(bytes);
    }

    /// `bytes` at field offset `off` of the object at `at`.
    pub fn set(&self, at: u64, off: i32, bytes: &[u8]) {
        assert!(off >= 0, "writing an absent field");
        self.write(at + off as u64, bytes);
    }

    pub fn u64(&self, at: u64, off: i32, v: u64) {
        self.set(at, off, &v.to_le_bytes());
    }

    pub fn u32(&self, at: u64, off: i32, v: u32) {
        self.set(at, off, &v.to_le_bytes());
    }

    /// The word at `at`, read without counting.
    pub fn get_u64(&self, at: u64) -> u64 {
        let regions = self.regions.borrow();
        let (start, data) = regions.range(..=at).next_back().expect("mapped");
        let off = (at - start) as usize;
        u64::from_le_bytes(data[off..off + 8].try_into().expect("8 bytes"))
    }
}

/// A process of version `version` read with `row` at `addrs`; pid 1, no file behind it.
pub fn process(version: (u8, u8, u8), row: &'static Row, addrs: PythonAddrs) -> PythonProcess {
    PythonProcess {
        pid: 1,
        version,
        interpreter: PathBuf::from("/x"),
        executable: PathBuf::from("/x"),
        build_id: None,
        cmdline: Vec::new(),
        load_bias: 0,
        addrs,
        row,
    }
}
