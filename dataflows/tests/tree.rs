//! Category trees: campaigns that name a category meet the products of its descendants.
//!
//! Hand-checked cases first, then the dataflow against the brute-force reference on random
//! forests, deep chains, subtree moves, cycles and tombstones, batch by batch.

mod support;

use std::collections::BTreeMap;

use dataflows::reference::{apply_changes, changes_between, PairState, ReferenceState};
use dataflows::{Campaign, Category, CategoryId, IdSet, PairChange, Product, ProductPlacement, Time};
use proptest::prelude::*;
use support::{change, figures, run, run_placed, Event};

fn product(seller_id: u64, category_id: u64, stock: u32) -> Product {
    Product {
        seller_id,
        category_id,
        brand_id: 7,
        price_minor: 100,
        stock,
    }
}

fn campaign_in(categories: &[u64]) -> Campaign {
    Campaign {
        category_ids: IdSet::new(categories.to_vec()),
        ..Campaign::unrestricted()
    }
}

fn under(id: CategoryId, parent: CategoryId) -> Event {
    Event::Category(
        id,
        Some(Category {
            parent_id: Some(parent),
        }),
    )
}

fn root(id: CategoryId) -> Event {
    Event::Category(id, Some(Category { parent_id: None }))
}

/// Runs on 1 and 3 workers, checks they agree, returns the changes.
fn run_both(batches: Vec<Vec<Event>>) -> Vec<PairChange> {
    let one = run(1, batches.clone());
    assert_eq!(run(3, batches), one, "1 and 3 workers disagree");
    one
}

#[test]
fn a_campaign_naming_a_root_covers_a_grandchild() {
    let changes = run_both(vec![
        // No tree yet: the campaign meets its own category only.
        vec![
            Event::Campaign("top", Some(campaign_in(&[1]))),
            Event::Product("p-1", Some(product(42, 3, 5))),
            Event::Product("p-2", Some(product(42, 1, 1))),
        ],
        // 3 under 2 under 1 (which has no record: a root all the same).
        vec![under(3, 2), under(2, 1)],
        // A product arriving in the middle of the tree.
        vec![Event::Product("p-3", Some(product(42, 2, 2)))],
        // Naming a category and its ancestor counts each product once.
        vec![Event::Campaign("both", Some(campaign_in(&[2, 3])))],
        // A campaign naming a leaf is untouched by the tree above it.
        vec![Event::Campaign("leaf", Some(campaign_in(&[3])))],
        // A campaign on the top category, once the tree is there, meets its whole subtree.
        vec![Event::Campaign("late", Some(campaign_in(&[1])))],
        // A product arriving under both of a campaign's categories joins it once.
        vec![Event::Product("p-4", Some(product(42, 3, 10)))],
    ]);
    assert_eq!(
        changes,
        vec![
            change(0, "top", 42, figures(1, 1), None),
            change(1, "top", 42, figures(2, 6), figures(1, 1)),
            change(2, "top", 42, figures(3, 8), figures(2, 6)),
            change(3, "both", 42, figures(2, 7), None),
            change(4, "leaf", 42, figures(1, 5), None),
            change(5, "late", 42, figures(3, 8), None),
            change(6, "both", 42, figures(3, 17), figures(2, 7)),
            change(6, "late", 42, figures(4, 18), figures(3, 8)),
            change(6, "leaf", 42, figures(2, 15), figures(1, 5)),
            change(6, "top", 42, figures(4, 18), figures(3, 8)),
        ]
    );
}

