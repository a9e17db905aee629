//! The marketplace every implementation is measured on, and the changes of each phase.
//!
//! The initial load comes from the event-log generator; the bench then derives its own
//! phases from that state so that each measures one thing: product edits only, one new
//! campaign of a chosen reach, one edit of that campaign. Every event exists both as a
//! decoded record and as its event-log line, so the engine can be timed with and without
//! the JSON decode.
//!
//! The tree phase's workloads are described here and built in `crate::tree::workload`,
//! from the same spec with its `tree` set: a load, one subtree move and one top-level
//! campaign (`Workload::build`, in the crate root, picks the builder).

use std::collections::HashMap;

use dataflows::decode::{decode_envelope, Change, Record};
use dataflows::model::{Campaign, Category, CategoryId, Product};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use generate::zipf::Zipf;
use generate::{campaign_line, category_line, generate_to_vec, product_line, MarketplaceSpec};

/// A batch of events, in both forms.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pub records: Vec<Record>,
    pub lines: Vec<String>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub(crate) fn push_product(&mut self, key: &str, product: Option<Product>) {
        self.lines.push(product_line(key, product.as_ref()));
        self.records.push(Record {
            key: key.to_owned(),
            change: Change::Product(product),
        });
    }

    pub(crate) fn push_campaign(&mut self, key: &str, campaign: Option<Campaign>) {
        self.lines.push(campaign_line(key, campaign.as_ref()));
        self.records.push(Record {
            key: key.to_owned(),
            change: Change::Campaign(campaign),
        });
    }

    pub(crate) fn push_category(&mut self, id: CategoryId, category: Option<Category>) {
        self.lines.push(category_line(id, category.as_ref()));
        self.records.push(Record {
            key: id.to_string(),
            change: Change::Category(category),
        });
    }

    /// Adds a record with its line to the last batch, or to a new one once it holds `size`.
    pub(crate) fn push_into(batches: &mut Vec<Batch>, size: usize, line: String, record: Record) {
        let batch = match batches.last_mut() {
            Some(batch) if batch.len() < size.max(1) => batch,
            _ => {
                batches.push(Batch::default());
                batches.last_mut().expect("just pushed")
            }
        };
        batch.lines.push(line);
        batch.records.push(record);
    }
}

/// The product-update batches of one batch size.
#[derive(Clone, Debug)]
pub struct UpdateRound {
    pub batch_size: usize,
    pub batches: Vec<Batch>,
}

/// Which of the two workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeCase {
    Tree,
    Flat,
}

impl TreeCase {
    pub fn name(self) -> &'static str {
        match self {
            TreeCase::Tree => "tree",
            TreeCase::Flat => "flat",
        }
    }
}

/// What a tree phase workload is built from, besides the marketplace (whose `tree_depth`
/// and `tree_fanout` shape the tree).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TreePhaseSpec {
    pub case: TreeCase,
    /// The share of the products the moved subtree should hold.
    pub move_share: f64,
}

/// The tree phase's changes, as the case expresses them.
#[derive(Clone, Debug, Default)]
pub struct TreeBatches {
    pub subtree_move: Batch,
    pub top_level_campaign: Batch,
    pub figures: TreeFigures,
}

/// What the tree phase changes, the same in both cases.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TreeFigures {
    pub categories: usize,
    pub top_level_categories: usize,
    /// Levels of the tree as loaded.
    pub levels: usize,
    /// The category whose subtree moves, its parent before and after.
    pub moved: CategoryId,
    pub moved_from: Option<CategoryId>,
    pub moved_to: Option<CategoryId>,
    /// Categories in the moved subtree, the category itself included.
    pub moved_categories: usize,
    pub moved_products: usize,
    pub moved_share: f64,
    /// Active campaigns naming a category above the old or the new position: the ones whose
    /// pairs the move may change.
    pub campaigns_above: usize,
    /// Campaigns the flat case edits for the move: those whose expanded list it changes.
    pub flat_campaign_edits: usize,
    pub top_level: CategoryId,
    pub top_level_products: usize,
    pub top_level_share: f64,
    /// Categories the flat case's top-level campaign lists.
    pub top_level_flat_list: usize,
}

