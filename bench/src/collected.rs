//! The engine's output as the bench keeps it: checked, compact, and kept off the clock.
//!
//! The bench must hold every pair the engine wrote to check the output contract and to
//! compare final states, but that copy is not the engine's state. Its changes are taken
//! by value as they leave the dataflow and applied after the batch's clock stops, into a
//! map keyed by integers whose size is known, so it can be taken out of the memory figure.

use std::collections::HashMap;
use std::mem::size_of;

use dataflows::model::{CampaignId, SellerId};
use dataflows::reference::{apply_changes, PairState, PairStore};
use dataflows::{PairChange, PairFigures, PairKey};
use differential_dataflow::Hashable;

/// Pairs keyed by (seller, 64-bit hash of the campaign id), as the engine counts them.
type Key = (SellerId, u64);

/// What one worker collected of the engine's output.
#[derive(Default)]
pub struct CollectedPairs {
    /// Changes out of the dataflow, not yet applied.
    pending: Vec<PairChange>,
    figures: HashMap<Key, PairFigures>,
    campaign_ids: HashMap<u64, CampaignId>,
    /// The first breach of the output contract.
    problem: Option<String>,
}

impl CollectedPairs {
    /// Takes a container of changes as the dataflow hands it over.
    pub fn receive(&mut self, changes: &mut Vec<PairChange>) {
        self.pending.append(changes);
    }

    /// Applies what arrived since the last call, checking the output contract.
    pub fn apply_pending(&mut self) {
        let mut pending = std::mem::take(&mut self.pending);
        if self.problem.is_none() {
            if let Err(problem) = apply_changes(self, &pending) {
                self.problem = Some(problem);
            }
        }
        // Handed back empty so the next batch reuses its allocation.
        pending.clear();
        self.pending = pending;
    }

    /// Bytes the pair map has allocated: hashbrown's buckets, each an entry and a control byte.
    pub fn footprint_bytes(&self) -> u64 {
        let capacity = self.figures.capacity();
        if capacity == 0 {
            return 0;
        }
        let buckets = (capacity * 8 / 7).next_power_of_two();
        (buckets * (size_of::<(Key, PairFigures)>() + 1)) as u64
    }

    /// The pairs, or the first breach of the output contract.
    pub fn into_pairs(self) -> Result<PairState, String> {
        if let Some(problem) = self.problem {
            return Err(problem);
        }
        let ids = self.campaign_ids;
        Ok(self
            .figures
            .into_iter()
            .map(|((seller_id, tag), figures)| {
                let campaign_id = ids[&tag].clone();
                (PairKey { seller_id, campaign_id }, figures)
            })
            .collect())
    }

    fn key(&mut self, pair: &PairKey) -> Key {
        let tag = pair.campaign_id.hashed();
        self.campaign_ids.entry(tag).or_insert_with(|| pair.campaign_id.clone());
        (pair.seller_id, tag)
    }
}

impl PairStore for CollectedPairs {
    fn put(&mut self, pair: &PairKey, figures: PairFigures) -> Option<PairFigures> {
        let key = self.key(pair);
        self.figures.insert(key, figures)
    }

    fn take(&mut self, pair: &PairKey) -> Option<PairFigures> {
        let key = self.key(pair);
        self.figures.remove(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(seller_id: u64, campaign: &str, figures: Option<u64>, previous: Option<u64>) -> PairChange {
        let figures_of = |products: u64| PairFigures {
            eligible_products: products,
            eligible_stock: products * 10,
        };
        PairChange {
            time: 1,
            pair: PairKey {
                seller_id,
                campaign_id: campaign.to_owned(),
            },
            figures: figures.map(figures_of),
            previous: previous.map(figures_of),
        }
    }

    #[test]
    fn applies_changes_and_returns_the_pairs_with_their_ids() {
        let mut collected = CollectedPairs::default();
        collected.receive(&mut vec![change(1, "a", Some(2), None), change(2, "b", Some(1), None)]);
        collected.apply_pending();
        collected.receive(&mut vec![
            change(1, "a", Some(3), Some(2)),
            change(2, "b", None, Some(1)),
        ]);
        collected.apply_pending();
        assert!(collected.footprint_bytes() >= size_of::<(Key, PairFigures)>() as u64);
        let pairs = collected.into_pairs().expect("the changes keep the contract");
        let only: Vec<_> = pairs
            .iter()
            .map(|(pair, f)| (pair.document_id(), f.eligible_products))
            .collect();
        assert_eq!(only, vec![("a:1".to_owned(), 3)]);
    }

    #[test]
    fn reports_a_breach_of_the_contract() {
        let mut collected = CollectedPairs::default();
        collected.receive(&mut vec![change(1, "a", None, Some(1))]);
        collected.apply_pending();
        let problem = collected.into_pairs().expect_err("a delete of a missing pair");
        assert!(problem.contains("does not exist"), "{problem}");
    }
}
