//! Products meet campaigns where the products are: what each time adds to each pair.
//!
//! ```text
//!  products (by key hash, or where read) \
//!  campaigns (broadcast) ------------ EligiblePairs --> ((campaign tag, seller), (Δproducts, Δstock))
//!  ancestor changes (broadcast) ----/                   summed per time on this worker
//! ```
//!
//! Each worker holds its share of the products once ([`ProductTable`]), every campaign
//! ([`CampaignTable`]) and the category tree ([`CategoryTree`]: each category's ancestors
//! and descendants). Once every input has passed a time `t`, it applies `t` in three
//! steps, each adding what it changes, F(after) - F(before):
//!
//! 1. campaign changes, against the products and the tree as they were before `t`: each
//!    product the old or the new version meets counts where its eligibility flips (the
//!    old and new version are met in one pass when indexed alike). A campaign meets only
//!    the products under its index keys, where a category key covers the category's
//!    descendants too; those without list criteria are met by one scan of the share, for
//!    all of this time's changed campaigns together;
//! 2. tree changes, against the campaigns as they are at `t` and the old products: for
//!    each category whose ancestors changed, only the campaigns that name an ancestor it
//!    lost or gained can change, and only for the products of that category;
//! 3. product changes, against the campaigns and the tree as they are at `t`: the old
//!    version leaves the campaigns it met, the new one joins those it meets (three hash
//!    lookups, one more per ancestor of its category: the campaign table keeps each
//!    category's ancestors in the entry the first lookup finds).
//!
//! A rebuild (`quiet_until`) skips the three steps for its times: they only change the
//! state (products are loaded unindexed and indexed once at the end), and once every input
//! has passed `quiet_until` each seller's products are met once, giving `F(P, C, T)` at
//! `quiet_until` (its chunks' deltas would add up to several times the pairs they end at).
//! There the workers of a process lend each other their shares ([`LentShares`]) and sum
//! each seller once, from every share: one total per pair and process, not one per worker.
//!
//! The steps telescope to exactly `F(P_t, C_t, T_t) - F(P_{t-1}, C_{t-1}, T_{t-1})`, the
//! change of every pair's totals at `t`, summed on this worker before anything is
//! exchanged. Without category records the tree stays empty and each step is the flat one.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, ParallelizationContract, Pipeline};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::Capability;
use timely::dataflow::Stream;

use crate::campaign_edit::Edit;
use crate::eligibility::{ProductPlacement, QuietRebuild};
use crate::hashing::{FastMap, FastSet};
use crate::model::{tag_of, Campaign, CampaignId, CategoryId, Product, ProductKey, SellerId, Tag, Time};
use crate::operators::ancestors::AncestorChange;
use crate::operators::upsert::{LatestUpserts, Upsert};
use crate::rule::{admits_category, index_campaign, is_eligible, CampaignIndex, PredicateKey, NO_ANCESTORS};
use crate::state::campaigns::Handle;
use crate::state::{CampaignTable, CategoryTree, LentShares, ProductTable};

/// A pair as the hot path keys it: (campaign tag, seller).
pub type PairTag = (Tag, SellerId);
/// What a time adds to a pair: (eligible products, eligible stock).
pub type Contribution = (i64, i64);

/// Builds the operator; `campaigns` and `ancestors` must reach every worker whole
/// (broadcast). `placement` says where a product's records meet: every record of a key
/// must reach the same worker, for as long as the dataflow runs.
///
/// `rebuild`: the times up to its `until` change the state only, and what the state then
/// holds leaves once, at `until`, as each (pair, totals) of the sellers this worker sums
/// from every share of its process ([`EndOfRebuild`]).
pub fn eligible_pairs<'scope>(
    products: Stream<'scope, Time, Vec<Upsert<ProductKey, Product>>>,
    placement: ProductPlacement,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    ancestors: Stream<'scope, Time, Vec<AncestorChange>>,
    rebuild: Option<QuietRebuild>,
) -> Stream<'scope, Time, Vec<(PairTag, Contribution)>> {
    match placement {
        ProductPlacement::ByKey => {
            let by_key = Exchange::new(|update: &Upsert<ProductKey, Product>| update.key.route());
            build(products, by_key, campaigns, ancestors, rebuild)
        }
        // No exchange: it moved every product between threads (~0.8 core-s, 0.5 s of a
        // 2-worker rebuild of 10M products, docs/benchmarks.md).
        ProductPlacement::AsRead => build(products, Pipeline, campaigns, ancestors, rebuild),
    }
}

