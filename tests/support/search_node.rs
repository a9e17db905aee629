//! A search node of a test's own (`scripts/elasticsearch.sh` with its own home and ports), for
//! a test that stops it: the shared node stays up for every other test.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Stdio};

pub struct PrivateSearchNode {
    home: tempfile::TempDir,
    pub port: u16,
    transport_port: u16,
}

impl PrivateSearchNode {
    pub fn start() -> Self {
        let node = PrivateSearchNode {
            home: tempfile::tempdir().unwrap(),
            port: super::free_port(),
            transport_port: super::free_port(),
        };
        node.script("start");
        node
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn stop(&self) {
        self.script("stop");
    }

    pub fn restart(&self) {
        self.script("start");
    }

    fn script(&self, command: &str) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/elasticsearch.sh");
        let output = Command::new("bash")
            .arg(script)
            .arg(command)
            .env("SEARCH_HOME_DIR", self.home.path())
            .env("ES_PORT", self.port.to_string())
            .env("SEARCH_TRANSPORT_PORT", self.transport_port.to_string())
            .env("SEARCH_CLUSTER_NAME", format!("eligibility-test-{}", self.port))
            .env("SEARCH_HEAP_OPTS", "-Xms256m -Xmx512m")
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "scripts/elasticsearch.sh {command} (own node on port {}) failed: {}",
            self.port,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for PrivateSearchNode {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/elasticsearch.sh");
        let _ = Command::new("bash")
            .arg(script)
            .arg("stop")
            .env("SEARCH_HOME_DIR", self.home.path())
            .env("ES_PORT", self.port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
