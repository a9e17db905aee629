//! A cluster of three processes of two workers each, on loopback, against the real Kafka
//! broker and search node, started the way Kubernetes starts it: peers from a pattern,
//! process indices from pod names, a rendezvous before timely connects.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::MutexGuard;
use std::time::Duration;

use support::kafka::{expected_state, generated_lines, wait_until, KafkaCase, SinkSetup, BROKER};
use support::search::{delete_index, index_content, require_node};
use support::{binary, free_port, path_str};

fn serial() -> MutexGuard<'static, ()> {
    BROKER.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Peer ports 3{i}{tail} for process i: `tail` picked so that the three are free.
fn peer_pattern() -> String {
    loop {
        let tail = 100 + free_port() % 800;
        let free = (0..3)
            .all(|i| std::net::TcpListener::bind(("127.0.0.1", format!("3{i}{tail}").parse::<u16>().unwrap())).is_ok());
        if free {
            return format!("127.0.0.1:3{{i}}{tail}");
        }
    }
}

/// Starts process `index` of a cluster of `processes` the StatefulSet way; its log goes
/// to a file beside the config (a pipe nobody reads would fill up and stall it).
fn start(
    config: &std::path::Path,
    processes: usize,
    index: usize,
    peers: &str,
    rendezvous: u16,
    extra: &[&str],
) -> (Child, std::path::PathBuf) {
    let log = config.with_extension(format!("process-{index}.{}.log", std::process::id()));
    let stderr = std::fs::File::create(&log).unwrap();
    let child = Command::new(binary())
        .args(["run", "--config", path_str(config), "--progress-secs", "0"])
        .args(extra)
        .env("ELIGIBILITY_PROCESSES", processes.to_string())
        .env("ELIGIBILITY_WORKERS", "2")
        .env("ELIGIBILITY_POD_NAME", format!("eligibility-{index}"))
        .env("ELIGIBILITY_PEERS", peers)
        .env("ELIGIBILITY_RENDEZVOUS_PORT", rendezvous.to_string())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    (child, log)
}

/// Kills every process still running when a test ends early.
struct Cluster(Vec<(Child, std::path::PathBuf)>);

impl Drop for Cluster {
    fn drop(&mut self) {
        for (child, _) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits for every process: whether each succeeded, and its log.
fn wait_all(mut cluster: Cluster) -> Vec<(bool, String)> {
    cluster
        .0
        .drain(..)
        .map(|(mut child, log)| {
            let status = child.wait().unwrap();
            (status.success(), std::fs::read_to_string(log).unwrap_or_default())
        })
        .collect()
}

#[test]
fn three_processes_of_two_workers_write_the_index_one_worker_writes() {
    let _serial = serial();
    require_node();
    let case = KafkaCase::new("cluster-3x2", false);
    let single_index = format!("{}-single", case.products_topic.trim_end_matches("-products"));
    let cluster_index = format!("{}-cluster", case.products_topic.trim_end_matches("-products"));
    delete_index(&single_index);
    delete_index(&cluster_index);
    let lines = generated_lines(case.dir.path(), 3_000, 6_000, 61);
    case.produce(&lines, 6);

    case.write_sinks_config(
        &case.config,
        SinkSetup {
            elasticsearch_index: Some(&single_index),
            ..SinkSetup::default()
        },
    );
    case.run_to_end(&case.config, &[]);

    let cluster_config = case.dir.path().join("cluster.toml");
    case.write_sinks_config(
        &cluster_config,
        SinkSetup {
            elasticsearch_index: Some(&cluster_index),
            ..SinkSetup::default()
        },
    );
    let peers = peer_pattern();
    let rendezvous = free_port();
    let children = Cluster(
        (0..3)
            .map(|i| start(&cluster_config, 3, i, &peers, rendezvous, &["--stop-at-end"]))
            .collect(),
    );
    let logs = wait_all(children);
    for (index, (ok, stderr)) in logs.iter().enumerate() {
        assert!(ok, "process {index} failed:\n{stderr}");
    }
    let expected = expected_state(&lines);
    let (single, _) = index_content(&single_index);
    assert_eq!(single, expected);
    let cluster = index_content(&cluster_index).0;
    if cluster != single {
        // What went wrong in a cluster is in its processes' warnings: keep them.
        for (index, (_, stderr)) in logs.iter().enumerate() {
            let warnings: Vec<&str> = stderr.lines().filter(|line| !line.contains("INFO")).collect();
            // The last ones: a failure is usually the end of the log.
            let warnings = &warnings[warnings.len().saturating_sub(20)..];
            eprintln!("process {index}'s warnings and errors:\n{}", warnings.join("\n"));
        }
    }
    assert_eq!(cluster, single, "3 x 2 writes what 1 x 1 writes");
}

#[test]
fn a_killed_process_brings_the_cluster_down_and_a_restart_is_exact() {
    let _serial = serial();
    require_node();
    let case = KafkaCase::new("cluster-kill", false);
    let index = format!("{}-pairs", case.products_topic.trim_end_matches("-products"));
    delete_index(&index);
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            elasticsearch_index: Some(&index),
            ..SinkSetup::default()
        },
    );
    let lines = generated_lines(case.dir.path(), 3_000, 12_000, 67);
    let (first, rest) = lines.split_at(5_000);
    case.produce(first, 6);