fn build<'scope, P>(
    products: Stream<'scope, Time, Vec<Upsert<ProductKey, Product>>>,
    by_product: P,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    ancestors: Stream<'scope, Time, Vec<AncestorChange>>,
    rebuild: Option<QuietRebuild>,
) -> Stream<'scope, Time, Vec<(PairTag, Contribution)>>
where
    P: ParallelizationContract<Time, Vec<Upsert<ProductKey, Product>>>,
{
    let scope = products.scope();
    let quiet_until = rebuild.as_ref().map(|rebuild| rebuild.until);
    let lent = rebuild.as_ref().map(|rebuild| rebuild.lent.clone()).unwrap_or_default();
    let worker = scope.index();
    // Products spread over the workers by key, or by partitions dealt evenly (`AsRead`):
    // each gets about its share of the records read (a hint for the table's size only).
    let products_share = rebuild.map_or(0, |rebuild| rebuild.products.div_ceil(scope.peers() as u64));
    let mut builder = OperatorBuilder::new("EligiblePairs".to_owned(), scope);
    let activator = scope.activator_for(builder.operator_info().address);
    let mut products_in = builder.new_input(products, by_product);
    let mut campaigns_in = builder.new_input(campaigns, Pipeline);
    let mut ancestors_in = builder.new_input(ancestors, Pipeline);
    let (output, stream) = builder.new_output();
    let mut output = OutputBuilder::<_, CapacityContainerBuilder<Vec<(PairTag, Contribution)>>>::from(output);
    builder.build(move |mut capabilities| {
        // Held at `quiet_until` until the end of the rebuild is given.
        let mut end = quiet_until.map(|time| capabilities.pop().expect("one output").delayed(&time));
        drop(capabilities);
        let mut ending: Option<Ending> = None;
        let mut pending: BTreeMap<Time, PendingTime> = BTreeMap::new();
        let mut state = Matcher::default();
        state
            .products
            .reserve(usize::try_from(products_share).unwrap_or(usize::MAX));
        // Emptied product maps of applied times, kept for the next ones.
        let mut recycled: Vec<LatestUpserts<ProductKey, Product>> = Vec::new();
        move |frontiers| {
            let mut output = output.activate();
            products_in.for_each(|capability, data| {
                let time = *capability.least().expect("a totally ordered stamp has a least time");
                let pending = PendingTime::at(&mut pending, time, || capability.retain_least(0), &mut recycled);
                data.drain(..).for_each(|update| pending.products.offer(update));
            });
            campaigns_in.for_each(|capability, data| {
                let time = *capability.least().expect("a totally ordered stamp has a least time");
                let pending = PendingTime::at(&mut pending, time, || capability.retain_least(0), &mut recycled);
                data.drain(..).for_each(|update| pending.campaigns.offer(update));
            });
            ancestors_in.for_each(|capability, data| {
                // A collection's updates carry their own times, at or after the message's.
                for (pair, time, diff) in data.drain(..) {
                    let pending =
                        PendingTime::at(&mut pending, time, || Some(capability.delayed(&time, 0)), &mut recycled);
                    *pending.ancestors.entry(pair).or_default() += diff;
                }
            });
            let passed = |time: &Time| !frontiers.iter().any(|frontier| frontier.less_equal(time));
            loop {
                // The later times wait until the end is given and the share is back.
                match ending.take() {
                    Some(Ending::Lent(capability)) => {
                        let Some(shares) = lent.all() else {
                            ending = Some(Ending::Lent(capability));
                            activator.activate_after(LENDING_POLL);
                            return;
                        };
                        ending = Some(Ending::Summing(EndOfRebuild::new(capability, shares, &lent)));
                        continue;
                    }
                    Some(Ending::Summing(mut giving)) => {
                        let done = giving.next_slice(&mut state);
                        output
                            .session(&giving.capability)
                            .give_iterator(state.seller_deltas.drain(..));
                        if !done {
                            ending = Some(Ending::Summing(giving));
                            activator.activate();
                            return;
                        }
                        // Its shares and its capability: the totals may go on.
                        drop(giving);
                        lent.finish();
                        state.shrink_scratch((0, 0));
                        ending = Some(Ending::Returning);
                        continue;
                    }
                    Some(Ending::Returning) => {
                        let Some(share) = lent.take_back(worker) else {
                            ending = Some(Ending::Returning);
                            activator.activate_after(LENDING_POLL);
                            return;
                        };
                        state.products = share;
                    }
                    None => {}
                }
                let next = pending.first_key_value().map(|(time, _)| *time);
                if let Some(end_time) = end.as_ref().map(|capability| *capability.time()) {
                    if next.is_none_or(|time| time > end_time) {
                        if !passed(&end_time) {
                            break;
                        }
                        let capability = end.take().expect("checked");
                        state.products.index();
                        lent.lend(worker, std::mem::take(&mut state.products));
                        ending = Some(Ending::Lent(capability));
                        continue;
                    }
                }
                let Some(time) = next.filter(|time| passed(time)) else {
                    break;
                };
                let PendingTime {
                    capability,
                    mut products,
                    campaigns,
                    ancestors,
                } = pending.remove(&time).expect("the first time");
                let records = products.len();
                if quiet_until.is_some_and(|quiet_until| time <= quiet_until) {
                    state.apply_quietly(campaigns, ancestors, &mut products);
                } else {
                    state.apply_campaigns(campaigns);
                    state.apply_tree(ancestors);
                    state.apply_products(&mut products);
                }
                if recycled.len() < 2 {
                    // A map grown by a rebuild chunk would be swept whole at every small
                    // live time: it keeps room for what this time held, not its peak.
                    products.shrink_for(records);
                    recycled.push(products);
                }
                let used = state.scratch_used();
                let mut session = output.session(&capability);
                session.give_iterator(state.drain_deltas());
                drop(session);
                state.shrink_scratch(used);
            }
        }
    });
    stream
}

