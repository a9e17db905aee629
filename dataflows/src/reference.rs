//! A brute-force reference: the current entities in maps, pairs recounted from scratch.
//!
//! Tests compare the dataflow against it, and benchmarks use it to check that every
//! implementation agrees. It checks every product against every campaign, so it is only
//! meant for small inputs.

use std::collections::BTreeMap;

use crate::decode::Change;
use crate::model::{Campaign, PairChange, PairFigures, PairKey, Product, Time};
use crate::rule::{is_eligible, NO_ANCESTORS};

/// Every existing pair with its figures.
pub type PairState = BTreeMap<PairKey, PairFigures>;

/// The current products and campaigns, by id.
#[derive(Clone, Debug, Default)]
pub struct ReferenceState {
    pub products: BTreeMap<String, Product>,
    pub campaigns: BTreeMap<String, Campaign>,
}

impl ReferenceState {
    /// Applies one upsert or tombstone.
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
        }
    }

    /// Recounts every pair by checking every product against every campaign.
    pub fn pairs(&self) -> PairState {
        let mut pairs = PairState::new();
        for (campaign_id, campaign) in &self.campaigns {
            for product in self.products.values() {
                if is_eligible(product, NO_ANCESTORS, campaign) {
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
