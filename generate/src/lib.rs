//! A synthetic marketplace as an event log (SPEC.md's JSONL), for tests, demos and benches.
//!
//! Seller sizes, category and brand popularity are Zipf-like, as on a real marketplace: a
//! few sellers own many products, a few categories hold most of them. After the initial
//! load (campaigns, then products) comes a mix of updates: price and stock edits, moves to
//! another category, deletes, new products, identical re-sends, unknown tombstones,
//! campaign edits, deactivations, tombstones and new campaigns, with a configurable share
//! of malformed records. The same spec and seed always give the same bytes.
//!
//! With `tree_depth > 0` the categories form a tree (`tree`): the load starts with one
//! `categories` record per category, campaigns also name inner and top-level categories,
//! and the updates also move subtrees (a category gets another parent one level up, so the
//! tree stays acyclic and `tree_depth` deep), promote categories to the top level and
//! delete a few category records. With `tree_depth` 0 the log is the flat one, byte for
//! byte what it was before trees existed.

pub mod tree;
pub mod zipf;

use std::io::Write;

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use dataflows::model::{Campaign, Category, CategoryId, Product};

use self::tree::{category_value, Tree};
use self::zipf::Zipf;

/// What to generate.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MarketplaceSpec {
    pub products: u64,
    pub sellers: u64,
    pub categories: u64,
    pub brands: u64,
    pub campaigns: u64,
    /// Events after the initial load.
    pub updates: u64,
    /// Share of records, in `[0, 1]`, that are malformed.
    pub malformed_share: f64,
    /// Zipf exponent of products per seller.
    pub seller_skew: f64,
    /// Zipf exponent of products per category (and brand).
    pub category_skew: f64,
    pub seed: u64,
    /// Levels of the category tree: 0 for none (no `categories` records: the flat
    /// marketplace), 1 for top-level categories only, 5 for five levels.
    #[serde(default)]
    pub tree_depth: u32,
    /// Children of each inner category (the last level may be partly filled); the number
    /// of top-level categories follows from `categories`, `tree_depth` and this.
    #[serde(default = "default_tree_fanout")]
    pub tree_fanout: u64,
}

/// The default fan-out: 1,000 categories five levels deep make 9 top-level ones.
pub const DEFAULT_TREE_FANOUT: u64 = 3;

fn default_tree_fanout() -> u64 {
    DEFAULT_TREE_FANOUT
}

/// Share of the updates that change the category tree, when there is one.
pub const TREE_UPDATE_SHARE: f64 = 0.01;

impl Default for MarketplaceSpec {
    fn default() -> Self {
        MarketplaceSpec {
            products: 100_000,
            sellers: 2_000,
            categories: 500,
            brands: 1_000,
            campaigns: 50,
            updates: 100_000,
            malformed_share: 0.001,
            seller_skew: 0.9,
            category_skew: 1.0,
            seed: 1,
            tree_depth: 0,
            tree_fanout: DEFAULT_TREE_FANOUT,
        }
    }
}

/// How many records of each kind were written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GenerateStats {
    pub lines: u64,
    pub product_records: u64,
    pub campaign_records: u64,
    pub category_records: u64,
    pub malformed: u64,
}

#[derive(Clone, Copy)]
struct ProductState {
    seller: u64,
    category: u64,
    brand: u64,
    price_cents: u64,
    stock: u64,
}

#[derive(Clone)]
struct CampaignState {
    categories: Vec<u64>,
    brands: Vec<u64>,
    sellers: Vec<u64>,
    excluded: Vec<u64>,
    min_price_cents: Option<u64>,
    max_price_cents: Option<u64>,
    min_stock: u64,
    active: bool,
}

struct Generator<'w> {
    spec: MarketplaceSpec,
    rng: ChaCha8Rng,
    sellers: Zipf,
    categories: Zipf,
    brands: Zipf,
    products: Vec<Option<ProductState>>,
    campaigns: Vec<Option<CampaignState>>,
    /// The category tree, when `tree_depth > 0`.
    tree: Option<Tree>,
    out: &'w mut dyn Write,
    stats: GenerateStats,
    line: String,
}