/// The records of one time, waiting until every input has passed it.
struct PendingTime {
    capability: Capability<Time>,
    products: LatestUpserts<ProductKey, Product>,
    campaigns: LatestUpserts<CampaignId, Campaign>,
    /// Net change of each (category, strict ancestor) pair.
    ancestors: FastMap<(CategoryId, CategoryId), isize>,
}

impl PendingTime {
    fn at<'a>(
        pending: &'a mut BTreeMap<Time, PendingTime>,
        time: Time,
        capability: impl FnOnce() -> Option<Capability<Time>>,
        recycled: &mut Vec<LatestUpserts<ProductKey, Product>>,
    ) -> &'a mut PendingTime {
        pending.entry(time).or_insert_with(|| PendingTime {
            capability: capability().expect("a totally ordered stamp has a least time"),
            products: recycled.pop().unwrap_or_default(),
            campaigns: LatestUpserts::default(),
            ancestors: FastMap::default(),
        })
    }
}

/// A worker's state, and what the time being applied adds to each pair.
#[derive(Default)]
struct Matcher {
    products: ProductTable,
    campaigns: CampaignTable,
    tree: CategoryTree,
    /// What the campaign and tree steps add to each pair.
    deltas: FastMap<PairTag, Contribution>,
    /// What the product step (or a rebuild's end) adds, summed per seller (a pair may
    /// also be in `deltas`).
    seller_deltas: Vec<(PairTag, Contribution)>,
    /// The product step's scratch: the versions that leave (-1) or join (+1), by seller,
    /// and one seller's sums.
    versions: Vec<(Product, i64)>,
    sums: SellerSums,
}

