//! The matching stacks merged into one tree of frames as a report shows them (root first): the shape behind folded
//! stacks and flame graphs.
//!
//! A stack in a recording is a leaf node of the file's stack table (a tree of (parent, symbol) nodes). Several
//! nodes can look the same in a report (lines dropped, two symbols with one name, the same stack on two threads
//! without thread roots), so the tree is built over *labels*: a child per distinct label under each parent.
//!
//! Cost is linear: each file node is resolved once per root context (process / thread / stack-status marker) and
//! memoised, so a crafted file of one 20,000-frame chain with a sample at every depth costs 20,000 steps, not the
//! 200 million of naming every stack from its leaf. Memory is one entry per tree node and per visited file node.

use std::cmp::Ordering;

use crate::folded;
use crate::hash::FxMap;
use crate::names;
use crate::profile::Profile;

/// One distinct frame text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// As every exporter names it (see [`names`]): `function (file:line)`, `[idle]`, `python3.11 [pid 12]`, ...
    /// Not escaped: each exporter escapes for its own format.
    pub text: String,
    /// A symbol shown under this label (the first one met), for exporters that show more (the full path);
    /// `None` for pseudo-frames, process and thread roots.
    pub symbol: Option<u32>,
}

/// A node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Index into [`Tree::labels`].
    pub label: u32,
    /// Parent node; the root is its own parent.
    pub parent: u32,
    /// Samples whose stack ends here.
    pub self_count: u64,
    /// Samples whose stack passes through here (self included).
    pub total: u64,
    /// Depth: 0 for the root, 1 for the outermost frames.
    pub depth: u32,
}

/// The merged stacks. Node 0 is an unnamed root above every stack.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// Distinct frame texts.
    pub labels: Vec<Label>,
    /// Node 0 is the root.
    pub nodes: Vec<Node>,
    /// Children of node `i`: `children[child_start[i]..child_start[i + 1]]`, ordered by label text.
    child_start: Vec<u32>,
    children: Vec<u32>,
}

/// The root node.
pub const ROOT: u32 = 0;

impl Tree {
    /// Merges the profile's matching stacks as `options` shows them (lines, process and thread roots).
    pub fn build(profile: &Profile, options: &folded::Options) -> Tree {
        let mut b = Builder::new();
        let tables = &profile.tables;
        // Label of each symbol, resolved once.
        let mut symbol_label: Vec<u32> = vec![u32::MAX; tables.symbols.len()];
        let mut process_label: FxMap<u32, u32> = FxMap::default();
        let mut thread_label: FxMap<u32, u32> = FxMap::default();
        let mut marker_label: FxMap<u8, u32> = FxMap::default();
        // (root context node, file stack node) -> tree node.
        let mut memo: FxMap<(u32, u32), u32> = FxMap::default();
        let mut path: Vec<u32> = Vec::new();

        for s in &profile.stacks {
            let thread = profile.threads.get(s.thread as usize);
            let mut at = ROOT;
            if options.pid_root {
                let label = match thread {
                    Some(t) => *process_label
                        .entry(t.pid)
                        .or_insert_with(|| b.label(profile.process_label(t.pid), None)),
                    None => *process_label
                        .entry(u32::MAX)
                        .or_insert_with(|| b.label(folded::ALL_PROCESSES.to_string(), None)),
                };
                at = b.child(at, label);
            }
            if options.tid_root {
                let label = *thread_label.entry(s.thread).or_insert_with(|| match thread {
                    Some(t) => b.label(profile.thread_label(t), None),
                    None => b.label(folded::ALL_THREADS.to_string(), None),
                });
                at = b.child(at, label);
            }
            if let Some(m) = names::marker(s.status, s.leaf != 0) {
                let label = *marker_label.entry(s.status.as_u8()).or_insert_with(|| b.label(m, None));
                at = b.child(at, label);
            }
            let context = at;

            // Walk up to the first node already placed under this context, then place the rest going down.
            path.clear();
            let mut node = s.leaf;
            let mut top = context;
            while node != 0 {
                if let Some(&placed) = memo.get(&(context, node)) {
                    top = placed;
                    break;
                }
                path.push(node);
                node = tables.nodes[node as usize - 1].0;
            }
            let mut at = top;
            for &n in path.iter().rev() {
                let sym = tables.nodes[n as usize - 1].1;
                let label = match symbol_label[sym as usize] {
                    u32::MAX => {
                        let l = b.label(names::frame_name(tables.symbol(sym), options.lines), Some(sym));
                        symbol_label[sym as usize] = l;
                        l
                    }
                    l => l,
                };
                at = b.child(at, label);
                memo.insert((context, n), at);
            }
            b.nodes[at as usize].self_count += s.count;
        }
        b.finish()
    }

