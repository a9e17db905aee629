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
//!
//! Two options serve campaign windows (SPEC.md, "Campaign windows"; see `schedule`): with
//! `line_timestamps` every line carries a `"timestamp"` (milliseconds since the Unix epoch,
//! from `start_at_ms`, `line_interval_ms` apart), the clock of file mode; with
//! `scheduled_campaigns` a share of the campaigns carry `starts_at` / `ends_at` drawn within
//! the log's span, so they open and close while the job reads it (this turns timestamps on).
//! They draw from their own random streams: the marketplace is the one written without
//! them, and with their defaults (off) the log is byte for byte what it was before them.

pub mod schedule;
pub mod tree;
pub mod zipf;

use std::io::Write;

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use dataflows::instant::EpochNanos;
use dataflows::model::{Campaign, Category, CategoryId, Product};

use self::schedule::{Bound, LineClock, Schedule, WindowState};
use self::tree::{category_value, Tree};
use self::zipf::Zipf;

pub use self::schedule::{
    format_rfc3339_at_offset, parse_share, parse_start_at_ms, DEFAULT_LINE_INTERVAL_MS, DEFAULT_START_AT,
    DEFAULT_START_AT_MS, MAX_RFC3339_MS,
};

/// The greatest line timestamp: Kafka's record timestamps are signed 64-bit milliseconds.
pub use dataflows::decode::MAX_TIMESTAMP;

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
    /// Give every line a `"timestamp"`: milliseconds since the Unix epoch, `start_at_ms`
    /// for the first line and `line_interval_ms` more for each next one (file mode's clock).
    /// Also on when `scheduled_campaigns > 0`. Default off.
    #[serde(default, skip_serializing_if = "is_false")]
    pub line_timestamps: bool,
    /// The first line's timestamp, with line timestamps ([`DEFAULT_START_AT`]).
    #[serde(default = "default_start_at_ms", skip_serializing_if = "is_default_start_at_ms")]
    pub start_at_ms: u64,
    /// Milliseconds between two lines' timestamps, with line timestamps (1).
    #[serde(
        default = "default_line_interval_ms",
        skip_serializing_if = "is_default_line_interval_ms"
    )]
    pub line_interval_ms: u64,
    /// Share of the campaigns, in `[0, 1]`, that carry a window (`starts_at` / `ends_at`)
    /// opening and closing within the log's timestamps; more than 0 turns on line
    /// timestamps. Default 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scheduled_campaigns: f64,
}

// The options of campaign windows are left out of a serialized spec while they hold their
// defaults, so a spec serializes (in bench reports, in the rebuild bench's topics) as it
// did before they existed.
fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &f64) -> bool {
    *value == 0.0
}

fn default_start_at_ms() -> u64 {
    DEFAULT_START_AT_MS
}

fn is_default_start_at_ms(value: &u64) -> bool {
    *value == DEFAULT_START_AT_MS
}

fn default_line_interval_ms() -> u64 {
    DEFAULT_LINE_INTERVAL_MS
}

fn is_default_line_interval_ms(value: &u64) -> bool {
    *value == DEFAULT_LINE_INTERVAL_MS
}

impl MarketplaceSpec {
    /// Whether lines carry a `"timestamp"`: asked for, or needed by scheduled campaigns
    /// (without timestamps file mode's clock stays at the beginning of time and no window
    /// would ever open).
    pub fn has_line_timestamps(&self) -> bool {
        self.line_timestamps || self.scheduled_share() > 0.0
    }

    /// `scheduled_campaigns` within `[0, 1]` (0 for NaN).
    fn scheduled_share(&self) -> f64 {
        if self.scheduled_campaigns.is_nan() {
            0.0
        } else {
            self.scheduled_campaigns.clamp(0.0, 1.0)
        }
    }

