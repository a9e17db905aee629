//! The category tree of a generated marketplace: its shape, and where the Zipf ranks land.
//!
//! The `categories` ids `0..n` are laid out level by level, as in a heap with `roots`
//! roots: id `i >= roots` has parent `(i - roots) / fanout`. The number of roots is the
//! least that fits `n` ids into `depth` levels, so the tree is `depth` levels deep (the
//! last one partly filled). Every edge joins a level to the one above it, and the moves
//! the generator makes keep it so (a node only ever gets a parent one level up), so the
//! tree never gets a cycle and never grows deeper than `depth`.
//!
//! Products and campaigns draw a category by popularity rank (Zipf); with a tree, rank
//! `r` names `by_rank[r]`: the leaves, shuffled, take the popular ranks and the inner
//! nodes the tail, so most products sit on leaves and a few on inner nodes, as on a
//! marketplace where sellers mostly pick the most specific category.

use rand::seq::SliceRandom;
use rand::Rng;

use dataflows::model::CategoryId;

pub struct Tree {
    /// The parent each node has now; `None` for a root (or a node whose record was
    /// deleted).
    pub parent: Vec<Option<CategoryId>>,
    /// Whether the node's record is deleted (a tombstone was written last).
    pub deleted: Vec<bool>,
    /// Each node's level in the initial tree: 0 for the roots.
    pub level: Vec<u32>,
    /// The nodes of each level.
    pub by_level: Vec<Vec<CategoryId>>,
    /// Nodes with children in the initial tree, roots among them.
    pub inner: Vec<CategoryId>,
    /// The category of each popularity rank.
    pub by_rank: Vec<CategoryId>,
}

impl Tree {
    /// The tree of `n` categories, `depth >= 1` levels deep, each inner node with up to
    /// `fanout` children; `rng` shuffles which category gets which popularity rank.
    pub fn new<R: Rng>(n: u64, depth: u32, fanout: u64, rng: &mut R) -> Tree {
        let n = n.max(1);
        let roots = roots(n, depth, fanout);
        let fanout = fanout.max(1);
        let parent: Vec<Option<CategoryId>> = (0..n).map(|id| (id >= roots).then(|| (id - roots) / fanout)).collect();
        let mut level = vec![0u32; n as usize];
        for id in roots..n {
            level[id as usize] = level[parent[id as usize].expect("below the roots") as usize] + 1;
        }
        let levels = level.iter().max().map_or(1, |deepest| deepest + 1);
        let mut by_level = vec![Vec::new(); levels as usize];
        for id in 0..n {
            by_level[level[id as usize] as usize].push(id);
        }
        let mut has_children = vec![false; n as usize];
        for p in parent.iter().flatten() {
            has_children[*p as usize] = true;
        }
        let inner: Vec<CategoryId> = (0..n).filter(|id| has_children[*id as usize]).collect();
        let mut leaves: Vec<CategoryId> = (0..n).filter(|id| !has_children[*id as usize]).collect();
        let mut tail = inner.clone();
        leaves.shuffle(rng);
        tail.shuffle(rng);
        leaves.extend(tail);
        Tree {
            parent,
            deleted: vec![false; n as usize],
            level,
            by_level,
            inner,
            by_rank: leaves,
        }
    }

    pub fn len(&self) -> u64 {
        self.parent.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }

    pub fn roots(&self) -> &[CategoryId] {
        &self.by_level[0]
    }

    /// The category record's value as the generator writes it: `{"parent_id": …}`.
    pub fn value(&self, id: CategoryId) -> String {
        if self.deleted[id as usize] {
            return "null".to_owned();
        }
        category_value(self.parent[id as usize])
    }
}

/// How many roots it takes for `n` nodes to fit in `depth` levels of `fanout` children.
pub fn roots(n: u64, depth: u32, fanout: u64) -> u64 {
    let fanout = fanout.max(1);
    let mut per_tree: u64 = 0;
    let mut level_size: u64 = 1;
    for _ in 0..depth.max(1) {
        per_tree = per_tree.saturating_add(level_size);
        level_size = level_size.saturating_mul(fanout);
    }
    n.max(1).div_ceil(per_tree.max(1))
}

/// A category value: `{"parent_id": 10}`, or `{"parent_id": null}` for a root.
pub fn category_value(parent_id: Option<CategoryId>) -> String {
    match parent_id {
        Some(parent) => format!(r#"{{"parent_id": {parent}}}"#),
        None => r#"{"parent_id": null}"#.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn depth_of(tree: &Tree, mut id: CategoryId) -> u32 {
        let mut depth = 0;
        while let Some(parent) = tree.parent[id as usize] {
            id = parent;
            depth += 1;
        }
        depth
    }

    #[test]
    fn the_tree_has_the_asked_depth_and_fanout() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // 1 + 3 + 9 + 27 + 81 = 121 a tree: 1,000 ids take 9 roots.
        let tree = Tree::new(1_000, 5, 3, &mut rng);
        assert_eq!(tree.roots().len(), 9);
        assert_eq!(tree.by_level.len(), 5);
        assert_eq!(
            tree.by_level.iter().map(Vec::len).collect::<Vec<_>>(),
            [9, 27, 81, 243, 640]
        );
        for id in 0..1_000 {
            assert_eq!(depth_of(&tree, id), tree.level[id as usize]);
        }
        let mut children = vec![0; 1_000];
        for parent in tree.parent.iter().flatten() {
            children[*parent as usize] += 1;
        }
        assert!(children.iter().all(|count| *count <= 3));
        assert_eq!(tree.inner.len(), children.iter().filter(|count| **count > 0).count());
        // Every category has one rank, the leaves the first ones.
        let mut ranked = tree.by_rank.clone();
        ranked.sort_unstable();
        assert_eq!(ranked, (0..1_000).collect::<Vec<_>>());
        let leaves = 1_000 - tree.inner.len();
        assert!(tree.by_rank[..leaves].iter().all(|id| children[*id as usize] == 0));
    }

    #[test]
    fn small_and_degenerate_shapes() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // One level: roots only.
        let tree = Tree::new(10, 1, 4, &mut rng);
        assert_eq!(tree.roots().len(), 10);
        assert!(tree.inner.is_empty());
        // Fan-out 1: chains of `depth` nodes.
        let tree = Tree::new(10, 5, 1, &mut rng);
        assert_eq!(tree.roots().len(), 2);
        assert_eq!(tree.by_level.len(), 5);
        // Fewer ids than one full tree: one root, the levels as deep as the ids reach.
        let tree = Tree::new(5, 5, 3, &mut rng);
        assert_eq!(tree.roots(), [0]);
        assert_eq!(tree.by_level.iter().map(Vec::len).collect::<Vec<_>>(), [1, 3, 1]);
        assert_eq!(roots(u64::MAX, 64, u64::MAX), 1);
    }
}