/// Sizes of the bench's marketplace and phases.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub marketplace: MarketplaceSpec,
    /// Events per batch during the initial load.
    pub load_batch_size: usize,
    /// Batch sizes of the product-update phase.
    pub update_batch_sizes: Vec<usize>,
    /// Product updates generated for each batch size (rounded up to whole batches).
    pub updates_per_round: usize,
    /// Share of all products the new campaign should match, in `(0, 1]`; in the tree
    /// phase, the share the top-level campaign's category should come closest to.
    pub new_campaign_share: f64,
    /// Set for the tree phase: which of its workloads to build instead of the main one.
    #[serde(default)]
    pub tree: Option<TreePhaseSpec>,
}

/// Everything the implementations are fed, in order.
pub struct Workload {
    pub products: usize,
    pub load: Vec<Batch>,
    pub rounds: Vec<UpdateRound>,
    pub new_campaign: Batch,
    /// The share of the products the new campaign matches once it is in.
    pub new_campaign_share: f64,
    pub campaign_edit: Batch,
    /// The tree phase's changes, in a tree phase workload (which has no other phases).
    pub tree: Option<TreeBatches>,
}

pub const NEW_CAMPAIGN_KEY: &str = "c-bench-new";

impl Workload {
    /// The main workload (`spec.tree` is not read: see `Workload::build`).
    pub fn build_main(spec: &WorkloadSpec) -> Workload {
        let marketplace = MarketplaceSpec {
            updates: 0,
            malformed_share: 0.0,
            ..spec.marketplace.clone()
        };
        let log = generate_to_vec(&marketplace);
        let mut products: Vec<(String, Product)> = Vec::with_capacity(marketplace.products as usize);
        let mut load = Vec::new();
        for line in log.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
            let record = decode_envelope(line).expect("the generator writes valid records");
            if let Change::Product(Some(product)) = &record.change {
                products.push((record.key.clone(), *product));
            }
            let line = String::from_utf8(line.to_vec()).expect("the generator writes UTF-8");
            Batch::push_into(&mut load, spec.load_batch_size, line, record);
        }

        let mut rng = ChaCha8Rng::seed_from_u64(marketplace.seed ^ 0xbe9c);
        let categories = Zipf::new(marketplace.categories, marketplace.category_skew);
        let rounds = spec
            .update_batch_sizes
            .iter()
            .map(|&batch_size| {
                let count = spec.updates_per_round.div_ceil(batch_size.max(1));
                let batches = (0..count)
                    .map(|_| product_edits(&mut products, batch_size, &categories, &mut rng))
                    .collect();
                UpdateRound { batch_size, batches }
            })
            .collect();

        let (campaign, share) = campaign_of_reach(&products, spec.new_campaign_share);
        let mut new_campaign = Batch::default();
        new_campaign.push_campaign(NEW_CAMPAIGN_KEY, Some(campaign.clone()));
        // The edit a campaign manager makes most: tighten the stock floor and the price cap.
        let edited = Campaign {
            min_stock: campaign.min_stock.max(1) * 5,
            max_price_minor: Some(median_price(&products)),
            ..campaign
        };
        let mut campaign_edit = Batch::default();
        campaign_edit.push_campaign(NEW_CAMPAIGN_KEY, Some(edited));

        Workload {
            products: products.len(),
            load,
            rounds,
            new_campaign,
            new_campaign_share: share,
            campaign_edit,
            tree: None,
        }
    }

    /// Whether any record is a category's: if not, the engine runs without a tree.
    pub fn has_categories(&self) -> bool {
        let tree = self
            .tree
            .iter()
            .flat_map(|tree| [&tree.subtree_move, &tree.top_level_campaign]);
        self.load
            .iter()
            .chain(tree)
            .flat_map(|batch| &batch.records)
            .any(|record| matches!(record.change, Change::Category(_)))
    }

    /// Every batch in the order the implementations apply them.
    pub fn events(&self) -> usize {
        self.load.iter().map(Batch::len).sum::<usize>()
            + self
                .rounds
                .iter()
                .flat_map(|round| &round.batches)
                .map(Batch::len)
                .sum::<usize>()
            + self.new_campaign.len()
            + self.campaign_edit.len()
            + self
                .tree
                .as_ref()
                .map_or(0, |tree| tree.subtree_move.len() + tree.top_level_campaign.len())
    }
}

