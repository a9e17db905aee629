//! `eligibility-bench rebuild` on a tiny marketplace against the real broker: the floor
//! reads what was produced, the three runs into an empty sink end with the pairs a
//! brute-force recount of the event log gives, and the quiet restart writes nothing.
//! Needs KAFKA_BROKERS (scripts/test.sh sets it); without it the test says so and passes.

mod support;

use std::collections::HashMap;
use std::process::Command;

use bench::rebuild::{RebuildReport, RunKind};
use dataflows::decode::{decode_envelope, split_envelope};
use dataflows::model::Topic;
use dataflows::reference::ReferenceState;
use eligibility::change_log::{fold_state, read_changes};

#[test]
fn the_rebuild_bench_measures_every_run_and_their_outputs_agree() {
    let Ok(brokers) = std::env::var("KAFKA_BROKERS") else {
        eprintln!("SKIP: the rebuild bench needs a Kafka broker: set KAFKA_BROKERS (scripts/kafka.sh start)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    let json = dir.path().join("report.json");
    // A seed of its own per run, so the topics are fresh and this run produces them.
    let seed = std::process::id() as u64 * 1000 + (std::time::UNIX_EPOCH.elapsed().unwrap().as_millis() % 1000) as u64;
    // Both the bench and the recount below generate from these.
    let marketplace = format!(
        "--products 3000 --sellers 40 --categories 30 --brands 50 --campaigns 20 --tree-depth 3 --malformed 0.01 --seed {seed}"
    );
    let marketplace: Vec<&str> = marketplace.split(' ').collect();
    let run = |extra: &[&str]| {
        let mut command = Command::new(support::exe());
        command.args(["rebuild", "--brokers", &brokers, "--partitions", "3", "--keep"]);
        command.args(&marketplace);
        command
            .arg("--work-dir")
            .arg(&work)
            .arg("--json")
            .arg(&json)
            .args(extra);
        let output = command.output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: RebuildReport = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        (stdout, report)
    };
    let (table, report) = run(&[]);
    assert!(report.produced_now);
    assert!(table.contains("| rebuild / floor |") && table.contains("| 2 processes × 1 / 1 process × 2 |"));

    // The event log the topics were produced from, generated again: what the floor must
    // have read and kept, and the pairs a brute-force recount gives.
    let log = dir.path().join("events.jsonl");
    let status = Command::new(support::engine())
        .args(["generate", "--updates", "0"])
        .args(&marketplace)
        .arg("--output")
        .arg(&log)
        .status()
        .unwrap();
    assert!(status.success());
    let (mut records, mut rejected) = (0, 0);
    let mut latest: HashMap<(Topic, String), bool> = HashMap::new();
    let mut reference = ReferenceState::default();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        // `produce` skips the lines without a topic and key to send them to.
        let Ok(envelope) = split_envelope(line.as_bytes()) else {
            continue;
        };
        records += 1;
        match decode_envelope(line.as_bytes()) {
            Ok(record) => {
                latest.insert((envelope.topic, record.key.clone()), envelope.value.is_some());
                reference.apply(&record.key, &record.change);
            }
            Err(_) => rejected += 1,
        }
    }
    let kept = |topic| latest.iter().filter(|((t, _), live)| *t == topic && **live).count() as u64;
    let floor = &report.floor;
    assert_eq!(floor.partitions, 9);
    assert_eq!((floor.records, floor.rejected), (records, rejected));
    assert!(rejected > 0, "the log has malformed records for the decoder to reject");
    assert_eq!(
        (floor.products, floor.campaigns, floor.categories),
        (kept(Topic::Products), kept(Topic::Campaigns), kept(Topic::Categories))
    );
    assert!(floor.products > 2_900 && floor.categories > 0, "{floor:?}");

    // Every run was measured; the quiet restarts wrote nothing; the others wrote every pair.
    let kinds: Vec<RunKind> = report.runs.iter().map(|run| run.kind).collect();
    use RunKind::*;
    assert_eq!(
        kinds,
        [
            Floor,
            Rebuild,
            QuietRestart,
            TwoWorkers,
            QuietRestartTwoWorkers,
            TwoProcesses
        ]
    );
    // The broker's CPU time is counted when it runs here (as scripts/kafka.sh starts it).
    let local_broker = bench::broker_cpu::LocalBroker::find().is_some();
    for run in &report.runs {
        assert!(
            run.process.wall_seconds > 0.0 && run.process.peak_rss_bytes > 0 && run.process.cpu_seconds > 0.0,
            "{run:?}"
        );
        assert_eq!(run.broker_cpu_seconds.is_some(), local_broker, "{run:?}");
    }
    let cluster_cpu: f64 = report
        .run(TwoProcesses)
        .unwrap()
        .members
        .iter()
        .map(|m| m.cpu_seconds)
        .sum();
    // Equal up to the last bit: the test reads each figure back from the JSON report on its
    // own, and serde_json parses floats to within an ulp unless `float_roundtrip` is on.
    let summed = report.run(TwoProcesses).unwrap().process.cpu_seconds;
    assert!(
        (summed - cluster_cpu).abs() <= 1e-9 * cluster_cpu,
        "{summed} != {cluster_cpu}"
    );
    // Nothing uses more than every core for the whole run.
    let bound = report.ratios.two_workers_bound.expect("the 1-worker run was made");
    assert!(bound > 0.0 && bound <= 1.05, "{bound}");
    assert!(table.contains("cores busy") && table.contains("The least 2 workers / 1 worker"));
    assert_eq!(report.run(TwoProcesses).unwrap().members.len(), 2);
    assert_eq!(report.quiet_restart_writes, 0);
    for kind in [QuietRestart, QuietRestartTwoWorkers] {
        assert_eq!(report.run(kind).unwrap().pairs_written, Some(0), "{kind:?}");
    }
    assert!(report.ratios.restart_two_workers_vs_one.is_some());
    assert!(table.contains("quiet restart, 2 workers / 1 worker"));
    assert!(report.outputs_agree);
    let pairs = report.run(Rebuild).unwrap().state.unwrap().pairs;
    for kind in [Rebuild, TwoWorkers, TwoProcesses] {
        let run = report.run(kind).unwrap();
        assert_eq!(
            run.state.unwrap(),
            report.run(Rebuild).unwrap().state.unwrap(),
            "{kind:?}"
        );
        assert_eq!(run.pairs_written, Some(pairs), "{kind:?} wrote each pair once");
    }
    let ratios = &report.ratios;
    assert!(ratios.rebuild_vs_floor.is_some() && ratios.two_processes_vs_two_workers.is_some());

    // The pairs are the right ones.
    for folder in ["one-worker", "two-workers", "two-processes"] {
        let changes = read_changes(&work.join(folder).join("changes.jsonl")).unwrap();
        assert_eq!(fold_state(&changes), reference.pairs(), "{folder}");
    }
    assert_eq!(pairs as usize, reference.pairs().len());

    // A second run finds the topics already hold the marketplace, and produces nothing.
    let (_, again) = run(&["--no-processes"]);
    assert!(!again.produced_now);
    let read = |floor: &bench::rebuild::floor::FloorOutput| (floor.records, floor.keys(), floor.rejected);
    assert_eq!(read(&again.floor), read(&report.floor));
    assert!(again.run(TwoProcesses).is_none() && again.outputs_agree);
}
