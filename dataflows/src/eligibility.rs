//! The eligibility dataflow: changelogs in, per-pair (count, stock) totals out.
//!
//! ```text
//!  categories (Upsert)
//!        |  exchange by category id
//!   CategoryEdges: (child, parent) ±1
//!        |
//!   iterate { closure ⋈ edges ∪ edges, distinct }   recursive: any depth, cycles end
//!        |  (category, strict ancestor) ±1 per time
//!    broadcast ---------------------------------------+
//!                                                     |
//!  products (Upsert, text id)                 campaigns (Upsert)      clock readings
//!        |  id -> ProductKey (128-bit hash)          |  broadcast             |  broadcast
//!        |                                   CampaignWindows <----------------+
//!        |                        open: the criteria; closed: a tombstone
//!        |                                           +-----------------------+
//!        |  exchange by product key (or none: read  |                       |
//!        |  where they meet, ProductPlacement)      |                       |
//!        +------------> EligiblePairs <--------------+                       |
//!                 products once per worker, every campaign,                  |
//!                 the tree both ways (ancestors, descendants);               |
//!                 joined through predicate keys; summed per time             |
//!                             |  ((campaign tag, seller), (Δproducts, Δstock))
//!                             |  exchange by pair                            |
//!                         PairTotals <---------- names tags -----------------+
//!                             |
//!            PairChange: each moved pair once per time, old and new figures
//! ```
//!
//! A product change touches only the campaigns indexed under its keys (its category's
//! ancestors among them), on the worker that holds the product: it never moves and is
//! never copied under other keys. A campaign change touches only the products under its
//! categories and their descendants (or one scan of each worker's share, for campaigns
//! without list criteria), so it recomputes only its own pairs. A tree change touches only
//! the products of the categories whose ancestors changed, for the campaigns naming an
//! ancestor lost or gained. The totals are one 24-byte table entry per pair, on the worker the
//! pair hashes to.
//!
//! Why not differential's `join` and `count`: campaigns are a small dimension beside the
//! products, so a broadcast hash join that keeps each product once beats arrangements that
//! keep it under each of its keys and re-sort it at every merge (docs/benchmarks.md). The
//! output is still exact per time, whatever the worker count: a pair's change is formed
//! once, where its totals live, so no later stage consolidates or re-sorts it. The tree
//! is a small dimension too, but recursive: its closure is the one place where
//! differential's `iterate` pays, and only its changes reach the matcher.

use timely::dataflow::operators::vec::{Broadcast, Map};
use timely::dataflow::Stream;

use crate::model::{Campaign, CampaignId, Category, CategoryId, PairChange, Product, ProductId, ProductKey, Time};
use crate::operators::ancestors::ancestor_changes;
use crate::operators::campaign_windows::{campaign_windows, JobClock};
use crate::operators::eligible_pairs::eligible_pairs;
use crate::operators::pair_totals::pair_totals;
use crate::operators::Upsert;
use crate::state::pairs::PairCount;
use crate::state::LentShares;

/// Builds the eligibility dataflow and returns the changes of every pair whose figures
/// moved, once per pair and time, unsorted, on the worker that holds the pair's totals.
///
/// `rebuild`, for a restart: the changes of the times up to its `until` are not emitted
/// one by one; the pairs reached at `until` come out at `until` instead, as changes from
/// nothing (for `reconcile_with_held`).
///
/// `clock` says what instant each time stands for, and so when scheduled campaigns open
/// and close (`operators::campaign_windows`).
///
/// `placement`: where the products' records meet ([`ProductPlacement`]).
///
/// `categories` is the tree's changelog, keyed by category id. A job without one passes a
/// stream that is closed from the start (timely's `empty`, or an input closed at once) and
/// sees a flat tree at exactly the flat cost: the recursive part finishes at once. An open
/// stream that carries no record gives the same pairs, but every logical time then passes
/// through the recursive part's progress tracking, some 15-20 µs per time on one worker:
/// nothing beside batches of thousands of updates, but more than doubling the cost of
/// five-update batches.
pub fn render_eligibility<'scope>(
    products: Stream<'scope, Time, Vec<Upsert<ProductId, Product>>>,
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    categories: Stream<'scope, Time, Vec<Upsert<CategoryId, Category>>>,
    clock: JobClock<'scope>,
    placement: ProductPlacement,
    rebuild: Option<QuietRebuild>,
) -> Stream<'scope, Time, Vec<PairChange>> {
    // Hashed where the record enters, before any exchange sees the text id.
    let products = products.map(|update: Upsert<ProductId, Product>| Upsert {
        key: ProductKey::of(&update.key),
        seq: update.seq,
        value: update.value,
    });
    let campaigns = campaign_windows(campaigns.broadcast(), clock);
    let ancestors = ancestor_changes(categories).broadcast();
    let deltas = eligible_pairs(products, placement, campaigns.clone(), ancestors, rebuild.clone());
    pair_totals(deltas, campaigns, rebuild)
}

/// Where a product's records meet, to be applied in order against its held version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProductPlacement {
    /// On the worker its key hashes to, whatever worker read them: for any source.
    ByKey,
    /// On the worker that read them, without an exchange: only for a source that gives
    /// every record of a key to the same worker for the whole run (each Kafka partition
    /// has one reader, and a key's records stay in one partition).
    AsRead,
}

/// A rebuild from the changelogs before the job goes live.
#[derive(Clone, Debug)]
pub struct QuietRebuild {
    /// The times up to this one only change the state; what it reaches comes out here.
    pub until: Time,
    /// The pairs it is expected to reach, once known, to size the pair tables.
    pub pairs: PairCount,
    /// How many product records it reads, on all workers together (0 if not known): more
    /// than the products it ends with only by the versions compaction has not yet removed,
    /// so it sizes each worker's product table for its share at once.
    pub products: u64,
    /// Where the workers of this process lend each other their products at the end, so
    /// that each seller is summed once per process: one `LentShares::new(workers)` per
    /// process, cloned into its workers (`LentShares::default()`: each worker alone).
    pub lent: LentShares,
}
