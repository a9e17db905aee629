//! The tree phase on a small marketplace, and the baselines under category trees: every
//! implementation agrees with a brute-force recount after each phase and batch, in the tree
//! and the flat case alike, and the engine and the hand-written incremental write exactly
//! the pairs that changed.

mod support;

use std::sync::Arc;
use std::time::Duration;

use bench::baselines::incremental::Incremental;
use bench::baselines::Implementation;
use bench::engine::{self, Feed};
use bench::report::Kind;
use bench::tree::workload::{TreeCase, TreePhaseSpec, TOP_LEVEL_CAMPAIGN_KEY};
use bench::tree::TreeOptions;
use bench::workload::{Workload, WorkloadSpec};
use bench::{BenchOptions, Phase};
use dataflows::decode::{decode_envelope, Change, Record};
use dataflows::model::{Campaign, Category, CategoryId, Product};
use dataflows::reference::{PairState, ReferenceState};
use generate::{generate_to_vec, MarketplaceSpec};
use rand::{Rng, SeedableRng};

fn marketplace(seed: u64) -> MarketplaceSpec {
    MarketplaceSpec {
        products: 3_000,
        sellers: 60,
        categories: 120,
        brands: 60,
        campaigns: 25,
        seed,
        tree_depth: 5,
        tree_fanout: 2,
        ..MarketplaceSpec::default()
    }
}

fn spec(seed: u64, case: TreeCase) -> WorkloadSpec {
    WorkloadSpec {
        marketplace: marketplace(seed),
        load_batch_size: 700,
        update_batch_sizes: Vec::new(),
        updates_per_round: 0,
        new_campaign_share: 0.15,
        tree: Some(TreePhaseSpec { case, move_share: 0.05 }),
    }
}

/// Applies `records` in batches of `size` to the reference and to every baseline, and
/// asserts after each batch that the baselines hold the reference's pairs.
fn assert_baselines_follow(records: &[Record], size: usize, context: &str) {
    let mut reference = ReferenceState::default();
    let mut baselines = support::baselines();
    for batch in records.chunks(size) {
        for record in batch {
            reference.apply(&record.key, &record.change);
        }
        let expected = reference.pairs();
        for baseline in &mut baselines {
            baseline.apply(batch);
            assert_eq!(baseline.pairs(), expected, "{} {context}", baseline.name());
        }
    }
}

#[test]
fn the_tree_phase_moves_a_subtree_of_the_asked_share_and_names_a_top_level_category() {
    let tree = Workload::build(&spec(1, TreeCase::Tree));
    let flat = Workload::build(&spec(1, TreeCase::Flat));
    assert_eq!(
        tree.phases(),
        [Phase::Bootstrap, Phase::SubtreeMove, Phase::TopLevelCampaign]
    );
    assert_eq!(flat.phases(), tree.phases());
    assert!(tree.has_categories() && !flat.has_categories());
    let figures = &tree.tree.as_ref().unwrap().figures;
    assert_eq!(figures, &flat.tree.as_ref().unwrap().figures);
    // 1 + 2 + 4 + 8 + 16 = 31 a tree: 120 categories take 4 top-level ones.
    assert_eq!(
        (figures.categories, figures.top_level_categories, figures.levels),
        (120, 4, 5)
    );
    assert!((0.02..0.08).contains(&figures.moved_share), "{figures:?}");
    assert!(
        figures.moved_categories > 1 && figures.moved_to.is_some(),
        "{figures:?}"
    );
    assert!(
        figures.campaigns_above > 0 && figures.flat_campaign_edits > 0,
        "{figures:?}"
    );
    assert!(figures.top_level_flat_list > 10, "{figures:?}");
    // The tree case moves with one record and adds one campaign on one category.
    let batches = tree.tree.as_ref().unwrap();
    assert_eq!(batches.subtree_move.len(), 1);
    assert!(matches!(
        batches.subtree_move.records[0].change,
        Change::Category(Some(Category { parent_id })) if parent_id == figures.moved_to
    ));
    assert_eq!(batches.top_level_campaign.records[0].key, TOP_LEVEL_CAMPAIGN_KEY);
    let Change::Campaign(Some(top)) = &batches.top_level_campaign.records[0].change else {
        panic!("a campaign");
    };
    assert_eq!(top.category_ids.iter().collect::<Vec<_>>(), [figures.top_level]);
    // The flat case edits campaigns instead, and lists the subtree.
    let flat_batches = flat.tree.as_ref().unwrap();
    assert_eq!(flat_batches.subtree_move.len(), figures.flat_campaign_edits);
    let Change::Campaign(Some(flat_top)) = &flat_batches.top_level_campaign.records[0].change else {
        panic!("a campaign");
    };
    assert_eq!(flat_top.category_ids.len(), figures.top_level_flat_list);
    for workload in [&tree, &flat] {
        let changes = workload
            .tree
            .iter()
            .flat_map(|t| [&t.subtree_move, &t.top_level_campaign]);
        for batch in workload.load.iter().chain(changes) {
            for (line, record) in batch.lines.iter().zip(&batch.records) {
                assert_eq!(&decode_envelope(line.as_bytes()).unwrap(), record);
            }
        }
    }
}

