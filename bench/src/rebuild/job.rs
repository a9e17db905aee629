//! `eligibility run --config … --stop-at-end` on the topics, into a JSONL sink: its config,
//! its command lines, and what its change log holds once folded.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::BufRead;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use eligibility::change_log::fold_log;
use serde::{Deserialize, Serialize};

use super::config::{config_text, Topics};

/// One job's folder: its config, change log and stderr.
pub struct JobDir {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub changes: PathBuf,
}

impl JobDir {
    /// A fresh folder `dir`, with the config written: the sink there is empty.
    pub fn create(dir: PathBuf, brokers: &str, topics: &Topics) -> anyhow::Result<JobDir> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot empty {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let changes = dir.join("changes.jsonl");
        let config = dir.join("job.toml");
        std::fs::write(&config, config_text(brokers, topics, &changes))?;
        Ok(JobDir { dir, config, changes })
    }

    /// `eligibility run` to the end of the topics, from the committed offsets (none in an
    /// empty sink), with `extra` options; stderr goes to `stderr-<name>.txt`.
    pub fn command(&self, engine: &Path, name: &str, extra: &[String]) -> anyhow::Result<Command> {
        let mut command = Command::new(engine);
        command.args(["run", "--config"]).arg(&self.config);
        command.args([
            "--stop-at-end",
            "--from",
            "committed",
            "--progress-secs",
            "0",
            "--log",
            "warn",
        ]);
        command.args(extra);
        command.stdout(Stdio::null());
        command.stderr(Stdio::from(std::fs::File::create(self.stderr(name))?));
        Ok(command)
    }

    pub fn stderr(&self, name: &str) -> PathBuf {
        self.dir.join(format!("stderr-{name}.txt"))
    }

    /// A hostfile of `processes` free local ports.
    pub fn hostfile(&self, processes: usize) -> anyhow::Result<PathBuf> {
        let mut lines = String::new();
        for _ in 0..processes {
            // Bound and let go: the port is free unless something takes it in between.
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            lines.push_str(&format!("127.0.0.1:{port}\n"));
        }
        let path = self.dir.join("hosts.txt");
        std::fs::write(&path, lines)?;
        Ok(path)
    }
}

/// The last lines of a run's stderr, to show with its failure.
pub fn stderr_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Lines in a change log: pair changes written (0 for a missing log).
pub fn lines(path: &Path) -> anyhow::Result<u64> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(error).with_context(|| format!("cannot open {}", path.display())),
    };
    let mut count = 0;
    for line in std::io::BufReader::with_capacity(1 << 20, file).split(b'\n') {
        line?;
        count += 1;
    }
    Ok(count)
}

/// The final state a change log describes, as a count and an order-free digest: equal
/// states give equal figures, whatever order their changes were written in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldedLog {
    pub pairs: u64,
    pub digest: u64,
}

/// Folds a change log (read-only) into its final pairs, as the job folds its own.
pub fn fold(path: &Path) -> anyhow::Result<FoldedLog> {
    let held = fold_log(path)?;
    let digest = held.pairs().fold(0u64, |sum, entry| {
        let mut hasher = DefaultHasher::new();
        entry.hash(&mut hasher);
        sum.wrapping_add(hasher.finish())
    });
    Ok(FoldedLog {
        pairs: held.len() as u64,
        digest,
    })
}
