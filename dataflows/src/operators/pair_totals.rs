//! The running totals of every pair, and their changes per time.
//!
//! ```text
//!  ((tag, seller), Δ) from every worker --(by pair)--> PairTotals --> PairChange at t
//!  campaigns (broadcast) --(names the tags)----------/
//! ```
//!
//! Each pair lives on one worker, which sums what every worker's [`eligible_pairs`] sent
//! for a time and, once both inputs have passed it, reports each pair whose totals moved,
//! once, as a [`PairChange`] (old and new figures) under the campaign's text id. One hash
//! map entry per pair is all the state. The changes come out unsorted, on the worker that
//! owns the pair: exactly one per moved pair and time, so nothing downstream consolidates.
//!
//! A rebuild (`quiet_until`) emits nothing for its times: the totals it reaches by
//! `quiet_until` come out once, at `quiet_until`, as changes from nothing, for
//! `reconcile_with_held` to hold against what the sinks hold. Names are kept for every
//! campaign id ever seen, a few dozen bytes each, since a pair's end may come after its
//! campaign's tombstone.
//!
//! [`eligible_pairs`]: super::eligible_pairs

use std::collections::BTreeMap;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use crate::hashing::{pair_route, FastMap};
use crate::model::{tag_of, Campaign, CampaignId, PairChange, PairFigures, PairKey, Tag, Time};
use crate::operators::eligible_pairs::{Contribution, PairTag};
use crate::operators::upsert::Upsert;

/// A pair's totals: (eligible products, eligible stock); (0, 0) for a pair that does not exist.
pub type PairTotals = (isize, isize);

/// Builds the operator; `campaigns` must reach every worker whole (broadcast).
pub fn pair_totals<'scope>(
    deltas: Stream<'scope, Time, Vec<(PairTag, Contribution)>>,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    quiet_until: Option<Time>,
) -> Stream<'scope, Time, Vec<PairChange>> {
    let by_pair = Exchange::new(|(pair, _delta): &(PairTag, Contribution)| pair_route(pair.0, pair.1));
    deltas.binary_frontier::<_, CapacityContainerBuilder<Vec<PairChange>>, _, _, _, _>(
        campaigns,
        by_pair,
        Pipeline,
        "PairTotals",
        move |capability, _info| {
            let mut quiet = quiet_until.map(|time| capability.delayed(&time));
            let mut pending: BTreeMap<Time, (Capability<Time>, FastMap<PairTag, Contribution>)> = BTreeMap::new();
            let mut totals = Totals::default();
            move |(deltas_in, deltas_frontier), (campaigns_in, campaigns_frontier), output| {
                deltas_in.for_each(|capability, data| {
                    let time = *capability.least().expect("a totally ordered stamp has a least time");
                    let (_, sums) = pending.entry(time).or_insert_with(|| {
                        let capability = capability.retain_least(0).expect("a least time");
                        (capability, FastMap::default())
                    });
                    for (pair, (products, stock)) in data.drain(..) {
                        let sum = sums.entry(pair).or_default();
                        sum.0 += products;
                        sum.1 += stock;
                    }
                });
                campaigns_in.for_each(|_capability, data| {
                    for update in data.drain(..) {
                        totals.names.entry(tag_of(&update.key)).or_insert(update.key);
                    }
                });
                let passed = |time: &Time| !deltas_frontier.less_equal(time) && !campaigns_frontier.less_equal(time);
                while let Some(entry) = pending.first_entry() {
                    let time = *entry.key();
                    if !passed(&time) {
                        break;
                    }
                    let (capability, sums) = entry.remove();
                    let loud = quiet_until.is_none_or(|quiet_until| time > quiet_until);
                    if loud {
                        if let Some(quiet) = quiet.take() {
                            output.session(&quiet).give_iterator(totals.snapshot(*quiet.time()));
                        }
                        let changes = totals.changes(sums, time);
                        output.session(&capability).give_iterator(changes.into_iter());
                    } else {
                        totals.apply(sums, |_, _, _| {});
                    }
                }
                if quiet.as_ref().is_some_and(|quiet| passed(quiet.time())) {
                    let quiet = quiet.take().expect("checked");
                    output.session(&quiet).give_iterator(totals.snapshot(*quiet.time()));
                }
            }
        },
    )
}

/// The totals of the pairs this worker owns, and the campaign ids their tags stand for.
#[derive(Default)]
struct Totals {
    totals: FastMap<PairTag, PairTotals>,
    names: FastMap<Tag, CampaignId>,
}

impl Totals {
    fn pair_key(&self, (tag, seller_id): PairTag) -> PairKey {
        let campaign_id = self
            .names
            .get(&tag)
            .expect("a pair's campaign arrives no later than its first pair")
            .clone();
        PairKey { seller_id, campaign_id }
    }

    /// Adds one time's sums; `moved` sees each pair whose totals changed, old and new.
    fn apply(&mut self, sums: FastMap<PairTag, Contribution>, mut moved: impl FnMut(PairTag, PairTotals, PairTotals)) {
        for (pair, (products, stock)) in sums {
            if (products, stock) == (0, 0) {
                continue;
            }
            let old = self.totals.get(&pair).copied().unwrap_or_default();
            let new = (old.0 + products as isize, old.1 + stock as isize);
            debug_assert!(new.0 >= 0 && (new.0 > 0 || new.1 == 0), "pair totals went negative");
            if new.0 == 0 {
                self.totals.remove(&pair);
            } else {
                self.totals.insert(pair, new);
            }
            moved(pair, old, new);
        }
    }

    /// One time's changes: each moved pair once, with its old and new figures.
    fn changes(&mut self, sums: FastMap<PairTag, Contribution>, time: Time) -> Vec<PairChange> {
        let mut moved = Vec::new();
        self.apply(sums, |pair, old, new| moved.push((pair, old, new)));
        moved
            .into_iter()
            .map(|(pair, old, new)| PairChange {
                time,
                pair: self.pair_key(pair),
                figures: figures(new),
                previous: figures(old),
            })
            .collect()
    }

    /// Every pair's totals, as changes from nothing at `time`.
    fn snapshot(&self, time: Time) -> impl Iterator<Item = PairChange> + '_ {
        self.totals.iter().map(move |(pair, totals)| PairChange {
            time,
            pair: self.pair_key(*pair),
            figures: figures(*totals),
            previous: None,
        })
    }
}

/// The figures of existing totals; `None` for a pair that does not exist.
fn figures((products, stock): PairTotals) -> Option<PairFigures> {
    (products != 0).then_some(PairFigures {
        eligible_products: products as u64,
        eligible_stock: stock as u64,
    })
}
