//! Changelog records, and the last of several for one key within a logical time.
//!
//! Within one batch the last valid record for a key wins (SPEC.md). Records of one key and
//! time may reach an operator in any order (from several workers), so it keeps the record
//! with the greatest sequence number the source gave it (its line number or Kafka offset).

use std::collections::hash_map::Entry;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::hashing::FastMap;

/// One changelog record for the dataflow: `value: None` is a tombstone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Upsert<K, V> {
    pub key: K,
    /// Order of the record in its source; the greatest wins within a time.
    pub seq: u64,
    pub value: Option<V>,
}

/// The records of one logical time, the last one per key.
pub struct LatestUpserts<K, V> {
    latest: FastMap<K, (u64, Option<V>)>,
}

impl<K: Hash + Eq, V> Default for LatestUpserts<K, V> {
    fn default() -> Self {
        LatestUpserts {
            latest: FastMap::default(),
        }
    }
}

impl<K: Hash + Eq, V> LatestUpserts<K, V> {
    /// Keeps `update` unless a later record for its key is already here.
    pub fn offer(&mut self, update: Upsert<K, V>) {
        match self.latest.entry(update.key) {
            Entry::Occupied(mut held) => {
                if held.get().0 < update.seq {
                    held.insert((update.seq, update.value));
                }
            }
            Entry::Vacant(slot) => {
                slot.insert((update.seq, update.value));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    pub fn len(&self) -> usize {
        self.latest.len()
    }

    /// Gives back the room beyond what `records` (a time's count) needs, with a floor, so
    /// that a map reused after a large time is not drained bucket by bucket at every small one.
    pub fn shrink_for(&mut self, records: usize) {
        let room = 2 * records.max(4_096);
        if self.latest.capacity() > 2 * room {
            self.latest.shrink_to(room);
        }
    }

    /// Whether any winning record's value (`None`: a tombstone) meets `test`.
    pub fn any_value(&self, mut test: impl FnMut(Option<&V>) -> bool) -> bool {
        self.latest.values().any(|(_seq, value)| test(value.as_ref()))
    }

    /// The winning records, in no particular order.
    pub fn into_latest(self) -> impl Iterator<Item = (K, Option<V>)> {
        self.latest.into_iter().map(|(key, (_seq, value))| (key, value))
    }

    /// The winning records, in no particular order, keeping the allocation for reuse: a
    /// rebuild's times each hold a chunk of 100,000 records.
    pub fn drain_latest(&mut self) -> impl Iterator<Item = (K, Option<V>)> + '_ {
        self.latest.drain().map(|(key, (_seq, value))| (key, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_greatest_sequence_number_wins_in_any_arrival_order() {
        let mut latest = LatestUpserts::default();
        for (seq, value) in [(3, Some("c")), (1, Some("a")), (5, None), (4, Some("d"))] {
            latest.offer(Upsert { key: "k", seq, value });
        }
        latest.offer(Upsert {
            key: "other",
            seq: 0,
            value: Some("x"),
        });
        let mut winners: Vec<_> = latest.into_latest().collect();
        winners.sort();
        assert_eq!(winners, vec![("k", None), ("other", Some("x"))]);
    }
}