/// Writes the event log for `spec` to `out`.
pub fn generate(spec: &MarketplaceSpec, out: &mut dyn Write) -> std::io::Result<GenerateStats> {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    // No draw at all without a tree, so a flat log is what it was before trees.
    let tree = (spec.tree_depth > 0).then(|| Tree::new(spec.categories, spec.tree_depth, spec.tree_fanout, &mut rng));
    let mut generator = Generator {
        rng,
        tree,
        sellers: Zipf::new(spec.sellers, spec.seller_skew),
        categories: Zipf::new(spec.categories, spec.category_skew),
        brands: Zipf::new(spec.brands, spec.category_skew),
        products: Vec::with_capacity(spec.products as usize),
        campaigns: Vec::new(),
        spec: spec.clone(),
        out,
        stats: GenerateStats::default(),
        line: String::with_capacity(256),
    };
    generator.run()?;
    generator.out.flush()?;
    Ok(generator.stats)
}

/// The event log for `spec`, in memory.
pub fn generate_to_vec(spec: &MarketplaceSpec) -> Vec<u8> {
    let mut bytes = Vec::new();
    generate(spec, &mut bytes).expect("writing to memory cannot fail");
    bytes
}

/// One event-log line that upserts (or with `None`, deletes) a product, as the generator
/// writes it.
pub fn product_line(key: &str, product: Option<&Product>) -> String {
    let value = product.map_or_else(
        || "null".to_owned(),
        |p| Generator::product_value(&ProductState::from(p)),
    );
    format!(r#"{{"topic": "products", "key": "{key}", "value": {value}}}"#)
}

/// One event-log line that upserts (or with `None`, deletes) a category.
pub fn category_line(id: CategoryId, category: Option<&Category>) -> String {
    let value = category.map_or_else(|| "null".to_owned(), |c| category_value(c.parent_id));
    format!(r#"{{"topic": "categories", "key": "{id}", "value": {value}}}"#)
}

/// One event-log line that upserts (or with `None`, deletes) a campaign.
pub fn campaign_line(key: &str, campaign: Option<&Campaign>) -> String {
    let value = campaign.map_or_else(
        || "null".to_owned(),
        |c| Generator::campaign_value(&CampaignState::from(c)),
    );
    format!(r#"{{"topic": "campaigns", "key": "{key}", "value": {value}}}"#)
}

impl From<&Product> for ProductState {
    fn from(p: &Product) -> Self {
        ProductState {
            seller: p.seller_id,
            category: p.category_id,
            brand: p.brand_id,
            price_cents: p.price_minor,
            stock: u64::from(p.stock),
        }
    }
}

impl From<&Campaign> for CampaignState {
    fn from(c: &Campaign) -> Self {
        CampaignState {
            categories: c.category_ids.iter().collect(),
            brands: c.brand_ids.iter().collect(),
            sellers: c.seller_ids.iter().collect(),
            excluded: c.excluded_seller_ids.iter().collect(),
            min_price_cents: c.min_price_minor,
            max_price_cents: c.max_price_minor,
            min_stock: c.min_stock,
            active: c.active,
        }
    }
}

fn price_text(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

fn id_list(ids: &[u64]) -> String {
    let items: Vec<String> = ids.iter().map(u64::to_string).collect();
    format!("[{}]", items.join(", "))
}

impl Generator<'_> {
    fn run(&mut self) -> std::io::Result<()> {
        for id in 0..self.tree.as_ref().map_or(0, Tree::len) {
            self.emit_category(id)?;
        }
        for _ in 0..self.spec.campaigns {
            let campaign = self.new_campaign();
            self.campaigns.push(Some(campaign));
            self.emit_campaign(self.campaigns.len() - 1)?;
        }
        for _ in 0..self.spec.products {
            let product = self.new_product();
            self.products.push(Some(product));
            self.emit_product(self.products.len() - 1)?;
        }
        for _ in 0..self.spec.updates {
            self.update()?;
        }
        Ok(())
    }

    fn write_line(&mut self) -> std::io::Result<()> {
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes())?;
        self.stats.lines += 1;
        Ok(())
    }

    /// Writes the line in `self.line`, or a malformed variant of it now and then.
    fn emit(&mut self, topic: &str, key: &str, value: &str) -> std::io::Result<()> {
        self.line.clear();
        if self.spec.malformed_share > 0.0 && self.rng.random_bool(self.spec.malformed_share.min(1.0)) {
            self.line = self.malformed(topic, key, value);
            self.stats.malformed += 1;
        } else {
            self.line = format!(r#"{{"topic": "{topic}", "key": "{key}", "value": {value}}}"#);
            match topic {
                "products" => self.stats.product_records += 1,
                "campaigns" => self.stats.campaign_records += 1,
                _ => self.stats.category_records += 1,
            }
        }
        self.write_line()
    }

    fn malformed(&mut self, topic: &str, key: &str, value: &str) -> String {
        let good = format!(r#"{{"topic": "{topic}", "key": "{key}", "value": {value}}}"#);
        match self.rng.random_range(0..9) {
            0 => good[..good.len() / 2].to_owned(),
            1 => format!(r#"{{"topic": "{topic}", "value": {value}}}"#),
            2 => format!(r#"{{"topic": "orders", "key": "{key}", "value": {value}}}"#),
            3 => format!(r#"{{"topic": "{topic}", "key": "", "value": {value}}}"#),
            4 => format!(r#"{{"topic": "{topic}", "key": "{key}", "value": [1, 2]}}"#),
            5 if topic == "products" => format!(
                r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 1.5}}}}"#
            ),
            6 if topic == "products" => format!(
                r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": "9.99", "stock": 1}}}}"#
            ),
            7 if topic == "products" => format!(
                r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 9.99, "stock": -4}}}}"#
            ),
            5 if topic == "categories" => {
                format!(r#"{{"topic": "categories", "key": "cat-{key}", "value": {value}}}"#)
            }
            6 if topic == "categories" => {
                format!(r#"{{"topic": "categories", "key": "{key}", "value": {{"parent_id": "{key}"}}}}"#)
            }
            7 if topic == "categories" => {
                format!(r#"{{"topic": "categories", "key": "{key}", "value": {{"parent_id": -1}}}}"#)
            }
            _ if topic == "campaigns" => {
                format!(
                    r#"{{"topic": "campaigns", "key": "{key}", "value": {{"category_ids": "all", "min_stock": 1}}}}"#
                )
            }
            _ => format!(r#"{{"topic": "{topic}", "key": 17, "value": {value}}}"#),
        }
    }

    fn product_value(p: &ProductState) -> String {
        format!(
            r#"{{"seller_id": {}, "category_id": {}, "brand_id": {}, "price": {}, "stock": {}}}"#,
            p.seller,
            p.category,
            p.brand,
            price_text(p.price_cents),
            p.stock
        )
    }

    fn campaign_value(c: &CampaignState) -> String {
        let mut fields = Vec::new();
        if !c.categories.is_empty() {
            fields.push(format!(r#""category_ids": {}"#, id_list(&c.categories)));
        }
        if !c.brands.is_empty() {
            fields.push(format!(r#""brand_ids": {}"#, id_list(&c.brands)));
        }
        if !c.sellers.is_empty() {
            fields.push(format!(r#""seller_ids": {}"#, id_list(&c.sellers)));
        }
        if !c.excluded.is_empty() {
            fields.push(format!(r#""excluded_seller_ids": {}"#, id_list(&c.excluded)));
        }
        if let Some(min) = c.min_price_cents {
            fields.push(format!(r#""min_price": {}"#, price_text(min)));
        }
        if let Some(max) = c.max_price_cents {
            fields.push(format!(r#""max_price": {}"#, price_text(max)));
        }
        if c.min_stock > 0 {
            fields.push(format!(r#""min_stock": {}"#, c.min_stock));
        }
        if !c.active {
            fields.push(r#""active": false"#.to_owned());
        }
        format!("{{{}}}", fields.join(", "))
    }

    fn emit_product(&mut self, index: usize) -> std::io::Result<()> {
        let key = format!("p-{index}");
        let value = match &self.products[index] {
            Some(product) => Self::product_value(product),
            None => "null".to_owned(),
        };
        self.emit("products", &key, &value)
    }

    fn emit_category(&mut self, id: CategoryId) -> std::io::Result<()> {
        let value = self.tree.as_ref().expect("only with a tree").value(id);
        self.emit("categories", &id.to_string(), &value)
    }

    /// The category of popularity rank `rank`: the rank itself without a tree.
    fn category_of(&self, rank: u64) -> CategoryId {
        match &self.tree {
            Some(tree) => tree.by_rank[rank as usize],
            None => rank,
        }
    }

    fn sample_category(&mut self) -> CategoryId {
        let rank = self.categories.sample(&mut self.rng);
        self.category_of(rank)
    }

    fn emit_campaign(&mut self, index: usize) -> std::io::Result<()> {
        let key = format!("c-{index}");
        let value = match &self.campaigns[index] {
            Some(campaign) => Self::campaign_value(campaign),
            None => "null".to_owned(),
        };
        self.emit("campaigns", &key, &value)
    }

    fn price(&mut self) -> u64 {
        // Log-uniform between 1.00 and 5000.00, with the endings shops use.
        let cents = (100.0 * (self.rng.random::<f64>() * 5000f64.ln()).exp()) as u64;
        let ending = *[0u64, 90, 99, 50].choose(&mut self.rng).expect("non-empty");
        (cents / 100) * 100 + ending
    }

    fn stock(&mut self) -> u64 {
        if self.rng.random_bool(0.15) {
            0
        } else {
            (self.rng.random::<f64>() * 500f64.ln()).exp() as u64
        }
    }

    fn new_product(&mut self) -> ProductState {
        ProductState {
            seller: self.sellers.sample(&mut self.rng),
            category: self.sample_category(),
            brand: self.brands.sample(&mut self.rng),
            price_cents: self.price(),
            stock: self.stock(),
        }
    }

    fn sample_distinct(&mut self, count: usize, from: fn(&Self, &mut ChaCha8Rng) -> u64) -> Vec<u64> {
        let mut rng = self.rng.clone();
        let mut ids: Vec<u64> = (0..count).map(|_| from(self, &mut rng)).collect();
        self.rng = rng;
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn new_campaign(&mut self) -> CampaignState {
        let mut campaign = CampaignState {
            categories: Vec::new(),
            brands: Vec::new(),
            sellers: Vec::new(),
            excluded: Vec::new(),
            min_price_cents: None,
            max_price_cents: None,
            min_stock: 0,
            active: self.rng.random_bool(0.95),
        };
        match self.rng.random_range(0..100) {
            0..65 => {
                campaign.categories = match self.tree {
                    None => self.popular_categories(),
                    Some(_) => self.tree_categories(),
                };
                if self.rng.random_bool(0.25) {
                    let n = self.rng.random_range(1..=5);
                    campaign.brands = self.sample_distinct(n, |g, rng| g.brands.sample(rng));
                }
            }
            65..80 => {
                let n = self.rng.random_range(1..=8);
                campaign.brands = self.sample_distinct(n, |g, rng| g.brands.sample(rng));
            }
            80..88 => {
                let n = self.rng.random_range(5..=200);
                campaign.sellers = self.sample_distinct(n, |g, rng| rng.random_range(0..g.spec.sellers.max(1)));
            }
            _ => {}
        }
        if self.rng.random_bool(0.4) {
            let min = self.rng.random_range(0..20_000);
            let max = min + self.rng.random_range(5_000..200_000);
            match self.rng.random_range(0..3) {
                0 => campaign.min_price_cents = Some(min),
                1 => campaign.max_price_cents = Some(max),
                _ => {
                    campaign.min_price_cents = Some(min);
                    campaign.max_price_cents = Some(max);
                }
            }
        }
        if self.rng.random_bool(0.35) {
            campaign.min_stock = self.rng.random_range(1..=20);
        }
        if self.rng.random_bool(0.15) {
            let n = self.rng.random_range(1..=20);
            campaign.excluded = self.sample_distinct(n, |g, rng| g.sellers.sample(rng));
        }
        campaign
    }

    /// 1 to 12 categories by popularity: what a flat marketplace's campaign names.
    fn popular_categories(&mut self) -> Vec<CategoryId> {
        let n = self.rng.random_range(1..=12);
        self.sample_distinct(n, |g, rng| g.category_of(g.categories.sample(rng)))
    }

    /// What a campaign names under a tree: popular (mostly leaf) categories, or one to
    /// three inner ones (with a few popular ones now and then, some below them), or one
    /// top-level category.
    fn tree_categories(&mut self) -> Vec<CategoryId> {
        let tree = self.tree.as_ref().expect("only with a tree");
        let (inner, roots) = (tree.inner.clone(), tree.roots().to_vec());
        match self.rng.random_range(0..100) {
            40..85 if !inner.is_empty() => {
                let n = self.rng.random_range(1..=3);
                let mut ids: Vec<CategoryId> = (0..n)
                    .map(|_| *inner.choose(&mut self.rng).expect("non-empty"))
                    .collect();
                if self.rng.random_bool(0.3) {
                    ids.extend(self.popular_categories());
                }
                ids.sort_unstable();
                ids.dedup();
                ids
            }
            85..100 => vec![*roots.choose(&mut self.rng).expect("a tree has a root")],
            _ => self.popular_categories(),
        }
    }

    fn live_product(&mut self) -> Option<usize> {
        (0..8)
            .map(|_| self.rng.random_range(0..self.products.len().max(1)))
            .find(|index| self.products.get(*index).is_some_and(Option::is_some))
    }

    fn live_campaign(&mut self) -> Option<usize> {
        (0..8)
            .map(|_| self.rng.random_range(0..self.campaigns.len().max(1)))
            .find(|index| self.campaigns.get(*index).is_some_and(Option::is_some))
    }

    /// One update, out of 10,000: product changes dominate, as on a marketplace, where
    /// campaigns change a few times a day and products all the time.
    fn update(&mut self) -> std::io::Result<()> {
        if self.tree.is_some() && self.rng.random_bool(TREE_UPDATE_SHARE) {
            return self.tree_update();
        }
        let roll = self.rng.random_range(0..10_000);
        let product = if roll < 9_850 { self.live_product() } else { None };
        match (roll, product) {
            (0..3_300, Some(index)) => {
                let price = self.products[index].as_ref().map_or(0, |p| p.price_cents);
                let factor = self.rng.random_range(0.7..1.3);
                let new_price = ((price as f64 * factor) as u64).max(1);
                if let Some(p) = self.products[index].as_mut() {
                    p.price_cents = new_price;
                }
                self.emit_product(index)
            }
            (3_300..6_300, Some(index)) => {
                let stock = self.stock();
                if let Some(p) = self.products[index].as_mut() {
                    p.stock = stock;
                }
                self.emit_product(index)
            }
            (6_300..6_900, Some(index)) => {
                let category = self.sample_category();
                if let Some(p) = self.products[index].as_mut() {
                    p.category = category;
                }
                self.emit_product(index)
            }
            (6_900..7_100, Some(index)) => {
                let brand = self.brands.sample(&mut self.rng);
                if let Some(p) = self.products[index].as_mut() {
                    p.brand = brand;
                }
                self.emit_product(index)
            }
            (7_100..7_600, Some(index)) => {
                self.products[index] = None;
                self.emit_product(index)
            }
            // An identical re-send, as producers do after a retry.
            (7_600..8_300, Some(index)) => self.emit_product(index),
            (0..9_850, _) => {
                let product = self.new_product();
                self.products.push(Some(product));
                self.emit_product(self.products.len() - 1)
            }
            (9_850..9_900, _) => {
                // A tombstone for a key that never existed is valid and changes nothing.
                let key = format!("p-unknown-{}", self.rng.random::<u32>());
                self.emit("products", &key, "null")
            }
            (9_900..9_960, _) => match self.live_campaign() {
                Some(index) => {
                    self.edit_campaign(index);
                    self.emit_campaign(index)
                }
                None => self.add_campaign(),
            },
            (9_960..9_980, _) => match self.live_campaign() {
                Some(index) => {
                    if let Some(c) = self.campaigns[index].as_mut() {
                        c.active = !c.active;
                    }
                    self.emit_campaign(index)
                }
                None => self.add_campaign(),
            },
            (9_980..9_990, _) => match self.live_campaign() {
                Some(index) => {
                    self.campaigns[index] = None;
                    self.emit_campaign(index)
                }
                None => self.add_campaign(),
            },
            _ => self.add_campaign(),
        }
    }

    /// One change of the category tree: mostly a subtree move (a category gets another
    /// parent on the level above its own, as when a marketplace reorganises a department),
    /// else a promotion to the top level, a deleted record, an identical re-send, or a
    /// tombstone for a category that never had a record.
    fn tree_update(&mut self) -> std::io::Result<()> {
        let roll = self.rng.random_range(0..100);
        let tree = self.tree.as_ref().expect("only with a tree");
        let (n, first_below_roots) = (tree.len(), tree.roots().len() as u64);
        let id = match roll {
            0..85 if first_below_roots < n => self.rng.random_range(first_below_roots..n),
            _ => self.rng.random_range(0..n),
        };
        let level = tree.level[id as usize] as usize;
        let tree_parent = match roll {
            0..75 if level > 0 => {
                let above = &tree.by_level[level - 1];
                Some(Some(above[self.rng.random_range(0..above.len())]))
            }
            0..85 => Some(None),
            _ => None,
        };
        let tree = self.tree.as_mut().expect("only with a tree");
        match (roll, tree_parent) {
            (_, Some(parent)) => {
                tree.parent[id as usize] = parent;
                tree.deleted[id as usize] = false;
            }
            (85..92, None) => {
                tree.parent[id as usize] = None;
                tree.deleted[id as usize] = true;
            }
            (92..97, None) => {}
            _ => {
                let key = (n + u64::from(self.rng.random::<u32>())).to_string();
                return self.emit("categories", &key, "null");
            }
        }
        self.emit_category(id)
    }

    fn add_campaign(&mut self) -> std::io::Result<()> {
        let campaign = self.new_campaign();
        self.campaigns.push(Some(campaign));
        self.emit_campaign(self.campaigns.len() - 1)
    }

    fn edit_campaign(&mut self, index: usize) {
        let roll = self.rng.random_range(0..4);
        let category = self.sample_category();
        let min_stock = self.rng.random_range(0..=10);
        let max_price = self.rng.random_range(1_000..500_000);
        let Some(c) = self.campaigns[index].as_mut() else {
            return;
        };
        match roll {
            0 if !c.categories.is_empty() => {
                c.categories.push(category);
                c.categories.sort_unstable();
                c.categories.dedup();
            }
            0 | 1 => c.min_stock = min_stock,
            2 => c.max_price_cents = Some(max_price),
            _ => c.min_price_cents = c.min_price_cents.map_or(Some(500), |_| None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataflows::decode::Change;
    use dataflows::model::Topic;
    use dataflows::reference::ReferenceState;

    fn small() -> MarketplaceSpec {
        MarketplaceSpec {
            products: 500,
            sellers: 40,
            categories: 20,
            brands: 30,
            campaigns: 10,
            updates: 2_000,
            malformed_share: 0.02,
            seed: 7,
            ..MarketplaceSpec::default()
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_bytes_and_another_seed_does_not() {
        assert_eq!(generate_to_vec(&small()), generate_to_vec(&small()));
        assert_ne!(
            generate_to_vec(&small()),
            generate_to_vec(&MarketplaceSpec { seed: 8, ..small() })
        );
    }

    #[test]
    fn every_line_is_decoded_or_counted_as_malformed() {
        let bytes = generate_to_vec(&small());
        let mut stats = GenerateStats::default();
        generate(&small(), &mut std::io::sink()).map(|s| stats = s).unwrap();
        let mut rejected = 0;
        let mut lines = 0;
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            lines += 1;
            if dataflows::decode::decode_envelope(line).is_err() {
                rejected += 1;
            }
        }
        assert_eq!(lines, 10 + 500 + 2_000);
        assert_eq!(lines, stats.lines);
        assert_eq!(rejected, stats.malformed);
        assert!(stats.malformed > 10, "{stats:?}");
    }

    #[test]
    fn written_lines_decode_to_the_entities_they_were_made_from() {
        let product = Product {
            seller_id: 3,
            category_id: 4,
            brand_id: 5,
            price_minor: 1999,
            stock: 7,
        };
        let campaign = Campaign {
            category_ids: [4, 9].into_iter().collect(),
            max_price_minor: Some(5000),
            min_stock: 2,
            ..Campaign::unrestricted()
        };
        let decoded = dataflows::decode::decode_envelope(product_line("p-1", Some(&product)).as_bytes()).unwrap();
        assert_eq!(decoded.change, dataflows::decode::Change::Product(Some(product)));
        let decoded = dataflows::decode::decode_envelope(campaign_line("c-1", Some(&campaign)).as_bytes()).unwrap();
        assert_eq!(decoded.change, dataflows::decode::Change::Campaign(Some(campaign)));
        let decoded = dataflows::decode::decode_envelope(product_line("p-1", None).as_bytes()).unwrap();
        assert_eq!(decoded.change, dataflows::decode::Change::Product(None));
    }

    #[test]
    fn without_a_tree_the_log_is_the_flat_one_of_before_trees() {
        // Digests of logs written before trees existed (`eligibility generate` at cffe72f).
        let mid = MarketplaceSpec {
            products: 20_000,
            updates: 30_000,
            malformed_share: 0.01,
            seed: 3,
            ..MarketplaceSpec::default()
        };
        for (spec, lines, digest) in [
            (small(), 2_510, 16_370_552_443_544_141_058u64),
            (mid, 50_050, 12_282_019_492_517_434_351),
        ] {
            let bytes = generate_to_vec(&spec);
            assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), lines);
            assert_eq!(xxhash_rust::xxh3::xxh3_64(&bytes), digest, "{spec:?}");
        }
    }

    fn tree() -> MarketplaceSpec {
        MarketplaceSpec {
            products: 3_000,
            categories: 200,
            updates: 20_000,
            tree_depth: 4,
            tree_fanout: 3,
            ..small()
        }
    }

    fn records(
        bytes: &[u8],
    ) -> impl Iterator<Item = Result<dataflows::decode::Record, dataflows::decode::DecodeError>> + '_ {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(dataflows::decode::decode_envelope)
    }

    /// The depth of `category` (0 for a root), or `None` on a cycle.
    fn depth(state: &ReferenceState, category: CategoryId) -> Option<u32> {
        let mut at = category;
        let mut depth = 0;
        while let Some(parent) = state.categories.get(&at).and_then(|c| c.parent_id) {
            depth += 1;
            if depth > 64 {
                return None;
            }
            at = parent;
        }
        Some(depth)
    }

    #[test]
    fn a_tree_loads_first_and_campaigns_and_products_use_every_level() {
        let spec = MarketplaceSpec {
            updates: 0,
            malformed_share: 0.0,
            campaigns: 60,
            ..tree()
        };
        assert_eq!(generate_to_vec(&spec), generate_to_vec(&spec));
        let mut state = ReferenceState::default();
        let mut kinds = Vec::new();
        for record in records(&generate_to_vec(&spec)) {
            let record = record.unwrap();
            let topic = record.change.topic();
            if kinds.last() != Some(&topic) {
                kinds.push(topic);
            }
            state.apply(&record.key, &record.change);
        }
        assert_eq!(kinds, [Topic::Categories, Topic::Campaigns, Topic::Products]);
        // 1 + 3 + 9 + 27 = 40 a tree: 5 trees of 4 levels.
        assert_eq!(state.categories.len(), 200);
        let roots: Vec<CategoryId> = (0..200).filter(|id| depth(&state, *id) == Some(0)).collect();
        assert_eq!(roots, [0, 1, 2, 3, 4]);
        assert!((0..200).all(|id| depth(&state, id).is_some_and(|d| d < 4)));
        let mut children = std::collections::BTreeMap::<CategoryId, u32>::new();
        for category in state.categories.values() {
            if let Some(parent) = category.parent_id {
                *children.entry(parent).or_default() += 1;
            }
        }
        assert!(children.values().all(|n| *n <= 3));
        let inner = |id: &CategoryId| children.contains_key(id);
        let on_inner = state.products.values().filter(|p| inner(&p.category_id)).count();
        assert!(
            on_inner > 0 && on_inner < state.products.len() / 5,
            "{on_inner} products on inner categories"
        );
        let named: Vec<CategoryId> = state.campaigns.values().flat_map(|c| c.category_ids.iter()).collect();
        assert!(
            named.iter().any(|id| roots.contains(id)),
            "a campaign names a top-level category"
        );
        assert!(named.iter().any(|id| inner(id) && !roots.contains(id)));
        assert!(named.iter().any(|id| !inner(id)));
    }

    #[test]
    fn tree_updates_move_subtrees_and_delete_records_and_the_tree_stays_acyclic() {
        let spec = tree();
        let bytes = generate_to_vec(&spec);
        assert_ne!(bytes, generate_to_vec(&MarketplaceSpec { seed: 8, ..tree() }));
        let stats = generate(&spec, &mut std::io::sink()).unwrap();
        let mut state = ReferenceState::default();
        let (mut moves, mut promotions, mut tombstones, mut unknown) = (0, 0, 0, 0);
        let (mut rejected, mut categories) = (0, 0);
        for record in records(&bytes) {
            let Ok(record) = record else {
                rejected += 1;
                continue;
            };
            if let Change::Category(value) = &record.change {
                categories += 1;
                let id: CategoryId = record.key.parse().unwrap();
                match (state.categories.get(&id).map(|c| c.parent_id), value) {
                    (_, None) if id >= 200 => unknown += 1,
                    (_, None) => tombstones += 1,
                    (Some(Some(old)), Some(Category { parent_id: Some(new) })) if old != *new => moves += 1,
                    (Some(Some(_)), Some(Category { parent_id: None })) => promotions += 1,
                    _ => {}
                }
            }
            state.apply(&record.key, &record.change);
            if let Change::Category(_) = record.change {
                for id in 0..200 {
                    assert!(
                        depth(&state, id).is_some_and(|d| d < 4),
                        "category {id} after {}",
                        record.key
                    );
                }
            }
        }
        assert_eq!(rejected, stats.malformed);
        assert_eq!(categories, stats.category_records);
        assert_eq!(stats.lines, 200 + 10 + 3_000 + 20_000);
        // About 1% of 20,000 updates change the tree.
        assert!(categories > 200 + 120 && categories < 200 + 300, "{stats:?}");
        assert!(
            moves > 100 && promotions > 5 && tombstones > 5 && unknown > 0,
            "{moves} {promotions} {tombstones} {unknown}"
        );
    }

    #[test]
    fn malformed_category_records_are_rejected() {
        let spec = MarketplaceSpec {
            malformed_share: 0.5,
            updates: 0,
            ..tree()
        };
        let bytes = generate_to_vec(&spec);
        let mut codes = std::collections::BTreeSet::new();
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).take(200) {
            if let Err(error) = dataflows::decode::decode_envelope(line) {
                codes.insert(error.code());
            }
        }
        for code in [
            "bad_key",
            "wrong_type",
            "negative",
            "invalid_json",
            "missing_key",
            "unknown_topic",
        ] {
            assert!(codes.contains(code), "{code} in {codes:?}");
        }
    }

    #[test]
    fn category_lines_decode() {
        for category in [
            Some(Category { parent_id: Some(10) }),
            Some(Category { parent_id: None }),
            None,
        ] {
            let decoded =
                dataflows::decode::decode_envelope(category_line(1001, category.as_ref()).as_bytes()).unwrap();
            assert_eq!(decoded.key, "1001");
            assert_eq!(decoded.change, Change::Category(category));
        }
    }

    #[test]
    fn seller_sizes_are_skewed() {
        let spec = MarketplaceSpec {
            updates: 0,
            malformed_share: 0.0,
            ..small()
        };
        let bytes = generate_to_vec(&spec);
        let mut per_seller = std::collections::HashMap::new();
        for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let record = dataflows::decode::decode_envelope(line).unwrap();
            if let dataflows::decode::Change::Product(Some(p)) = record.change {
                *per_seller.entry(p.seller_id).or_insert(0u32) += 1;
            }
        }
        let mut sizes: Vec<u32> = per_seller.into_values().collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        assert!(sizes[0] > 5 * sizes[sizes.len() / 2], "{sizes:?}");
    }
}
