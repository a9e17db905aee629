//! The hand-written incremental implementation: the same computation as the engine, with
//! the same predicate index, in hash maps on one thread. It is the practical speed limit
//! of one core, against which the engine's per-worker rate is judged.

use std::collections::{HashMap, HashSet};

use dataflows::decode::{Change, Record};
use dataflows::model::{Campaign, PairFigures, PairKey, Product, SellerId};
use dataflows::reference::PairState;
use dataflows::rule::{index_campaign, is_eligible, CampaignIndex, PredicateKey};

use super::Implementation;

type CampaignSlot = u32;
type ProductSlot = u32;

/// Products and campaigns in slabs, both indexed by predicate key, and the running totals.
#[derive(Default)]
pub struct Incremental {
    product_slots: HashMap<String, ProductSlot>,
    products: Vec<Option<Product>>,
    free_products: Vec<ProductSlot>,
    products_by_key: HashMap<PredicateKey, HashSet<ProductSlot>>,
    campaign_slots: HashMap<String, CampaignSlot>,
    campaigns: Vec<(String, Option<Campaign>)>,
    campaigns_by_key: HashMap<PredicateKey, Vec<CampaignSlot>>,
    unrestricted: Vec<CampaignSlot>,
    totals: HashMap<(CampaignSlot, SellerId), (u64, u64)>,
    /// Pairs touched by the batch being applied, with their totals before it.
    touched: HashMap<(CampaignSlot, SellerId), (u64, u64)>,
}

impl Incremental {
    pub fn new() -> Self {
        Self::default()
    }

    fn add(&mut self, pair: (CampaignSlot, SellerId), stock: u32, sign: i8) {
        let totals = self.totals.entry(pair).or_default();
        self.touched.entry(pair).or_insert(*totals);
        if sign > 0 {
            totals.0 += 1;
            totals.1 += u64::from(stock);
        } else {
            totals.0 -= 1;
            totals.1 -= u64::from(stock);
        }
        if totals.0 == 0 {
            self.totals.remove(&pair);
        }
    }

    /// Adds (`sign` 1) or removes (-1) a product's contribution to every campaign it meets.
    fn count_product(&mut self, product: &Product, sign: i8) {
        let mut candidates: Vec<CampaignSlot> = self.unrestricted.clone();
        for key in product.predicate_keys() {
            if let Some(slots) = self.campaigns_by_key.get(&key) {
                candidates.extend_from_slice(slots);
            }
        }
        for slot in candidates {
            let eligible = self.campaigns[slot as usize]
                .1
                .as_ref()
                .is_some_and(|c| is_eligible(product, c));
            if eligible {
                self.add((slot, product.seller_id), product.stock, sign);
            }
        }
    }

    /// Adds or removes a campaign's contribution over the products under its keys.
    fn count_campaign(&mut self, slot: CampaignSlot, sign: i8) {
        let Some(campaign) = self.campaigns[slot as usize].1.clone() else {
            return;
        };
        let mut candidates: Vec<ProductSlot> = Vec::new();
        match index_campaign(&campaign) {
            None => {}
            Some(CampaignIndex::EveryCategory(_)) => candidates
                .extend((0..self.products.len() as ProductSlot).filter(|s| self.products[*s as usize].is_some())),
            Some(CampaignIndex::Keys(keys, _)) => {
                for key in keys {
                    candidates.extend(self.products_by_key.get(&key).into_iter().flatten());
                }
            }
        }
        for product_slot in candidates {
            if let Some(product) = self.products[product_slot as usize] {
                if is_eligible(&product, &campaign) {
                    self.add((slot, product.seller_id), product.stock, sign);
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

/// Adds a campaign slot to a short unordered list, or removes it.
fn edit_list(list: &mut Vec<u32>, slot: u32, add: bool) {
    if add {
        list.push(slot);
    } else if let Some(position) = list.iter().position(|s| *s == slot) {
        list.swap_remove(position);
    }
}

impl Implementation for Incremental {
    fn name(&self) -> &'static str {
        "hand-written incremental"
    }

    fn apply(&mut self, batch: &[Record]) -> u64 {
        for record in batch {
            match &record.change {
                Change::Product(product) => self.apply_product(&record.key, *product),
                Change::Campaign(campaign) => self.apply_campaign(&record.key, campaign.clone()),
            }
        }
        let touched = std::mem::take(&mut self.touched);
        touched
            .into_iter()
            .filter(|(pair, before)| self.totals.get(pair).copied().unwrap_or_default() != *before)
            .count() as u64
    }

    fn pairs(&self) -> PairState {
        self.totals
            .iter()
            .map(|((slot, seller_id), (products, stock))| {
                let pair = PairKey {
                    campaign_id: self.campaigns[*slot as usize].0.clone(),
                    seller_id: *seller_id,
                };
                let figures = PairFigures {
                    eligible_products: *products,
                    eligible_stock: *stock,
                };
                (pair, figures)
            })
            .collect()
    }
}
