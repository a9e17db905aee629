//! The eligibility dataflow: changelogs in, per-pair (count, stock) totals out.
//!
//! ```text
//!  products (Upsert, text id)                 campaigns (Upsert)
//!        |  id -> ProductKey (128-bit hash)          |
//!        |                                       broadcast ------------------+
//!        |  exchange by product key                  |                       |
//!        +------------> EligiblePairs <--------------+                       |
//!                 products once per worker, every campaign,                  |
//!                 joined through predicate keys; summed per time             |
//!                             |  ((campaign tag, seller), (Δproducts, Δstock))
//!                             |  exchange by pair                            |
//!                         PairTotals <---------- names tags -----------------+
//!                             |
//!            ((pair, (eligible_products, eligible_stock)), time, ±1)
//! ```
//!
//! A product change touches only the campaigns indexed under its keys, on the worker that
//! holds the product: it never moves and is never copied under other keys. A campaign
//! change touches only the products under its categories (or one scan of each worker's
//! share, for campaigns without categories), so it recomputes only its own pairs. The
//! totals are one hash map entry per pair, on the worker the pair hashes to.
//!
//! Why not differential's `join` and `count`: campaigns are a small dimension beside the
//! products, so a broadcast hash join that keeps each product once beats arrangements that
//! keep it under each of its keys and re-sort it at every merge (docs/benchmarks.md). The
//! output is still a differential collection, exact per time, whatever the worker count.

use differential_dataflow::VecCollection;
use timely::dataflow::operators::vec::{Broadcast, Map};
use timely::dataflow::Stream;

use crate::model::{Campaign, CampaignId, PairKey, Product, ProductId, ProductKey, Time};
use crate::operators::eligible_pairs::eligible_pairs;
use crate::operators::pair_changes::PairTotals;
use crate::operators::pair_totals::pair_totals;
use crate::operators::Upsert;

/// Builds the eligibility dataflow and returns the totals of every existing pair.
///
/// `quiet_until`, for a rebuild: the changes of the times up to it are not emitted one by
/// one; the totals reached at `quiet_until` come out at `quiet_until` instead (the same
/// collection, delayed to that time).
pub fn render_eligibility<'scope>(
    products: Stream<'scope, Time, Vec<Upsert<ProductId, Product>>>,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    quiet_until: Option<Time>,
) -> VecCollection<'scope, Time, (PairKey, PairTotals), isize> {
    // Hashed where the record enters, before any exchange sees the text id.
    let products = products.map(|update: Upsert<ProductId, Product>| Upsert {
        key: ProductKey::of(&update.key),
        seq: update.seq,
        value: update.value,
    });
    let campaigns = campaigns.broadcast();
    let deltas = eligible_pairs(products, campaigns.clone());
    pair_totals(deltas, campaigns, quiet_until)
}
