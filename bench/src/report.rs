//! The bench's results, as JSON for plots and later comparison (as Markdown: `tables.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::engine::Feed;
use super::file_mode::FileModeReport;
pub use super::kind::Kind;
pub use super::measure::Memory;
use super::measure::{kib_field, PhaseResult};
use super::process::ProcessFigures;
use super::tree::TreeReport;
use super::BenchOptions;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchReport {
    pub machine: Machine,
    pub products: usize,
    pub sellers: u64,
    pub categories: u64,
    pub brands: u64,
    pub campaigns: u64,
    pub seed: u64,
    pub load_batch_size: usize,
    pub new_campaign_share: f64,
    pub baseline_budget_seconds: f64,
    pub implementations: Vec<ImplementationReport>,
    /// The process that only builds the workload: its share of every other process.
    #[serde(default)]
    pub workload: WorkloadFigures,
    pub memory: Memory,
    /// The bench parent's own peak.
    pub peak_resident_bytes: u64,
    pub seconds: f64,
    /// `eligibility run` against the hand-written file-mode baseline, when run.
    #[serde(default)]
    pub file_mode: Option<FileModeReport>,
    /// The tree phase, when run.
    #[serde(default)]
    pub tree: Option<TreeReport>,
}

/// The workload, as the process that only builds it saw it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WorkloadFigures {
    pub products: usize,
    pub events: usize,
    pub new_campaign_share: f64,
    /// Resident memory once built: what every implementation's process holds besides its own.
    pub resident_after_build_bytes: u64,
    pub process: ProcessFigures,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ImplementationReport {
    pub name: String,
    pub kind: Kind,
    pub phases: Vec<PhaseResult>,
    /// The implementation's own process: wall time (workload building included) and peak.
    #[serde(default)]
    pub process: ProcessFigures,
}

impl ImplementationReport {
    /// Peak RSS less what the workload holds: the implementation's own memory.
    pub fn peak_less_workload_bytes(&self, workload: &WorkloadFigures) -> u64 {
        self.process
            .peak_rss_bytes
            .saturating_sub(workload.resident_after_build_bytes)
    }
}

impl BenchReport {
    pub fn new(
        options: &BenchOptions,
        workload: WorkloadFigures,
        implementations: Vec<ImplementationReport>,
        memory: Memory,
        peak_resident_bytes: u64,
        elapsed: Duration,
        file_mode: Option<FileModeReport>,
    ) -> Self {
        let marketplace = &options.workload.marketplace;
        BenchReport {
            machine: Machine::current(),
            products: workload.products,
            sellers: marketplace.sellers,
            categories: marketplace.categories,
            brands: marketplace.brands,
            campaigns: marketplace.campaigns,
            seed: marketplace.seed,
            load_batch_size: options.workload.load_batch_size,
            new_campaign_share: workload.new_campaign_share,
            baseline_budget_seconds: options.baseline_budget.as_secs_f64(),
            implementations,
            workload,
            memory,
            peak_resident_bytes,
            seconds: elapsed.as_secs_f64(),
            file_mode,
            tree: None,
        }
    }

    pub fn implementation(&self, kind: &Kind) -> Option<&ImplementationReport> {
        self.implementations.iter().find(|i| &i.kind == kind)
    }

    /// The engine fed decoded records on `workers` workers.
    pub fn engine(&self, workers: usize) -> Option<&ImplementationReport> {
        self.implementation(&Kind::Engine {
            workers,
            feed: Feed::Decoded,
        })
    }
}

impl Machine {
    pub fn current() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|line| line.strip_prefix("model name"))
            .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_else(|| "unknown CPU".into());
        let memory_kib = kib_field(
            &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
            "MemTotal:",
        );
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_bytes: memory_kib * 1024,
        }
    }
}