    /// How many lines the log has: every category, campaign and product of the load and
    /// one line an update.
    fn line_count(&self, tree: Option<&Tree>) -> u64 {
        tree.map_or(0, Tree::len)
            .saturating_add(self.campaigns)
            .saturating_add(self.products)
            .saturating_add(self.updates)
    }
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
            line_timestamps: false,
            start_at_ms: DEFAULT_START_AT_MS,
            line_interval_ms: DEFAULT_LINE_INTERVAL_MS,
            scheduled_campaigns: 0.0,
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
    /// Campaigns given a window when created (scheduled campaigns).
    pub scheduled_campaigns: u64,
    /// Campaign records (valid upserts, among `campaign_records`) that carry a window: a
    /// `starts_at`, an `ends_at` or both.
    pub campaign_records_with_window: u64,
    /// The first and the last line's timestamps (milliseconds since the Unix epoch), when
    /// lines carry them: the span the windows lie in.
    pub first_timestamp_ms: Option<u64>,
    pub last_timestamp_ms: Option<u64>,
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
    window: WindowState,
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
    /// The lines' timestamps, with line timestamps.
    clock: Option<LineClock>,
    /// The campaigns' windows, with scheduled campaigns.
    schedule: Option<Schedule>,
    out: &'w mut dyn Write,
    stats: GenerateStats,
    line: String,
}

/// Writes the event log for `spec` to `out`.
pub fn generate(spec: &MarketplaceSpec, out: &mut dyn Write) -> std::io::Result<GenerateStats> {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    // No draw at all without a tree, so a flat log is what it was before trees.
    let tree = (spec.tree_depth > 0).then(|| Tree::new(spec.categories, spec.tree_depth, spec.tree_fanout, &mut rng));
    let lines = spec.line_count(tree.as_ref());
    let clock = spec
        .has_line_timestamps()
        .then(|| LineClock::new(spec.seed, spec.start_at_ms, spec.line_interval_ms));
    // The last line's timestamp: windows lie between the first line's and this one.
    let last_ms = match clock {
        None => 0,
        Some(_) => lines
            .saturating_sub(1)
            .checked_mul(spec.line_interval_ms)
            .and_then(|span| span.checked_add(spec.start_at_ms))
            .filter(|last| *last <= MAX_TIMESTAMP)
            .ok_or_else(|| invalid(format!("the last line's timestamp would be past {MAX_TIMESTAMP} ms")))?,
    };
    let share = spec.scheduled_share();
    if share > 0.0 && last_ms > MAX_RFC3339_MS {
        return Err(invalid(format!(
            "the last line's timestamp, {last_ms} ms, is past what RFC 3339 can write (year 9999)"
        )));
    }
    let schedule = (share > 0.0).then(|| Schedule::new(spec.seed, share, spec.start_at_ms, last_ms));
    let mut generator = Generator {
        rng,
        tree,
        clock,
        schedule,
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
    debug_assert_eq!(generator.stats.lines, spec.line_count(generator.tree.as_ref()));
    Ok(generator.stats)
}

fn invalid(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, message)
}

/// The event log for `spec`, in memory.
pub fn generate_to_vec(spec: &MarketplaceSpec) -> Vec<u8> {
    let mut bytes = Vec::new();
    // Writing to memory cannot fail: only a spec whose timestamps overflow can.
    generate(spec, &mut bytes).unwrap_or_else(|error| panic!("{error}"));
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
            window: WindowState {
                starts_at: c.window.starts_at.map(Bound::utc),
                ends_at: c.window.ends_at.map(Bound::utc),
            },
        }
    }
}

