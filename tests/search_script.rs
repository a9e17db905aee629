//! `scripts/elasticsearch.sh` with a home of its own: a second node beside the default one
//! (which `scripts/test.sh` starts), with its own pid, lock, log and data.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::free_port;
use support::search::require_node;

fn script(home: &Path, port: u16, command: &str) -> Output {
    Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/elasticsearch.sh"))
        .arg(command)
        .env("SEARCH_HOME_DIR", home)
        .env("ES_PORT", port.to_string())
        .env("SEARCH_TRANSPORT_PORT", free_port().to_string())
        .env("SEARCH_HEAP_OPTS", "-Xms256m -Xmx512m")
        .output()
        .unwrap()
}

#[test]
fn a_second_node_runs_beside_the_default_one_in_its_own_home() {
    // The default node runs meanwhile: the second must not take it for itself.
    require_node();
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    let started = script(home.path(), port, "start");
    let stderr = String::from_utf8_lossy(&started.stderr).into_owned();
    // Stop it whatever happens next.
    struct Stop<'a>(&'a Path, u16);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            script(self.0, self.1, "stop");
        }
    }
    let _stop = Stop(home.path(), port);
    assert!(started.status.success(), "{stderr}");
    let pid = std::fs::read_to_string(home.path().join("node.pid")).unwrap();
    let status = script(home.path(), port, "status");
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stdout));
    assert!(String::from_utf8_lossy(&status.stdout).contains(pid.trim()));
    assert!(home.path().join("data").is_dir(), "its data lives in its home");
    require_node();
}

/// `curl` against a node of a test's own: (HTTP status, body).
fn curl(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    let output = Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            "-X",
            method,
            "-H",
            "Content-Type: application/json",
        ])
        .args(["--data", body, &format!("http://127.0.0.1:{port}{path}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (status.trim().parse().unwrap_or(0), body.to_owned())
}

#[test]
fn start_waits_for_a_recovery_longer_than_the_runners_health_timeout_and_the_node_survives_it() {
    let home = tempfile::tempdir().unwrap();
    let port = free_port();
    struct Stop<'a>(&'a Path, u16);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            script(self.0, self.1, "stop");
        }
    }
    let _stop = Stop(home.path(), port);
    let started = script(home.path(), port, "start");
    assert!(started.status.success(), "{}", String::from_utf8_lossy(&started.stderr));
    // A shard that cannot be allocated: the node comes back red, as a long translog replay
    // keeps it red, for longer than the runner's 30 s ensureYellow() waits.
    let (status, body) = curl(
        port,
        "PUT",
        "/held-back",
        r#"{"settings": {"number_of_shards": 1, "number_of_replicas": 0,
            "index.routing.allocation.require._name": "nowhere"}}"#,
    );
    assert_eq!(status, 200, "{body}");
    let stopped = script(home.path(), port, "stop");
    assert!(stopped.status.success());

    let mut start = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/elasticsearch.sh"))
        .arg("start")
        .env("SEARCH_HOME_DIR", home.path())
        .env("ES_PORT", port.to_string())
        .env("SEARCH_TRANSPORT_PORT", free_port().to_string())
        .env("SEARCH_HEAP_OPTS", "-Xms256m -Xmx512m")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let answered = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while curl(port, "GET", "/_cluster/health", "").0 != 200 {
        assert!(std::time::Instant::now() < answered, "the node never answered");
        assert!(
            start.try_wait().unwrap().is_none(),
            "start ended before the node answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // Well past the runner's 30 s: the node still runs and `start` still waits.
    std::thread::sleep(std::time::Duration::from_secs(45));
    if let Some(status) = start.try_wait().unwrap() {
        let mut stderr = String::new();
        std::io::Read::read_to_string(start.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        panic!("start ended ({status}) while the node recovered:\n{stderr}");
    }
    let (status, health) = curl(port, "GET", "/_cluster/health", "");
    assert_eq!(status, 200, "the node answers: {health}");
    assert!(health.contains(r#""status":"red""#), "{health}");

    // The recovery ends: `start` returns, the node healthy.
    let (status, body) = curl(
        port,
        "PUT",
        "/held-back/_settings",
        r#"{"index.routing.allocation.require._name": null}"#,
    );
    assert_eq!(status, 200, "{body}");
    let ended = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = start.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < ended,
            "start did not return once the node recovered"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert!(status.success(), "{status}");
    let (_, health) = curl(port, "GET", "/_cluster/health", "");
    assert!(health.contains(r#""status":"green""#), "{health}");
}