#[test]
fn moving_a_subtree_writes_exactly_the_pairs_that_change_at_its_time() {
    let changes = run_both(vec![
        vec![
            // 4 under 3 under 2 under 1; 11 under 10.
            root(1),
            under(2, 1),
            under(3, 2),
            under(4, 3),
            root(10),
            under(11, 10),
            Event::Product("deep", Some(product(42, 4, 5))),
            Event::Product("mid", Some(product(43, 3, 1))),
            Event::Product("stays", Some(product(42, 2, 2))),
            Event::Product("other", Some(product(44, 11, 7))),
            Event::Campaign("one", Some(campaign_in(&[1]))),
            Event::Campaign("two", Some(campaign_in(&[2]))),
            Event::Campaign("three", Some(campaign_in(&[3]))),
            Event::Campaign("ten", Some(campaign_in(&[10]))),
            Event::Campaign("eleven", Some(campaign_in(&[11]))),
        ],
        // 3 (with 4 under it) moves under 11.
        vec![under(3, 11)],
        // Re-sending the same parent changes nothing.
        vec![under(3, 11)],
    ]);
    let at_one: Vec<_> = changes.iter().filter(|change| change.time == 1).cloned().collect();
    // "one" and "two" lose 3 and 4, "ten" and "eleven" gain them; "three", below the
    // move, and seller 44's pairs, beside it, do not change.
    let mut expected = vec![
        change(1, "one", 42, figures(1, 2), figures(2, 7)),
        change(1, "one", 43, None, figures(1, 1)),
        change(1, "two", 42, figures(1, 2), figures(2, 7)),
        change(1, "two", 43, None, figures(1, 1)),
        change(1, "ten", 42, figures(1, 5), None),
        change(1, "ten", 43, figures(1, 1), None),
        change(1, "eleven", 42, figures(1, 5), None),
        change(1, "eleven", 43, figures(1, 1), None),
    ];
    expected.sort();
    assert_eq!(at_one, expected);
    assert!(changes.iter().all(|change| change.time <= 1), "{changes:?}");
}

#[test]
fn on_a_cycle_every_member_is_an_ancestor_of_every_other() {
    let changes = run_both(vec![
        vec![
            Event::Product("p-1", Some(product(42, 1, 1))),
            Event::Product("p-2", Some(product(42, 2, 2))),
            Event::Product("p-3", Some(product(42, 3, 4))),
            Event::Product("p-5", Some(product(43, 5, 8))),
            Event::Campaign("three", Some(campaign_in(&[3]))),
            Event::Campaign("five", Some(campaign_in(&[5]))),
        ],
        // 1 -> 2 -> 3 -> 1, and 5 leads into the cycle: 5's ancestors are 1, 2 and 3.
        vec![under(1, 2), under(2, 3), under(3, 1), under(5, 1)],
        // A category that is its own parent has no ancestor but itself.
        vec![under(4, 4), Event::Product("p-4", Some(product(42, 4, 16)))],
        // A tombstone breaks the cycle at 3, which becomes a root: 1 and 2 stay under it.
        vec![Event::Category(3, None)],
        // Another tombstone makes 2 a root: 1 stays under 2, no longer under 3.
        vec![Event::Category(2, None)],
    ]);
    assert_eq!(
        changes,
        vec![
            change(0, "three", 42, figures(1, 4), None),
            change(0, "five", 43, figures(1, 8), None),
            change(1, "three", 42, figures(3, 7), figures(1, 4)),
            change(1, "three", 43, figures(1, 8), None),
            change(4, "three", 42, figures(1, 4), figures(3, 7)),
            change(4, "three", 43, None, figures(1, 8)),
        ]
    );
}