impl Matcher {
    fn apply_campaigns(&mut self, changes: LatestUpserts<CampaignId, Campaign>) {
        // Campaigns without list criteria, met by one scan of the share after the loop.
        let mut scanned: Vec<(Tag, Option<Campaign>, Option<Campaign>)> = Vec::new();
        for (id, new) in changes.into_latest() {
            // An identical re-send (or a closed campaign's tombstone repeated) changes
            // nothing: no re-index, and the per-category lists stay prepared.
            if self.campaigns.get(&id) == new.as_ref() {
                continue;
            }
            let old = self.campaigns.upsert(&id, new.clone());
            let tag = tag_of(&id);
            let (old_keyed, old_scanned) = split_index(old.as_ref());
            let (new_keyed, new_scanned) = split_index(new.as_ref());
            match (old_keyed, new_keyed) {
                (Some(old), Some(new)) if std::mem::discriminant(&old.0[0]) == std::mem::discriminant(&new.0[0]) => {
                    self.meet_keyed(tag, Some(old), Some(new))
                }
                (old, new) => {
                    self.meet_keyed(tag, old, None);
                    self.meet_keyed(tag, None, new);
                }
            }
            if old_scanned.is_some() || new_scanned.is_some() {
                scanned.push((tag, old_scanned, new_scanned));
            }
        }
        let edits: Vec<(Tag, Edit)> = scanned
            .iter()
            .map(|(tag, old, new)| (*tag, Edit::new(old.as_ref(), new.as_ref())))
            .filter(|(_tag, edit)| !edit.changes_nothing())
            .collect();
        if edits.is_empty() {
            return;
        }
        for product in self.products.iter() {
            for (tag, edit) in &edits {
                // Unrestricted by category: the tree does not matter.
                add_flip(&mut self.deltas, *tag, product, edit);
            }
        }
    }

    /// Meets the products under the keys of a campaign's old and new version (indexed by
    /// keys of one kind, so each product sits under one key of their union) in one pass.
    /// A product's figures do not depend on the campaign, so only a product whose
    /// eligibility flips changes a pair: an edit costs lookups, not a retraction and an
    /// addition of every product it meets.
    fn meet_keyed(
        &mut self,
        tag: Tag,
        old: Option<(Vec<PredicateKey>, Campaign)>,
        new: Option<(Vec<PredicateKey>, Campaign)>,
    ) {
        let (old_keys, old_rest) = self.meeting(old);
        let (new_keys, new_rest) = self.meeting(new);
        let mut keys: Vec<PredicateKey> = old_keys.union(&new_keys).copied().collect();
        // Deterministic work order (the sums do not depend on it).
        keys.sort_unstable();
        // A version meets the products under a key only if it names the key.
        let both = Edit::new(old_rest.as_ref(), new_rest.as_ref());
        let only_old = Edit::new(old_rest.as_ref(), None);
        let only_new = Edit::new(None, new_rest.as_ref());
        for key in keys {
            let edit = match (old_keys.contains(&key), new_keys.contains(&key)) {
                (true, true) => &both,
                (true, false) => &only_old,
                (false, _) => &only_new,
            };
            // An edit of the indexed list alone changes nothing under the keys both name.
            if edit.changes_nothing() {
                continue;
            }
            for product in self.products.with_key(key) {
                add_flip(&mut self.deltas, tag, product, edit);
            }
        }
    }

    /// The keys one version of a campaign meets products under, and its other criteria.
    fn meeting(&self, version: Option<(Vec<PredicateKey>, Campaign)>) -> (FastSet<PredicateKey>, Option<Campaign>) {
        match version {
            Some((keys, rest)) => (self.meeting_keys(keys).into_iter().collect(), Some(rest)),
            None => (FastSet::default(), None),
        }
    }

