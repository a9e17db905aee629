//! The two recompute approaches of the background article.
//!
//! *Per pair*: for each (seller, campaign) pair a change may touch, recount the pair by
//! filtering that seller's products, and write the result.
//! *Per campaign*: for each campaign a change may touch, rerun its aggregation (a filtered
//! terms aggregation on seller, as one Elasticsearch query does) and write every bucket.
//! The aggregation finds its candidates through a category/brand/seller index, as the
//! search engine's inverted index would, rather than scanning every product.
//!
//! Both decide which pairs or campaigns a product change touches by checking the old and
//! the new product against every campaign, the cheapest honest test they have. A category
//! tree is kept as each category's ancestors, found again by walking parents after any
//! change of it (a category service's cache); a tree change touches the campaigns naming
//! the moved category or an ancestor it had or has.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use dataflows::decode::{decode_category_id, Change, Record};
use dataflows::model::{Campaign, CategoryId, PairFigures, PairKey, Product, SellerId};
use dataflows::reference::{PairState, ReferenceState};
use dataflows::rule::{index_campaign, is_eligible, CampaignIndex, PredicateKey, NO_ANCESTORS};

use super::implementation::Implementation;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    PerPair,
    PerCampaign,
}

/// Products by id, by seller and by predicate key; campaigns; the pairs last written.
pub struct Recompute {
    strategy: Strategy,
    products: HashMap<String, Product>,
    by_seller: HashMap<SellerId, HashMap<String, Product>>,
    by_key: HashMap<PredicateKey, HashSet<String>>,
    campaigns: BTreeMap<String, Campaign>,
    pairs: HashMap<PairKey, PairFigures>,
    /// The category records (and nothing else: `ancestors` walks their parents).
    tree: ReferenceState,
    /// Each category's ancestors besides itself; only categories that have some.
    ancestors: HashMap<CategoryId, Vec<CategoryId>>,
    /// Each category's descendants besides itself.
    descendants: HashMap<CategoryId, Vec<CategoryId>>,
}

impl Recompute {
    pub fn new(strategy: Strategy) -> Self {
        Recompute {
            strategy,
            products: HashMap::new(),
            by_seller: HashMap::new(),
            by_key: HashMap::new(),
            campaigns: BTreeMap::new(),
            pairs: HashMap::new(),
            tree: ReferenceState::default(),
            ancestors: HashMap::new(),
            descendants: HashMap::new(),
        }
    }

    fn ancestors_of(&self, category: CategoryId) -> &[CategoryId] {
        self.ancestors.get(&category).map_or(NO_ANCESTORS, Vec::as_slice)
    }

    fn eligible(&self, product: &Product, campaign: &Campaign) -> bool {
        is_eligible(product, self.ancestors_of(product.category_id), campaign)
    }

    /// Walks every category's parents again.
    fn rebuild_tree(&mut self) {
        self.ancestors.clear();
        self.descendants.clear();
        for &category in self.tree.categories.keys() {
            let ancestors: Vec<CategoryId> = self.tree.ancestors(category).into_iter().collect();
            for ancestor in &ancestors {
                self.descendants.entry(*ancestor).or_default().push(category);
            }
            if !ancestors.is_empty() {
                self.ancestors.insert(category, ancestors);
            }
        }
    }

