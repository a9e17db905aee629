//! The eligibility dataflow: changelogs in, per-pair (count, stock) totals out.
//!
//! ```text
//!  products (Upsert)                               campaigns (Upsert)
//!        |                                                |
//!  LatestPerKey + arrange_from_upsert              LatestPerKey + arrange_from_upsert
//!        |  (product id -> Product)                       |  (campaign id -> Campaign)
//!        +--------------------+                  index_campaign: keys + residual
//!        |                    |                     |                     |
//!  keys: category,      categories in use      Keys(k..)        EveryCategory
//!  brand, seller              |                     |                     |
//!        |                    +-------- join on () -+---------------------+
//!  arrange by key                                   |
//!        |                                   arrange by key
//!        +--------------- join_core ----------------+
//!                             |  residual check (is_eligible)
//!                  explode ((campaign, seller), (1, stock))
//!                             |
//!                        count_total  ->  (pair, (eligible_products, eligible_stock))
//! ```
//!
//! A product change touches only the campaigns indexed under its three keys; a campaign
//! change touches only the products under its own keys, so it recomputes only its pairs.
//! Every arrangement is private to the dataflow, so its compaction follows the frontier.

use differential_dataflow::operators::arrange::upsert::arrange_from_upsert;
use differential_dataflow::operators::{CountTotal, ThresholdTotal};
use differential_dataflow::trace::implementations::{ValBuilder, ValSpine};
use differential_dataflow::VecCollection;
use serde::{Deserialize, Serialize};
use timely::dataflow::Stream;

use crate::model::{Campaign, CampaignId, PairKey, Product, ProductId, Time};
use crate::operators::pair_changes::PairTotals;
use crate::operators::{LatestPerKey, Upsert};
use crate::rule::{index_campaign, is_eligible, CampaignIndex, PredicateKey};

/// A campaign as the index holds it: its id and the criteria left after the key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CampaignMatcher {
    pub campaign_id: CampaignId,
    pub residual: Campaign,
}

/// Builds the eligibility dataflow and returns the totals of every existing pair.
pub fn render_eligibility<'scope>(
    products: Stream<'scope, Time, Vec<Upsert<ProductId, Product>>>,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
) -> VecCollection<'scope, Time, (PairKey, PairTotals), isize> {
    let products = arrange_from_upsert::<
        ValBuilder<ProductId, Product, Time, isize>,
        ValSpine<ProductId, Product, Time, isize>,
        ProductId,
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
                    .map(|key| {
                        let matcher = CampaignMatcher {
                            campaign_id: id.clone(),
                            residual: residual.clone(),
                        };
                        (key, matcher)
                    })
                    .collect(),
                _ => Vec::new(),
            });

    // Campaigns without list criteria meet products through every category in use, so
    // products need no fourth "all" key and no worker holds every product.
    let unrestricted_campaigns =
        campaigns.flat_map_ref(|id: &CampaignId, campaign: &Campaign| match index_campaign(campaign) {
            Some(CampaignIndex::EveryCategory(residual)) => Some((
                (),
                CampaignMatcher {
                    campaign_id: id.clone(),
                    residual,
                },
            )),
            _ => None,
        });
    let spread_campaigns = unrestricted_campaigns.join_map(
        categories_in_use.map(|category| ((), category)),
        |_unit, matcher, category| (PredicateKey::Category(*category), matcher.clone()),
    );

    let campaigns_by_key = keyed_campaigns
        .concat(spread_campaigns)
        .arrange_by_key_named("CampaignsByPredicate");

    products_by_key
        .join_core(campaigns_by_key, |_key, product, matcher: &CampaignMatcher| {
            is_eligible(product, &matcher.residual).then(|| {
                let pair = PairKey {
                    campaign_id: matcher.campaign_id.clone(),
                    seller_id: product.seller_id,
                };
                (pair, product.stock)
            })
        })
        .explode(|(pair, stock)| Some((pair, (1isize, stock as isize))))
        .count_total()
}
