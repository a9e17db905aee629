//! `eligibility-bench`: the engine against the approaches it replaces, side by side.
//!
//! Every implementation runs in a process of its own (`child`), on the same marketplace
//! built there from the same spec and seed, so each peak memory figure is that
//! implementation's: the engine on each asked number of workers (fed decoded records, and
//! event-log lines decoded inside the timed region), then the three baselines. All of them
//! must end with the same pairs, or the run fails. Then the end-to-end file mode
//! (`file_mode`): `eligibility run` against a hand-written equivalent on one event log.
//! Then the tree phase (`tree`): a subtree move and a campaign on a top-level category, on
//! the marketplace with a category tree and on the same marketplace kept flat.
//! `eligibility-bench rebuild` (`rebuild`) measures a restart from the Kafka topics
//! against a plain consumer of them. See docs/benchmarks.md.

pub mod args;
pub mod baselines;
pub mod broker_cpu;
pub mod child;
pub mod collected;
pub mod engine;
pub mod file_mode;
pub mod format;
pub mod kind;
pub mod measure;
pub mod plot;
pub mod process;
pub mod processes;
pub mod rebuild;
pub mod report;
pub mod sweep;
pub mod tables;
pub mod tree;
pub mod window;
pub mod workload;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::{Deserialize, Serialize};

use self::baselines::Implementation;
use self::child::{ChildOutput, ChildTask};
use self::engine::Feed;
use self::file_mode::FileModeOptions;
use self::measure::{peak_resident_bytes, PhaseResult};
use self::report::{BenchReport, ImplementationReport, Kind, WorkloadFigures};
use self::tree::TreeOptions;
use self::workload::{Batch, Workload, WorkloadSpec};

/// One phase of the bench, in the order they run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Phase {
    /// The initial load: every campaign, then every product.
    Bootstrap,
    /// Product price, stock and category edits in batches of `batch_size`.
    Updates { batch_size: usize },
    /// One new campaign that reaches a set share of the products.
    NewCampaign,
    /// An edit of that campaign's criteria.
    CampaignEdit,
    /// The tree phase: one category's subtree moved under another parent (flat: the
    /// campaign edits that move makes).
    SubtreeMove,
    /// The tree phase: a new campaign on a top-level category (flat: listing its subtree).
    TopLevelCampaign,
}

impl Phase {
    pub fn label(&self) -> String {
        match self {
            Phase::Bootstrap => "bootstrap".into(),
            Phase::Updates { batch_size } => format!("updates, batch {batch_size}"),
            Phase::NewCampaign => "new campaign".into(),
            Phase::CampaignEdit => "campaign edit".into(),
            Phase::SubtreeMove => "subtree move".into(),
            Phase::TopLevelCampaign => "top-level campaign".into(),
        }
    }
}

impl Workload {
    /// The workload `spec` asks for: the tree phase's, or the main one.
    pub fn build(spec: &WorkloadSpec) -> Workload {
        match &spec.tree {
            Some(tree) => tree::workload::build(spec, tree),
            None => Workload::build_main(spec),
        }
    }

    /// The phases this workload holds, in order.
    pub fn phases(&self) -> Vec<Phase> {
        if self.tree.is_some() {
            return vec![Phase::Bootstrap, Phase::SubtreeMove, Phase::TopLevelCampaign];
        }
        let mut phases = vec![Phase::Bootstrap];
        phases.extend(self.rounds.iter().map(|round| Phase::Updates {
            batch_size: round.batch_size,
        }));
        phases.extend([Phase::NewCampaign, Phase::CampaignEdit]);
        phases
    }

    /// Every event-log line, in the order the implementations apply them.
    pub fn lines(&self) -> Vec<&str> {
        let mut lines = Vec::with_capacity(self.events());
        for phase in self.phases() {
            for batch in self.batches(&phase) {
                lines.extend(batch.lines.iter().map(String::as_str));
            }
        }
        lines
    }

    /// The batches of one phase.
    pub fn batches(&self, phase: &Phase) -> Vec<&Batch> {
        match phase {
            Phase::Bootstrap => self.load.iter().collect(),
            Phase::Updates { batch_size } => self
                .rounds
                .iter()
                .filter(|round| round.batch_size == *batch_size)
                .flat_map(|round| &round.batches)
                .collect(),
            Phase::NewCampaign => vec![&self.new_campaign],
            Phase::CampaignEdit => vec![&self.campaign_edit],
            Phase::SubtreeMove => self.tree.iter().map(|tree| &tree.subtree_move).collect(),
            Phase::TopLevelCampaign => self.tree.iter().map(|tree| &tree.top_level_campaign).collect(),
        }
    }
}

/// Everything one bench run needs.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    pub workload: WorkloadSpec,
    /// Engine worker counts to run, e.g. `[1, 2]`.
    pub workers: Vec<usize>,
    /// Also run the engine on event-log lines, with the JSON decode timed.
    pub json_feed: bool,
    /// Wall time a baseline may spend timing one phase before it is timed on a prefix.
    pub baseline_budget: Duration,
    pub baselines: bool,
    /// The bench binary each implementation runs in: this one, re-executed.
    pub exe: PathBuf,
    /// The end-to-end file-mode comparison, if asked.
    pub file_mode: Option<FileModeOptions>,
    /// The main phases (bootstrap, updates, new campaign, campaign edit) in memory.
    pub main: bool,
    /// The tree phase, if asked.
    pub tree: Option<TreeOptions>,
}

