//! The tree phase's two workloads, with the same products, campaigns and changes.
//!
//! *Tree*: the generator's marketplace with its category tree (`categories` records
//! first), then one subtree move (a category record naming another parent) and one new
//! campaign naming a top-level category. *Flat*: the same marketplace as a system without
//! trees keeps it: no category records, and every campaign lists each category it names
//! together with all the categories below it. There the move is an edit of every campaign
//! whose list it changes, and the top-level campaign lists its whole subtree. Both give
//! the same pairs at every step, so each implementation must write the same pairs in both.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use dataflows::decode::{decode_envelope, Change, Record};
use dataflows::model::{Campaign, Category, CategoryId, Product};
use dataflows::reference::ReferenceState;
use generate::{campaign_line, generate_to_vec, MarketplaceSpec};

use crate::workload::{Batch, Workload, WorkloadSpec};
pub use crate::workload::{TreeBatches, TreeCase, TreeFigures, TreePhaseSpec};

/// The key of the campaign on a top-level category.
pub const TOP_LEVEL_CAMPAIGN_KEY: &str = "c-bench-top";

/// Builds the `tree.case` workload of `spec`.
pub fn build(spec: &WorkloadSpec, tree: &TreePhaseSpec) -> Workload {
    let marketplace = MarketplaceSpec {
        updates: 0,
        malformed_share: 0.0,
        tree_depth: spec.marketplace.tree_depth.max(1),
        ..spec.marketplace.clone()
    };
    let log = generate_to_vec(&marketplace);
    let mut lines: Vec<(String, Record)> = Vec::with_capacity(marketplace.products as usize + 10_000);
    let mut state = ReferenceState::default();
    let mut products: Vec<Product> = Vec::with_capacity(marketplace.products as usize);
    let mut campaigns: Vec<(String, Campaign)> = Vec::new();
    for line in log.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
        let record = decode_envelope(line).expect("the generator writes valid records");
        match &record.change {
            Change::Product(Some(product)) => products.push(*product),
            Change::Campaign(Some(campaign)) => campaigns.push((record.key.clone(), campaign.clone())),
            Change::Category(_) => state.apply(&record.key, &record.change),
            _ => {}
        }
        let line = String::from_utf8(line.to_vec()).expect("the generator writes UTF-8");
        lines.push((line, record));
    }

    let before = Shape::of(&state, &products);
    let moved = before.moved_category(products.len() as f64 * tree.move_share);
    let moved_from = state.categories[&moved].parent_id;
    let moved_to = before.new_parent(moved);
    let mut after_state = state.clone();
    after_state.apply(
        &moved.to_string(),
        &Change::Category(Some(Category { parent_id: moved_to })),
    );
    let after = Shape::of(&after_state, &products);
    let top_level = after.top_level(products.len() as f64 * spec.new_campaign_share);
    let top_level_campaign = Campaign {
        category_ids: [top_level].into_iter().collect(),
        ..Campaign::unrestricted()
    };

    let above: BTreeSet<CategoryId> = before.ancestors(moved).chain(after.ancestors(moved)).collect();
    let flat_edits: Vec<(&String, Campaign)> = campaigns
        .iter()
        .filter_map(|(key, campaign)| {
            let edited = after.expanded(campaign);
            (edited != before.expanded(campaign)).then_some((key, edited))
        })
        .collect();
    let figures = TreeFigures {
        categories: state.categories.len(),
        top_level_categories: before.roots.len(),
        levels: before.levels,
        moved,
        moved_from,
        moved_to,
        moved_categories: 1 + before.descendants.get(&moved).map_or(0, Vec::len),
        moved_products: before.subtree_products(moved),
        moved_share: before.subtree_products(moved) as f64 / products.len().max(1) as f64,
        campaigns_above: campaigns
            .iter()
            .filter(|(_, c)| c.active && c.category_ids.iter().any(|id| above.contains(&id)))
            .count(),
        flat_campaign_edits: flat_edits.len(),
        top_level,
        top_level_products: after.subtree_products(top_level),
        top_level_share: after.subtree_products(top_level) as f64 / products.len().max(1) as f64,
        top_level_flat_list: after.expanded(&top_level_campaign).category_ids.len(),
    };

    let mut load = Vec::new();
    let mut subtree_move = Batch::default();
    let mut top_level_batch = Batch::default();
    match tree.case {
        TreeCase::Tree => {
            for (line, record) in lines {
                Batch::push_into(&mut load, spec.load_batch_size, line, record);
            }
            subtree_move.push_category(moved, Some(Category { parent_id: moved_to }));
            top_level_batch.push_campaign(TOP_LEVEL_CAMPAIGN_KEY, Some(top_level_campaign));
        }
        TreeCase::Flat => {
            for (line, record) in lines {
                let (line, record) = match record.change {
                    Change::Category(_) => continue,
                    Change::Campaign(Some(campaign)) => {
                        let expanded = before.expanded(&campaign);
                        let line = campaign_line(&record.key, Some(&expanded));
                        let record = Record {
                            key: record.key,
                            change: Change::Campaign(Some(expanded)),
                        };
                        (line, record)
                    }
                    _ => (line, record),
                };
                Batch::push_into(&mut load, spec.load_batch_size, line, record);
            }
            for (key, edited) in flat_edits {
                subtree_move.push_campaign(key, Some(edited));
            }
            top_level_batch.push_campaign(TOP_LEVEL_CAMPAIGN_KEY, Some(after.expanded(&top_level_campaign)));
        }
    }
    Workload {
        products: products.len(),
        load,
        rounds: Vec::new(),
        new_campaign: Batch::default(),
        new_campaign_share: figures.top_level_share,
        campaign_edit: Batch::default(),
        tree: Some(TreeBatches {
            subtree_move,
            top_level_campaign: top_level_batch,
            figures,
        }),
    }
}

