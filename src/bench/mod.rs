//! `eligibility bench`: the engine against the approaches it replaces, side by side.
//!
//! One run builds one marketplace in memory and feeds the same phases to every
//! implementation: the engine on each asked number of workers (fed decoded records, and
//! event-log lines decoded inside the timed region), then the three baselines. All of them
//! must end with the same pairs, or the run fails. See docs/benchmarks.md.

pub mod baselines;
pub mod collected;
pub mod engine;
pub mod measure;
pub mod plot;
pub mod report;
pub mod sweep;
pub mod workload;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::{Deserialize, Serialize};

use self::baselines::incremental::Incremental;
use self::baselines::recompute::{Recompute, Strategy};
use self::baselines::Implementation;
use self::engine::Feed;
use self::measure::{peak_resident_bytes, resident_bytes, PhaseResult};
use self::report::{BenchReport, ImplementationReport, Memory};
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
}

impl Phase {
    pub fn label(&self) -> String {
        match self {
            Phase::Bootstrap => "bootstrap".into(),
            Phase::Updates { batch_size } => format!("updates, batch {batch_size}"),
            Phase::NewCampaign => "new campaign".into(),
            Phase::CampaignEdit => "campaign edit".into(),
        }
    }
}

impl Workload {
    /// The phases this workload holds, in order.
    pub fn phases(&self) -> Vec<Phase> {
        let mut phases = vec![Phase::Bootstrap];
        phases.extend(self.rounds.iter().map(|round| Phase::Updates {
            batch_size: round.batch_size,
        }));
        phases.extend([Phase::NewCampaign, Phase::CampaignEdit]);
        phases
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
}

/// Runs the bench and checks that every implementation ends with the same pairs.
pub fn run(options: &BenchOptions) -> anyhow::Result<BenchReport> {
    let resident_empty = resident_bytes();
    let started = Instant::now();
    let workload = Arc::new(Workload::build(&options.workload));
    eprintln!(
        "workload: {} products, {} events in {} phases, built in {:.1} s",
        workload.products,
        workload.events(),
        workload.phases().len(),
        started.elapsed().as_secs_f64()
    );
    let phases = Arc::new(workload.phases());
    let mut implementations = Vec::new();
    let mut memory = None;
    let mut reference = None;

    let mut feeds = vec![Feed::Decoded];
    if options.json_feed {
        feeds.push(Feed::Json);
    }
    for feed in feeds {
        for &workers in &options.workers {
            let name = match feed {
                Feed::Decoded => format!("engine, {workers} worker(s)"),
                Feed::Json => format!("engine, {workers} worker(s), JSON decode"),
            };
            eprintln!("running {name}");
            let outcome = engine::run(workload.clone(), phases.clone(), workers, feed)?;
            // Memory is read off the first run only: later runs reuse what it freed.
            // The bench's own copy of the pairs is taken out: a sink holds no such copy.
            memory.get_or_insert_with(|| {
                let engine_state_bytes = outcome
                    .resident_loaded
                    .saturating_sub(outcome.resident_before)
                    .saturating_sub(outcome.collected_bytes);
                Memory {
                    workload_bytes: outcome.resident_before.saturating_sub(resident_empty),
                    engine_state_bytes,
                    engine_state_bytes_per_product: engine_state_bytes as f64 / workload.products.max(1) as f64,
                    collected_pairs_bytes: outcome.collected_bytes,
                    peak_resident_bytes_after_engine: peak_resident_bytes(),
                    engine_workers: workers,
                }
            });
            check_agreement(&name, &outcome.pairs, &mut reference)?;
            implementations.push(ImplementationReport {
                name,
                kind: report::Kind::Engine { workers, feed },
                phases: outcome.phases,
            });
        }
    }

    if options.baselines {
        let candidates: Vec<Box<dyn Implementation>> = vec![
            Box::new(Incremental::new()),
            Box::new(Recompute::new(Strategy::PerCampaign)),
            Box::new(Recompute::new(Strategy::PerPair)),
        ];
        for mut implementation in candidates {
            let name = implementation.name().to_owned();
            eprintln!("running {name}");
            let phases = run_baseline(implementation.as_mut(), &workload, &phases, options.baseline_budget);
            check_agreement(&name, &implementation.pairs(), &mut reference)?;
            implementations.push(ImplementationReport {
                kind: report::Kind::baseline(&name),
                name,
                phases,
            });
        }
    }

    Ok(BenchReport::new(
        options,
        &workload,
        implementations,
        memory.unwrap_or_default(),
        peak_resident_bytes(),
        started.elapsed(),
    ))
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

fn check_agreement(
    name: &str,
    pairs: &dataflows::reference::PairState,
    reference: &mut Option<(String, dataflows::reference::PairState)>,
) -> anyhow::Result<()> {
    match reference {
        None => {
            *reference = Some((name.to_owned(), pairs.clone()));
            Ok(())
        }
        Some((first, expected)) if expected != pairs => {
            let differing = expected
                .iter()
                .filter(|(pair, figures)| pairs.get(*pair) != Some(*figures))
                .count()
                + pairs.keys().filter(|pair| !expected.contains_key(*pair)).count();
            bail!(
                "{name} ends with {} pairs and {first} with {}: {differing} differ",
                pairs.len(),
                expected.len()
            )
        }
        Some(_) => Ok(()),
    }
}
