//! The eligibility dataflow on small, hand-checked cases, on one and several workers.

mod support;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use dataflows::state::pairs::PairCount;
use dataflows::state::LentShares;
use dataflows::{
    render_eligibility, Campaign, IdSet, JobClock, PairChange, PairFigures, PairKey, Product, ProductPlacement,
    QuietRebuild,
};
use support::{change, figures, run, run_with, sorted_changes, Event, Inputs};
use timely::dataflow::operators::capture::Capture;
use timely::dataflow::operators::Input;

fn product(seller_id: u64, category_id: u64, price_minor: u64, stock: u32) -> Product {
    Product {
        seller_id,
        category_id,
        brand_id: 7,
        price_minor,
        stock,
    }
}

fn campaign_in(categories: &[u64]) -> Campaign {
    Campaign {
        category_ids: IdSet::new(categories.to_vec()),
        ..Campaign::unrestricted()
    }
}

#[test]
fn counts_and_stock_follow_product_changes() {
    for workers in [1, 3] {
        let changes = run(
            workers,
            vec![
                vec![
                    Event::Campaign("c-1", Some(campaign_in(&[10]))),
                    Event::Product("p-1", Some(product(42, 10, 100, 5))),
                    Event::Product("p-2", Some(product(42, 10, 200, 7))),
                    Event::Product("p-3", Some(product(43, 11, 100, 1))),
                ],
                // p-2 leaves the category, p-3 enters it.
                vec![
                    Event::Product("p-2", Some(product(42, 11, 200, 7))),
                    Event::Product("p-3", Some(product(43, 10, 100, 1))),
                ],
                // A re-sent identical state and an unknown tombstone change nothing.
                vec![
                    Event::Product("p-1", Some(product(42, 10, 100, 5))),
                    Event::Product("p-9", None),
                ],
                // Seller 42's last eligible product goes away.
                vec![Event::Product("p-1", None)],
            ],
        );
        assert_eq!(
            changes,
            vec![
                change(0, "c-1", 42, figures(2, 12), None),
                change(1, "c-1", 42, figures(1, 5), figures(2, 12)),
                change(1, "c-1", 43, figures(1, 1), None),
                change(3, "c-1", 42, None, figures(1, 5)),
            ],
            "workers: {workers}"
        );
    }
}

#[test]
fn without_a_categories_source_the_pairs_are_the_same() {
    let batches = vec![
        vec![
            Event::Campaign("c-1", Some(campaign_in(&[10]))),
            Event::Campaign("all", Some(Campaign::unrestricted())),
            Event::Product("p-1", Some(product(42, 10, 100, 5))),
            Event::Product("p-2", Some(product(43, 11, 100, 1))),
        ],
        vec![Event::Product("p-2", Some(product(43, 10, 100, 2)))],
        vec![Event::Campaign("c-1", None)],
    ];
    for workers in [1, 2] {
        let without = run_with(workers, batches.clone(), false);
        assert_eq!(without, run(workers, batches.clone()), "workers: {workers}");
        assert_eq!(without.len(), 7);
    }
}

#[test]
fn the_last_record_for_a_key_in_a_batch_wins() {
    let changes = run(
        2,
        vec![vec![
            Event::Campaign("c-1", Some(campaign_in(&[10]))),
            Event::Product("p-1", Some(product(42, 10, 100, 5))),
            Event::Product("p-1", None),
            Event::Product("p-2", None),
            Event::Product("p-2", Some(product(42, 10, 100, 3))),
        ]],
    );
    assert_eq!(changes, vec![change(0, "c-1", 42, figures(1, 3), None)]);
}

#[test]
fn campaign_edits_deactivation_and_tombstones() {
    let changes = run(
        3,
        vec![
            vec![
                Event::Product("p-1", Some(product(42, 10, 100, 5))),
                Event::Product("p-2", Some(product(43, 11, 5000, 2))),
                Event::Campaign("c-1", Some(campaign_in(&[10]))),
                Event::Campaign("c-2", Some(campaign_in(&[10]))),
            ],
            // c-1 widens to category 11 but caps the price: p-2 is too expensive.
            vec![Event::Campaign(
                "c-1",
                Some(Campaign {
                    max_price_minor: Some(1000),
                    ..campaign_in(&[10, 11])
                }),
            )],
            vec![Event::Campaign(
                "c-1",
                Some(Campaign {
                    active: false,
                    ..campaign_in(&[10])
                }),
            )],
            vec![Event::Campaign("c-2", None)],
            // Reordered lists are the same campaign: nothing changes.
            vec![Event::Campaign(
                "c-1",
                Some(Campaign {
                    active: false,
                    ..campaign_in(&[10])
                }),
            )],
        ],
    );
    assert_eq!(
        changes,
        vec![
            change(0, "c-1", 42, figures(1, 5), None),
            change(0, "c-2", 42, figures(1, 5), None),
            change(2, "c-1", 42, None, figures(1, 5)),
            change(3, "c-2", 42, None, figures(1, 5)),
        ]
    );
}