    /// Applies a record to the entities; returns the campaign ids whose pairs it may
    /// change, and for a product change the sellers concerned.
    fn store(&mut self, record: &Record) -> (Vec<String>, Vec<SellerId>) {
        match &record.change {
            Change::Product(new) => {
                let old = self.products.remove(&record.key);
                if let Some(old) = old {
                    if let Some(products) = self.by_seller.get_mut(&old.seller_id) {
                        products.remove(&record.key);
                    }
                    for key in old.predicate_keys() {
                        if let Some(ids) = self.by_key.get_mut(&key) {
                            ids.remove(&record.key);
                        }
                    }
                }
                if let Some(new) = new {
                    self.products.insert(record.key.clone(), *new);
                    self.by_seller
                        .entry(new.seller_id)
                        .or_default()
                        .insert(record.key.clone(), *new);
                    for key in new.predicate_keys() {
                        self.by_key.entry(key).or_default().insert(record.key.clone());
                    }
                }
                let touched = self
                    .campaigns
                    .iter()
                    .filter(|(_, c)| {
                        old.is_some_and(|p| self.eligible(&p, c)) || new.is_some_and(|p| self.eligible(&p, c))
                    })
                    .map(|(id, _)| id.clone())
                    .collect();
                let sellers = old.iter().chain(new.iter()).map(|p| p.seller_id).collect();
                (touched, sellers)
            }
            Change::Campaign(new) => {
                match new {
                    Some(campaign) => self.campaigns.insert(record.key.clone(), campaign.clone()),
                    None => self.campaigns.remove(&record.key),
                };
                (vec![record.key.clone()], Vec::new())
            }
            Change::Category(_) => {
                let id = decode_category_id(&record.key).expect("a decoded category record has a decimal key");
                let mut around: HashSet<CategoryId> = self.ancestors_of(id).iter().copied().collect();
                self.tree.apply(&record.key, &record.change);
                self.rebuild_tree();
                around.extend(self.ancestors_of(id));
                around.insert(id);
                let touched = self
                    .campaigns
                    .iter()
                    .filter(|(_, c)| c.category_ids.iter().any(|named| around.contains(&named)))
                    .map(|(id, _)| id.clone())
                    .collect();
                (touched, Vec::new())
            }
        }
    }

    /// Recounts one pair from the seller's products.
    fn recount_pair(&self, campaign_id: &str, seller: SellerId) -> Option<PairFigures> {
        let campaign = self.campaigns.get(campaign_id)?;
        let mut figures = PairFigures {
            eligible_products: 0,
            eligible_stock: 0,
        };
        for product in self.by_seller.get(&seller)?.values() {
            if self.eligible(product, campaign) {
                figures.eligible_products += 1;
                figures.eligible_stock += u64::from(product.stock);
            }
        }
        (figures.eligible_products > 0).then_some(figures)
    }

    /// Writes one recount; returns 1, the write it made.
    fn write_pair(&mut self, campaign_id: &str, seller: SellerId) -> u64 {
        let pair = PairKey {
            campaign_id: campaign_id.to_owned(),
            seller_id: seller,
        };
        match self.recount_pair(campaign_id, seller) {
            Some(figures) => self.pairs.insert(pair, figures),
            None => self.pairs.remove(&pair),
        };
        1
    }

    /// One campaign's aggregation: its buckets by seller.
    fn aggregate(&self, campaign_id: &str) -> HashMap<SellerId, PairFigures> {
        let mut buckets: HashMap<SellerId, PairFigures> = HashMap::new();
        let Some(campaign) = self.campaigns.get(campaign_id) else {
            return buckets;
        };
        let mut count = |product: &Product| {
            if self.eligible(product, campaign) {
                let figures = buckets.entry(product.seller_id).or_insert(PairFigures {
                    eligible_products: 0,
                    eligible_stock: 0,
                });
                figures.eligible_products += 1;
                figures.eligible_stock += u64::from(product.stock);
            }
        };
        match index_campaign(campaign) {
            None => {}
            Some(CampaignIndex::EveryCategory(_)) => self.products.values().for_each(&mut count),
            Some(CampaignIndex::Keys(keys, _)) => {
                // A category's products, and those of the categories below it, once each.
                let mut visited = HashSet::new();
                for key in keys {
                    let below = match key {
                        PredicateKey::Category(category) => self.descendants.get(&category),
                        _ => None,
                    };
                    let below = below.into_iter().flatten().map(|c| PredicateKey::Category(*c));
                    for key in std::iter::once(key).chain(below) {
                        if !visited.insert(key) {
                            continue;
                        }
                        for id in self.by_key.get(&key).into_iter().flatten() {
                            count(&self.products[id]);
                        }
                    }
                }
            }
        }
        buckets
    }