#[test]
fn every_baseline_matches_a_brute_force_recount_after_each_tree_phase_in_both_cases() {
    for seed in [1, 2, 3] {
        let mut after_phase: Vec<Vec<PairState>> = Vec::new();
        for case in [TreeCase::Tree, TreeCase::Flat] {
            let workload = Workload::build(&spec(seed, case));
            let mut reference = ReferenceState::default();
            let mut baselines = support::baselines();
            let mut states = Vec::new();
            for phase in workload.phases() {
                let mut writes = vec![0; baselines.len()];
                for batch in workload.batches(&phase) {
                    for record in &batch.records {
                        reference.apply(&record.key, &record.change);
                    }
                    for (baseline, writes) in baselines.iter_mut().zip(&mut writes) {
                        *writes += baseline.apply(&batch.records);
                    }
                }
                let expected = reference.pairs();
                for baseline in &baselines {
                    assert_eq!(
                        baseline.pairs(),
                        expected,
                        "{} after {phase:?} on the {case:?} case, seed {seed}",
                        baseline.name()
                    );
                }
                if phase != Phase::Bootstrap {
                    assert!(writes[0] > 0, "{phase:?} changes pairs");
                }
                states.push(expected);
            }
            after_phase.push(states);
        }
        assert_eq!(
            after_phase[0], after_phase[1],
            "the tree and the flat case agree, seed {seed}"
        );
    }
}

#[test]
fn the_engine_agrees_with_the_brute_force_after_each_tree_phase_and_writes_what_the_incremental_writes() {
    let mut writes_by_case = Vec::new();
    for case in [TreeCase::Tree, TreeCase::Flat] {
        let workload = Arc::new(Workload::build(&spec(4, case)));
        let phases = workload.phases();
        let mut reference = ReferenceState::default();
        let mut incremental = Incremental::new();
        let mut incremental_writes = Vec::new();
        for phase in &phases {
            let mut writes = 0;
            for batch in workload.batches(phase) {
                for record in &batch.records {
                    reference.apply(&record.key, &record.change);
                }
                writes += incremental.apply(&batch.records);
            }
            incremental_writes.push(writes);
        }
        for workers in [1, 2] {
            // The phases up to each one, run afresh: the engine hands back its final pairs.
            let mut expected = ReferenceState::default();
            for end in 1..=phases.len() {
                for batch in workload.batches(&phases[end - 1]) {
                    for record in &batch.records {
                        expected.apply(&record.key, &record.change);
                    }
                }
                let prefix = Arc::new(phases[..end].to_vec());
                let outcome = engine::run(workload.clone(), prefix, workers, Feed::Decoded).unwrap();
                assert_eq!(
                    outcome.pairs,
                    expected.pairs(),
                    "after {:?}, {case:?} case, {workers} worker(s)",
                    phases[end - 1]
                );
                if end == phases.len() {
                    let writes: Vec<u64> = outcome.phases.iter().map(|p| p.writes).collect();
                    assert_eq!(writes, incremental_writes, "{case:?} case, {workers} worker(s)");
                }
            }
        }
        assert_eq!(incremental.pairs(), reference.pairs());
        writes_by_case.push(incremental_writes);
    }
    // The same pairs change whether the tree moves or the flat campaigns are edited (the
    // loads differ: the flat one has no category records, so its batches split elsewhere).
    assert_eq!(writes_by_case[0][1..], writes_by_case[1][1..]);
}

/// The generator's whole update stream with a tree (moves, promotions, deleted records,
/// product and campaign changes), in batches: the baselines follow the reference.
#[test]
fn the_baselines_follow_the_generators_tree_updates_batch_by_batch() {
    let spec = MarketplaceSpec {
        products: 1_500,
        categories: 60,
        campaigns: 12,
        updates: 6_000,
        malformed_share: 0.01,
        tree_depth: 4,
        tree_fanout: 3,
        seed: 11,
        ..marketplace(11)
    };
    let records: Vec<Record> = generate_to_vec(&spec)
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .filter_map(|line| decode_envelope(line).ok())
        .collect();
    let moves = records
        .iter()
        .skip(60)
        .filter(|r| matches!(r.change, Change::Category(Some(_))))
        .count();
    assert!(moves > 20, "{moves} category records among the updates");
    assert_baselines_follow(&records, 97, "on the generated log");
}