    /// The keys under which a campaign indexed under `keys` meets products: a category
    /// key covers the category's descendants too, each category once, so that a product
    /// under two named categories is met once.
    fn meeting_keys(&self, keys: Vec<PredicateKey>) -> Vec<PredicateKey> {
        if self.tree.is_empty() {
            return keys;
        }
        let mut covered: FastSet<CategoryId> = FastSet::default();
        let mut meeting = Vec::with_capacity(keys.len());
        for key in keys {
            let PredicateKey::Category(named) = key else {
                meeting.push(key);
                continue;
            };
            for category in std::iter::once(named).chain(self.tree.descendants(named)) {
                if covered.insert(category) {
                    meeting.push(PredicateKey::Category(category));
                }
            }
        }
        meeting
    }

    /// Applies the changes of the ancestor relation: a product's eligibility depends on
    /// the ancestors of its own category only, so each category whose ancestors moved is
    /// settled on its own, for its products, with the campaigns that name an ancestor it
    /// lost or gained (the others admit it before as after).
    fn apply_tree(&mut self, changes: FastMap<(CategoryId, CategoryId), isize>) {
        if changes.is_empty() {
            return;
        }
        let moved = self.tree.apply(changes.into_iter().filter(|(_pair, diff)| *diff != 0));
        let mut affected = Vec::new();
        for moved in moved {
            self.campaigns.set_ancestors(moved.category, &moved.after);
            let products_key = PredicateKey::Category(moved.category);
            if !self.products.has_key(products_key) {
                continue;
            }
            affected.clear();
            for ancestor in moved.changed_ancestors() {
                affected.extend(self.campaigns.naming(ancestor));
            }
            affected.sort_unstable();
            affected.dedup();
            for &handle in &affected {
                let active = self.campaigns.active(handle);
                let before = admits_category(&active.categories, moved.category, &moved.before);
                let after = admits_category(&active.categories, moved.category, &moved.after);
                if before == after {
                    continue;
                }
                let sign = if after { 1 } else { -1 };
                for product in self.products.with_key(products_key) {
                    if is_eligible(product, NO_ANCESTORS, &active.residual) {
                        add(&mut self.deltas, active.tag, product, sign);
                    }
                }
            }
        }
    }

    /// The product changes: each old version leaves the campaigns it met, each new one
    /// joins those it meets. The versions are taken seller by seller, and a seller's sums
    /// kept in an array indexed by campaign handle: a rebuild's chunk of 100,000 products
    /// meets millions of (campaign, seller) pairs, and a hash map of them was the hot spot.
    fn apply_products(&mut self, changes: &mut LatestUpserts<ProductKey, Product>) {
        let versions = &mut self.versions;
        versions.clear();
        for (key, new) in changes.drain_latest() {
            let old = self.products.upsert(key, new);
            if old == new {
                continue;
            }
            versions.extend(old.map(|product| (product, -1)));
            versions.extend(new.map(|product| (product, 1)));
        }
        versions.sort_unstable_by_key(|(product, _sign)| product.seller_id);
        self.campaigns.prepare();
        for seller in versions.chunk_by(|a, b| a.0.seller_id == b.0.seller_id) {
            let versions = seller.iter().map(|(product, sign)| (product, *sign));
            self.sums.add_seller(
                &self.campaigns,
                seller[0].0.seller_id,
                versions,
                &mut self.seller_deltas,
            );
        }
    }