/// A batch of price, stock and category edits of distinct random products.
fn product_edits(products: &mut [(String, Product)], size: usize, categories: &Zipf, rng: &mut ChaCha8Rng) -> Batch {
    let mut batch = Batch::default();
    let mut seen = HashMap::new();
    while batch.len() < size.min(products.len()) {
        let index = rng.random_range(0..products.len());
        if seen.insert(index, ()).is_some() {
            continue;
        }
        let (key, product) = &mut products[index];
        match rng.random_range(0..10) {
            0..4 => product.price_minor = ((product.price_minor as f64 * rng.random_range(0.7..1.3)) as u64).max(1),
            4..9 => product.stock = rng.random_range(0..500),
            _ => product.category_id = categories.sample(rng),
        }
        batch.push_product(key, Some(*product));
    }
    batch
}

/// A campaign on the most popular categories, as many as it takes to reach `share` of the
/// products, and the share it really reaches.
pub(crate) fn campaign_of_reach(products: &[(String, Product)], share: f64) -> (Campaign, f64) {
    let mut per_category: HashMap<CategoryId, usize> = HashMap::new();
    for (_, product) in products {
        *per_category.entry(product.category_id).or_default() += 1;
    }
    let mut by_size: Vec<(CategoryId, usize)> = per_category.into_iter().collect();
    by_size.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let target = (share * products.len() as f64).ceil() as usize;
    let mut chosen = Vec::new();
    let mut reached = 0;
    for (category, count) in by_size {
        if reached >= target {
            break;
        }
        // Skip a category that overshoots when a smaller one comes closer.
        if reached + count > target && reached > 0 && reached + count - target > target - reached {
            continue;
        }
        chosen.push(category);
        reached += count;
    }
    let campaign = Campaign {
        category_ids: chosen.into_iter().collect(),
        ..Campaign::unrestricted()
    };
    (campaign, reached as f64 / products.len().max(1) as f64)
}

fn median_price(products: &[(String, Product)]) -> u64 {
    let mut prices: Vec<u64> = products.iter().map(|(_, p)| p.price_minor).collect();
    if prices.is_empty() {
        return 0;
    }
    let middle = prices.len() / 2;
    *prices.select_nth_unstable(middle).1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> WorkloadSpec {
        WorkloadSpec {
            marketplace: MarketplaceSpec {
                products: 5_000,
                sellers: 100,
                categories: 50,
                brands: 80,
                campaigns: 10,
                ..MarketplaceSpec::default()
            },
            load_batch_size: 1_000,
            update_batch_sizes: vec![1, 100],
            updates_per_round: 250,
            new_campaign_share: 0.2,
            tree: None,
        }
    }

    #[test]
    fn phases_have_the_asked_sizes_and_lines_match_records() {
        let workload = Workload::build(&spec());
        assert_eq!(workload.products, 5_000);
        assert_eq!(workload.load.iter().map(Batch::len).sum::<usize>(), 5_010);
        assert_eq!(workload.rounds[0].batches.len(), 250);
        assert_eq!(workload.rounds[1].batches.len(), 3);
        assert!(workload.rounds[1].batches.iter().all(|b| b.len() == 100));
        for batch in workload.load.iter().chain(&workload.rounds[1].batches) {
            for (line, record) in batch.lines.iter().zip(&batch.records) {
                assert_eq!(&decode_envelope(line.as_bytes()).unwrap(), record);
            }
        }
        assert!(
            (0.1..0.3).contains(&workload.new_campaign_share),
            "{}",
            workload.new_campaign_share
        );
    }
}
