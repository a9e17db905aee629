//! The category tree's ancestor relation, kept up to date with differential's `iterate`.
//!
//! ```text
//!  categories (Upsert) --(by id)--> CategoryEdges: (child, parent) +1 / -1
//!                                        |
//!                  +---------------------+---------------------------+
//!                  v                                                 |
//!     +--> closure (c, a) --> (a, c) join (a, p) --> (c, p) --+      |
//!     |                                                       concat <-- edges
//!     |                                      drop (c, c); distinct   |
//!     +-------------------- iterate until nothing changes -----------+
//!                                        |
//!                       consolidate: (category, strict ancestor) ±1 per time
//! ```
//!
//! The closure is recursive, so depth is unbounded; `distinct` makes it a set, so a cycle
//! ends the iteration like any other path: every member reaches every other, and reaching
//! itself is dropped (a category is its own ancestor anyway, which the matcher knows
//! without a pair). A move of one `parent_id` is two edge changes, and the loop revisits
//! only the pairs they reach: the moved subtree's categories against the old and the new
//! ancestors, in as many rounds as the tree is deep.
//!
//! Only categories that some record places under a parent appear; the changes are a few
//! per category edit, and every worker then receives them all (broadcast).

use std::collections::BTreeMap;

use differential_dataflow::operators::iterate::Iterate;
use differential_dataflow::{AsCollection, VecCollection};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use crate::hashing::{category_route, FastMap};
use crate::model::{Category, CategoryId, Time};
use crate::operators::upsert::{LatestUpserts, Upsert};

/// A change of the ancestor relation: ((category, strict ancestor), time, +1 or -1).
pub type AncestorChange = ((CategoryId, CategoryId), Time, isize);

/// The changes of the ancestor relation, at the time of the category records that cause
/// them, consolidated: each pair at most once per time, partitioned across the workers.
pub fn ancestor_changes<'scope>(
    categories: Stream<'scope, Time, Vec<Upsert<CategoryId, Category>>>,
) -> Stream<'scope, Time, Vec<AncestorChange>> {
    let edges = category_edges(categories);
    let closure = edges.clone().iterate(|scope, closure| {
        let edges = edges.enter(scope);
        closure
            .map(|(category, ancestor)| (ancestor, category))
            .join_map(edges.clone(), |_ancestor, category, parent| (*category, *parent))
            .concat(edges)
            .filter(|(category, ancestor)| category != ancestor)
            .distinct()
    });
    // Leaving the loop, a pair may come and go within one time over several rounds.
    closure.consolidate().inner
}

/// The (child, parent) edges of the tree as a collection: each category's latest record
/// per time replaces its previous edge. A root, a tombstone, or a category that is its own
/// parent has no edge.
fn category_edges<'scope>(
    categories: Stream<'scope, Time, Vec<Upsert<CategoryId, Category>>>,
) -> VecCollection<'scope, Time, (CategoryId, CategoryId)> {
    type Edge = ((CategoryId, CategoryId), Time, isize);
    let by_category = Exchange::new(|update: &Upsert<CategoryId, Category>| category_route(update.key));
    categories
        .unary_frontier::<CapacityContainerBuilder<Vec<Edge>>, _, _, _>(
            by_category,
            "CategoryEdges",
            |_capability, _info| {
                let mut pending: BTreeMap<Time, (Capability<Time>, LatestUpserts<CategoryId, Category>)> =
                    BTreeMap::new();
                // Every category with a parent, on the worker its id routes to.
                let mut parents: FastMap<CategoryId, CategoryId> = FastMap::default();
                move |(input, frontier), output| {
                    input.for_each(|capability, data| {
                        let time = *capability.least().expect("a totally ordered stamp has a least time");
                        let (_, latest) = pending.entry(time).or_insert_with(|| {
                            let capability = capability.retain_least(0).expect("a least time");
                            (capability, LatestUpserts::default())
                        });
                        data.drain(..).for_each(|update| latest.offer(update));
                    });
                    // A time's records may come in several messages: the last one per
                    // category is known once the time is complete.
                    while let Some(entry) = pending.first_entry() {
                        let time = *entry.key();
                        if frontier.less_equal(&time) {
                            break;
                        }
                        let (capability, latest) = entry.remove();
                        let mut session = output.session(&capability);
                        for (category, record) in latest.into_latest() {
                            let parent = record
                                .and_then(|node| node.parent_id)
                                .filter(|parent| *parent != category);
                            let old = match parent {
                                Some(parent) => parents.insert(category, parent),
                                None => parents.remove(&category),
                            };
                            if old != parent {
                                if let Some(old) = old {
                                    session.give(((category, old), time, -1));
                                }
                                if let Some(parent) = parent {
                                    session.give(((category, parent), time, 1));
                                }
                            }
                        }
                    }
                }
            },
        )
        .as_collection()
}