    /// A time of a rebuild, before its end: the state takes the changes, and nothing is
    /// counted; the end gives the whole state's contribution at once. The per-time deltas
    /// of a rebuild's chunks add up to several times the pairs they end at (a seller's
    /// products are met again in every chunk), each summed into the totals on its way.
    fn apply_quietly(
        &mut self,
        campaigns: LatestUpserts<CampaignId, Campaign>,
        ancestors: FastMap<(CategoryId, CategoryId), isize>,
        products: &mut LatestUpserts<ProductKey, Product>,
    ) {
        for (id, new) in campaigns.into_latest() {
            if self.campaigns.get(&id) != new.as_ref() {
                self.campaigns.upsert(&id, new);
            }
        }
        if !ancestors.is_empty() {
            let moved = self
                .tree
                .apply(ancestors.into_iter().filter(|(_pair, diff)| *diff != 0));
            for moved in moved {
                self.campaigns.set_ancestors(moved.category, &moved.after);
            }
        }
        for (key, new) in products.drain_latest() {
            self.products.load(key, new);
        }
    }

    /// This time's non-zero deltas; the map and the list keep their allocations.
    fn drain_deltas(&mut self) -> impl Iterator<Item = (PairTag, Contribution)> + '_ {
        let keyed = self.deltas.drain().filter(|(_pair, delta)| *delta != (0, 0));
        keyed.chain(self.seller_deltas.drain(..))
    }

    /// What this time filled of the scratch space: (keyed deltas, seller deltas).
    fn scratch_used(&self) -> (usize, usize) {
        (self.deltas.len(), self.seller_deltas.len())
    }

    /// Gives back what a much larger time (a rebuild's chunk, a campaign edit) left in the
    /// scratch space once times are small again: draining a hash map visits its every
    /// bucket, so a map grown to millions of pairs once would cost a scan of them at
    /// every later time, and the lists would hold their peak for good.
    fn shrink_scratch(&mut self, (keyed, by_seller): (usize, usize)) {
        const KEEP: usize = 4_096;
        let room = |used: usize| 2 * used.max(KEEP);
        if self.deltas.capacity() > 2 * room(keyed) {
            self.deltas.shrink_to(room(keyed));
        }
        if self.seller_deltas.capacity() > 2 * room(by_seller) {
            self.seller_deltas.shrink_to(room(by_seller));
        }
        if self.versions.capacity() > 2 * room(self.versions.len()) {
            self.versions.clear();
            self.versions.shrink_to(KEEP);
        }
    }
}

/// Where a worker is in the end of a rebuild ([`LentShares`]).
enum Ending {
    /// Its share is lent; it waits for the other workers' shares.
    Lent(Capability<Time>),
    /// It sums its sellers from every share.
    Summing(EndOfRebuild),
    /// It is done; it waits until no worker reads the shares, to take its own back.
    Returning,
}

/// How often a worker waiting for the others' shares, or for its own, looks again: the
/// others are then indexing or summing theirs, a matter of seconds at millions of products.
const LENDING_POLL: Duration = Duration::from_millis(1);

/// The end of a rebuild: every pair this worker's sellers reach, with their totals from
/// every share of its process, given seller by seller in slices (what is given waits in
/// the channel until the totals take it).
struct EndOfRebuild {
    capability: Capability<Time>,
    /// Every share of this worker's process, lent for the end.
    shares: Vec<Arc<ProductTable>>,
    /// Where the sellers are claimed.
    lent: LentShares,
    /// The products of the seller being summed, copied out of the slabs.
    gathered: Vec<Product>,
}

/// At most about this many pairs leave in one activation.
const END_SLICE: usize = if cfg!(test) { 64 } else { 1 << 18 };

/// Sellers claimed at a time: a few, so that the workers end together.
const SELLERS_PER_CLAIM: usize = 16;

impl EndOfRebuild {
    fn new(capability: Capability<Time>, shares: Vec<Arc<ProductTable>>, lent: &LentShares) -> Self {
        EndOfRebuild {
            capability,
            shares,
            lent: lent.clone(),
            gathered: Vec::new(),
        }
    }

