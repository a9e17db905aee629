//! Turns the per-pair totals into one change per pair and completed time.
//!
//! `count_total` reports a pair's move from old to new figures as a retraction of the old
//! and an insertion of the new. This operator routes both to one worker (chosen by the
//! sink), waits until the time is complete, and emits per pair either its new figures or,
//! when only a retraction remains, its end.
//!
//! Invariant: per time, each pair appears at most once, changes are sorted by pair, an
//! upsert always carries figures different from the pair's previous ones (equal figures
//! cancel out before this point), and a delete always names a pair that existed.

use std::collections::BTreeMap;

use differential_dataflow::VecCollection;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use crate::model::{PairChange, PairFigures, PairKey, Time};

/// A pair's totals as differential keeps them: (eligible products, eligible stock).
pub type PairTotals = (isize, isize);

/// Extension trait: per-time changes of the pair totals.
pub trait PairChanges<'scope> {
    /// Emits each completed time's changes on the worker `route` picks for the pair.
    fn pair_changes<F>(self, route: F) -> Stream<'scope, Time, Vec<PairChange>>
    where
        F: Fn(&PairKey) -> u64 + 'static;
}

impl<'scope> PairChanges<'scope> for VecCollection<'scope, Time, (PairKey, PairTotals), isize> {
    fn pair_changes<F>(self, route: F) -> Stream<'scope, Time, Vec<PairChange>>
    where
        F: Fn(&PairKey) -> u64 + 'static,
    {
        let exchange = Exchange::new(move |update: &Update| route(&(update.0).0));
        self.inner
            .unary_frontier(exchange, "PairChanges", |_capability, _info| {
                let mut pending: BTreeMap<Time, Pending> = BTreeMap::new();
                move |(input, frontier), output| {
                    input.for_each(|capability, data| {
                        for update in data.drain(..) {
                            let time = update.1;
                            pending
                                .entry(time)
                                .or_insert_with(|| Pending {
                                    capability: capability.delayed(&time, 0),
                                    updates: Vec::new(),
                                    consolidated_len: 0,
                                })
                                .push(update);
                        }
                    });
                    while let Some(entry) = pending.first_entry() {
                        if frontier.less_equal(entry.key()) {
                            break;
                        }
                        let (
                            time,
                            Pending {
                                capability, updates, ..
                            },
                        ) = entry.remove_entry();
                        let changes = changes_at(time, updates);
                        if !changes.is_empty() {
                            output.session(&capability).give_iterator(changes.into_iter());
                        }
                    }
                }
            })
    }
}

type Update = ((PairKey, PairTotals), Time, isize);

/// The updates of one time, waiting for the time to complete.
struct Pending {
    capability: Capability<Time>,
    updates: Vec<Update>,
    consolidated_len: usize,
}

impl Pending {
    /// Adds an update, consolidating now and then: a time that collects a long history
    /// (the rebuild after a restart) then holds one entry per pair, not one per update.
    fn push(&mut self, update: Update) {
        self.updates.push(update);
        if self.updates.len() > 2 * self.consolidated_len + 4096 {
            differential_dataflow::consolidation::consolidate_updates(&mut self.updates);
            self.consolidated_len = self.updates.len();
        }
    }
}

/// Forms the changes of one time from its retractions and insertions.
fn changes_at(time: Time, mut updates: Vec<Update>) -> Vec<PairChange> {
    differential_dataflow::consolidation::consolidate_updates(&mut updates);
    // Sorted by pair, then totals: each pair's retraction and insertion are adjacent.
    let mut changes: Vec<PairChange> = Vec::new();
    for ((pair, totals), _time, diff) in updates {
        let figures = to_figures(totals);
        let change = match changes.last_mut() {
            Some(last) if last.pair == pair => last,
            _ => {
                changes.push(PairChange {
                    time,
                    pair,
                    figures: None,
                    previous: None,
                });
                changes.last_mut().expect("just pushed")
            }
        };
        if diff > 0 {
            change.figures = Some(figures);
        } else {
            change.previous = Some(figures);
        }
    }
    changes
}

fn to_figures((products, stock): PairTotals) -> PairFigures {
    PairFigures {
        eligible_products: products as u64,
        eligible_stock: stock as u64,
    }
}
