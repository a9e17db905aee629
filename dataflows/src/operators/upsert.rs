//! Keeps, per key and logical time, only the last of several upserts.
//!
//! Within one batch the last valid record for a key wins (SPEC.md). Differential's
//! `arrange_from_upsert` breaks ties between updates at the same time by the greatest
//! value instead, so this operator resolves them first, by the sequence number the source
//! gave each record (its line number or Kafka offset). Records are exchanged by the hash
//! of their key, the same routing `arrange_from_upsert` uses, so no record moves twice.
//!
//! Invariant: for each (key, time) at most one update leaves, and only once the input
//! frontier has passed that time, so no later record for it can still arrive.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use differential_dataflow::{ExchangeData, Hashable};
use serde::{Deserialize, Serialize};
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use crate::model::Time;

/// One changelog record for the dataflow: `value: None` is a tombstone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Upsert<K, V> {
    pub key: K,
    /// Order of the record in its source; the greatest wins within a time.
    pub seq: u64,
    pub value: Option<V>,
}

/// Extension trait: the last upsert per key and time.
pub trait LatestPerKey<'scope, K, V> {
    /// Emits `(key, value, time)` for the greatest `seq` of each key at each time.
    fn latest_per_key(self, name: &str) -> Stream<'scope, Time, Vec<(K, Option<V>, Time)>>;
}

impl<'scope, K, V> LatestPerKey<'scope, K, V> for Stream<'scope, Time, Vec<Upsert<K, V>>>
where
    K: ExchangeData + Hashable + Hash,
    V: ExchangeData,
{
    fn latest_per_key(self, name: &str) -> Stream<'scope, Time, Vec<(K, Option<V>, Time)>> {
        let exchange = Exchange::new(|update: &Upsert<K, V>| update.key.hashed().into());
        self.unary_frontier(exchange, name, |_capability, _info| {
            type Latest<K, V> = HashMap<K, (u64, Option<V>)>;
            let mut pending: BTreeMap<Time, (Capability<Time>, Latest<K, V>)> = BTreeMap::new();
            move |(input, frontier), output| {
                input.for_each(|capability, data| {
                    let Some(time) = capability.least().copied() else {
                        return;
                    };
                    let (_, latest) = pending.entry(time).or_insert_with(|| {
                        (
                            capability.retain_least(0).expect("stamp has a least time"),
                            HashMap::new(),
                        )
                    });
                    for update in data.drain(..) {
                        match latest.entry(update.key) {
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
                });
                while let Some(entry) = pending.first_entry() {
                    if frontier.less_equal(entry.key()) {
                        break;
                    }
                    let (time, (capability, latest)) = entry.remove_entry();
                    let mut session = output.session(&capability);
                    for (key, (_seq, value)) in latest {
                        session.give((key, value, time));
                    }
                }
            }
        })
    }
}