/// Random forests with cycles, self-parents, parents without a record, tombstones and
/// repeated keys, against the reference: what the generator never writes.
#[test]
fn the_baselines_follow_random_trees_with_cycles_and_tombstones() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for round in 0..40 {
        let categories: CategoryId = rng.random_range(2..12);
        let mut records = Vec::new();
        for i in 0..rng.random_range(10..40) {
            records.push(Record {
                key: format!("p-{}", rng.random_range(0..30)),
                change: Change::Product(Some(Product {
                    seller_id: rng.random_range(0..4),
                    category_id: rng.random_range(0..categories + 2),
                    brand_id: rng.random_range(0..3),
                    price_minor: rng.random_range(100..1_000),
                    stock: rng.random_range(0..5),
                })),
            });
            if i % 4 == 0 {
                let named = (0..rng.random_range(0..4))
                    .map(|_| rng.random_range(0..categories + 2))
                    .collect();
                let brands = match rng.random_bool(0.2) {
                    true => [rng.random_range(0..3)].into_iter().collect(),
                    false => Default::default(),
                };
                records.push(Record {
                    key: format!("c-{}", rng.random_range(0..5)),
                    change: Change::Campaign(Some(Campaign {
                        category_ids: named,
                        brand_ids: brands,
                        min_stock: rng.random_range(0..2),
                        ..Campaign::unrestricted()
                    })),
                });
            }
        }
        for _ in 0..rng.random_range(5..60) {
            let category = match rng.random_range(0..10) {
                0 => None,
                _ => Some(Category {
                    parent_id: rng.random_bool(0.9).then(|| rng.random_range(0..categories + 2)),
                }),
            };
            let record = Record {
                key: rng.random_range(0..categories).to_string(),
                change: Change::Category(category),
            };
            let at = rng.random_range(0..=records.len());
            records.insert(at, record);
        }
        let size = rng.random_range(1..8);
        assert_baselines_follow(&records, size, &format!("in round {round}"));
    }
}

#[test]
fn the_bench_runs_the_tree_phase_alone_and_every_run_agrees() {
    let options = BenchOptions {
        workload: WorkloadSpec {
            tree: None,
            marketplace: MarketplaceSpec {
                tree_depth: 0,
                ..marketplace(6)
            },
            ..spec(6, TreeCase::Tree)
        },
        workers: vec![1, 2],
        json_feed: false,
        baseline_budget: Duration::from_secs(600),
        baselines: true,
        exe: support::exe(),
        file_mode: None,
        main: false,
        tree: Some(TreeOptions {
            depth: 5,
            fanout: 2,
            move_share: 0.05,
        }),
    };
    // `bench::run` fails unless all ten runs end with the same pairs.
    let report = bench::run(&options).expect("the implementations agree");
    assert!(report.implementations.is_empty());
    let tree = report.tree.as_ref().unwrap();
    assert_eq!(tree.runs.len(), 10);
    assert_eq!(tree.figures.levels, 5);
    let writes = |kind: &Kind, case, phase| tree.phase(kind, case, &phase).unwrap().writes;
    let engine = Kind::Engine {
        workers: 2,
        feed: Feed::Decoded,
    };
    for phase in [Phase::SubtreeMove, Phase::TopLevelCampaign] {
        let moved = writes(&engine, TreeCase::Tree, phase.clone());
        assert!(moved > 0, "{phase:?}");
        for case in [TreeCase::Tree, TreeCase::Flat] {
            assert_eq!(writes(&engine, case, phase.clone()), moved, "{phase:?}");
            assert_eq!(writes(&Kind::Incremental, case, phase.clone()), moved, "{phase:?}");
        }
    }
    let markdown = report.to_markdown();
    assert!(markdown.starts_with("#### category trees"), "{markdown}");
    assert!(
        markdown.contains("| subtree move | engine, 1 worker(s) |") && markdown.contains("top-level category"),
        "{markdown}"
    );
}

/// The file mode on a log with a tree: the hand-written baseline writes the engine's bytes.
#[test]
fn the_hand_written_file_mode_writes_what_the_engine_writes_under_a_tree() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let spec = MarketplaceSpec {
        products: 1_500,
        sellers: 30,
        categories: 80,
        campaigns: 12,
        updates: 6_000,
        malformed_share: 0.05,
        tree_depth: 4,
        tree_fanout: 3,
        seed: 9,
        ..MarketplaceSpec::default()
    };
    std::fs::write(&log, generate_to_vec(&spec)).unwrap();
    let (_, base_letters) = support::file_modes_agree(&log, dir.path());
    let letters = String::from_utf8(base_letters).unwrap();
    assert!(
        letters.contains("categories"),
        "malformed category records are dead letters"
    );
}
