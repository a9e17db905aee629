//! The hand-written incremental implementation: the same computation as the engine, with
//! the same predicate index, in hash maps on one thread. It is the practical speed limit
//! of one core, against which the engine's per-worker rate is judged, so it is written as
//! one would for speed: integer slots, a fast hasher, and per-batch deltas summed per pair
//! before they touch the totals.
//!
//! The category tree is kept as each category's ancestors and descendants (SPEC.md,
//! "Category trees"), both updated by walking parents when an edge changes. A product
//! meets the campaigns under its category and each ancestor's, a campaign the products
//! under its categories and their descendants; a campaign naming two of a product's
//! categories counts it under the least one only, as the engine does. An edge change
//! recounts the products of each category whose ancestors changed, for the campaigns
//! naming an ancestor it lost or gained. Without a tree, none of it costs anything.

use std::iter::once;

use dataflows::decode::{decode_category_id, Change, Record};
use dataflows::hashing::{FastMap, FastSet};
use dataflows::model::{Campaign, Category, CategoryId, PairChange, PairFigures, PairKey, Product, SellerId, Time};
use dataflows::reference::PairState;
use dataflows::rule::{first_category_met, index_campaign, is_eligible, CampaignIndex, PredicateKey, NO_ANCESTORS};

use super::implementation::Implementation;

type CampaignSlot = u32;
type ProductSlot = u32;
type Pair = (CampaignSlot, SellerId);
/// A pair's (eligible products, eligible stock).
type Totals = (u64, u64);

/// Products and campaigns in slabs, both indexed by predicate key, the category tree, and
/// the running totals.
#[derive(Default)]
pub struct Incremental {
    product_slots: FastMap<String, ProductSlot>,
    products: Vec<Option<Product>>,
    free_products: Vec<ProductSlot>,
    products_by_key: FastMap<PredicateKey, FastSet<ProductSlot>>,
    campaign_slots: FastMap<String, CampaignSlot>,
    campaigns: Vec<(String, Option<Campaign>)>,
    campaigns_by_key: FastMap<PredicateKey, Vec<CampaignSlot>>,
    unrestricted: Vec<CampaignSlot>,
    totals: FastMap<Pair, (u64, u64)>,
    /// What the batch being applied adds to each pair: (products, stock).
    deltas: FastMap<Pair, (i64, i64)>,
    /// Each category's parent, as its record gives it.
    parents: FastMap<CategoryId, CategoryId>,
    /// Each category's ancestors besides itself, sorted; only categories that have some.
    ancestors: FastMap<CategoryId, Vec<CategoryId>>,
    /// Each category's descendants besides itself: the categories whose ancestors hold it.
    descendants: FastMap<CategoryId, FastSet<CategoryId>>,
}

impl Incremental {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (`sign` 1) or removes (-1) a product's contribution to every campaign it meets.
    fn count_product(&mut self, product: &Product, sign: i64) {
        let own = product.category_id;
        let ancestors = match self.ancestors.is_empty() {
            true => NO_ANCESTORS,
            false => self.ancestors.get(&own).map_or(NO_ANCESTORS, Vec::as_slice),
        };
        let keyed = product
            .predicate_keys()
            .into_iter()
            .filter_map(|key| self.campaigns_by_key.get(&key))
            .flatten()
            .map(|slot| (*slot, own));
        // Under each ancestor too, counted only under the least category the campaign names.
        let above = ancestors.iter().flat_map(|&ancestor| {
            self.campaigns_by_key
                .get(&PredicateKey::Category(ancestor))
                .into_iter()
                .flatten()
                .map(move |slot| (*slot, ancestor))
        });
        let unrestricted = self.unrestricted.iter().map(|slot| (*slot, own));
        for (slot, under) in keyed.chain(above).chain(unrestricted) {
            let eligible = self.campaigns[slot as usize].1.as_ref().is_some_and(|c| {
                is_eligible(product, ancestors, c)
                    && (ancestors.is_empty()
                        || c.category_ids.is_empty()
                        || first_category_met(&c.category_ids, own, ancestors) == Some(under))
            });
            if eligible {
                add(&mut self.deltas, (slot, product.seller_id), product.stock, sign);
            }
        }
    }

