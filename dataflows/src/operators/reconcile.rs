//! Starts the output from what the sinks already hold, not from nothing.
//!
//! After a restart the job rebuilds its state from the changelogs, while its sinks still
//! hold the pairs they were written before. Writing the rebuilt state as if the sinks were
//! empty would rewrite every pair; writing nothing would miss what changed while the job
//! was down. So, on the worker that writes a pair:
//!
//! ```text
//!   times <  live_from   nothing is written; each pair's last figures are kept
//!   time  =  live_from   each pair whose rebuilt figures differ from the held ones:
//!                        an upsert where they differ, a delete where a held pair is gone
//!   times >  live_from   the changes pass through as they come
//! ```
//!
//! With a quiet rebuild (`render_eligibility`'s `quiet_until` = `live_from`), the changes
//! before `live_from` are a snapshot at `live_from`, so only one pass over the pairs is
//! kept; a loud rebuild folds its history in time order to the same result.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::vec::{Broadcast, Filter};
use timely::dataflow::operators::{Concat, Exchange as _, Operator};
use timely::dataflow::Stream;

use crate::hashing::{pair_route, FastMap};
use crate::model::{tag_of, CampaignId, PairChange, PairFigures, PairKey, SellerId, Tag, Time};
use crate::operators::eligible_pairs::PairTag;
use crate::state::pairs::{CampaignHandles, PairCount, PairEntry, PairTable};

/// What a sink holds, as the reconcile takes it in: each campaign's id once, and every
/// pair under its campaign's tag, not a string apiece (millions of pairs).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HeldItem {
    /// The id a tag stands for; reaches every worker.
    Name(Tag, CampaignId),
    /// A pair and its figures; reaches the worker that writes the pair.
    Pair(PairTag, PairFigures),
}

/// The pairs a sink holds, gathered at start-up: 24 bytes each, under a handle of their
/// campaign, with each campaign's id kept once. Gathered by a [`HeldFold`]; each pair once.
///
/// Most of them are usually one sorted run: a change log's first time holds every pair
/// once, in key order, and is kept as the vector it was read into, without hashing
/// (hashing 10.7M pairs into a table was the most of a restart's reading of its log). The
/// pairs given out of that order are in a table beside it.
#[derive(Clone, Debug, Default)]
pub struct Held {
    /// Sorted by (seller, campaign id), each pair once.
    ordered: Vec<PairEntry>,
    /// The pairs not in `ordered`.
    later: PairTable,
    campaigns: CampaignHandles,
}

impl Held {
    pub fn new() -> Self {
        Held::default()
    }

    pub fn len(&self) -> usize {
        self.ordered.len() + self.later.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The figures held for `pair`.
    pub fn get(&self, pair: &PairKey) -> Option<PairFigures> {
        let campaign = self.campaigns.get(tag_of(&pair.campaign_id))?;
        let found = find_ordered(&self.ordered, &self.campaigns, pair.seller_id, &pair.campaign_id)
            .ok()
            .map(|index| &self.ordered[index])
            .or_else(|| self.later.get(campaign, pair.seller_id));
        found.map(PairEntry::figures)
    }

    /// Every pair keeps its place with figures no rebuilt pair has: each is then written
    /// again (`--from earliest`), and those no longer rebuilt are still deleted.
    pub fn forget_figures(&mut self) {
        self.ordered
            .iter_mut()
            .chain(self.later.iter_mut())
            .for_each(|entry| (entry.products, entry.stock) = (0, 0));
    }

    /// Every pair with its campaign's id (for tests and tools; allocates an id per pair).
    pub fn pairs(&self) -> impl Iterator<Item = (PairKey, PairFigures)> + '_ {
        self.ordered.iter().chain(self.later.iter()).map(|entry| {
            let pair = PairKey {
                seller_id: entry.seller,
                campaign_id: self.campaigns.id(entry.campaign).expect("named when held").clone(),
            };
            (pair, entry.figures())
        })
    }