    let peers = peer_pattern();
    let rendezvous = free_port();
    let mut children = Cluster(
        (0..3)
            .map(|i| start(&case.config, 3, i, &peers, rendezvous, &[]))
            .collect(),
    );
    wait_until(
        "the cluster has written part of the index",
        Duration::from_secs(120),
        || index_content(&index).0.len() > 50,
    );
    // More input arrives while one process dies.
    case.produce(&rest[..3_000], 6);
    children.0[1].0.kill().unwrap();
    let _ = children.0[1].0.wait();
    let survivors = Cluster(
        children
            .0
            .drain(..)
            .enumerate()
            .filter(|(i, _)| *i != 1)
            .map(|(_, c)| c)
            .collect(),
    );
    let outcomes = {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut survivors = survivors;
        while survivors.0.iter_mut().any(|(c, _)| c.try_wait().unwrap().is_none()) {
            assert!(
                std::time::Instant::now() < deadline,
                "the other processes did not stop after losing a peer"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        wait_all(survivors)
    };
    assert!(
        outcomes.iter().all(|(ok, _)| !ok),
        "a process that lost its peer must fail, for the cluster to restart"
    );

    case.produce(&rest[3_000..], 6);
    let children = Cluster(
        (0..3)
            .map(|i| start(&case.config, 3, i, &peers, rendezvous, &["--stop-at-end"]))
            .collect(),
    );
    for (index, (ok, stderr)) in wait_all(children).into_iter().enumerate() {
        assert!(ok, "process {index} failed after the restart:\n{stderr}");
    }
    assert_eq!(index_content(&index).0, expected_state(&lines));
}

#[test]
fn a_misconfigured_cluster_stops_with_the_reason() {
    let _serial = serial();
    let case = KafkaCase::new("cluster-misconfigured", false);
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            jsonl: Some("changes.jsonl"),
            ..SinkSetup::default()
        },
    );
    case.produce(&[r#"{"topic": "campaigns", "key": "c", "value": {}}"#.to_owned()], 1);
    let peers = peer_pattern();
    let rendezvous = free_port();
    // Process 1 thinks the cluster has three processes; process 0 says two.
    let children = Cluster(vec![
        start(&case.config, 2, 0, &peers, rendezvous, &["--stop-at-end"]),
        start(&case.config, 3, 1, &peers, rendezvous, &["--stop-at-end"]),
    ]);
    for (ok, stderr) in wait_all(children) {
        assert!(!ok);
        assert!(
            stderr.contains("misconfigured") && stderr.contains("expects 3 processes, process 0 expects 2"),
            "{stderr}"
        );
    }
}