    /// Adds or removes a campaign's contribution over the products under its keys.
    fn count_campaign(&mut self, slot: CampaignSlot, sign: i64) {
        let Some(campaign) = &self.campaigns[slot as usize].1 else {
            return;
        };
        let (products, deltas) = (&self.products, &mut self.deltas);
        let mut count = |product: &Product, ancestors: &[CategoryId]| {
            if is_eligible(product, ancestors, campaign) {
                add(deltas, (slot, product.seller_id), product.stock, sign);
            }
        };
        match index_campaign(campaign) {
            None => {}
            Some(CampaignIndex::EveryCategory(_)) => {
                for product in products.iter().flatten() {
                    let ancestors = self.ancestors.get(&product.category_id);
                    count(product, ancestors.map_or(NO_ANCESTORS, Vec::as_slice));
                }
            }
            Some(CampaignIndex::Keys(keys, _)) => {
                for key in keys {
                    let below = match key {
                        PredicateKey::Category(category) => self.descendants.get(&category),
                        _ => None,
                    };
                    let categories = below.into_iter().flatten().map(|c| PredicateKey::Category(*c));
                    for key_below in once(key).chain(categories) {
                        let ancestors = match key_below {
                            PredicateKey::Category(category) => {
                                self.ancestors.get(&category).map_or(NO_ANCESTORS, Vec::as_slice)
                            }
                            _ => NO_ANCESTORS,
                        };
                        // Counted under the least of its categories a product falls in.
                        if let (PredicateKey::Category(category), PredicateKey::Category(named)) = (key_below, key) {
                            if !ancestors.is_empty()
                                && first_category_met(&campaign.category_ids, category, ancestors) != Some(named)
                            {
                                continue;
                            }
                        }
                        for product_slot in self.products_by_key.get(&key_below).into_iter().flatten() {
                            if let Some(product) = &products[*product_slot as usize] {
                                count(product, ancestors);
                            }
                        }
                    }
                }
            }
        }
    }

    fn index_campaign_slot(&mut self, slot: CampaignSlot, add: bool) {
        let Some(campaign) = &self.campaigns[slot as usize].1 else {
            return;
        };
        match index_campaign(campaign) {
            None => {}
            Some(CampaignIndex::EveryCategory(_)) => edit_list(&mut self.unrestricted, slot, add),
            Some(CampaignIndex::Keys(keys, _)) => {
                for key in keys {
                    edit_list(self.campaigns_by_key.entry(key).or_default(), slot, add);
                }
            }
        }
    }

    fn apply_product(&mut self, key: &str, new: Option<Product>) {
        if let Some(&slot) = self.product_slots.get(key) {
            if self.products[slot as usize] == new {
                return;
            }
            if let Some(old) = self.products[slot as usize].take() {
                self.count_product(&old, -1);
                for predicate in old.predicate_keys() {
                    if let Some(set) = self.products_by_key.get_mut(&predicate) {
                        set.remove(&slot);
                    }
                }
            }
            if new.is_none() {
                self.product_slots.remove(key);
                self.free_products.push(slot);
            }
        }
        if let Some(product) = new {
            let slot = match self.product_slots.get(key) {
                Some(&slot) => slot,
                None => {
                    let slot = self.free_products.pop().unwrap_or_else(|| {
                        self.products.push(None);
                        (self.products.len() - 1) as ProductSlot
                    });
                    self.product_slots.insert(key.to_owned(), slot);
                    slot
                }
            };
            self.products[slot as usize] = Some(product);
            for predicate in product.predicate_keys() {
                self.products_by_key.entry(predicate).or_default().insert(slot);
            }
            self.count_product(&product, 1);
        }
    }

