//! The bench on a small marketplace: every implementation agrees with a brute-force
//! recount, the engine writes exactly the pairs that changed, and the plots are drawn.

mod support;

use std::process::Command;
use std::time::Duration;

use bench::report::{BenchReport, Kind};
use bench::workload::{Workload, WorkloadSpec};
use bench::{self, plot, BenchOptions, Phase};
use dataflows::reference::ReferenceState;
use generate::MarketplaceSpec;

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
        tree: None,
    }
}

#[test]
fn every_baseline_matches_a_brute_force_recount() {
    for seed in [1, 2, 3] {
        let workload = Workload::build(&spec(seed));
        let mut reference = ReferenceState::default();
        let mut baselines = support::baselines();
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
        exe: support::exe(),
        file_mode: None,
        main: true,
        tree: None,
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
    // Each implementation's own process was measured, and held at least the workload. The
    // kernel's high-water mark (`ru_maxrss`) and `VmRSS` count pages in per-CPU batches, so
    // the two may differ by some pages: a MiB of slack on this 20 MB workload.
    const RSS_SLACK: u64 = 1 << 20;
    let workload = &report.workload;
    assert!(
        workload.process.peak_rss_bytes + RSS_SLACK >= workload.resident_after_build_bytes,
        "peak {} < resident after build {}",
        workload.process.peak_rss_bytes,
        workload.resident_after_build_bytes
    );
    assert!(workload.resident_after_build_bytes > 0);
    for implementation in &report.implementations {
        let process = &implementation.process;
        assert!(process.wall_seconds > 0.0, "{}", implementation.name);
        assert!(
            process.peak_rss_bytes + RSS_SLACK >= workload.resident_after_build_bytes,
            "{}: {} < {}",
            implementation.name,
            process.peak_rss_bytes,
            workload.resident_after_build_bytes
        );
        assert!(implementation.phases.iter().all(|p| p.peak_rss_bytes > 0));
    }
    let markdown = report.to_markdown();
    assert!(markdown.contains("#### processes") && markdown.contains("#### engine / hand-written incremental"));

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

#[test]
fn file_mode_outputs_match_and_every_process_is_measured() {
    // The whole command, as a user runs it: the bench is the parent of every measured
    // process, and fails unless `eligibility run` writes the hand-written baseline's bytes.
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let output = Command::new(support::exe())
        .env("ELIGIBILITY_BIN", support::engine())
        .args([
            "--products",
            "2000",
            "--sellers",
            "40",
            "--categories",
            "30",
            "--brands",
            "50",
        ])
        .args([
            "--campaigns",
            "15",
            "--seed",
            "6",
            "--batch-sizes",
            "100",
            "--updates-per-batch-size",
            "300",
        ])
        .args(["--load-batch-size", "500", "--no-json-feed", "--baseline-budget", "1s"])
        .args(["--file-updates", "3000", "--file-batch-size", "250"])
        .arg("--work-dir")
        .arg(dir.path().join("work"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: BenchReport = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let file_mode = report.file_mode.as_ref().expect("file mode runs by default");
    assert!(file_mode.outputs_identical);
    assert!(file_mode.change_log_bytes > 0 && file_mode.dead_letter_bytes > 0);
    let names: Vec<&str> = file_mode.runs.iter().map(|run| run.name.as_str()).collect();
    assert_eq!(
        names,
        ["hand-written incremental", "engine, 1 worker(s)", "engine, 2 worker(s)"]
    );
    for run in &file_mode.runs {
        assert!(
            run.process.peak_rss_bytes > 0 && run.process.wall_seconds > 0.0,
            "{}",
            run.name
        );
        let wall = run.process.wall_seconds / file_mode.runs[0].process.wall_seconds;
        assert!((run.wall_vs_baseline - wall).abs() < 1e-9, "{}", run.name);
        assert!(run.peak_rss_vs_baseline > 0.0, "{}", run.name);
    }
    let (wall, rss) = file_mode.two_workers_vs_one.expect("1 and 2 workers ran");
    assert!(wall > 0.0 && rss > 0.0);
    // The bench parent stays far below what it measures: the floor under each figure.
    let incremental = report.implementation(&Kind::Incremental).unwrap();
    assert!(report.peak_resident_bytes < incremental.process.peak_rss_bytes);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("#### file mode") && stdout.contains("2 workers over 1"),
        "{stdout}"
    );
    // The tree phase runs by default, after the file mode.
    let tree = report.tree.as_ref().expect("the tree phase runs by default");
    assert_eq!(tree.runs.len(), 2 * 5);
    assert!(stdout.contains("#### category trees"), "{stdout}");
    assert!(!dir.path().join("work/events.jsonl").exists(), "the log is removed");
}

#[test]
fn the_hand_written_file_mode_writes_what_the_engine_writes() {
    // Small batches split the log's updates, malformed lines and repeated keys many ways.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("events.jsonl");
    let generated = Command::new(support::engine())
        .args(["generate", "--products", "1500", "--sellers", "30", "--campaigns", "12"])
        .args(["--updates", "4000", "--malformed", "0.02", "--seed", "9", "--output"])
        .arg(&log)
        .status()
        .unwrap();
    assert!(generated.success());
    support::file_modes_agree(&log, dir.path());
}