#[test]
fn unrestricted_campaigns_meet_every_category_in_use() {
    let changes = run(
        2,
        vec![
            vec![
                Event::Campaign(
                    "all",
                    Some(Campaign {
                        excluded_seller_ids: IdSet::new(vec![44]),
                        ..Campaign::unrestricted()
                    }),
                ),
                Event::Product("p-1", Some(product(42, 10, 100, 5))),
                Event::Product("p-2", Some(product(42, 11, 100, 1))),
                Event::Product("p-3", Some(product(44, 10, 100, 1))),
            ],
            // A category that appears later is met too.
            vec![Event::Product("p-4", Some(product(42, 12, 100, 4)))],
            // A category that disappears takes its products' pairs with it.
            vec![
                Event::Product("p-1", None),
                Event::Product("p-2", None),
                Event::Product("p-4", None),
            ],
        ],
    );
    assert_eq!(
        changes,
        vec![
            change(0, "all", 42, figures(2, 6), None),
            change(1, "all", 42, figures(3, 10), figures(2, 6)),
            change(2, "all", 42, None, figures(3, 10)),
        ]
    );
}

#[test]
fn brand_and_seller_keyed_campaigns_check_their_residuals() {
    let changes = run(
        2,
        vec![vec![
            Event::Product(
                "p-1",
                Some(Product {
                    brand_id: 8,
                    ..product(42, 10, 100, 5)
                }),
            ),
            Event::Product("p-2", Some(product(42, 10, 100, 5))),
            Event::Product("p-3", Some(product(43, 10, 100, 0))),
            Event::Campaign(
                "brand",
                Some(Campaign {
                    brand_ids: IdSet::new(vec![7]),
                    seller_ids: IdSet::new(vec![42]),
                    ..Campaign::unrestricted()
                }),
            ),
            Event::Campaign(
                "seller",
                Some(Campaign {
                    seller_ids: IdSet::new(vec![42, 43]),
                    min_stock: 1,
                    ..Campaign::unrestricted()
                }),
            ),
        ]],
    );
    assert_eq!(
        changes,
        vec![
            change(0, "brand", 42, figures(1, 5), None),
            change(0, "seller", 42, figures(2, 10), None)
        ]
    );
}

/// Runs a rebuild (`rebuild` batches at times 1, 2, …), then `live` batches from time 11,
/// When the held pairs' input closes, against the rebuild.
#[derive(Clone, Copy, Debug, PartialEq)]
enum HeldFeed {
    /// Once fed, before anything else, as the job does.
    Early,
    /// Advanced with the other inputs, closed at the end.
    Along,
    /// Kept below the rebuild's end until the rebuild has ended, then closed.
    Late,
}

/// with the output reconciled against `held` pairs; `quiet` keeps the rebuild's own changes
/// inside the dataflow; `feed` says when the held input closes; `placement` where the
/// products meet (and so which worker feeds them).
/// Also returns the most rebuilt pairs the reconcile kept waiting for the held pairs.
fn run_reconciled(
    quiet: bool,
    feed: HeldFeed,
    placement: ProductPlacement,
    held: Vec<(PairKey, PairFigures)>,
    rebuild: Vec<Vec<Event>>,
    live: Vec<Vec<Event>>,
) -> (Vec<PairChange>, usize) {
    use dataflows::operators::reconcile::{Held, KeptWaiting};
    use dataflows::operators::reconcile_with_held;
    const LIVE_FROM: u64 = 10;
    let (send, recv) = mpsc::channel();
    let send = Arc::new(Mutex::new(send));
    let batches: Arc<Vec<(u64, Vec<Event>)>> = Arc::new(
        rebuild
            .into_iter()
            .enumerate()
            .map(|(i, batch)| (1 + i as u64, batch))
            .chain(
                live.into_iter()
                    .enumerate()
                    .map(|(i, batch)| (LIVE_FROM + 1 + i as u64, batch)),
            )
            .collect(),
    );
    let held = Arc::new(held);
    // Every product record the rebuild reads, as a Kafka source counts them: sizes the
    // product tables (tombstones and repeated keys make it more than the products).
    let product_records = batches
        .iter()
        .filter(|(time, _)| *time <= LIVE_FROM)
        .flat_map(|(_, batch)| batch)
        .filter(|event| matches!(event, Event::Product(..)))
        .count() as u64;
    // Known before the rebuild starts, as a sink's held pairs usually are.
    let held_pairs = PairCount::default();
    held_pairs.note(held.len());
    let kept_waiting = KeptWaiting::default();
    let waiting = kept_waiting.clone();
    // One per process: the workers lend each other their products at the rebuild's end.
    let lent = LentShares::new(2);
    timely::execute(timely::Config::process(2), move |worker| {
        let send = send.lock().unwrap().clone();
        let held_pairs = held_pairs.clone();
        let counted = kept_waiting.clone();
        let kept_waiting = kept_waiting.clone();
        let (mut inputs, mut held_in) = worker.dataflow::<u64, _, _>(|scope| {
            let (inputs, (products, campaigns, categories)) = Inputs::new(scope);
            let (held_in, held) = scope.new_input();
            let changes = render_eligibility(
                products,
                campaigns,
                categories,
                JobClock::stopped(scope),
                placement,
                quiet.then(|| QuietRebuild {
                    until: LIVE_FROM,
                    pairs: held_pairs.clone(),
                    products: product_records,
                    lent: lent.clone(),
                }),
            );
            // Routed by pair: a held pair deleted on another worker than 0 needs its name there.
            reconcile_with_held(changes, held, LIVE_FROM, held_pairs, kept_waiting).capture_into(send);
            (inputs, held_in)
        });
        if worker.index() == 0 {
            for item in held.iter().cloned().collect::<Held>().into_items() {
                held_in.send(item);
            }
        }
        let mut held_in = Some(held_in);
        if feed == HeldFeed::Early {
            // As the job does: the reconcile then checks the rebuild's pairs as they arrive.
            held_in.take().expect("open").close();
        }
        for (time, batch) in batches.iter() {
            inputs.advance_to(*time);
            if let Some(held_in) = held_in.as_mut() {
                if feed == HeldFeed::Along || *time <= LIVE_FROM {
                    held_in.advance_to(*time);
                }
            }
            inputs.send_placed(batch, placement, worker.index(), worker.peers());
        }
        if feed == HeldFeed::Late {
            // The rebuild ends and its pairs reach the reconcile before the held input closes:
            // until the reconcile counts them (or for 5 s, if it never does).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while counted.most() == 0 && std::time::Instant::now() < deadline {
                worker.step_or_park(Some(std::time::Duration::from_millis(1)));
            }
        }
        drop(held_in);
    })
    .unwrap();
    (sorted_changes(recv), waiting.most())
}