    /// What the reconcile takes in: the names first, then the pairs.
    pub fn into_items(self) -> impl Iterator<Item = HeldItem> {
        let Held {
            ordered,
            later,
            campaigns,
        } = self;
        let names: Vec<HeldItem> = campaigns
            .named()
            .map(|(tag, name)| HeldItem::Name(tag, name.clone()))
            .collect();
        let pairs = ordered
            .into_iter()
            .chain(later)
            .map(move |entry| HeldItem::Pair((campaigns.tag(entry.campaign), entry.seller), entry.figures()));
        names.into_iter().chain(pairs)
    }
}

impl FromIterator<(PairKey, PairFigures)> for Held {
    fn from_iter<I: IntoIterator<Item = (PairKey, PairFigures)>>(pairs: I) -> Self {
        let mut fold = HeldFold::new();
        pairs.into_iter().for_each(|pair| fold.push(pair));
        fold.finish()
    }
}

/// Marks a pair released in [`HeldFold`]'s table: no held pair has negative products.
const RELEASED: i32 = -1;

/// Gathers what a sink holds from its writes in order (a pair given twice keeps its last
/// figures, a released pair is gone): as long as the pairs come in increasing key order,
/// as a change log's first time does, each is appended to a vector; from the first that
/// does not, into a table, settled against the vector by [`HeldFold::finish`].
#[derive(Debug, Default)]
pub struct HeldFold {
    ordered: Vec<PairEntry>,
    /// From the first pair out of order on: each pair's last figures, or [`RELEASED`].
    later: Option<PairTable>,
    campaigns: CampaignHandles,
}

impl HeldFold {
    pub fn new() -> Self {
        HeldFold::default()
    }

    /// Room for `pairs` more in the ordered run, if the system grants the address space
    /// (only what is filled is touched); a hint: refused, the run grows as it goes.
    pub fn reserve(&mut self, pairs: usize) {
        // An upper bound from a huge log can exceed what the kernel lets one mapping
        // overcommit: that must not abort the restart.
        let _ = self.ordered.try_reserve(pairs);
    }

    /// Holds `pair` with `figures`.
    pub fn push(&mut self, (pair, figures): (PairKey, PairFigures)) {
        self.hold(&pair.campaign_id, pair.seller_id, figures);
    }

    /// Holds the pair of `campaign_id` and `seller_id` with `figures`; the id is copied
    /// only on its campaign's first pair (a log read back holds millions of pairs).
    pub fn hold(&mut self, campaign_id: &str, seller_id: SellerId, figures: PairFigures) {
        let campaign = self.campaigns.name(tag_of(campaign_id), || campaign_id.to_owned());
        let entry = PairEntry::held(campaign, seller_id, figures);
        if self.later.is_none() && self.follows_ordered(seller_id, campaign_id) {
            self.ordered.push(entry);
        } else {
            self.later.get_or_insert_with(PairTable::default).insert(entry);
        }
    }

    /// No longer holds the pair of `campaign_id` and `seller_id` (a delete read back from a log).
    pub fn release(&mut self, campaign_id: &str, seller_id: SellerId) {
        let Some(campaign) = self.campaigns.get(tag_of(campaign_id)) else {
            return;
        };
        // Past the ordered run's last pair, nothing is held for it yet.
        if self.later.is_none() && self.follows_ordered(seller_id, campaign_id) {
            return;
        }
        let released = PairEntry {
            seller: seller_id,
            stock: 0,
            campaign,
            products: RELEASED,
        };
        self.later.get_or_insert_with(PairTable::default).insert(released);
    }

    fn follows_ordered(&self, seller_id: SellerId, campaign_id: &str) -> bool {
        self.ordered
            .last()
            .is_none_or(|last| (seller_id, campaign_id) > key_of(&self.campaigns, last))
    }