    /// Sums the next sellers into `state.seller_deltas`; whether none is left.
    fn next_slice(&mut self, state: &mut Matcher) -> bool {
        state.campaigns.prepare();
        loop {
            let claimed = self.lent.claim(&self.shares, SELLERS_PER_CLAIM);
            if claimed.is_empty() {
                return true;
            }
            for &seller_id in claimed {
                // Copied out first: a seller's products lie anywhere in the slabs, and a
                // tight loop of loads has its cache misses in flight together, where
                // fetching each between the campaign checks waited for them one by one (a
                // quarter of this operator's time).
                self.gathered.clear();
                for share in &self.shares {
                    self.gathered
                        .extend(share.with_key(PredicateKey::Seller(seller_id)).copied());
                }
                let versions = self.gathered.iter().map(|product| (product, 1));
                state
                    .sums
                    .add_seller(&state.campaigns, seller_id, versions, &mut state.seller_deltas);
            }
            if state.seller_deltas.len() >= END_SLICE {
                return false;
            }
        }
    }
}

/// One seller's sums, in an array indexed by campaign handle (a few KB), with the handles
/// touched: a rebuild's chunk of 100,000 products meets millions of (campaign, seller)
/// pairs, and a hash map of them was the hot spot.
#[derive(Default)]
struct SellerSums {
    per_campaign: Vec<Contribution>,
    touched: Vec<Handle>,
}

impl SellerSums {
    /// Adds one seller's product versions, each joining (+1) or leaving (-1) the campaigns
    /// it meets, and pushes the seller's non-zero sums to `out`.
    fn add_seller<'p>(
        &mut self,
        campaigns: &CampaignTable,
        seller_id: SellerId,
        versions: impl Iterator<Item = (&'p Product, i64)>,
        out: &mut Vec<(PairTag, Contribution)>,
    ) {
        if self.per_campaign.len() != campaigns.handles() {
            // Every sum is taken back to zero below, so only a new size needs a reset.
            self.per_campaign.clear();
            self.per_campaign.resize(campaigns.handles(), (0, 0));
        }
        let (per_campaign, touched) = (&mut self.per_campaign, &mut self.touched);
        for (product, sign) in versions {
            campaigns.candidates(product, |active| {
                if is_eligible(product, NO_ANCESTORS, &active.residual) {
                    let sum = &mut per_campaign[active.handle as usize];
                    if *sum == (0, 0) {
                        touched.push(active.handle);
                    }
                    sum.0 += sign;
                    sum.1 += sign * i64::from(product.stock);
                }
            });
        }
        for handle in touched.drain(..) {
            let sum = std::mem::take(&mut per_campaign[handle as usize]);
            if sum != (0, 0) {
                out.push(((campaigns.active(handle).tag, seller_id), sum));
            }
        }
    }
}

/// A campaign version's index as the two ways it meets products: under keys (with the
/// criteria left to check), or by a scan (no list criterion). `None`/`None` when inactive.
fn split_index(campaign: Option<&Campaign>) -> (Option<(Vec<PredicateKey>, Campaign)>, Option<Campaign>) {
    match campaign.and_then(index_campaign) {
        None => (None, None),
        Some(CampaignIndex::Keys(keys, rest)) => (Some((keys, rest)), None),
        Some(CampaignIndex::EveryCategory(rest)) => (None, Some(rest)),
    }
}

/// Adds or retracts one product's share of a pair where its eligibility differs between a
/// campaign's old and new version. Its figures do not depend on the campaign, so a product
/// eligible under both changes nothing.
#[inline]
fn add_flip(deltas: &mut FastMap<PairTag, Contribution>, tag: Tag, product: &Product, edit: &Edit) {
    if let Some(is) = edit.flip(product, NO_ANCESTORS) {
        add(deltas, tag, product, if is { 1 } else { -1 });
    }
}

/// Adds (`sign` 1) or retracts (-1) one product's share of a pair.
fn add(deltas: &mut FastMap<PairTag, Contribution>, tag: Tag, product: &Product, sign: i64) {
    let delta = deltas.entry((tag, product.seller_id)).or_default();
    delta.0 += sign;
    delta.1 += sign * i64::from(product.stock);
}
