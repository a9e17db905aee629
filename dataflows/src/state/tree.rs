//! The category tree as every worker holds it: each category's ancestors and descendants.
//!
//! The dataflow computes the ancestor relation ([`ancestor_changes`]) and broadcasts its
//! changes; each worker keeps it both ways. A product meets campaigns through the ancestors
//! of its category (the campaign table keeps a copy in each category's entry, so that the
//! hot path finds them in the lookup it makes anyway), and a campaign meets products
//! through the descendants of the categories it names. Only strict pairs are kept: a category is always its own ancestor,
//! and a category no record places under another costs nothing. With no `categories`
//! records at all, both maps stay empty and the matcher does exactly what it does flat.
//!
//! Categories are a small dimension (thousands to a hundred thousand), each with a few
//! ancestors, so every worker holding all of them is cheap beside its products.
//!
//! [`ancestor_changes`]: crate::operators::ancestors::ancestor_changes

use crate::hashing::{FastMap, FastSet};
use crate::model::CategoryId;

#[derive(Default)]
pub struct CategoryTree {
    /// The strict ancestors of every category that has any, sorted: a few per category.
    ancestors: FastMap<CategoryId, Vec<CategoryId>>,
    /// The strict descendants of every category that has any: a set, as a top-level
    /// category may have most categories under it.
    descendants: FastMap<CategoryId, FastSet<CategoryId>>,
}

/// A category whose ancestors changed at a time: strict ancestors before and after, sorted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    pub category: CategoryId,
    pub before: Vec<CategoryId>,
    pub after: Vec<CategoryId>,
}

impl Moved {
    /// The ancestors the category lost or gained.
    pub fn changed_ancestors(&self) -> Vec<CategoryId> {
        let (mut before, mut after) = (self.before.iter().peekable(), self.after.iter().peekable());
        let mut changed = Vec::new();
        loop {
            match (before.peek(), after.peek()) {
                (Some(b), Some(a)) if b == a => {
                    before.next();
                    after.next();
                }
                (Some(b), Some(a)) if b < a => changed.extend(before.next()),
                (Some(_), Some(_)) => changed.extend(after.next()),
                (Some(_), None) => changed.extend(before.next()),
                (None, Some(_)) => changed.extend(after.next()),
                (None, None) => return changed,
            }
        }
    }
}

impl CategoryTree {
    /// Whether no category has an ancestor but itself: the flat case.
    pub fn is_empty(&self) -> bool {
        self.ancestors.is_empty()
    }

    /// The ancestors of `category` besides itself, sorted.
    pub fn ancestors(&self, category: CategoryId) -> &[CategoryId] {
        self.ancestors.get(&category).map_or(&[], Vec::as_slice)
    }

    /// The descendants of `category` besides itself, in no order.
    pub fn descendants(&self, category: CategoryId) -> impl Iterator<Item = CategoryId> + '_ {
        self.descendants.get(&category).into_iter().flatten().copied()
    }

    /// Applies one time's changes of the relation, each (category, strict ancestor) with
    /// its net count (+1 added, -1 removed), and returns the categories whose ancestors
    /// changed, with their ancestors before and after.
    pub fn apply(&mut self, changes: impl IntoIterator<Item = ((CategoryId, CategoryId), isize)>) -> Vec<Moved> {
        let mut by_category: FastMap<CategoryId, (Vec<CategoryId>, Vec<CategoryId>)> = FastMap::default();
        for ((category, ancestor), diff) in changes {
            debug_assert!((-1..=1).contains(&diff), "the relation is a set: {diff}");
            debug_assert_ne!(category, ancestor, "only strict pairs");
            let (added, removed) = by_category.entry(category).or_default();
            match diff.signum() {
                1 => added.push(ancestor),
                -1 => removed.push(ancestor),
                _ => {}
            }
        }
        let mut moved = Vec::with_capacity(by_category.len());
        for (category, (added, mut removed)) in by_category {
            let before = self.ancestors.remove(&category).unwrap_or_default();
            removed.sort_unstable();
            let mut after: Vec<CategoryId> = before
                .iter()
                .copied()
                .filter(|ancestor| removed.binary_search(ancestor).is_err())
                .collect();
            debug_assert_eq!(after.len() + removed.len(), before.len(), "removed pairs exist");
            after.extend(&added);
            after.sort_unstable();
            after.dedup();
            for ancestor in &removed {
                if let Some(descendants) = self.descendants.get_mut(ancestor) {
                    descendants.remove(&category);
                    if descendants.is_empty() {
                        self.descendants.remove(ancestor);
                    }
                }
            }
            for ancestor in &added {
                self.descendants.entry(*ancestor).or_default().insert(category);
            }
            if !after.is_empty() {
                self.ancestors.insert(category, after.clone());
            }
            if before != after {
                moved.push(Moved {
                    category,
                    before,
                    after,
                });
            }
        }
        moved
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descendants(tree: &CategoryTree, category: CategoryId) -> Vec<CategoryId> {
        let mut descendants: Vec<_> = tree.descendants(category).collect();
        descendants.sort();
        descendants
    }

    #[test]
    fn both_directions_follow_the_changes() {
        let mut tree = CategoryTree::default();
        assert!(tree.is_empty());
        // 3 under 2 under 1.
        let moved = tree.apply([((3, 2), 1), ((3, 1), 1), ((2, 1), 1)]);
        assert_eq!(moved.len(), 2);
        assert_eq!(tree.ancestors(3), &[1, 2]);
        assert_eq!(tree.ancestors(1), &[] as &[CategoryId]);
        assert_eq!(descendants(&tree, 1), vec![2, 3]);
        // 3 moves under 4: it loses 2 and 1.
        let mut moved = tree.apply([((3, 2), -1), ((3, 1), -1), ((3, 4), 1), ((3, 5), 0)]);
        assert_eq!(
            moved.pop(),
            Some(Moved {
                category: 3,
                before: vec![1, 2],
                after: vec![4],
            })
        );
        assert_eq!(moved.pop(), None);
        assert_eq!(descendants(&tree, 1), vec![2]);
        assert_eq!(descendants(&tree, 4), vec![3]);
        assert!(
            !tree.descendants.contains_key(&2),
            "a category left without descendants is dropped"
        );
        tree.apply([((3, 4), -1), ((2, 1), -1)]);
        assert!(tree.is_empty());
        assert!(tree.descendants.is_empty());
    }

    #[test]
    fn changed_ancestors_are_the_symmetric_difference() {
        let moved = Moved {
            category: 9,
            before: vec![1, 2, 5, 7],
            after: vec![2, 3, 7, 8],
        };
        assert_eq!(moved.changed_ancestors(), vec![1, 3, 5, 8]);
    }
}