    /// What is held: the later pairs applied to the ordered run, those left beside it.
    pub fn finish(self) -> Held {
        let HeldFold {
            mut ordered,
            later,
            campaigns,
        } = self;
        let mut later = later.unwrap_or_default();
        let mut replaced = false;
        later.retain(|entry| {
            let id = campaigns.id(entry.campaign).expect("named when held");
            match find_ordered(&ordered, &campaigns, entry.seller, id) {
                Ok(index) => {
                    ordered[index] = *entry;
                    replaced |= entry.products == RELEASED;
                    false
                }
                Err(_) => entry.products != RELEASED,
            }
        });
        if replaced {
            ordered.retain(|entry| entry.products != RELEASED);
        }
        Held {
            ordered,
            later,
            campaigns,
        }
    }
}

/// A held pair's key in the order of a change log's lines: seller, then campaign id.
fn key_of<'a>(campaigns: &'a CampaignHandles, entry: &PairEntry) -> (SellerId, &'a str) {
    let id = campaigns.id(entry.campaign).expect("named when held");
    (entry.seller, id.as_str())
}

/// Where the pair of `seller` and `campaign_id` is in `ordered`, or would be.
fn find_ordered(
    ordered: &[PairEntry],
    campaigns: &CampaignHandles,
    seller: SellerId,
    campaign_id: &str,
) -> Result<usize, usize> {
    ordered.binary_search_by(|entry| key_of(campaigns, entry).cmp(&(seller, campaign_id)))
}

/// The most rebuilt pairs a quiet rebuild's reconcile kept, on any worker, because they came
/// before every held pair was in (shared by the workers of a process). Each is kept whole
/// until then (~40 bytes), so a rebuild whose end ran before the held pairs were fed held
/// its whole snapshot beside its tables: the job feeds them first, and this stays 0.
#[derive(Clone, Debug, Default)]
pub struct KeptWaiting(Arc<AtomicUsize>);

impl KeptWaiting {
    fn note(&self, pairs: usize) {
        self.0.fetch_max(pairs, Ordering::Relaxed);
    }

    /// The most pairs kept waiting at once.
    pub fn most(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

/// Starts each pair's changes from `held`, what the sinks hold, whose records must carry
/// times below `live_from`, on the pair's worker (`pair_route` of its campaign tag and
/// seller). `changes` must be there already, as [`render_eligibility`] leaves them; the held
/// pairs are brought there. Closing `held` once fed lets a quiet rebuild be checked as it
/// arrives. `held_pairs` is how many pairs the sinks hold, if known (0 if not), read when
/// the first arrives: this worker's table takes its share in one allocation instead of
/// doubling. `kept_waiting` records the most rebuilt pairs kept until the held ones were in.
///
/// [`render_eligibility`]: crate::render_eligibility
pub fn reconcile_with_held<'scope>(
    changes: Stream<'scope, Time, Vec<PairChange>>,
    held: Stream<'scope, Time, Vec<HeldItem>>,
    live_from: Time,
    held_pairs: PairCount,
    kept_waiting: KeptWaiting,
) -> Stream<'scope, Time, Vec<PairChange>> {
    let peers = changes.scope().peers();
    // Names go to every worker, pairs to the one that owns them.
    let names = held
        .clone()
        .filter(|item| matches!(item, HeldItem::Name(..)))
        .broadcast();
    let pairs = held
        .filter(|item| matches!(item, HeldItem::Pair(..)))
        .exchange(|item| match item {
            HeldItem::Pair((tag, seller), _) => pair_route(*tag, *seller),
            HeldItem::Name(..) => 0,
        });
    let held = names.concat(pairs);
    changes.binary_frontier::<_, CapacityContainerBuilder<Vec<PairChange>>, _, _, _, _>(
        held,
        Pipeline,
        Pipeline,
        "ReconcileWithHeld",
        move |capability, _info| {
            let mut live = Some(capability.delayed(&live_from));
            let mut rebuild = Rebuild::default();
            move |(changes_in, changes_frontier), (held_in, held_frontier), output| {
                held_in.for_each(|_capability, data| {
                    if rebuild.held.is_empty() && data.iter().any(|item| matches!(item, HeldItem::Pair(..))) {
                        rebuild.held.reserve(held_pairs.share(peers));
                    }
                    for item in data.drain(..) {
                        rebuild.hold(item);
                    }
                });
                changes_in.for_each(|capability, data| {
                    let time = *capability.least().expect("a totally ordered stamp has a least time");
                    if time > live_from {
                        output.session(&capability).give_container(data);
                    } else {
                        debug_assert!(data.iter().all(|change| change.time == time));
                        rebuild.pending.entry(time).or_default().append(data);
                    }
                });
                let Some(live_capability) = live.as_ref() else {
                    return;
                };
                let passed = |time: &Time| !changes_frontier.less_equal(time) && !held_frontier.less_equal(time);
                rebuild.fold_passed(|time| *time < live_from && passed(time));
                // Once every held pair is in and no earlier time can come, a quiet
                // rebuild's snapshot is checked as it arrives, never kept whole.
                let settled = rebuild.rebuilt.is_empty()
                    && !held_frontier.less_equal(&live_from)
                    && changes_frontier.frontier().iter().all(|time| *time >= live_from);
                if settled {
                    if let Some(arrived) = rebuild.pending.remove(&live_from) {
                        let differing = arrived
                            .into_iter()
                            .filter_map(|change| rebuild.against_held(change.pair, change.figures, live_from));
                        output.session(live_capability).give_iterator(differing);
                    }
                } else if rebuild.rebuilt.is_empty() {
                    kept_waiting.note(rebuild.pending.get(&live_from).map_or(0, Vec::len));
                }
                if passed(&live_from) {
                    let live = live.take().expect("checked");
                    let rebuild = std::mem::take(&mut rebuild);
                    output
                        .session(&live)
                        .give_iterator(rebuild.differences(live_from).into_iter());
                }
            }
        },
    )
}

