//! A brute-force reference: the current entities in maps, pairs recounted from scratch.
//!
//! Tests compare the dataflow against it, and benchmarks use it to check that every
//! implementation agrees. It checks every product against every campaign, and finds a
//! category's ancestors by walking up its parents, so it is only meant for small inputs.

use std::collections::{BTreeMap, BTreeSet};

use crate::decode::{decode_category_id, Change};
use crate::instant::EpochNanos;
use crate::model::{Campaign, Category, CategoryId, PairChange, PairFigures, PairKey, Product, Time};
use crate::rule::is_eligible;

/// Every existing pair with its figures.
pub type PairState = BTreeMap<PairKey, PairFigures>;

/// The current products, campaigns and categories, by id, and the job's clock.
#[derive(Clone, Debug)]
pub struct ReferenceState {
    pub products: BTreeMap<String, Product>,
    pub campaigns: BTreeMap<String, Campaign>,
    pub categories: BTreeMap<CategoryId, Category>,
    /// What the clock reads: a campaign has pairs only while its window is open at it.
    pub clock: EpochNanos,
}

impl Default for ReferenceState {
    fn default() -> Self {
        ReferenceState {
            products: BTreeMap::new(),
            campaigns: BTreeMap::new(),
            categories: BTreeMap::new(),
            clock: EpochNanos::BEGINNING,
        }
    }
}

impl ReferenceState {
    /// Moves the clock to `millis` since the epoch; it never goes back.
    pub fn advance_clock(&mut self, millis: u64) {
        self.clock = self.clock.max(EpochNanos::from_millis(millis));
    }

    /// Applies one upsert or tombstone. A category's `key` must be a decoded one (decimal).
    pub fn apply(&mut self, key: &str, change: &Change) {
        match change {
            Change::Product(Some(product)) => {
                self.products.insert(key.to_owned(), *product);
            }
            Change::Product(None) => {
                self.products.remove(key);
            }
            Change::Campaign(Some(campaign)) => {
                self.campaigns.insert(key.to_owned(), campaign.clone());
            }
            Change::Campaign(None) => {
                self.campaigns.remove(key);
            }
            Change::Category(category) => {
                let id = decode_category_id(key).expect("a category record's key is a decoded category id");
                match category {
                    Some(category) => self.categories.insert(id, *category),
                    None => self.categories.remove(&id),
                };
            }
        }
    }

    /// The ancestors of `category` besides itself: every category reached by following
    /// `parent_id` from it, stopping where a category has no parent (no record, or a
    /// root's) or where the walk comes back to a category it passed (a cycle). On a cycle,
    /// `category` reaches itself, which is left out.
    pub fn ancestors(&self, category: CategoryId) -> BTreeSet<CategoryId> {
        let mut ancestors = BTreeSet::new();
        let mut at = category;
        while let Some(parent) = self.categories.get(&at).and_then(|node| node.parent_id) {
            if parent == category || !ancestors.insert(parent) {
                break;
            }
            at = parent;
        }
        ancestors
    }

    /// Recounts every pair by checking every product against every campaign.
    pub fn pairs(&self) -> PairState {
        let mut pairs = PairState::new();
        let mut ancestors: BTreeMap<CategoryId, Vec<CategoryId>> = BTreeMap::new();
        for product in self.products.values() {
            ancestors
                .entry(product.category_id)
                .or_insert_with(|| self.ancestors(product.category_id).into_iter().collect());
        }
        let open = self
            .campaigns
            .iter()
            .filter(|(_, campaign)| campaign.window.is_open_at(self.clock));
        for (campaign_id, campaign) in open {
            for product in self.products.values() {
                if is_eligible(product, &ancestors[&product.category_id], campaign) {
                    let figures = pairs
                        .entry(PairKey {
                            campaign_id: campaign_id.clone(),
                            seller_id: product.seller_id,
                        })
                        .or_insert(PairFigures {
                            eligible_products: 0,
                            eligible_stock: 0,
                        });
                    figures.eligible_products += 1;
                    figures.eligible_stock += u64::from(product.stock);
                }
            }
        }
        pairs
    }
}

