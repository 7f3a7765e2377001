//! `contextvars` read from outside: a context's variables are a HAMT (hamt.c), an immutable mapping of
//! `ContextVar` objects to their values, whose nodes are bitmap nodes (up to 16 pairs; a pair with a NULL key holds
//! a sub-node), array nodes (32 sub-nodes) and collision nodes (pairs of keys whose 32-bit hashes are equal).

use super::objects::{at, Objects};
use crate::mem::ReadMem;

/// Levels of a HAMT: 32-bit hashes, 5 bits a level.
const MAX_DEPTH: u32 = 7;

/// What a walk of a HAMT found: its items, and the addresses of the node types it met.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HamtItems {
    /// (key, value) of every item.
    pub items: Vec<(u64, u64)>,
    /// The type of its bitmap nodes (`hamt_bitmap_node`).
    pub bitmap_type: Option<u64>,
    /// The type of its array nodes (`hamt_array_node`).
    pub array_type: Option<u64>,
}

/// The items of the HAMT object `hamt` (a context's `ctx_vars`), at most `max`; `None` when it is no HAMT (a node
/// whose type is not one of the three) or cannot be read.
pub fn hamt_items<M: ReadMem>(objs: &mut Objects<'_, M>, hamt: u64, max: usize) -> Option<HamtItems> {
    let l = objs.row().layout;
    let root = objs.u64_at(at(hamt, l.hamt_root)?)?;
    let mut out = HamtItems::default();
    node(objs, root, 0, max, &mut out)?;
    Some(out)
}

fn node<M: ReadMem>(objs: &mut Objects<'_, M>, n: u64, depth: u32, max: usize, out: &mut HamtItems) -> Option<()> {
    if depth > MAX_DEPTH || out.items.len() > max {
        return None;
    }
    let l = objs.row().layout;
    let t = objs.type_of(n)?;
    let name = objs.type_name(&t)?;
    match name.as_str() {
        "hamt_bitmap_node" | "hamt_collision_node" => {
            if name == "hamt_bitmap_node" {
                out.bitmap_type = Some(t.addr);
            }
            // ob_size: the pairs' slots (2 a pair); the pairs at b_array / c_array (the same place).
            let size = objs.u64_at(at(n, l.bytes_size)?)? as i64;
            if !(0..=64).contains(&size) {
                return None;
            }
            let pairs = objs.bytes(at(n, l.hamt_bitmap_array)?, 8 * size as usize)?;
            for kv in pairs.chunks_exact(16) {
                let k = u64::from_le_bytes(kv[..8].try_into().ok()?);
                let v = u64::from_le_bytes(kv[8..].try_into().ok()?);
                if k == 0 {
                    if name != "hamt_bitmap_node" || v == 0 {
                        return None;
                    }
                    node(objs, v, depth + 1, max, out)?;
                } else {
                    out.items.push((k, v));
                }
            }
        }
        "hamt_array_node" => {
            out.array_type = Some(t.addr);
            let children = objs.bytes(at(n, l.hamt_array)?, 32 * 8)?;
            for c in children.chunks_exact(8) {
                let c = u64::from_le_bytes(c.try_into().ok()?);
                if c != 0 {
                    node(objs, c, depth + 1, max, out)?;
                }
            }
        }
        _ => return None,
    }
    Some(())
}

/// A `ContextVar`'s hash as the HAMT files it: its 64-bit hash folded to 32 bits (hamt.c, `hamt_hash`).
pub fn var_hash32<M: ReadMem>(objs: &Objects<'_, M>, var: u64) -> Option<u32> {
    let h = objs.u64_at(at(var, objs.row().layout.contextvar_hash)?)?;
    let xored = (h as u32) ^ ((h >> 32) as u32);
    Some(if xored == u32::MAX { u32::MAX - 1 } else { xored })
}

/// The name of `ContextVar` `var` (`None`: not a `ContextVar`).
pub fn var_name<M: ReadMem>(objs: &mut Objects<'_, M>, var: u64) -> Option<String> {
    let t = objs.type_of(var)?;
    if !objs.type_name(&t)?.ends_with("ContextVar") {
        return None;
    }
    let name = objs.u64_at(at(var, objs.row().layout.contextvar_name)?)?;
    objs.str_value(name, 256).map(|(s, _)| s)
}