#[test]
fn a_rebuild_writes_only_what_differs_from_what_the_sinks_hold() {
    let pair = |campaign: &str, seller: u64| PairKey {
        campaign_id: campaign.into(),
        seller_id: seller,
    };
    let held = vec![
        // Still right after the rebuild: not written again.
        (
            pair("c-1", 42),
            PairFigures {
                eligible_products: 2,
                eligible_stock: 12,
            },
        ),
        // Stale figures: rewritten.
        (
            pair("c-1", 43),
            PairFigures {
                eligible_products: 5,
                eligible_stock: 5,
            },
        ),
        // No longer exists: deleted.
        (
            pair("c-gone", 42),
            PairFigures {
                eligible_products: 1,
                eligible_stock: 1,
            },
        ),
    ];
    let rebuild = vec![
        vec![
            Event::Campaign("c-1", Some(campaign_in(&[10]))),
            Event::Product("p-1", Some(product(42, 10, 100, 5))),
            Event::Product("p-2", Some(product(42, 10, 100, 1))),
        ],
        vec![
            Event::Product("p-2", Some(product(42, 10, 100, 7))),
            Event::Product("p-3", Some(product(43, 10, 100, 1))),
            // New since the sink was written: upserted.
            Event::Product("p-4", Some(product(44, 10, 100, 3))),
        ],
    ];
    let live = vec![vec![Event::Product("p-1", None)]];
    let by_key = ProductPlacement::ByKey;
    let (quiet, kept_waiting) = run_reconciled(
        true,
        HeldFeed::Early,
        by_key,
        held.clone(),
        rebuild.clone(),
        live.clone(),
    );
    assert_eq!(
        kept_waiting, 0,
        "held pairs in first: each rebuilt pair is checked as it arrives"
    );
    for (is_quiet, feed, placement) in [
        (true, HeldFeed::Along, by_key),
        (true, HeldFeed::Late, by_key),
        (false, HeldFeed::Early, by_key),
        (false, HeldFeed::Along, by_key),
        // Each product's records fed by one of the two workers and kept there, as Kafka reads.
        (true, HeldFeed::Early, ProductPlacement::AsRead),
        (false, HeldFeed::Early, ProductPlacement::AsRead),
    ] {
        let (changes, kept_waiting) =
            run_reconciled(is_quiet, feed, placement, held.clone(), rebuild.clone(), live.clone());
        assert_eq!(
            changes, quiet,
            "quiet {is_quiet}, held fed {feed:?}, {placement:?}: every way ends in the same changes"
        );
        if is_quiet {
            // Held pairs that come after the rebuild's end keep its pairs waiting.
            assert_eq!(
                kept_waiting > 0,
                feed == HeldFeed::Late,
                "held fed {feed:?}: {kept_waiting} kept waiting"
            );
        }
    }
    assert_eq!(
        quiet,
        vec![
            change(10, "c-gone", 42, None, figures(1, 1)),
            change(10, "c-1", 43, figures(1, 1), figures(5, 5)),
            change(10, "c-1", 44, figures(1, 3), None),
            change(11, "c-1", 42, figures(1, 7), figures(2, 12)),
        ]
    );
}