/// What a worker gathers until `live_from`: the held pairs and the rebuilt figures.
#[derive(Default)]
struct Rebuild {
    /// Under a handle of their campaign, 24 bytes each: millions of held pairs need not
    /// each own a string.
    held: PairTable,
    campaigns: CampaignHandles,
    /// Changes of times not yet taken in.
    pending: BTreeMap<Time, Vec<PairChange>>,
    /// Each pair's figures after the folded times before `live_from`, `None` where it ended.
    rebuilt: FastMap<PairKey, Option<PairFigures>>,
}

impl Rebuild {
    fn hold(&mut self, item: HeldItem) {
        match item {
            HeldItem::Name(tag, name) => {
                self.campaigns.name(tag, || name);
            }
            HeldItem::Pair((tag, seller), figures) => {
                let campaign = self.campaigns.handle(tag);
                self.held.insert(PairEntry::held(campaign, seller, figures));
            }
        }
    }

    /// Folds the completed times in time order: a pair's last change wins.
    fn fold_passed(&mut self, passed: impl Fn(&Time) -> bool) {
        while let Some(entry) = self.pending.first_entry() {
            if !passed(entry.key()) {
                break;
            }
            for change in entry.remove() {
                self.rebuilt.insert(change.pair, change.figures);
            }
        }
    }

    /// The change that takes a pair's sinks from what they hold to `figures`, if any.
    fn against_held(&mut self, pair: PairKey, figures: Option<PairFigures>, live_from: Time) -> Option<PairChange> {
        let previous = self
            .campaigns
            .get(tag_of(&pair.campaign_id))
            .and_then(|campaign| self.held.remove(campaign, pair.seller_id))
            .map(|entry| entry.figures());
        (figures != previous).then_some(PairChange {
            time: live_from,
            pair,
            figures,
            previous,
        })
    }

