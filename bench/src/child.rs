//! One implementation in a process of its own, so that its peak memory is its own.
//!
//! The parent re-executes its own binary as `eligibility-bench child --task JSON`. The
//! child builds the workload from the task's spec and seed, runs one implementation
//! through every phase, and prints a [`ChildOutput`] as JSON on stdout: its timings, and a
//! digest of its final pairs and of its workload for the parent to compare across children.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use dataflows::reference::PairState;
use serde::{Deserialize, Serialize};

use super::baselines::{self, Implementation};
use super::engine;
use super::kind::Kind;
use super::measure::{peak_resident_bytes, resident_bytes, Memory, PhaseResult};
use super::process::{run_measured, ProcessFigures};
use super::tree::workload::TreeFigures;
use super::workload::{Workload, WorkloadSpec};
use generate::{generate, MarketplaceSpec};

/// What a child process does.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildTask {
    /// Builds the workload and runs `kind` on it; with no kind, only builds it (the
    /// workload's own share of every other child's memory).
    Implementation {
        workload: WorkloadSpec,
        kind: Option<Kind>,
        baseline_budget: Duration,
    },
    /// Writes the event log of `marketplace` to `path`.
    EventLog {
        marketplace: MarketplaceSpec,
        path: PathBuf,
    },
}

/// What a child prints.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ChildOutput {
    /// Equal in every child of one run, or the workload was not built deterministically.
    pub workload_digest: u64,
    pub products: usize,
    pub events: usize,
    /// The share of the products the new campaign reaches.
    pub new_campaign_share: f64,
    /// The child's resident memory once the workload is built.
    pub resident_after_build_bytes: u64,
    pub phases: Vec<PhaseResult>,
    pub pairs: usize,
    pub pairs_digest: u64,
    /// The engine's in-process memory figures (engine children only).
    pub memory: Option<Memory>,
    /// What the tree phase changes (tree phase workloads only).
    #[serde(default)]
    pub tree: Option<TreeFigures>,
}

/// Runs `task` in a child process of `exe`; returns what it printed and what it cost.
pub fn spawn(exe: &Path, task: &ChildTask) -> anyhow::Result<(ChildOutput, ProcessFigures)> {
    let mut command = Command::new(exe);
    command.args(["child", "--task", &serde_json::to_string(task)?]);
    let finished = run_measured(command)?;
    let output = serde_json::from_slice(&finished.stdout).context("a bench child printed no results")?;
    Ok((output, finished.figures))
}

/// The child's side: runs `task` in this process.
pub fn run(task: &ChildTask) -> anyhow::Result<ChildOutput> {
    match task {
        ChildTask::Implementation {
            workload,
            kind,
            baseline_budget,
        } => run_implementation(workload, kind.as_ref(), *baseline_budget),
        ChildTask::EventLog { marketplace, path } => {
            let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            generate(marketplace, &mut out).context("cannot write the event log")?;
            Ok(ChildOutput::default())
        }
    }
}

fn run_implementation(spec: &WorkloadSpec, kind: Option<&Kind>, budget: Duration) -> anyhow::Result<ChildOutput> {
    let resident_empty = resident_bytes();
    let workload = Arc::new(Workload::build(spec));
    let mut output = ChildOutput {
        workload_digest: digest(&workload.lines()),
        products: workload.products,
        events: workload.events(),
        new_campaign_share: workload.new_campaign_share,
        resident_after_build_bytes: resident_bytes(),
        tree: workload.tree.as_ref().map(|tree| tree.figures.clone()),
        ..ChildOutput::default()
    };
    let phases = workload.phases();
    let pairs = match kind {
        None => return Ok(output),
        Some(Kind::Engine { workers, feed }) => {
            let outcome = engine::run(workload.clone(), Arc::new(phases), *workers, *feed)?;
            // The bench's own copy of the pairs is taken out: a sink holds no such copy.
            let engine_state_bytes = outcome
                .resident_loaded
                .saturating_sub(outcome.resident_before)
                .saturating_sub(outcome.collected_bytes);
            output.memory = Some(Memory {
                workload_bytes: outcome.resident_before.saturating_sub(resident_empty),
                engine_state_bytes,
                engine_state_bytes_per_product: engine_state_bytes as f64 / workload.products.max(1) as f64,
                collected_pairs_bytes: outcome.collected_bytes,
                peak_resident_bytes_after_engine: peak_resident_bytes(),
                engine_workers: *workers,
            });
            output.phases = outcome.phases;
            outcome.pairs
        }
        Some(baseline) => {
            let mut implementation: Box<dyn Implementation> =
                baselines::of_kind(baseline).context("the engine is handled above")?;
            output.phases = super::run_baseline(implementation.as_mut(), &workload, &phases, budget);
            implementation.pairs()
        }
    };
    output.pairs = pairs.len();
    output.pairs_digest = pairs_digest(&pairs);
    Ok(output)
}

/// A digest of every pair and its figures, in pair order.
pub fn pairs_digest(pairs: &PairState) -> u64 {
    digest(pairs)
}

/// SipHash with fixed keys: the same in every child of one binary.
fn digest<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut hasher = DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}
