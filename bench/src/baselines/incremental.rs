//! The hand-written incremental implementation: the same computation as the engine, with
//! the same predicate index, in hash maps on one thread. It is the practical speed limit
//! of one core, against which the engine's per-worker rate is judged, so it is written as
//! one would for speed: integer slots, a fast hasher, and per-batch deltas summed per pair
//! before they touch the totals.

use dataflows::decode::{Change, Record};
use dataflows::hashing::{FastMap, FastSet};
use dataflows::model::{Campaign, PairChange, PairFigures, PairKey, Product, SellerId, Time};
use dataflows::reference::PairState;
use dataflows::rule::{index_campaign, is_eligible, CampaignIndex, PredicateKey};

use super::Implementation;

type CampaignSlot = u32;
type ProductSlot = u32;
type Pair = (CampaignSlot, SellerId);
/// A pair's (eligible products, eligible stock).
type Totals = (u64, u64);

/// Products and campaigns in slabs, both indexed by predicate key, and the running totals.
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
}

impl Incremental {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (`sign` 1) or removes (-1) a product's contribution to every campaign it meets.
    fn count_product(&mut self, product: &Product, sign: i64) {
        let keyed = product
            .predicate_keys()
            .into_iter()
            .filter_map(|key| self.campaigns_by_key.get(&key))
            .flatten();
        for &slot in keyed.chain(&self.unrestricted) {
            let eligible = self.campaigns[slot as usize]
                .1
                .as_ref()
                .is_some_and(|c| is_eligible(product, c));
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
        let mut count = |product: &Product| {
            if is_eligible(product, campaign) {
                add(&mut self.deltas, (slot, product.seller_id), product.stock, sign);
            }
        };
        match index_campaign(campaign) {
            None => {}
            Some(CampaignIndex::EveryCategory(_)) => self.products.iter().flatten().for_each(&mut count),
            Some(CampaignIndex::Keys(keys, _)) => {
                for key in keys {
                    for product_slot in self.products_by_key.get(&key).into_iter().flatten() {
                        if let Some(product) = &self.products[*product_slot as usize] {
                            count(product);
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