/// The tree at one moment, with the products under each category.
struct Shape {
    ancestors: HashMap<CategoryId, Vec<CategoryId>>,
    descendants: HashMap<CategoryId, Vec<CategoryId>>,
    /// Categories with a record and no parent.
    roots: Vec<CategoryId>,
    levels: usize,
    /// Products whose own category it is.
    products: HashMap<CategoryId, usize>,
}

impl Shape {
    fn of(state: &ReferenceState, products: &[Product]) -> Shape {
        let mut ancestors = HashMap::new();
        let mut descendants: HashMap<CategoryId, Vec<CategoryId>> = HashMap::new();
        for &category in state.categories.keys() {
            let above: Vec<CategoryId> = state.ancestors(category).into_iter().collect();
            for ancestor in &above {
                descendants.entry(*ancestor).or_default().push(category);
            }
            ancestors.insert(category, above);
        }
        let mut per_category = HashMap::new();
        for product in products {
            *per_category.entry(product.category_id).or_default() += 1;
        }
        Shape {
            roots: state
                .categories
                .iter()
                .filter(|(_, node)| node.parent_id.is_none())
                .map(|(id, _)| *id)
                .collect(),
            levels: ancestors.values().map(|above| above.len() + 1).max().unwrap_or(0),
            ancestors,
            descendants,
            products: per_category,
        }
    }

    fn ancestors(&self, category: CategoryId) -> impl Iterator<Item = CategoryId> + '_ {
        self.ancestors.get(&category).into_iter().flatten().copied()
    }

    fn depth(&self, category: CategoryId) -> usize {
        self.ancestors.get(&category).map_or(0, Vec::len)
    }

    fn root_of(&self, category: CategoryId) -> CategoryId {
        // In a tree the root is the one ancestor at depth 0.
        self.ancestors(category)
            .find(|ancestor| self.depth(*ancestor) == 0)
            .unwrap_or(category)
    }

    /// Products of the category and of every category below it.
    fn subtree_products(&self, category: CategoryId) -> usize {
        let below = self.descendants.get(&category).into_iter().flatten();
        std::iter::once(&category)
            .chain(below)
            .map(|c| self.products.get(c).copied().unwrap_or(0))
            .sum()
    }

    /// The category below the top level whose subtree holds closest to `target` products.
    fn moved_category(&self, target: f64) -> CategoryId {
        self.ancestors
            .keys()
            .filter(|category| self.depth(**category) > 0)
            .map(|&category| ((self.subtree_products(category) as f64 - target).abs(), category))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, category)| category)
            .expect("a tree of more than one level has a category below the top")
    }

    /// Another parent for `category` on its parent's level, under another top-level
    /// category where there is one (the least id); `None` (a new top-level category) if
    /// its parent's level has no other category.
    fn new_parent(&self, category: CategoryId) -> Option<CategoryId> {
        let level = self.depth(category) - 1;
        let parent = self.ancestors(category).find(|a| self.depth(*a) == level);
        let root = self.root_of(category);
        let mut candidates: Vec<CategoryId> = self
            .ancestors
            .keys()
            .copied()
            .filter(|c| self.depth(*c) == level && Some(*c) != parent)
            .collect();
        candidates.sort_unstable_by_key(|c| (self.root_of(*c) == root, *c));
        candidates.first().copied()
    }

    /// The top-level category whose subtree holds closest to `target` products.
    fn top_level(&self, target: f64) -> CategoryId {
        self.roots
            .iter()
            .map(|&root| ((self.subtree_products(root) as f64 - target).abs(), root))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, root)| root)
            .expect("a tree has a top-level category")
    }

    /// The campaign with every category it names listed with all below it.
    fn expanded(&self, campaign: &Campaign) -> Campaign {
        let listed: BTreeSet<CategoryId> = campaign
            .category_ids
            .iter()
            .flat_map(|named| std::iter::once(named).chain(self.descendants.get(&named).into_iter().flatten().copied()))
            .collect();
        Campaign {
            category_ids: listed.into_iter().collect(),
            ..campaign.clone()
        }
    }
}

/// The categories of the tree and their parents, for tests.
pub fn parents(workload: &Workload) -> BTreeMap<CategoryId, Option<CategoryId>> {
    workload
        .load
        .iter()
        .flat_map(|batch| &batch.records)
        .filter_map(|record| match &record.change {
            Change::Category(category) => Some((
                record.key.parse().expect("a decimal key"),
                category.and_then(|c| c.parent_id),
            )),
            _ => None,
        })
        .collect()
}
