//! The bench on a small marketplace: every implementation agrees with a brute-force
//! recount, the engine writes exactly the pairs that changed, and the plots are drawn.

use std::time::Duration;

use dataflows::reference::ReferenceState;
use eligibility::bench::baselines::incremental::Incremental;
use eligibility::bench::baselines::recompute::{Recompute, Strategy};
use eligibility::bench::baselines::Implementation;
use eligibility::bench::report::Kind;
use eligibility::bench::workload::{Workload, WorkloadSpec};
use eligibility::bench::{self, plot, BenchOptions, Phase};
use eligibility::generate::MarketplaceSpec;

fn spec(seed: u64) -> WorkloadSpec {
    WorkloadSpec {
        marketplace: MarketplaceSpec {
            products: 3_000,
            sellers: 60,
            categories: 40,
            brands: 60,
            campaigns: 25,
            seed,
            ..MarketplaceSpec::default()
        },
        load_batch_size: 700,
        update_batch_sizes: vec![1, 50],
        updates_per_round: 200,
        new_campaign_share: 0.15,
    }
}

#[test]
fn every_baseline_matches_a_brute_force_recount() {
    for seed in [1, 2, 3] {
        let workload = Workload::build(&spec(seed));
        let mut reference = ReferenceState::default();
        let mut baselines: Vec<Box<dyn Implementation>> = vec![
            Box::new(Incremental::new()),
            Box::new(Recompute::new(Strategy::PerCampaign)),
            Box::new(Recompute::new(Strategy::PerPair)),
        ];
        for phase in workload.phases() {
            for batch in workload.batches(&phase) {
                for record in &batch.records {
                    reference.apply(&record.key, &record.change);
                }
                for baseline in &mut baselines {
                    baseline.apply(&batch.records);
                }
            }
            let expected = reference.pairs();
            for baseline in &baselines {
                assert_eq!(
                    baseline.pairs(),
                    expected,
                    "{} after {phase:?}, seed {seed}",
                    baseline.name()
                );
            }
        }
    }
}

fn options(seed: u64, baseline_budget: Duration) -> BenchOptions {
    BenchOptions {
        workload: spec(seed),
        workers: vec![1, 2],
        json_feed: true,
        baseline_budget,
        baselines: true,
    }
}

#[test]
fn a_fully_timed_run_writes_only_what_changed_and_draws_its_plots() {
    // The budget outlasts this small workload, so every batch of every baseline is timed.
    let report = bench::run(&options(4, Duration::from_secs(600))).expect("the implementations agree");
    assert_eq!(report.implementations.len(), 7);
    let engine = report.engine(1).unwrap();
    let incremental = report.implementation(&Kind::Incremental).unwrap();
    let per_campaign = report.implementation(&Kind::PerCampaign).unwrap();
    for (engine_phase, incremental_phase) in engine.phases.iter().zip(&incremental.phases) {
        assert_eq!(engine_phase.phase, incremental_phase.phase);
        assert!(engine_phase.events > 0 && engine_phase.events_per_second > 0.0);
        assert_eq!(engine_phase.batches_timed, engine_phase.batches_total);
        assert_eq!(incremental_phase.batches_timed, incremental_phase.batches_total);
        // Both write exactly the pairs whose figures changed.
        assert_eq!(
            engine_phase.writes, incremental_phase.writes,
            "{:?}",
            engine_phase.phase
        );
    }
    let edit = |implementation: &bench::report::ImplementationReport| {
        let phase = implementation
            .phases
            .iter()
            .find(|p| p.phase == Phase::CampaignEdit)
            .unwrap();
        assert_eq!(phase.batches_timed, phase.batches_total);
        phase.writes
    };
    // Rerunning an edited campaign's aggregation rewrites all its pairs, changed or not.
    assert!(
        edit(per_campaign) > edit(engine),
        "{} vs {}",
        edit(per_campaign),
        edit(engine)
    );
    assert!(report.memory.engine_state_bytes_per_product > 0.0);
    assert!(report.to_markdown().contains("| engine, 2 worker(s) |"));

    let dir = tempfile::tempdir().unwrap();
    plot::run_plots(&report, dir.path()).unwrap();
    plot::sweep_plots(&[report.clone(), report], dir.path()).unwrap();
    for name in [
        "throughput_vs_batch_size.png",
        "latency_vs_batch_size.png",
        "workers.png",
        "new_campaign_latency_vs_products.png",
        "memory_vs_products.png",
    ] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{name}");
    }
}

#[test]
fn a_spent_budget_samples_one_batch_and_the_baselines_still_agree() {
    // A zero budget times one batch a phase and applies the rest untimed; `bench::run`
    // fails unless every implementation still ends with the engine's pairs.
    let report = bench::run(&options(5, Duration::ZERO)).expect("the implementations agree");
    let per_campaign = report.implementation(&Kind::PerCampaign).unwrap();
    let sampled = per_campaign
        .phases
        .iter()
        .find(|p| p.phase == Phase::Updates { batch_size: 1 })
        .unwrap();
    assert_eq!((sampled.batches_timed, sampled.batches_total), (1, 200));
    let engine = report.engine(2).unwrap();
    assert!(engine.phases.iter().all(|p| p.batches_timed == p.batches_total));
}