    /// The changes at `live_from` not yet formed: the rebuild's against the held pairs,
    /// then the end of every held pair the rebuild did not reach.
    fn differences(mut self, live_from: Time) -> Vec<PairChange> {
        let last = self.pending.remove(&live_from).unwrap_or_default();
        debug_assert!(self.pending.is_empty(), "earlier times are folded already");
        let mut rebuilt = std::mem::take(&mut self.rebuilt);
        rebuilt.extend(last.into_iter().map(|change| (change.pair, change.figures)));
        let mut changes: Vec<PairChange> = rebuilt
            .into_iter()
            .filter_map(|(pair, figures)| self.against_held(pair, figures, live_from))
            .collect();
        let campaigns = &self.campaigns;
        changes.extend(self.held.drain().map(|entry| {
            PairChange {
                time: live_from,
                pair: PairKey {
                    seller_id: entry.seller,
                    campaign_id: campaigns
                        .id(entry.campaign)
                        .expect("a held pair's campaign is named")
                        .clone(),
                },
                figures: None,
                previous: Some(entry.figures()),
            }
        }));
        changes
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    /// A write read back: a pair (seller, campaign) held with figures, or released.
    type Write = ((SellerId, String), Option<(u64, u64)>);

    fn key() -> impl Strategy<Value = (SellerId, String)> {
        (0..6u64, prop_oneof![Just("c-1"), Just("c-10"), Just("c-2"), Just("d")]).prop_map(|(s, c)| (s, c.to_owned()))
    }

    /// Mostly what a change log holds: a first time of distinct pairs in key order, then
    /// later writes in any order (ids that sort apart as text and as numbers).
    fn writes() -> impl Strategy<Value = Vec<Write>> {
        let first = proptest::collection::btree_map(key(), (1..50u64, 0..500u64), 0..20);
        let later = proptest::collection::vec((key(), proptest::option::of((1..50u64, 0..500u64))), 0..30);
        (first, later).prop_map(|(first, later)| {
            first
                .into_iter()
                .map(|(key, figures)| (key, Some(figures)))
                .chain(later)
                .collect()
        })
    }

    proptest! {
        /// Folding the writes in order holds what a map of each pair's last write holds.
        #[test]
        fn a_fold_holds_each_pairs_last_write(writes in writes()) {
            let mut fold = HeldFold::new();
            let mut expected = BTreeMap::new();
            for ((seller, campaign), figures) in &writes {
                match figures {
                    Some((products, stock)) => {
                        let figures = PairFigures { eligible_products: *products, eligible_stock: *stock };
                        fold.hold(campaign, *seller, figures);
                        expected.insert((*seller, campaign.clone()), figures);
                    }
                    None => {
                        fold.release(campaign, *seller);
                        expected.remove(&(*seller, campaign.clone()));
                    }
                }
            }
            let held = fold.finish();
            prop_assert_eq!(held.len(), expected.len());
            let got: BTreeMap<_, _> = held.pairs().map(|(pair, figures)| ((pair.seller_id, pair.campaign_id), figures)).collect();
            prop_assert_eq!(&got, &expected);
            for seller in 0..6 {
                for campaign in ["c-1", "c-10", "c-2", "d", "e"] {
                    let pair = PairKey { seller_id: seller, campaign_id: campaign.to_owned() };
                    prop_assert_eq!(held.get(&pair), expected.get(&(seller, campaign.to_owned())).copied());
                }
            }
            let pairs = held.into_items().filter(|item| matches!(item, HeldItem::Pair(..))).count();
            prop_assert_eq!(pairs, expected.len());
        }
    }

    #[test]
    fn pairs_in_key_order_are_kept_without_a_table() {
        let mut fold = HeldFold::new();
        let figures = PairFigures {
            eligible_products: 1,
            eligible_stock: 2,
        };
        for (seller, campaign) in [(1, "c-1"), (1, "c-10"), (1, "c-2"), (2, "c-1")] {
            fold.hold(campaign, seller, figures);
        }
        assert!(fold.later.is_none(), "ascending keys stay in the ordered run");
        fold.hold("c-1", 1, figures);
        assert!(fold.later.is_some(), "a key again goes to the table");
    }
}
