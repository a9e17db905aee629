//! Products meet campaigns where the products are: what each time adds to each pair.
//!
//! ```text
//!  products (by key hash) ---\
//!                             EligiblePairs --> ((campaign tag, seller), (Δproducts, Δstock))
//!  campaigns (broadcast) ----/                  summed per time on this worker
//! ```
//!
//! Each worker holds its share of the products once ([`ProductTable`]) and every campaign
//! ([`CampaignTable`]). Once both inputs have passed a time `t`, it applies `t`:
//!
//! 1. campaign changes, against the products as they were before `t`: the old version's
//!    pairs are retracted, the new one's added. A campaign meets only the products under
//!    its index keys; those without list criteria are met by one scan of the share, for
//!    all of this time's changed campaigns together;
//! 2. product changes, against the campaigns as they are at `t`: the old version leaves
//!    the campaigns it met, the new one joins those it meets (three hash lookups).
//!
//! The two steps together give exactly `F(P_t, C_t) - F(P_{t-1}, C_{t-1})`, the change of
//! every pair's totals at `t`, summed on this worker before anything is exchanged.

use std::collections::BTreeMap;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use crate::hashing::FastMap;
use crate::model::{tag_of, Campaign, CampaignId, Product, ProductKey, SellerId, Tag, Time};
use crate::operators::upsert::{LatestUpserts, Upsert};
use crate::rule::{index_campaign, is_eligible, CampaignIndex, NO_ANCESTORS};
use crate::state::{CampaignTable, ProductTable};

/// A pair as the hot path keys it: (campaign tag, seller).
pub type PairTag = (Tag, SellerId);
/// What a time adds to a pair: (eligible products, eligible stock).
pub type Contribution = (i64, i64);

/// Builds the operator; `campaigns` must reach every worker whole (broadcast).
pub fn eligible_pairs<'scope>(
    products: Stream<'scope, Time, Vec<Upsert<ProductKey, Product>>>,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
) -> Stream<'scope, Time, Vec<(PairTag, Contribution)>> {
    let by_product = Exchange::new(|update: &Upsert<ProductKey, Product>| update.key.route());
    products.binary_frontier::<_, CapacityContainerBuilder<Vec<(PairTag, Contribution)>>, _, _, _, _>(
        campaigns,
        by_product,
        Pipeline,
        "EligiblePairs",
        |_capability, _info| {
            let mut pending: BTreeMap<Time, PendingTime> = BTreeMap::new();
            let mut state = Matcher::default();
            move |(products_in, products_frontier), (campaigns_in, campaigns_frontier), output| {
                products_in.for_each(|capability, data| {
                    let pending = PendingTime::at(&mut pending, capability);
                    data.drain(..).for_each(|update| pending.products.offer(update));
                });
                campaigns_in.for_each(|capability, data| {
                    let pending = PendingTime::at(&mut pending, capability);
                    data.drain(..).for_each(|update| pending.campaigns.offer(update));
                });
                while let Some(entry) = pending.first_entry() {
                    let time = *entry.key();
                    if products_frontier.less_equal(&time) || campaigns_frontier.less_equal(&time) {
                        break;
                    }
                    let PendingTime {
                        capability,
                        products,
                        campaigns,
                    } = entry.remove();
                    state.apply_campaigns(campaigns);
                    state.apply_products(products);
                    let mut session = output.session(&capability);
                    session.give_iterator(state.drain_deltas());
                }
            }
        },
    )
}

/// The records of one time, waiting until both inputs have passed it.
struct PendingTime {
    capability: Capability<Time>,
    products: LatestUpserts<ProductKey, Product>,
    campaigns: LatestUpserts<CampaignId, Campaign>,
}

impl PendingTime {
    fn at(
        pending: &mut BTreeMap<Time, PendingTime>,
        capability: timely::dataflow::operators::InputCapability<Time>,
    ) -> &mut PendingTime {
        let time = *capability.least().expect("a totally ordered stamp has a least time");
        pending.entry(time).or_insert_with(|| PendingTime {
            capability: capability
                .retain_least(0)
                .expect("a totally ordered stamp has a least time"),
            products: LatestUpserts::default(),
            campaigns: LatestUpserts::default(),
        })
    }
}

/// A worker's state, and what the time being applied adds to each pair.
#[derive(Default)]
struct Matcher {
    products: ProductTable,
    campaigns: CampaignTable,
    deltas: FastMap<PairTag, Contribution>,
}

impl Matcher {
    fn apply_campaigns(&mut self, changes: LatestUpserts<CampaignId, Campaign>) {
        // Campaigns without list criteria, met by one scan of the share after the loop.
        let mut scanned: Vec<(Tag, Campaign, i64)> = Vec::new();
        for (id, new) in changes.into_latest() {
            let old = self.campaigns.upsert(&id, new.clone());
            if old == new {
                continue;
            }
            let tag = tag_of(&id);
            for (version, sign) in [(old, -1), (new, 1)] {
                let Some(campaign) = version else { continue };
                match index_campaign(&campaign) {
                    None => {}
                    Some(CampaignIndex::Keys(keys, residual)) => {
                        for key in keys {
                            for product in self.products.with_key(key) {
                                if is_eligible(product, NO_ANCESTORS, &residual) {
                                    add(&mut self.deltas, tag, product, sign);
                                }
                            }
                        }
                    }
                    Some(CampaignIndex::EveryCategory(_)) => scanned.push((tag, campaign, sign)),
                }
            }
        }
        if scanned.is_empty() {
            return;
        }
        for product in self.products.iter() {
            for (tag, campaign, sign) in &scanned {
                if is_eligible(product, NO_ANCESTORS, campaign) {
                    add(&mut self.deltas, *tag, product, *sign);
                }
            }
        }
    }

    fn apply_products(&mut self, changes: LatestUpserts<ProductKey, Product>) {
        for (key, new) in changes.into_latest() {
            let old = self.products.upsert(key, new);
            if old == new {
                continue;
            }
            for (version, sign) in [(old, -1), (new, 1)] {
                let Some(product) = version else { continue };
                let deltas = &mut self.deltas;
                self.campaigns.candidates(&product, |active| {
                    if is_eligible(&product, NO_ANCESTORS, &active.residual) {
                        add(deltas, active.tag, &product, sign);
                    }
                });
            }
        }
    }

    /// This time's non-zero deltas; the map keeps its allocation for the next time.
    fn drain_deltas(&mut self) -> impl Iterator<Item = (PairTag, Contribution)> + '_ {
        self.deltas.drain().filter(|(_pair, delta)| *delta != (0, 0))
    }
}

/// Adds (`sign` 1) or retracts (-1) one product's share of a pair.
fn add(deltas: &mut FastMap<PairTag, Contribution>, tag: Tag, product: &Product, sign: i64) {
    let delta = deltas.entry((tag, product.seller_id)).or_default();
    delta.0 += sign;
    delta.1 += sign * i64::from(product.stock);
}