fn price_text(cents: u64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// The JSON object `object` with `"field": value` added last.
fn with_field(object: &str, field: &str, value: &str) -> String {
    let body = object.strip_suffix('}').unwrap_or(object);
    let separator = if body.trim_end() == "{" { "" } else { ", " };
    format!(r#"{body}{separator}"{field}": {value}}}"#)
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
        if let Some(clock) = &self.clock {
            let at = clock.at(self.stats.lines);
            self.stats.first_timestamp_ms.get_or_insert(at);
            self.stats.last_timestamp_ms = Some(at);
        }
        self.stats.lines += 1;
        Ok(())
    }

    /// The timestamp of the line about to be written (the beginning of time without).
    fn now(&self) -> EpochNanos {
        self.clock.as_ref().map_or(EpochNanos::BEGINNING, |clock| {
            EpochNanos::from_millis(clock.at(self.stats.lines))
        })
    }

    /// Writes the record's line, or a malformed variant of it now and then.
    fn emit(&mut self, topic: &str, key: &str, value: &str) -> std::io::Result<()> {
        self.emit_record(topic, key, value, None).map(|_| ())
    }

    /// [`Self::emit`]; `windowless` is the value of a campaign with a window but without its
    /// bounds, for malformed records that carry a bad bound instead. Whether the line was
    /// malformed.
    fn emit_record(&mut self, topic: &str, key: &str, value: &str, windowless: Option<&str>) -> std::io::Result<bool> {
        self.line.clear();
        // The envelope's last field, `, "timestamp": …`, with timestamps: else nothing.
        let tail = self
            .clock
            .as_ref()
            .map_or_else(String::new, |clock| clock.tail(self.stats.lines));
        let malformed = self.spec.malformed_share > 0.0 && self.rng.random_bool(self.spec.malformed_share.min(1.0));
        if malformed {
            self.line = self.malformed(topic, key, value, &tail);
            self.stats.malformed += 1;
            // With timestamps and windows, some malformed records are valid but for a bad
            // timestamp or a bad window bound (drawn from their own streams).
            let bad_window = match (self.schedule.as_mut(), windowless) {
                (Some(schedule), Some(windowless)) => schedule.spoils().then(|| {
                    let (field, bad) = schedule.bad_bound();
                    with_field(windowless, field, &bad)
                }),
                _ => None,
            };
            if let Some(value) = bad_window {
                self.line = format!(r#"{{"topic": "{topic}", "key": "{key}", "value": {value}{tail}}}"#);
            } else if let Some(clock) = self.clock.as_mut() {
                if clock.spoils() {
                    let bad = clock.bad_tail(self.stats.lines);
                    self.line = format!(r#"{{"topic": "{topic}", "key": "{key}", "value": {value}{bad}}}"#);
                }
            }
        } else {
            self.line = format!(r#"{{"topic": "{topic}", "key": "{key}", "value": {value}{tail}}}"#);
            match topic {
                "products" => self.stats.product_records += 1,
                "campaigns" => self.stats.campaign_records += 1,
                _ => self.stats.category_records += 1,
            }
        }
        self.write_line()?;
        Ok(malformed)
    }

    /// A malformed variant of the record; `tail` ends every complete envelope (the
    /// timestamp, or nothing).
    fn malformed(&mut self, topic: &str, key: &str, value: &str, tail: &str) -> String {
        let good = format!(r#"{{"topic": "{topic}", "key": "{key}", "value": {value}{tail}}}"#);
        match self.rng.random_range(0..9) {
            0 => good[..good.len() / 2].to_owned(),
            1 => format!(r#"{{"topic": "{topic}", "value": {value}{tail}}}"#),
            2 => format!(r#"{{"topic": "orders", "key": "{key}", "value": {value}{tail}}}"#),
            3 => format!(r#"{{"topic": "{topic}", "key": "", "value": {value}{tail}}}"#),
            4 => format!(r#"{{"topic": "{topic}", "key": "{key}", "value": [1, 2]{tail}}}"#),
            5 if topic == "products" => format!(
                r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 1.5}}{tail}}}"#
            ),
            6 if topic == "products" => format!(
                r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": "9.99", "stock": 1}}{tail}}}"#
            ),
            7 if topic == "products" => format!(
                r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 9.99, "stock": -4}}{tail}}}"#
            ),
            5 if topic == "categories" => {
                format!(r#"{{"topic": "categories", "key": "cat-{key}", "value": {value}{tail}}}"#)
            }
            6 if topic == "categories" => {
                format!(r#"{{"topic": "categories", "key": "{key}", "value": {{"parent_id": "{key}"}}{tail}}}"#)
            }
            7 if topic == "categories" => {
                format!(r#"{{"topic": "categories", "key": "{key}", "value": {{"parent_id": -1}}{tail}}}"#)
            }
            _ if topic == "campaigns" => {
                format!(
                    r#"{{"topic": "campaigns", "key": "{key}", "value": {{"category_ids": "all", "min_stock": 1}}{tail}}}"#
                )
            }
            _ => format!(r#"{{"topic": "{topic}", "key": 17, "value": {value}{tail}}}"#),
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
        c.window.fields(&mut fields);
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
        let (value, windowless) = match &self.campaigns[index] {
            Some(campaign) => {
                let windowless = (self.schedule.is_some() && campaign.window.is_some()).then(|| {
                    Self::campaign_value(&CampaignState {
                        window: WindowState::default(),
                        ..campaign.clone()
                    })
                });
                (Self::campaign_value(campaign), windowless)
            }
            None => ("null".to_owned(), None),
        };
        let with_window = self.campaigns[index].as_ref().is_some_and(|c| c.window.is_some());
        let malformed = self.emit_record("campaigns", &key, &value, windowless.as_deref())?;
        if with_window && !malformed {
            self.stats.campaign_records_with_window += 1;
        }
        Ok(())
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
            window: WindowState::default(),
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
        // Last, and from its own stream: the criteria are those of a log without windows.
        let now = self.now();
        if let Some(schedule) = self.schedule.as_mut() {
            campaign.window = schedule.new_window(now);
            self.stats.scheduled_campaigns += u64::from(campaign.window.is_some());
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
                    self.edit_window(index);
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

    /// Along with an edit, a scheduled campaign's window may move (its own stream).
    fn edit_window(&mut self, index: usize) {
        let now = self.now();
        if let (Some(schedule), Some(Some(c))) = (self.schedule.as_mut(), self.campaigns.get_mut(index)) {
            schedule.edit_window(&mut c.window, now);
        }
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
    use dataflows::instant::parse_rfc3339;
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
    fn defaults_write_the_log_of_before_line_timestamps_and_windows() {
        // Digests (xxh3_64) of `generate_to_vec` at 56f55a1, before line timestamps and
        // windows existed, printed by a throwaway test; "cli" is `eligibility generate`'s
        // defaults (a tree three levels deep).
        let cli = MarketplaceSpec {
            tree_depth: 3,
            ..MarketplaceSpec::default()
        };
        for (spec, lines, digest) in [
            (MarketplaceSpec::default(), 200_050, 16_089_634_147_965_752_733u64),
            (cli, 200_550, 10_119_540_546_014_358_724),
            (tree(), 23_210, 12_706_001_434_705_695_695),
            // Start and interval mean nothing without timestamps.
            (
                MarketplaceSpec {
                    start_at_ms: 0,
                    line_interval_ms: 60_000,
                    ..tree()
                },
                23_210,
                12_706_001_434_705_695_695,
            ),
        ] {
            let bytes = generate_to_vec(&spec);
            assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), lines);
            assert_eq!(xxhash_rust::xxh3::xxh3_64(&bytes), digest, "{spec:?}");
        }
        let stats = generate(&tree(), &mut std::io::sink()).unwrap();
        assert_eq!((stats.first_timestamp_ms, stats.last_timestamp_ms), (None, None));
        assert_eq!((stats.scheduled_campaigns, stats.campaign_records_with_window), (0, 0));
        // A spec serializes as before (bench reports, the rebuild bench's topics), and a
        // spec serialized before reads as the defaults.
        let json = serde_json::to_value(MarketplaceSpec::default()).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 12, "{keys:?}");
        assert_eq!(
            serde_json::from_value::<MarketplaceSpec>(json).unwrap(),
            MarketplaceSpec::default()
        );
        let scheduled = MarketplaceSpec {
            scheduled_campaigns: 0.25,
            line_interval_ms: 10,
            ..small()
        };
        let json = serde_json::to_string(&scheduled).unwrap();
        assert_eq!(serde_json::from_str::<MarketplaceSpec>(&json).unwrap(), scheduled);
    }

    /// A line as the tests read it: what `decode_envelope` reads, and the timestamp and
    /// window bounds read here (whatever the decoder makes of them). `Err` for a line the
    /// job must reject.
    #[derive(Debug)]
    struct Read {
        record: dataflows::decode::Record,
        json: serde_json::Value,
        timestamp: Option<u64>,
        starts_at: Option<(EpochNanos, String)>,
        ends_at: Option<(EpochNanos, String)>,
    }

    fn read(line: &[u8]) -> Result<Read, String> {
        let record = dataflows::decode::decode_envelope(line).map_err(|error| error.to_string())?;
        let json: serde_json::Value = serde_json::from_slice(line).map_err(|error| error.to_string())?;
        let timestamp = match json.get("timestamp") {
            None => None,
            Some(value) => Some(value.as_u64().ok_or(format!("timestamp {value}"))?),
        };
        let bound = |field: &str| match json["value"].get(field) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(text)) => parse_rfc3339(text)
                .map(|at| Some((at, text.clone())))
                .map_err(|error| format!("{field} {text}: {error}")),
            Some(other) => Err(format!("{field} {other}")),
        };
        let (starts_at, ends_at) = (bound("starts_at")?, bound("ends_at")?);
        if let Change::Campaign(Some(campaign)) = &record.change {
            // Today's decoder may not read windows; one that does reads these.
            if !campaign.window.is_unbounded() {
                assert_eq!(campaign.window.starts_at, starts_at.as_ref().map(|b| b.0));
                assert_eq!(campaign.window.ends_at, ends_at.as_ref().map(|b| b.0));
            }
        }
        Ok(Read {
            record,
            json,
            timestamp,
            starts_at,
            ends_at,
        })
    }

    fn lines(bytes: &[u8]) -> Vec<&[u8]> {
        bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect()
    }

    #[test]
    fn line_timestamps_add_a_last_field_and_change_nothing_else() {
        let plain = MarketplaceSpec {
            malformed_share: 0.2,
            ..small()
        };
        let spec = MarketplaceSpec {
            line_timestamps: true,
            start_at_ms: DEFAULT_START_AT_MS + 5,
            line_interval_ms: 3,
            ..plain.clone()
        };
        let (before, after) = (generate_to_vec(&plain), generate_to_vec(&spec));
        assert_eq!(after, generate_to_vec(&spec));
        let stats = generate(&spec, &mut std::io::sink()).unwrap();
        let (before, after) = (lines(&before), lines(&after));
        assert_eq!(before.len(), after.len());
        let (mut stamped, mut rejected) = (0, 0);
        let mut bad = std::collections::BTreeSet::new();
        for (n, (before, after)) in before.iter().zip(&after).enumerate() {
            let at = DEFAULT_START_AT_MS + 5 + 3 * n as u64;
            let before = std::str::from_utf8(before).unwrap();
            let after = std::str::from_utf8(after).unwrap();
            if after == format!(r#"{}, "timestamp": {at}}}"#, &before[..before.len() - 1]) {
                stamped += 1;
                assert_eq!(
                    read(after.as_bytes()).ok().map(|r| r.timestamp),
                    read(before.as_bytes()).ok().map(|_| Some(at))
                );
                continue;
            }
            // Otherwise a malformed line: truncated elsewhere, or valid but for its timestamp.
            assert!(
                dataflows::decode::decode_envelope(before.as_bytes()).is_err(),
                "{before}"
            );
            assert!(read(after.as_bytes()).is_err(), "{after}");
            rejected += 1;
            if let Ok(json) = serde_json::from_str::<serde_json::Value>(after) {
                bad.insert(match &json["timestamp"] {
                    serde_json::Value::String(_) => "string",
                    serde_json::Value::Number(n) if n.is_f64() => "float",
                    serde_json::Value::Number(n) if n.is_i64() => "negative",
                    other => panic!("{other} in {after}"),
                });
            }
        }
        assert_eq!(stamped + rejected, after.len());
        assert!(rejected <= stats.malformed as usize && rejected > 0);
        assert_eq!(bad, ["float", "negative", "string"].into_iter().collect());
        assert_eq!(stats.first_timestamp_ms, Some(DEFAULT_START_AT_MS + 5));
        assert_eq!(
            stats.last_timestamp_ms,
            Some(DEFAULT_START_AT_MS + 5 + 3 * (after.len() as u64 - 1))
        );
        assert_eq!(stats.campaign_records_with_window, 0);
    }

    fn scheduled() -> MarketplaceSpec {
        MarketplaceSpec {
            products: 2_000,
            campaigns: 300,
            updates: 30_000,
            malformed_share: 0.02,
            scheduled_campaigns: 0.4,
            line_interval_ms: 250,
            seed: 21,
            ..small()
        }
    }

    /// The fractional digits and the zone of an RFC 3339 text.
    fn form(text: &str) -> (usize, String) {
        let digits = text
            .split_once('.')
            .map_or(0, |(_, rest)| rest.bytes().take_while(u8::is_ascii_digit).count());
        let zone = if text.ends_with('Z') {
            "Z"
        } else {
            &text[text.len() - 6..]
        };
        (digits, zone.to_owned())
    }

    #[test]
    fn scheduled_campaigns_open_and_close_within_the_log() {
        let spec = scheduled();
        assert!(!spec.line_timestamps && spec.has_line_timestamps());
        let bytes = generate_to_vec(&spec);
        assert_eq!(bytes, generate_to_vec(&spec));
        assert_ne!(
            bytes,
            generate_to_vec(&MarketplaceSpec {
                seed: 22,
                ..scheduled()
            })
        );
        let stats = generate(&spec, &mut std::io::sink()).unwrap();
        let lines = lines(&bytes);
        assert_eq!(lines.len() as u64, stats.lines);
        let first = EpochNanos::from_millis(DEFAULT_START_AT_MS);
        let last = EpochNanos::from_millis(DEFAULT_START_AT_MS + 250 * (stats.lines - 1));
        assert_eq!(stats.first_timestamp_ms, Some(DEFAULT_START_AT_MS));
        assert_eq!(
            stats.last_timestamp_ms,
            Some(DEFAULT_START_AT_MS + 250 * (stats.lines - 1))
        );

        let (mut rejected, mut upserts, mut with_window, mut previous_timestamp) = (0, 0, 0, 0);
        let mut kinds = std::collections::BTreeMap::<&str, u32>::new();
        let mut forms = std::collections::BTreeSet::new();
        let mut windows = std::collections::HashMap::<String, (Option<EpochNanos>, Option<EpochNanos>)>::new();
        let (mut moved_starts, mut extended_ends, mut opening_and_closing) = (0, 0, 0);
        for (n, line) in lines.iter().enumerate() {
            let Ok(read) = read(line) else {
                rejected += 1;
                continue;
            };
            let timestamp = read.timestamp.expect("every line has a timestamp");
            assert_eq!(timestamp, DEFAULT_START_AT_MS + 250 * n as u64);
            assert!(timestamp >= previous_timestamp);
            previous_timestamp = timestamp;
            if !matches!(read.record.change, Change::Campaign(Some(_))) {
                assert!(read.json["value"].get("starts_at").is_none());
                continue;
            }
            upserts += 1;
            let window = (read.starts_at.as_ref().map(|b| b.0), read.ends_at.as_ref().map(|b| b.0));
            for (at, text) in read.starts_at.iter().chain(&read.ends_at) {
                assert!(first <= *at && *at <= last, "{text} outside the log");
                forms.insert(form(text));
            }
            if window != (None, None) {
                with_window += 1;
            }
            match windows.insert(read.record.key.clone(), window) {
                None => {
                    let kind = match window {
                        (None, None) => "none",
                        (Some(start), Some(end)) if end <= start => "never open",
                        (Some(start), Some(end)) => {
                            if first < start && end < last {
                                opening_and_closing += 1;
                            }
                            "both"
                        }
                        (Some(_), None) => "start",
                        (None, Some(_)) => "end",
                    };
                    *kinds.entry(kind).or_default() += 1;
                }
                Some(before) if before != window => {
                    assert!(
                        before != (None, None) && window != (None, None),
                        "{before:?} {window:?}"
                    );
                    moved_starts += u32::from(before.0 != window.0);
                    extended_ends += u32::from(before.0 == window.0 && before.1 < window.1);
                }
                Some(_) => {}
            }
        }
        assert_eq!(rejected, stats.malformed);
        assert_eq!(upserts, stats.campaign_records - tombstones(&bytes));
        assert_eq!(with_window, stats.campaign_records_with_window);
        let share = with_window as f64 / upserts as f64;
        assert!((0.32..0.48).contains(&share), "{with_window} of {upserts}");
        let scheduled = kinds
            .iter()
            .filter(|(kind, _)| **kind != "none")
            .map(|(_, n)| u64::from(*n))
            .sum();
        assert!(stats.scheduled_campaigns >= scheduled, "{stats:?} {kinds:?}");
        for kind in ["both", "start", "end", "never open"] {
            assert!(kinds.get(kind).is_some_and(|n| *n > 0), "{kinds:?}");
        }
        assert!(kinds["both"] > kinds["start"] + kinds["end"], "{kinds:?}");
        assert!(opening_and_closing > 10, "{opening_and_closing}");
        assert!(moved_starts > 0 && extended_ends > 0, "{moved_starts} {extended_ends}");
        for digits in [0, 3, 6, 9] {
            assert!(forms.iter().any(|f| f.0 == digits), "{forms:?}");
        }
        for zone in ["Z", "+03:00", "-05:30"] {
            assert!(forms.iter().any(|f| f.1 == zone), "{forms:?}");
        }
    }

    fn tombstones(bytes: &[u8]) -> u64 {
        lines(bytes)
            .into_iter()
            .filter_map(|line| dataflows::decode::decode_envelope(line).ok())
            .filter(|record| record.change == Change::Campaign(None))
            .count() as u64
    }

    #[test]
    fn windows_change_nothing_else_in_the_marketplace() {
        let spec = scheduled();
        let plain = MarketplaceSpec {
            scheduled_campaigns: 0.0,
            ..scheduled()
        };
        let (before, after) = (generate_to_vec(&plain), generate_to_vec(&spec));
        let (before, after) = (lines(&before), lines(&after));
        assert_eq!(before.len(), after.len());
        let mut same = 0;
        for (before, after) in before.iter().zip(&after) {
            if dataflows::decode::decode_envelope(before).is_err() {
                continue;
            }
            let before: serde_json::Value = serde_json::from_slice(before).unwrap();
            let mut after: serde_json::Value = serde_json::from_slice(after).unwrap();
            let object = after.as_object_mut().unwrap();
            assert!(object.remove("timestamp").is_some());
            if let Some(value) = object.get_mut("value").and_then(serde_json::Value::as_object_mut) {
                value.remove("starts_at");
                value.remove("ends_at");
            }
            assert_eq!(before, after);
            same += 1;
        }
        let (plain, stats) = (
            generate(&plain, &mut std::io::sink()).unwrap(),
            generate(&spec, &mut std::io::sink()).unwrap(),
        );
        assert_eq!(same as u64, plain.lines - plain.malformed);
        assert_eq!(
            (plain.product_records, plain.campaign_records, plain.malformed),
            (stats.product_records, stats.campaign_records, stats.malformed)
        );
    }

    #[test]
    fn malformed_lines_may_carry_a_bad_timestamp_or_a_bad_window() {
        let spec = MarketplaceSpec {
            campaigns: 200,
            malformed_share: 0.3,
            scheduled_campaigns: 1.0,
            ..small()
        };
        let bytes = generate_to_vec(&spec);
        let stats = generate(&spec, &mut std::io::sink()).unwrap();
        let (mut rejected, mut bad_timestamps, mut bad_windows) = (0, 0, 0);
        for line in lines(&bytes) {
            if read(line).is_ok() {
                continue;
            }
            rejected += 1;
            // Valid JSON with a bad timestamp or bound: the lines made from valid records.
            let Ok(json) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            let bad_bound = |field: &str| match json["value"].get(field) {
                None => false,
                Some(serde_json::Value::String(text)) => parse_rfc3339(text).is_err(),
                Some(_) => true,
            };
            bad_timestamps += u32::from(json.get("timestamp").is_some_and(|t| t.as_u64().is_none()));
            bad_windows += u32::from(bad_bound("starts_at") || bad_bound("ends_at"));
        }
        assert_eq!(rejected, stats.malformed);
        assert!(bad_timestamps > 10 && bad_windows > 5, "{bad_timestamps} {bad_windows}");
        assert!(stats.scheduled_campaigns > 190, "{stats:?}");
    }

    #[test]
    fn campaign_lines_write_windows_in_utc() {
        let campaign = Campaign {
            category_ids: [4].into_iter().collect(),
            window: dataflows::model::Window {
                starts_at: Some(parse_rfc3339("2026-11-27T03:00:00.250+03:00").unwrap()),
                ends_at: Some(parse_rfc3339("2026-11-28T00:00:00Z").unwrap()),
            },
            ..Campaign::unrestricted()
        };
        let line = campaign_line("c-1", Some(&campaign));
        assert_eq!(
            line,
            r#"{"topic": "campaigns", "key": "c-1", "value": {"category_ids": [4], "starts_at": "2026-11-27T00:00:00.250Z", "ends_at": "2026-11-28T00:00:00Z"}}"#
        );
        let read = read(line.as_bytes()).unwrap();
        assert_eq!(read.starts_at.map(|b| b.0), campaign.window.starts_at);
        assert_eq!(read.ends_at.map(|b| b.0), campaign.window.ends_at);
    }

    #[test]
    fn timestamps_past_what_the_log_can_carry_are_refused() {
        let spec = MarketplaceSpec {
            line_timestamps: true,
            start_at_ms: MAX_TIMESTAMP - 10,
            ..small()
        };
        assert!(generate(&spec, &mut std::io::sink()).is_err());
        let spec = MarketplaceSpec {
            scheduled_campaigns: 0.1,
            start_at_ms: MAX_RFC3339_MS - 10,
            ..small()
        };
        assert!(generate(&spec, &mut std::io::sink()).is_err());
        let spec = MarketplaceSpec {
            scheduled_campaigns: 0.1,
            start_at_ms: MAX_RFC3339_MS - 10 * (small().campaigns + small().products + small().updates),
            line_interval_ms: 10,
            ..small()
        };
        assert!(generate(&spec, &mut std::io::sink()).is_ok());
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
