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