    /// Replaces one campaign's pairs with a fresh aggregation; returns the writes.
    fn write_campaign(&mut self, campaign_id: &str) -> u64 {
        let buckets = self.aggregate(campaign_id);
        let stale: Vec<PairKey> = self
            .pairs
            .keys()
            .filter(|pair| pair.campaign_id == campaign_id && !buckets.contains_key(&pair.seller_id))
            .cloned()
            .collect();
        let writes = (buckets.len() + stale.len()) as u64;
        for pair in stale {
            self.pairs.remove(&pair);
        }
        for (seller_id, figures) in buckets {
            let pair = PairKey {
                campaign_id: campaign_id.to_owned(),
                seller_id,
            };
            self.pairs.insert(pair, figures);
        }
        writes
    }
}

impl Implementation for Recompute {
    fn name(&self) -> &'static str {
        match self.strategy {
            Strategy::PerPair => "per-pair recompute",
            Strategy::PerCampaign => "per-campaign aggregation",
        }
    }

    fn apply(&mut self, batch: &[Record]) -> u64 {
        let mut campaigns = BTreeSet::new();
        let mut pairs = BTreeSet::new();
        for record in batch {
            let (touched, sellers) = self.store(record);
            match (&record.change, self.strategy) {
                (Change::Campaign(_) | Change::Category(_), _) | (_, Strategy::PerCampaign) => {
                    campaigns.extend(touched)
                }
                (Change::Product(_), Strategy::PerPair) => {
                    for campaign in touched {
                        for seller in &sellers {
                            pairs.insert((campaign.clone(), *seller));
                        }
                    }
                }
            }
        }
        let mut writes = 0;
        match self.strategy {
            Strategy::PerCampaign => {
                for campaign in campaigns {
                    writes += self.write_campaign(&campaign);
                }
            }
            Strategy::PerPair => {
                // A campaign change touches every seller's pair with it.
                let sellers: Vec<SellerId> = self.by_seller.keys().copied().collect();
                for campaign in &campaigns {
                    let existing: Vec<SellerId> = self
                        .pairs
                        .keys()
                        .filter(|pair| &pair.campaign_id == campaign)
                        .map(|pair| pair.seller_id)
                        .collect();
                    for seller in sellers.iter().chain(&existing) {
                        pairs.insert((campaign.clone(), *seller));
                    }
                }
                for (campaign, seller) in pairs {
                    writes += self.write_pair(&campaign, seller);
                }
            }
        }
        writes
    }

    /// Stores everything, then computes every pair once: per pair, each seller's products
    /// filtered for each campaign; per campaign, each campaign's aggregation.
    fn bootstrap(&mut self, batches: &[&[Record]]) -> u64 {
        for batch in batches {
            self.apply_untimed(batch);
        }
        let campaigns: Vec<String> = self.campaigns.keys().cloned().collect();
        let mut writes = 0;
        match self.strategy {
            Strategy::PerCampaign => {
                for campaign in &campaigns {
                    writes += self.write_campaign(campaign);
                }
            }
            Strategy::PerPair => {
                let sellers: Vec<SellerId> = self.by_seller.keys().copied().collect();
                for campaign in &campaigns {
                    for seller in &sellers {
                        writes += self.write_pair(campaign, *seller);
                    }
                }
            }
        }
        writes
    }

    fn apply_untimed(&mut self, batch: &[Record]) {
        for record in batch {
            self.store(record);
        }
    }

    fn settle(&mut self) {
        let campaigns: Vec<String> = self.campaigns.keys().cloned().collect();
        self.pairs
            .retain(|pair, _| self.campaigns.contains_key(&pair.campaign_id));
        for campaign in campaigns {
            self.write_campaign(&campaign);
        }
    }

    fn pairs(&self) -> PairState {
        self.pairs
            .iter()
            .map(|(pair, figures)| (pair.clone(), *figures))
            .collect()
    }
}
