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
//! table entry of 24 bytes per pair is all the state. The changes come out unsorted, on the worker that
//! owns the pair: exactly one per moved pair and time, so nothing downstream consolidates.
//!
//! A rebuild ([`QuietRebuild`]) emits nothing for its times: the totals it reaches by its
//! `until` come out once, at `until`, as changes from nothing, for `reconcile_with_held` to
//! hold against what the sinks hold; the table first reserves room for this worker's share
//! of the pairs expected, if known. Names are kept for every
//! campaign id ever seen, a few dozen bytes each, since a pair's end may come after its
//! campaign's tombstone.
//!
//! [`eligible_pairs`]: super::eligible_pairs

use std::collections::BTreeMap;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use hashbrown::hash_table::Entry;

use crate::eligibility::QuietRebuild;
use crate::hashing::{pair_route, FastMap};
use crate::model::{tag_of, Campaign, CampaignId, PairChange, PairFigures, PairKey, SellerId, Time};
use crate::operators::eligible_pairs::{Contribution, PairTag};
use crate::operators::upsert::Upsert;
use crate::state::pairs::{CampaignHandle, CampaignHandles, PairEntry, PairTable};

/// A pair's totals: (eligible products, eligible stock); (0, 0) for a pair that does not exist.
pub type PairTotals = (isize, isize);

/// The pairs of this many of the table's slots (half to seven eighths of them full) leave
/// in one activation: the snapshot is the whole state (millions of pairs), and what is given
/// waits in the channel until the reconcile downstream runs, so it goes out in slices, one
/// per step of the worker.
const SNAPSHOT_SLOTS: usize = if cfg!(test) { 64 } else { 1 << 18 };

/// Builds the operator; `campaigns` must reach every worker whole (broadcast).
pub fn pair_totals<'scope>(
    deltas: Stream<'scope, Time, Vec<(PairTag, Contribution)>>,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    rebuild: Option<QuietRebuild>,
) -> Stream<'scope, Time, Vec<PairChange>> {
    let scope = deltas.scope();
    let peers = scope.peers();
    let quiet_until = rebuild.as_ref().map(|rebuild| rebuild.until);
    let mut expected = rebuild.map(|rebuild| rebuild.pairs);
    let by_pair = Exchange::new(|(pair, _delta): &(PairTag, Contribution)| pair_route(pair.0, pair.1));
    deltas.binary_frontier::<_, CapacityContainerBuilder<Vec<PairChange>>, _, _, _, _>(
        campaigns,
        by_pair,
        Pipeline,
        "PairTotals",
        move |capability, info| {
            let activator = scope.activator_for(info.address);
            let mut quiet = quiet_until.map(|time| Snapshot::new(capability.delayed(&time)));
            let mut pending: BTreeMap<Time, (Capability<Time>, FastMap<PairTag, Contribution>)> = BTreeMap::new();
            let mut totals = Totals::default();
            move |(deltas_in, deltas_frontier), (campaigns_in, campaigns_frontier), output| {
                deltas_in.for_each(|capability, data| {
                    let time = *capability.least().expect("a totally ordered stamp has a least time");
                    if quiet_until.is_some_and(|quiet_until| time <= quiet_until) {
                        // Once the count is known (the held pairs may be read later).
                        if let Some(share) = expected.as_ref().map(|count| count.share(peers)).filter(|&n| n > 0) {
                            totals.pairs.reserve(share.saturating_sub(totals.pairs.len()));
                            expected = None;
                        }
                        // Nothing of a rebuild's times is emitted but their sum, and sums
                        // commute: its deltas go straight into the totals, in any order.
                        totals.add_all(data.drain(..));
                        return;
                    }
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
                        totals.campaigns.name(tag_of(&update.key), || update.key);
                    }
                });
                let passed = |time: &Time| !deltas_frontier.less_equal(time) && !campaigns_frontier.less_equal(time);
                if let Some(snapshot) = quiet.as_mut() {
                    if !passed(snapshot.capability.time()) {
                        return;
                    }
                    // The later times wait until every slice of the snapshot is out.
                    let (slice, done) = snapshot.next_slice(&totals);
                    output.session(&snapshot.capability).give_iterator(slice);
                    if !done {
                        activator.activate();
                        return;
                    }
                    quiet = None;
                }
                while let Some(entry) = pending.first_entry() {
                    let time = *entry.key();
                    if !passed(&time) {
                        break;
                    }
                    let (capability, sums) = entry.remove();
                    let changes = totals.changes(sums, time);
                    output.session(&capability).give_iterator(changes.into_iter());
                }
            }
        },
    )
}