    /// Applies a category record: when the category's parent changes, the ancestors of the
    /// category and of every category below it (the ones whose walk passes it; the change
    /// does not alter which they are) are walked again, and their products recounted for
    /// the campaigns naming an ancestor lost or gained.
    fn apply_category(&mut self, key: &str, new: Option<Category>) {
        let id = decode_category_id(key).expect("a decoded category record has a decimal key");
        let parent = new.and_then(|category| category.parent_id);
        if self.parents.get(&id).copied() == parent {
            return;
        }
        match parent {
            Some(parent) => self.parents.insert(id, parent),
            None => self.parents.remove(&id),
        };
        let below = self.descendants.get(&id).into_iter().flatten().copied();
        let affected: Vec<CategoryId> = once(id).chain(below).collect();
        for category in affected {
            let after = walk(&self.parents, category);
            let before = match after.is_empty() {
                true => self.ancestors.remove(&category).unwrap_or_default(),
                false => self.ancestors.insert(category, after.clone()).unwrap_or_default(),
            };
            if before == after {
                continue;
            }
            let (lost, gained) = differences(&before, &after);
            for ancestor in &lost {
                if let Some(set) = self.descendants.get_mut(ancestor) {
                    set.remove(&category);
                    if set.is_empty() {
                        self.descendants.remove(ancestor);
                    }
                }
            }
            for ancestor in &gained {
                self.descendants.entry(*ancestor).or_default().insert(category);
            }
            self.recount_category(category, &before, &after, lost.iter().chain(&gained));
        }
    }

    /// Moves the products of `category` from what its `before` ancestors gave them to what
    /// its `after` ones give, for the campaigns naming one of `changed`.
    fn recount_category<'a>(
        &mut self,
        category: CategoryId,
        before: &[CategoryId],
        after: &[CategoryId],
        changed: impl Iterator<Item = &'a CategoryId>,
    ) {
        let Some(products) = self.products_by_key.get(&PredicateKey::Category(category)) else {
            return;
        };
        let mut slots: Vec<CampaignSlot> = changed
            .filter_map(|ancestor| self.campaigns_by_key.get(&PredicateKey::Category(*ancestor)))
            .flatten()
            .copied()
            .collect();
        slots.sort_unstable();
        slots.dedup();
        for &slot in &slots {
            let Some(campaign) = &self.campaigns[slot as usize].1 else {
                continue;
            };
            for product_slot in products {
                let Some(product) = &self.products[*product_slot as usize] else {
                    continue;
                };
                let (was, is) = (
                    is_eligible(product, before, campaign),
                    is_eligible(product, after, campaign),
                );
                if was != is {
                    let sign = if is { 1 } else { -1 };
                    add(&mut self.deltas, (slot, product.seller_id), product.stock, sign);
                }
            }
        }
    }

    fn apply_campaign(&mut self, key: &str, new: Option<Campaign>) {
        let slot = match self.campaign_slots.get(key) {
            Some(&slot) => slot,
            None => {
                self.campaigns.push((key.to_owned(), None));
                let slot = (self.campaigns.len() - 1) as CampaignSlot;
                self.campaign_slots.insert(key.to_owned(), slot);
                slot
            }
        };
        if self.campaigns[slot as usize].1 == new {
            return;
        }
        self.count_campaign(slot, -1);
        self.index_campaign_slot(slot, false);
        self.campaigns[slot as usize].1 = new;
        self.index_campaign_slot(slot, true);
        self.count_campaign(slot, 1);
    }
}

/// Adds (`sign` 1) or retracts (-1) one product's share of a pair.
fn add(deltas: &mut FastMap<Pair, (i64, i64)>, pair: Pair, stock: u32, sign: i64) {
    let delta = deltas.entry(pair).or_default();
    delta.0 += sign;
    delta.1 += sign * i64::from(stock);
}