    /// The children of `node`, ordered by label text (byte order).
    pub fn children(&self, node: u32) -> &[u32] {
        let (a, b) = (self.child_start[node as usize], self.child_start[node as usize + 1]);
        &self.children[a as usize..b as usize]
    }

    /// The node's label.
    pub fn label(&self, node: u32) -> &Label {
        &self.labels[self.nodes[node as usize].label as usize]
    }

    /// Samples in the whole tree.
    pub fn total(&self) -> u64 {
        self.nodes[ROOT as usize].total
    }

    /// Deepest node's depth.
    pub fn max_depth(&self) -> u32 {
        self.nodes.iter().map(|n| n.depth).max().unwrap_or(0)
    }

    /// Visits every node below the root depth first, children in label order: `visit(node, true)` before a node's
    /// children, `visit(node, false)` after them. Iterative: depth is bounded only by memory, never by the call
    /// stack.
    pub fn walk(&self, mut visit: impl FnMut(u32, bool)) {
        // (node, index of the next child to visit)
        let mut stack: Vec<(u32, u32)> = vec![(ROOT, 0)];
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            let kids = self.children(node);
            if (next as usize) < kids.len() {
                top.1 += 1;
                let child = kids[next as usize];
                visit(child, true);
                stack.push((child, 0));
            } else {
                stack.pop();
                if node != ROOT {
                    visit(node, false);
                }
            }
        }
    }
}

struct Builder {
    labels: Vec<Label>,
    label_ids: FxMap<String, u32>,
    nodes: Vec<Node>,
    child_of: FxMap<(u32, u32), u32>,
}

impl Builder {
    fn new() -> Builder {
        Builder {
            labels: Vec::new(),
            label_ids: FxMap::default(),
            nodes: vec![Node { label: u32::MAX, parent: ROOT, self_count: 0, total: 0, depth: 0 }],
            child_of: FxMap::default(),
        }
    }

    fn label(&mut self, text: String, symbol: Option<u32>) -> u32 {
        if let Some(&id) = self.label_ids.get(&text) {
            return id;
        }
        let id = self.labels.len() as u32;
        self.label_ids.insert(text.clone(), id);
        self.labels.push(Label { text, symbol });
        id
    }

    fn child(&mut self, parent: u32, label: u32) -> u32 {
        let next = self.nodes.len() as u32;
        let id = *self.child_of.entry((parent, label)).or_insert(next);
        if id == next {
            let depth = self.nodes[parent as usize].depth + 1;
            self.nodes.push(Node { label, parent, self_count: 0, total: 0, depth });
        }
        id
    }

    fn finish(self) -> Tree {
        let Builder { labels, mut nodes, child_of, .. } = self;
        drop(child_of);
        // Totals: children always come after their parent, so one backward pass adds each subtree up.
        for i in (0..nodes.len()).rev() {
            nodes[i].total += nodes[i].self_count;
            if i != 0 {
                let (parent, total) = (nodes[i].parent as usize, nodes[i].total);
                nodes[parent].total += total;
            }
        }
        // Children lists (counting sort by parent), each ordered by label text.
        let mut child_start = vec![0u32; nodes.len() + 1];
        for n in nodes.iter().skip(1) {
            child_start[n.parent as usize + 1] += 1;
        }
        for i in 1..child_start.len() {
            child_start[i] += child_start[i - 1];
        }
        let mut fill = child_start.clone();
        let mut children = vec![0u32; nodes.len().saturating_sub(1)];
        for (i, n) in nodes.iter().enumerate().skip(1) {
            let slot = &mut fill[n.parent as usize];
            children[*slot as usize] = i as u32;
            *slot += 1;
        }
        let text = |n: u32| labels[nodes[n as usize].label as usize].text.as_str();
        for w in child_start.windows(2) {
            children[w[0] as usize..w[1] as usize].sort_unstable_by(|&a, &b| match text(a).cmp(text(b)) {
                Ordering::Equal => a.cmp(&b),
                o => o,
            });
        }
        Tree { labels, nodes, child_start, children }
    }
}
