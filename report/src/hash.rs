//! A small, fast, deterministic hasher for integer keys (the rustc "Fx" hash), for the dense ids the report makes
//! or the file numbers densely (stack nodes, symbols, thread slots). It is not keyed: keys a crafted file chooses
//! freely from a wide range (names, pids, tids) could be picked to collide and make a table quadratic, so those go
//! in std's `HashMap` (SipHash, randomly keyed) instead.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Default, Clone, Copy)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The high bits of a product are the well mixed ones, and hash tables index by the low bits: without the
        // rotation, keys that differ only above their low bits (ids k << 20) would all fall in one bucket (as
        // rustc-hash 2 does).
        self.hash.rotate_left(26)
    }
}

pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