/// The ancestors of `category` besides itself, sorted: every category reached by following
/// parents, up to a root or back to a category already passed (a cycle), as the reference
/// finds them.
fn walk(parents: &FastMap<CategoryId, CategoryId>, category: CategoryId) -> Vec<CategoryId> {
    let mut ancestors = Vec::new();
    let mut at = category;
    while let Some(&parent) = parents.get(&at) {
        if parent == category || ancestors.contains(&parent) {
            break;
        }
        ancestors.push(parent);
        at = parent;
    }
    ancestors.sort_unstable();
    ancestors
}

/// What two sorted lists do not share: (only in `before`, only in `after`).
fn differences(before: &[CategoryId], after: &[CategoryId]) -> (Vec<CategoryId>, Vec<CategoryId>) {
    let lost = before
        .iter()
        .filter(|c| after.binary_search(c).is_err())
        .copied()
        .collect();
    let gained = after
        .iter()
        .filter(|c| before.binary_search(c).is_err())
        .copied()
        .collect();
    (lost, gained)
}

/// Adds a campaign slot to a short unordered list, or removes it.
fn edit_list(list: &mut Vec<u32>, slot: u32, add: bool) {
    if add {
        list.push(slot);
    } else if let Some(position) = list.iter().position(|s| *s == slot) {
        list.swap_remove(position);
    }
}

impl Incremental {
    /// Applies one batch and returns the changes of the pairs whose figures it changed, at
    /// `time`, as the engine's change output carries them (unsorted).
    pub fn apply_changes(&mut self, time: Time, batch: &[Record]) -> Vec<PairChange> {
        self.apply_records(batch);
        self.settle_deltas()
            .into_iter()
            .map(|((slot, seller_id), before, after)| PairChange {
                time,
                pair: self.pair_key(slot, seller_id),
                figures: figures(after),
                previous: figures(before),
            })
            .collect()
    }

    /// Adds the batch's deltas to the totals; returns each pair that moved, before and after.
    fn settle_deltas(&mut self) -> Vec<(Pair, Totals, Totals)> {
        let mut moved = Vec::new();
        for (pair, (products, stock)) in self.deltas.drain() {
            if (products, stock) == (0, 0) {
                continue;
            }
            let before = self.totals.get(&pair).copied().unwrap_or_default();
            let after = (
                before.0.checked_add_signed(products).expect("pair count went negative"),
                before.1.checked_add_signed(stock).expect("pair stock went negative"),
            );
            if after.0 == 0 {
                self.totals.remove(&pair);
            } else {
                self.totals.insert(pair, after);
            }
            moved.push((pair, before, after));
        }
        moved
    }

    fn apply_records(&mut self, batch: &[Record]) {
        for record in batch {
            match &record.change {
                Change::Product(product) => self.apply_product(&record.key, *product),
                Change::Campaign(campaign) => self.apply_campaign(&record.key, campaign.clone()),
                Change::Category(category) => self.apply_category(&record.key, *category),
            }
        }
    }

    fn pair_key(&self, slot: CampaignSlot, seller_id: SellerId) -> PairKey {
        PairKey {
            campaign_id: self.campaigns[slot as usize].0.clone(),
            seller_id,
        }
    }
}

/// A pair's running totals as figures; `None` for a pair with no eligible product.
fn figures((products, stock): (u64, u64)) -> Option<PairFigures> {
    (products > 0).then_some(PairFigures {
        eligible_products: products,
        eligible_stock: stock,
    })
}

impl Implementation for Incremental {
    fn name(&self) -> &'static str {
        "hand-written incremental"
    }

    fn apply(&mut self, batch: &[Record]) -> u64 {
        self.apply_records(batch);
        self.settle_deltas().len() as u64
    }

    fn pairs(&self) -> PairState {
        self.totals
            .iter()
            .filter_map(|(&(slot, seller_id), &totals)| Some((self.pair_key(slot, seller_id), figures(totals)?)))
            .collect()
    }
}