/// A rebuild's totals at `quiet_until`, given as changes from nothing, a slice at a time.
///
/// The totals do not change while it is given (later times wait for it), so every pair
/// stays in its slot and slice `i` is the pairs of slots `i * SNAPSHOT_SLOTS..`.
struct Snapshot {
    capability: Capability<Time>,
    next_slot: usize,
}

impl Snapshot {
    fn new(capability: Capability<Time>) -> Self {
        Snapshot {
            capability,
            next_slot: 0,
        }
    }

    /// The next slice, and whether it is the last.
    fn next_slice<'a>(&mut self, totals: &'a Totals) -> (impl Iterator<Item = PairChange> + 'a, bool) {
        let (start, time) = (self.next_slot, *self.capability.time());
        self.next_slot += SNAPSHOT_SLOTS;
        let changes = totals
            .pairs
            .in_slots(start..self.next_slot)
            .map(move |entry| totals.snapshot_change(entry, time));
        (changes, self.next_slot >= totals.pairs.slots())
    }
}

/// The totals of the pairs this worker owns, and the campaign ids their tags stand for.
#[derive(Default)]
struct Totals {
    pairs: PairTable,
    /// Ids are kept for good: a pair's end may come after its campaign's tombstone.
    campaigns: CampaignHandles,
}

impl Totals {
    fn pair_key(&self, campaign: CampaignHandle, seller_id: SellerId) -> PairKey {
        let campaign_id = self
            .campaigns
            .id(campaign)
            .expect("a pair's campaign arrives no later than its first pair")
            .clone();
        PairKey { seller_id, campaign_id }
    }

    /// Adds `delta` to a pair and returns its handle and totals before and after; a pair
    /// whose totals reach (0, 0) leaves the table.
    fn add(
        &mut self,
        (tag, seller): PairTag,
        (products, stock): Contribution,
    ) -> (CampaignHandle, PairTotals, PairTotals) {
        let campaign = self.campaigns.handle(tag);
        let products = i32::try_from(products).expect("fewer than 2³¹ products per pair");
        let (old, new) = match self.pairs.entry(campaign, seller) {
            Entry::Occupied(mut held) => {
                let old = totals(held.get());
                let sums = held.get_mut();
                sums.products += products;
                sums.stock += stock;
                let new = totals(sums);
                if new == (0, 0) {
                    held.remove();
                }
                (old, new)
            }
            Entry::Vacant(vacant) => {
                let new = PairEntry {
                    seller,
                    stock,
                    campaign,
                    products,
                };
                if totals(&new) != (0, 0) {
                    vacant.insert(new);
                }
                ((0, 0), totals(&new))
            }
        };
        (campaign, old, new)
    }

    /// One time's changes: each moved pair once, with its old and new figures.
    fn changes(&mut self, sums: FastMap<PairTag, Contribution>, time: Time) -> Vec<PairChange> {
        let mut changes = Vec::with_capacity(sums.len());
        for (pair, delta) in sums {
            if delta == (0, 0) {
                continue;
            }
            let (campaign, old, new) = self.add(pair, delta);
            debug_assert!(new.0 >= 0 && (new.0 > 0 || new.1 == 0), "pair totals went negative");
            changes.push(PairChange {
                time,
                pair: self.pair_key(campaign, pair.1),
                figures: figures(new),
                previous: figures(old),
            });
        }
        changes
    }

    /// Adds deltas of times nothing is emitted for, in any order: a pair is kept while
    /// its sums are not both zero (a retraction may come before its addition).
    fn add_all(&mut self, deltas: impl Iterator<Item = (PairTag, Contribution)>) {
        for (pair, delta) in deltas {
            self.add(pair, delta);
        }
    }

    /// A pair's totals as a change from nothing at `time`.
    fn snapshot_change(&self, entry: &PairEntry, time: Time) -> PairChange {
        PairChange {
            time,
            pair: self.pair_key(entry.campaign, entry.seller),
            figures: figures(totals(entry)),
            previous: None,
        }
    }
}