/// The changes that turn `before` into `after`, sorted by pair, all at `time`.
pub fn changes_between(before: &PairState, after: &PairState, time: Time) -> Vec<PairChange> {
    let mut changes = Vec::new();
    for (pair, figures) in after {
        let previous = before.get(pair).copied();
        if previous != Some(*figures) {
            changes.push(PairChange {
                time,
                pair: pair.clone(),
                figures: Some(*figures),
                previous,
            });
        }
    }
    for (pair, figures) in before {
        if !after.contains_key(pair) {
            changes.push(PairChange {
                time,
                pair: pair.clone(),
                figures: None,
                previous: Some(*figures),
            });
        }
    }
    changes.sort();
    changes
}

/// Where `apply_changes` keeps the figures of every pair.
pub trait PairStore {
    /// Sets a pair's figures, returning the ones it replaced.
    fn put(&mut self, pair: &PairKey, figures: PairFigures) -> Option<PairFigures>;
    /// Removes a pair, returning its figures.
    fn take(&mut self, pair: &PairKey) -> Option<PairFigures>;
}

impl PairStore for PairState {
    fn put(&mut self, pair: &PairKey, figures: PairFigures) -> Option<PairFigures> {
        self.insert(pair.clone(), figures)
    }

    fn take(&mut self, pair: &PairKey) -> Option<PairFigures> {
        self.remove(pair)
    }
}

/// Applies changes to a pair state, checking the output contract on the way: an upsert
/// never repeats a pair's current figures and a delete never names a missing pair.
pub fn apply_changes<S: PairStore>(state: &mut S, changes: &[PairChange]) -> Result<(), String> {
    for change in changes {
        let current = match change.figures {
            Some(figures) => {
                if figures.eligible_products == 0 {
                    return Err(format!("upsert of a pair with no eligible products: {change:?}"));
                }
                let current = state.put(&change.pair, figures);
                if current == Some(figures) {
                    return Err(format!("upsert repeats the current figures: {change:?}"));
                }
                current
            }
            None => {
                let current = state.take(&change.pair);
                if current.is_none() {
                    return Err(format!("delete names a pair that does not exist: {change:?}"));
                }
                current
            }
        };
        if current != change.previous {
            return Err(format!(
                "change names previous figures {:?}, state held {current:?}",
                change.previous
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(edges: &[(CategoryId, Option<CategoryId>)]) -> ReferenceState {
        let mut state = ReferenceState::default();
        for (id, parent_id) in edges {
            state.apply(
                &id.to_string(),
                &Change::Category(Some(Category { parent_id: *parent_id })),
            );
        }
        state
    }

    fn ancestors(state: &ReferenceState, category: CategoryId) -> Vec<CategoryId> {
        state.ancestors(category).into_iter().collect()
    }

    #[test]
    fn ancestors_follow_parents_through_chains_cycles_and_missing_records() {
        // 4 -> 3 -> 2 -> 1 (root record); 9 -> 8 with no record for 8;
        // 5 -> 6 -> 7 -> 5 a cycle, and 10 -> 6 leading into it; 11 its own parent.
        let mut state = tree(&[
            (4, Some(3)),
            (3, Some(2)),
            (2, Some(1)),
            (1, None),
            (9, Some(8)),
            (5, Some(6)),
            (6, Some(7)),
            (7, Some(5)),
            (10, Some(6)),
            (11, Some(11)),
        ]);
        assert_eq!(ancestors(&state, 4), vec![1, 2, 3]);
        assert_eq!(ancestors(&state, 1), Vec::<CategoryId>::new());
        assert_eq!(ancestors(&state, 9), vec![8]);
        assert_eq!(ancestors(&state, 8), Vec::<CategoryId>::new(), "no record: a root");
        assert_eq!(ancestors(&state, 99), Vec::<CategoryId>::new(), "never named: a root");
        assert_eq!(ancestors(&state, 5), vec![6, 7]);
        assert_eq!(ancestors(&state, 7), vec![5, 6]);
        assert_eq!(ancestors(&state, 10), vec![5, 6, 7]);
        assert_eq!(ancestors(&state, 11), Vec::<CategoryId>::new());
        // A tombstone makes 2 a root: 4 keeps 3 and 2 only.
        state.apply("2", &Change::Category(None));
        assert_eq!(ancestors(&state, 4), vec![2, 3]);
    }
}