/// Runs the bench and checks that every implementation ends with the same pairs.
pub fn run(options: &BenchOptions) -> anyhow::Result<BenchReport> {
    let started = Instant::now();
    let task = |kind: Option<Kind>| ChildTask::Implementation {
        workload: options.workload.clone(),
        kind,
        baseline_budget: options.baseline_budget,
    };
    let mut workload = WorkloadFigures::default();
    let mut built = ChildOutput::default();
    if options.main {
        eprintln!("building the workload alone");
        let process;
        (built, process) = child::spawn(&options.exe, &task(None))?;
        workload = WorkloadFigures {
            products: built.products,
            events: built.events,
            new_campaign_share: built.new_campaign_share,
            resident_after_build_bytes: built.resident_after_build_bytes,
            process,
        };
    }
    let mut implementations = Vec::new();
    let mut memory = None;
    let mut reference = None;
    let main_kinds = if options.main { kinds(options) } else { Vec::new() };
    for kind in main_kinds {
        let name = kind.name();
        eprintln!("running {name}");
        let (output, process) = child::spawn(&options.exe, &task(Some(kind.clone())))?;
        if output.workload_digest != built.workload_digest {
            bail!("{name} built another workload from the same spec and seed");
        }
        check_agreement(&name, &output, &mut reference)?;
        // The engine's in-process figures of its first run, for the sweep's plots.
        if memory.is_none() {
            memory = output.memory;
        }
        implementations.push(ImplementationReport {
            name,
            kind,
            phases: output.phases,
            process,
        });
    }
    let file_mode = match &options.file_mode {
        Some(file_options) => Some(file_mode::run(&options.exe, file_options)?),
        None => None,
    };
    let tree = match &options.tree {
        Some(tree_options) => Some(tree::run(&options.exe, options, tree_options)?),
        None => None,
    };
    let mut report = BenchReport::new(
        options,
        workload,
        implementations,
        memory.unwrap_or_default(),
        peak_resident_bytes(),
        started.elapsed(),
        file_mode,
    );
    report.tree = tree;
    Ok(report)
}

/// The implementations to run, in order: the engine on each feed and worker count, then
/// the baselines.
fn kinds(options: &BenchOptions) -> Vec<Kind> {
    let mut feeds = vec![Feed::Decoded];
    if options.json_feed {
        feeds.push(Feed::Json);
    }
    let mut kinds: Vec<Kind> = feeds
        .into_iter()
        .flat_map(|feed| {
            options
                .workers
                .iter()
                .map(move |&workers| Kind::Engine { workers, feed })
        })
        .collect();
    if options.baselines {
        kinds.extend([Kind::Incremental, Kind::PerCampaign, Kind::PerPair]);
    }
    kinds
}

/// Runs a baseline through every phase, timing each until its budget is spent (at least
/// one batch); the rest is applied untimed so later phases start from the right state.
fn run_baseline(
    implementation: &mut dyn Implementation,
    workload: &Workload,
    phases: &[Phase],
    budget: Duration,
) -> Vec<PhaseResult> {
    let mut results = Vec::with_capacity(phases.len());
    let mut behind = false;
    for phase in phases {
        let batches = workload.batches(phase);
        let mut result = PhaseResult::new(phase.clone());
        let started = Instant::now();
        let mut writes = 0;
        let mut timed = Duration::ZERO;
        if matches!(phase, Phase::Bootstrap) {
            let records: Vec<&[_]> = batches.iter().map(|batch| batch.records.as_slice()).collect();
            writes = implementation.bootstrap(&records);
            timed = started.elapsed();
            let events = batches.iter().map(|batch| batch.len()).sum();
            result.record_batch(events, timed);
        } else {
            for batch in batches {
                // Every phase times at least one batch, so each has a figure.
                if result.batches_timed == 0 || timed < budget {
                    let batch_started = Instant::now();
                    writes += implementation.apply(&batch.records);
                    let latency = batch_started.elapsed();
                    timed += latency;
                    result.record_batch(batch.len(), latency);
                } else {
                    implementation.apply_untimed(&batch.records);
                    result.record_untimed_batch();
                    behind = true;
                }
            }
        }
        result.finish(timed.as_secs_f64(), writes);
        results.push(result);
    }
    if behind {
        implementation.settle();
    }
    results
}

/// Fails unless `output` ends with the same pairs as the first implementation run.
fn check_agreement(
    name: &str,
    output: &ChildOutput,
    reference: &mut Option<(String, usize, u64)>,
) -> anyhow::Result<()> {
    match reference {
        None => {
            *reference = Some((name.to_owned(), output.pairs, output.pairs_digest));
            Ok(())
        }
        Some((first, pairs, digest)) if (*pairs, *digest) != (output.pairs, output.pairs_digest) => bail!(
            "{name} ends with {} pairs (digest {:016x}) and {first} with {pairs} (digest {digest:016x})",
            output.pairs,
            output.pairs_digest
        ),
        Some(_) => Ok(()),
    }
}