fn totals(entry: &PairEntry) -> PairTotals {
    (entry.products as isize, entry.stock as isize)
}

/// The figures of existing totals; `None` for a pair that does not exist.
fn figures((products, stock): PairTotals) -> Option<PairFigures> {
    (products != 0).then_some(PairFigures {
        eligible_products: products as u64,
        eligible_stock: stock as u64,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{mpsc, Arc, Mutex};

    use timely::dataflow::operators::capture::{Capture, Extract};
    use timely::dataflow::operators::{Concatenate, Input};

    use super::*;
    use crate::state::pairs::PairCount;

    /// Deltas at quiet times 0..=2 (a retraction sent before its addition among them) and a
    /// loud time 3, for 1,000 pairs: sixteen slices of 64 at the snapshot.
    fn run(workers: usize) -> Vec<(Time, PairChange)> {
        let (send, recv) = mpsc::channel();
        let send = Arc::new(Mutex::new(send));
        timely::execute(timely::Config::process(workers), move |worker| {
            let send = send.lock().expect("poisoned").clone();
            let (mut early, mut deltas, mut campaigns) = worker.dataflow::<Time, _, _>(|scope| {
                // Two delta inputs, so that a later time's retraction can arrive first.
                let (early_in, early) = scope.new_input::<Vec<(PairTag, Contribution)>>();
                let (deltas_in, deltas) = scope.new_input::<Vec<(PairTag, Contribution)>>();
                let (campaigns_in, campaigns) = scope.new_input::<Vec<Upsert<CampaignId, Campaign>>>();
                let deltas = scope.concatenate([early, deltas]);
                // Expected pairs known: the table is sized once.
                let pairs = PairCount::default();
                pairs.note(1_000);
                let rebuild = QuietRebuild {
                    until: 2,
                    pairs,
                    products: 0,
                    lent: Default::default(),
                };
                pair_totals(deltas, campaigns, Some(rebuild)).capture_into(send);
                (early_in, deltas_in, campaigns_in)
            });
            let tag = tag_of("c");
            // Campaigns reach every worker (broadcast in the dataflow).
            campaigns.send(Upsert {
                key: "c".to_owned(),
                seq: 0,
                value: Some(Campaign::unrestricted()),
            });
            if worker.index() == 0 {
                early.advance_to(1);
                early.send(((tag, 0), (-1, 0)));
                early.flush();
                worker.step();
                for seller in 0..1_000u64 {
                    deltas.send(((tag, seller), (1, seller as i64)));
                }
            }
            early.advance_to(3);
            deltas.advance_to(3);
            campaigns.advance_to(3);
            if worker.index() == 0 {
                deltas.send(((tag, 5), (1, 1)));
            }
        })
        .expect("timely runs");
        let mut changes: Vec<(Time, PairChange)> = recv
            .extract()
            .into_iter()
            .flat_map(|(time, data)| data.into_iter().map(move |change| (time, change)))
            .collect();
        changes.sort();
        changes
    }

    #[test]
    fn a_snapshot_in_slices_holds_every_pair_once_with_its_quiet_sum() {
        for workers in [1, 2] {
            let changes = run(workers);
            let at_snapshot: BTreeMap<u64, Option<PairFigures>> = changes
                .iter()
                .filter(|(time, _)| *time == 2)
                .map(|(_, change)| (change.pair.seller_id, change.figures))
                .collect();
            assert_eq!(
                changes.iter().filter(|(time, _)| *time == 2).count(),
                at_snapshot.len(),
                "each pair once"
            );
            // Seller 0's addition (time 0) and retraction (time 1) cancel, whatever their
            // order; every other pair is its one addition.
            let expected: BTreeMap<u64, Option<PairFigures>> = (1..1_000u64)
                .map(|seller| {
                    let figures = PairFigures {
                        eligible_products: 1,
                        eligible_stock: seller,
                    };
                    (seller, Some(figures))
                })
                .collect();
            assert_eq!(at_snapshot, expected, "{workers} workers");
            assert!(changes
                .iter()
                .all(|(_, change)| change.previous.is_none() || change.time == 3));
            let loud: Vec<_> = changes.iter().filter(|(time, _)| *time == 3).collect();
            assert_eq!(loud.len(), 1);
            assert_eq!(loud[0].1.previous.map(|f| f.eligible_stock), Some(5));
        }
    }
}
