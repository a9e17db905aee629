//! The bench's results: as JSON for plots and later comparison, and as tables of ratios.

use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::engine::Feed;
use super::file_mode::FileModeReport;
use super::format::{format_ratio, mib};
use super::measure::{kib_field, PhaseResult};
use super::process::ProcessFigures;
use super::processes;
use super::tree::TreeReport;
use super::{BenchOptions, Phase};

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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Kind {
    Engine { workers: usize, feed: Feed },
    Incremental,
    PerCampaign,
    PerPair,
}

impl Kind {
    pub fn name(&self) -> String {
        match self {
            Kind::Engine {
                workers,
                feed: Feed::Decoded,
            } => format!("engine, {workers} worker(s)"),
            Kind::Engine {
                workers,
                feed: Feed::Json,
            } => format!("engine, {workers} worker(s), JSON decode"),
            Kind::Incremental => "hand-written incremental".into(),
            Kind::PerCampaign => "per-campaign aggregation".into(),
            Kind::PerPair => "per-pair recompute".into(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Memory {
    /// Resident memory the generated workload takes, before any engine runs.
    pub workload_bytes: u64,
    /// Growth of resident memory over the engine's initial load, less the bench's copy of
    /// the pairs: the engine's state.
    pub engine_state_bytes: u64,
    pub engine_state_bytes_per_product: f64,
    /// The bench's copy of the pairs after the initial load, taken out of the state.
    pub collected_pairs_bytes: u64,
    pub peak_resident_bytes_after_engine: u64,
    pub engine_workers: usize,
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

    /// Markdown: one table per phase, each figure with its ratio to the engine's.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        if self.implementations.is_empty() {
            // Only the tree phase ran.
            if let Some(tree) = &self.tree {
                out.push_str(&tree.to_markdown());
            }
            return out;
        }
        let _ = writeln!(
            out,
            "{} products, {} sellers, {} categories, {} brands, {} campaigns (seed {}); {} on {} cores; new campaign reaches {:.1}% of products.\n",
            self.products,
            self.sellers,
            self.categories,
            self.brands,
            self.campaigns,
            self.seed,
            self.machine.cpu,
            self.machine.cores,
            self.new_campaign_share * 100.0
        );
        let reference = self.engine(1).or_else(|| self.implementations.first());
        let Some(reference) = reference else {
            return out;
        };
        let _ = writeln!(
            out,
            "Ratio: the {}'s events/s over the row's (above 1: the engine is faster).\n",
            reference.name
        );
        for (position, phase) in reference.phases.iter().enumerate() {
            let _ = writeln!(out, "#### {}\n", phase.phase.label());
            let _ = writeln!(
                out,
                "| implementation | events/s | p50 ms | p99 ms | pair writes | batches timed | ratio | peak RSS MiB by its end |"
            );
            let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
            for implementation in &self.implementations {
                let Some(result) = implementation.phases.get(position) else {
                    continue;
                };
                let ratio = phase.events_per_second / result.events_per_second.max(1e-9);
                let _ = writeln!(
                    out,
                    "| {} | {:.0} | {:.2} | {:.2} | {} | {}/{} | {} | {:.0} |",
                    implementation.name,
                    result.events_per_second,
                    result.p50_ms,
                    result.p99_ms,
                    result.writes,
                    result.batches_timed,
                    result.batches_total,
                    format_ratio(ratio),
                    mib(result.peak_rss_bytes)
                );
            }
            let _ = writeln!(out);
        }
        let memory = &self.memory;
        let _ = writeln!(
            out,
            "Inside the engine's first process: state {:.0} MiB ({:.0} B/product, {} worker(s); the bench's copy of the pairs, {:.0} MiB, taken out), workload {:.0} MiB, peak RSS {:.0} MiB. The bench's own peak RSS {:.0} MiB. Run took {:.0} s.\n",
            memory.engine_state_bytes as f64 / 1048576.0,
            memory.engine_state_bytes_per_product,
            memory.engine_workers,
            memory.collected_pairs_bytes as f64 / 1048576.0,
            memory.workload_bytes as f64 / 1048576.0,
            memory.peak_resident_bytes_after_engine as f64 / 1048576.0,
            self.peak_resident_bytes as f64 / 1048576.0,
            self.seconds
        );
        out.push_str(&processes::markdown(self));
        if let Some(file_mode) = &self.file_mode {
            out.push_str(&file_mode.to_markdown());
        }
        if let Some(tree) = &self.tree {
            out.push_str(&tree.to_markdown());
        }
        out.push_str(&self.goals());
        out
    }

    /// The goals on product updates, checked against this run.
    pub fn goals(&self) -> String {
        let mut out = String::new();
        let Some(incremental) = self.implementation(&Kind::Incremental) else {
            return out;
        };
        let _ = writeln!(out, "| goal on updates | batch | measured | met |");
        let _ = writeln!(out, "|---|---:|---:|---|");
        let updates = |report: &ImplementationReport| -> Vec<(usize, f64)> {
            report
                .phases
                .iter()
                .filter_map(|p| match p.phase {
                    Phase::Updates { batch_size } => Some((batch_size, p.events_per_second)),
                    _ => None,
                })
                .collect()
        };
        let base = updates(incremental);
        let mut goal = |label: &str, engine: Option<&ImplementationReport>, target: f64| {
            let Some(engine) = engine else {
                return;
            };
            for ((batch, rate), (_, base)) in updates(engine).into_iter().zip(&base) {
                let ratio = rate / base.max(1e-9);
                let met = if ratio >= target { "yes" } else { "no" };
                let _ = writeln!(out, "| {label} | {batch} | {} | {met} |", format_ratio(ratio));
            }
        };
        goal("engine 1 worker ≥ 0.5× hand-written incremental", self.engine(1), 0.5);
        goal("engine 2 workers > 1× hand-written incremental", self.engine(2), 1.0);
        for kind in [Kind::PerCampaign, Kind::PerPair] {
            let Some(baseline) = self.implementation(&kind) else {
                continue;
            };
            let Some(engine) = self.engine(1) else {
                continue;
            };
            for ((batch, rate), (_, base)) in updates(engine).into_iter().zip(updates(baseline)) {
                let ratio = rate / base.max(1e-9);
                let met = if ratio >= 100.0 { "yes" } else { "no" };
                let _ = writeln!(
                    out,
                    "| engine 1 worker ≥ 100× {} | {batch} | {} | {met} |",
                    baseline.name,
                    format_ratio(ratio)
                );
            }
        }
        out
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
