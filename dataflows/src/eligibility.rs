//! The eligibility dataflow: changelogs in, per-pair (count, stock) totals out.
//!
//! ```text
//!  products (Upsert)                               campaigns (Upsert)
//!        |  id -> ProductKey (128-bit hash)               |
//!  LatestPerKey + arrange_from_upsert              LatestPerKey + arrange_from_upsert
//!        |  (product key -> Product)                      |  (campaign id -> Campaign)
//!        +--------------------+                  index_campaign: keys + residual
//!        |                    |                     |                     |
//!  keys: category,      categories in use      Keys(k..)        EveryCategory
//!  brand, seller              |                     |                     |
//!        |                    +-------- join on () -+---------------------+
//!  arrange by key                                   |
//!        |                                   arrange by key
//!        +--------------- join_core ----------------+
//!                             |  residual check (is_eligible)
//!                explode ((campaign tag, seller), (1, stock))
//!                             |
//!                        count_total        campaign id by tag
//!                             |                     |
//!                             +----- join_core -----+  ->  (pair, (eligible_products,
//!                                                              eligible_stock))
//! ```
//!
//! A product change touches only the campaigns indexed under its three keys; a campaign
//! change touches only the products under its own keys, so it recomputes only its pairs.
//! Every arrangement is private to the dataflow, so its compaction follows the frontier.

use differential_dataflow::operators::arrange::upsert::arrange_from_upsert;
use differential_dataflow::operators::{CountTotal, ThresholdTotal};
use differential_dataflow::trace::implementations::{ValBuilder, ValSpine};
use differential_dataflow::{Hashable, VecCollection};
use serde::{Deserialize, Serialize};
use timely::dataflow::operators::vec::Map;
use timely::dataflow::Stream;

use crate::model::{Campaign, CampaignId, PairKey, Product, ProductId, ProductKey, Time};
use crate::operators::pair_changes::PairTotals;
use crate::operators::{LatestPerKey, Upsert};
use crate::rule::{index_campaign, is_eligible, CampaignIndex, PredicateKey};

/// A campaign as the index holds it: its id and the criteria left after the key.
///
/// `tag`, a 64-bit hash of the id, comes first: the join compares these values whenever it
/// merges batches of the index, and an integer settles almost every comparison. Pairs are
/// counted by tag; two ids with the same tag would share pairs, a chance of about
/// n²/2⁶⁵ for n campaigns (10⁻¹³ for a thousand), accepted for the speed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CampaignMatcher {
    pub tag: u64,
    pub campaign_id: CampaignId,
    pub residual: Campaign,
}

impl CampaignMatcher {
    pub fn new(campaign_id: &CampaignId, residual: Campaign) -> Self {
        CampaignMatcher {
            tag: campaign_id.hashed(),
            campaign_id: campaign_id.clone(),
            residual,
        }
    }
}

/// Builds the eligibility dataflow and returns the totals of every existing pair.
pub fn render_eligibility<'scope>(
    products: Stream<'scope, Time, Vec<Upsert<ProductId, Product>>>,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
) -> VecCollection<'scope, Time, (PairKey, PairTotals), isize> {
    // Hashed where the record enters, before any exchange or sort sees the text id.
    let products = products.map(|update: Upsert<ProductId, Product>| Upsert {
        key: ProductKey::of(&update.key),
        seq: update.seq,
        value: update.value,
    });
    let products = arrange_from_upsert::<
        ValBuilder<ProductKey, Product, Time, isize>,
        ValSpine<ProductKey, Product, Time, isize>,
        ProductKey,
        Product,
    >(products.latest_per_key("LatestProduct"), "UpsertProducts");
    let campaigns = arrange_from_upsert::<
        ValBuilder<CampaignId, Campaign, Time, isize>,
        ValSpine<CampaignId, Campaign, Time, isize>,
        CampaignId,
        Campaign,
    >(campaigns.latest_per_key("LatestCampaign"), "UpsertCampaigns");

    let products_by_key = products
        .clone()
        .flat_map_ref(|_id, product: &Product| product.predicate_keys().map(|key| (key, *product)))
        .arrange_by_key_named("ProductsByPredicate");

    let categories_in_use = products
        .flat_map_ref(|_id, product: &Product| Some(product.category_id))
        .distinct_total();

    let keyed_campaigns =
        campaigns
            .clone()
            .flat_map_ref(|id: &CampaignId, campaign: &Campaign| match index_campaign(campaign) {
                Some(CampaignIndex::Keys(keys, residual)) => keys
                    .into_iter()
                    .map(|key| (key, CampaignMatcher::new(id, residual.clone())))
                    .collect(),
                _ => Vec::new(),
            });

    // Campaigns without list criteria meet products through every category in use, so
    // products need no fourth "all" key and no worker holds every product.
    let unrestricted_campaigns =
        campaigns
            .clone()
            .flat_map_ref(|id: &CampaignId, campaign: &Campaign| match index_campaign(campaign) {
                Some(CampaignIndex::EveryCategory(residual)) => Some(((), CampaignMatcher::new(id, residual))),
                _ => None,
            });
    let spread_campaigns = unrestricted_campaigns.join_map(
        categories_in_use.map(|category| ((), category)),
        |_unit, matcher, category| (PredicateKey::Category(*category), matcher.clone()),
    );

    let campaigns_by_key = keyed_campaigns
        .concat(spread_campaigns)
        .arrange_by_key_named("CampaignsByPredicate");

    // Pairs are counted under the campaign's tag, an integer, and get their text id only
    // once their totals change: the hot path never clones or compares campaign ids.
    let campaign_ids = campaigns
        .flat_map_ref(|id: &CampaignId, _campaign: &Campaign| Some((id.hashed(), id.clone())))
        .arrange_by_key_named("CampaignIdsByTag");
    products_by_key
        .join_core(campaigns_by_key, |_key, product, matcher: &CampaignMatcher| {
            is_eligible(product, &matcher.residual).then_some(((matcher.tag, product.seller_id), product.stock))
        })
        .explode(|(pair, stock)| Some((pair, (1isize, stock as isize))))
        .count_total()
        .map(|((tag, seller_id), totals)| (tag, (seller_id, totals)))
        .join_core(campaign_ids, |_tag, &(seller_id, totals), campaign_id: &CampaignId| {
            let pair = PairKey {
                seller_id,
                campaign_id: campaign_id.clone(),
            };
            Some((pair, totals))
        })
}