#[test]
fn the_last_category_record_in_a_batch_wins() {
    let changes = run_both(vec![
        vec![
            Event::Product("p-1", Some(product(42, 3, 5))),
            Event::Campaign("one", Some(campaign_in(&[1]))),
            Event::Campaign("two", Some(campaign_in(&[2]))),
            under(3, 1),
            Event::Category(3, None),
            under(3, 2),
        ],
        vec![under(3, 1), Event::Category(3, None)],
    ]);
    assert_eq!(
        changes,
        vec![
            change(0, "two", 42, figures(1, 5), None),
            change(1, "two", 42, None, figures(1, 5)),
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Against the brute-force reference.

/// Product and campaign keys: few, so that they collide.
const PRODUCTS: [&str; 6] = ["p0", "p1", "p2", "p3", "p4", "p5"];
const CAMPAIGNS: [&str; 4] = ["c0", "c1", "c2", "c3"];
/// Categories with records are 0..8; 8 and 9 are only ever named (roots without a record).
const RECORDED: u64 = 8;
const NAMED: u64 = 10;

fn any_product() -> impl Strategy<Value = Product> {
    (0..3u64, 0..NAMED, 0..2u64, 0..4u64, 0..4u32).prop_map(|(seller_id, category_id, brand_id, price_minor, stock)| {
        Product {
            seller_id,
            category_id,
            brand_id,
            price_minor,
            stock,
        }
    })
}

fn any_campaign() -> impl Strategy<Value = Campaign> {
    (
        prop::collection::vec(0..NAMED, 0..3),
        prop::option::weighted(0.2, prop::collection::vec(0..2u64, 1..2)),
        prop::option::weighted(0.2, prop::collection::vec(0..3u64, 1..3)),
        prop::option::weighted(0.2, 0..3u64),
        prop::bool::weighted(0.9),
    )
        .prop_map(|(categories, brands, sellers, max_price, active)| Campaign {
            category_ids: IdSet::new(categories),
            brand_ids: IdSet::new(brands.unwrap_or_default()),
            seller_ids: IdSet::new(sellers.unwrap_or_default()),
            max_price_minor: max_price,
            active,
            ..Campaign::default()
        })
}

fn any_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (prop::sample::select(&PRODUCTS[..]), any_product()).prop_map(|(key, p)| Event::Product(key, Some(p))),
        1 => prop::sample::select(&PRODUCTS[..]).prop_map(|key| Event::Product(key, None)),
        2 => (prop::sample::select(&CAMPAIGNS[..]), any_campaign()).prop_map(|(key, c)| Event::Campaign(key, Some(c))),
        1 => prop::sample::select(&CAMPAIGNS[..]).prop_map(|key| Event::Campaign(key, None)),
        // Subtree moves, new edges, cycles (a parent anywhere), roots.
        5 => (0..RECORDED, prop::option::weighted(0.85, 0..NAMED))
            .prop_map(|(id, parent_id)| Event::Category(id, Some(Category { parent_id }))),
        1 => (0..RECORDED).prop_map(|id| Event::Category(id, None)),
    ]
}

/// A deep chain through the recorded categories in random order, its top a root or
/// closing it into one long cycle.
fn chain() -> impl Strategy<Value = Vec<Event>> {
    (
        Just((0..RECORDED).collect::<Vec<CategoryId>>()).prop_shuffle(),
        2..=RECORDED as usize,
        prop::bool::weighted(0.3),
    )
        .prop_map(|(ids, length, closed)| {
            let ids = &ids[..length];
            let mut events: Vec<Event> = ids.windows(2).map(|pair| under(pair[0], pair[1])).collect();
            let top = ids[length - 1];
            events.push(match closed {
                true => under(top, ids[0]),
                false => root(top),
            });
            events
        })
}

fn any_batch() -> impl Strategy<Value = Vec<Event>> {
    prop_oneof![
        6 => prop::collection::vec(any_event(), 1..8),
        1 => (chain(), prop::collection::vec(any_event(), 0..3)).prop_map(|(mut chain, more)| {
            chain.extend(more);
            chain
        }),
    ]
}

/// The changes the brute force expects: batch `i` at time `i`.
fn expected(batches: &[Vec<Event>]) -> Vec<PairChange> {
    let mut state = ReferenceState::default();
    let mut pairs = PairState::new();
    let mut changes = Vec::new();
    for (time, batch) in batches.iter().enumerate() {
        for event in batch {
            let (key, change) = event.as_record();
            state.apply(&key, &change);
        }
        let next = state.pairs();
        changes.extend(changes_between(&pairs, &next, time as Time));
        pairs = next;
    }
    changes.sort();
    changes
}

fn check(batches: &[Vec<Event>], workers: usize) -> Result<(), TestCaseError> {
    check_placed(batches, workers, ProductPlacement::ByKey)
}

fn check_placed(batches: &[Vec<Event>], workers: usize, placement: ProductPlacement) -> Result<(), TestCaseError> {
    let emitted = run_placed(workers, batches.to_vec(), true, placement);
    // Replayed in time order, the changes obey the output contract.
    let mut by_time: BTreeMap<Time, Vec<PairChange>> = BTreeMap::new();
    for change in &emitted {
        by_time.entry(change.time).or_default().push(change.clone());
    }
    let mut state = PairState::new();
    for changes in by_time.values() {
        apply_changes(&mut state, changes).map_err(TestCaseError::fail)?;
    }
    prop_assert_eq!(emitted, expected(batches), "workers: {}, {:?}", workers, placement);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn every_batch_matches_brute_force_on_trees(batches in prop::collection::vec(any_batch(), 1..16)) {
        check(&batches, 1)?;
        check(&batches, 3)?;
        // Each product's records fed by one worker of three and kept there, as Kafka reads.
        check_placed(&batches, 3, ProductPlacement::AsRead)?;
    }
}
