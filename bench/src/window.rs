//! `eligibility-bench window`: a scheduled campaign opening (and closing) against an edit
//! of `active` on the same campaign, on the engine as the job runs it (issue 26).
//!
//! One campaign reaches a set share of the products (a third by default). Each round, on
//! the loaded marketplace:
//!
//! ```text
//!  untimed  the campaign with a window [S, E), read at a clock before S (closed)
//!  open     a clock reading reaching S, and nothing else       -> its pairs appear
//!  close    a clock reading reaching E                         -> its pairs go
//!  untimed  the campaign without a window, active: false
//!  activate the same campaign, active: true                    -> its pairs appear
//!  deactivate active: false again                              -> its pairs go
//! ```
//!
//! Each timed step is one logical time, clocked from its record in to the moment the probe
//! has passed the time (its last pair change is out), on 1 and 2 workers. Opening should
//! cost what activating costs: both are the campaign's own pairs and nothing else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, bail};
use dataflows::decode::{decode_envelope, Change};
use dataflows::instant::EpochNanos;
use dataflows::model::{Campaign, CampaignId, Product, ProductId, Time, Window};
use dataflows::operators::{PairChanges, Upsert};
use dataflows::{render_eligibility, JobClock, PairChange, ProductPlacement};
use differential_dataflow::Hashable;
use generate::{generate_to_vec, MarketplaceSpec};
use serde::{Deserialize, Serialize};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::operator::empty;
use timely::dataflow::operators::{Input, Operator, Probe};
use timely::dataflow::ProbeHandle;

use crate::workload::campaign_of_reach;

/// The campaign the bench opens, closes, activates and deactivates.
const CAMPAIGN: &str = "c-bench-window";
/// Where the rounds' clock starts: 2026-11-27T00:00:00Z, in ms.
const CLOCK_START_MS: u64 = 1_795_737_600_000;
/// Records a time while loading.
const LOAD_BATCH: usize = 100_000;

pub struct WindowOptions {
    pub marketplace: MarketplaceSpec,
    /// Share of the products the campaign reaches, in (0, 1].
    pub share: f64,
    pub rounds: usize,
    pub workers: Vec<usize>,
}

/// The four steps each round times.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    Open,
    Close,
    Activate,
    Deactivate,
}

impl Step {
    const ALL: [Step; 4] = [Step::Open, Step::Close, Step::Activate, Step::Deactivate];

    fn name(self) -> &'static str {
        match self {
            Step::Open => "opens (clock reaches starts_at)",
            Step::Close => "closes (clock reaches ends_at)",
            Step::Activate => "edit: active true",
            Step::Deactivate => "edit: active false",
        }
    }
}

/// One step's timings over the rounds, and the pair changes it wrote each time.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepFigures {
    pub step: Step,
    pub ms: Vec<f64>,
    pub pairs_written: Vec<u64>,
}

impl StepFigures {
    pub fn median_ms(&self) -> f64 {
        let mut sorted = self.ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WorkersRun {
    pub workers: usize,
    pub steps: Vec<StepFigures>,
}

impl WorkersRun {
    fn step(&self, step: Step) -> &StepFigures {
        self.steps.iter().find(|s| s.step == step).expect("every step is timed")
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WindowReport {
    pub products: u64,
    pub share_reached: f64,
    pub rounds: usize,
    pub runs: Vec<WorkersRun>,
}

/// Builds the marketplace and the campaign, then times the rounds on each worker count.
pub fn run(options: &WindowOptions) -> anyhow::Result<WindowReport> {
    let spec = MarketplaceSpec {
        updates: 0,
        malformed_share: 0.0,
        tree_depth: 0,
        ..options.marketplace.clone()
    };
    let log = generate_to_vec(&spec);
    let mut products: Vec<(ProductId, Product)> = Vec::with_capacity(spec.products as usize);
    let mut campaigns: Vec<(CampaignId, Campaign)> = Vec::new();
    for line in log.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
        let record = decode_envelope(line).expect("the generator writes valid records");
        match record.change {
            Change::Product(Some(product)) => products.push((record.key, product)),
            Change::Campaign(Some(campaign)) => campaigns.push((record.key, campaign)),
            _ => {}
        }
    }
    drop(log);
    let (criteria, share_reached) = campaign_of_reach(&products, options.share);
    let load = Arc::new(Load {
        products,
        campaigns,
        criteria,
        rounds: options.rounds,
    });
    let mut runs = Vec::new();
    for &workers in &options.workers {
        eprintln!("window: timing the rounds on {workers} worker(s)");
        runs.push(run_rounds(load.clone(), workers)?);
    }
    // Both ways in reach the same pairs: the same number written opening and activating.
    for run in &runs {
        let (open, activate) = (run.step(Step::Open), run.step(Step::Activate));
        if open.pairs_written != activate.pairs_written || open.pairs_written.contains(&0) {
            bail!(
                "opening wrote {:?} pair changes, activating {:?} ({} workers)",
                open.pairs_written,
                activate.pairs_written,
                run.workers
            );
        }
    }
    Ok(WindowReport {
        products: spec.products,
        share_reached,
        rounds: options.rounds,
        runs,
    })
}

struct Load {
    products: Vec<(ProductId, Product)>,
    campaigns: Vec<(CampaignId, Campaign)>,
    criteria: Campaign,
    rounds: usize,
}

impl Load {
    fn campaign(&self, window: Window, active: bool) -> Campaign {
        Campaign {
            window,
            active,
            ..self.criteria.clone()
        }
    }
}

/// What worker 0 hands back: each step's (ms, pair changes) per round.
type Timings = Vec<(Step, f64, u64)>;

fn run_rounds(load: Arc<Load>, workers: usize) -> anyhow::Result<WorkersRun> {
    let config = match workers {
        1 => timely::Config::thread(),
        n => timely::Config::process(n),
    };
    let results: Arc<Mutex<Option<Timings>>> = Arc::default();
    let shared = results.clone();
    let written = Arc::new(AtomicU64::new(0));
    timely::execute(config, move |worker| {
        let (index, peers) = (worker.index(), worker.peers());
        let probe = ProbeHandle::new();
        let counter = written.clone();
        let (mut products, mut campaigns, mut clock) = worker.dataflow::<Time, _, _>(|scope| {
            let (products_in, products) = scope.new_input::<Vec<Upsert<ProductId, Product>>>();
            let (campaigns_in, campaigns) = scope.new_input::<Vec<Upsert<CampaignId, Campaign>>>();
            let (clock_in, readings) = scope.new_input::<Vec<u64>>();
            render_eligibility(
                products,
                campaigns,
                empty(scope),
                JobClock::Records(readings),
                ProductPlacement::ByKey,
                None,
            )
            .pair_changes(|pair| pair.hashed())
            .unary::<CapacityContainerBuilder<Vec<()>>, _, _, _>(Pipeline, "CountPairs", |_, _| {
                move |input, _output| {
                    input.for_each(|_time, changes: &mut Vec<PairChange>| {
                        counter.fetch_add(changes.len() as u64, Ordering::Relaxed);
                    });
                }
            })
            .probe_with(&probe);
            (products_in, campaigns_in, clock_in)
        });
        let mut time: Time = 0;
        let mut seq = 0u64;
        // Closes the current time on every worker and waits until its changes are out.
        macro_rules! step {
            () => {
                time += 1;
                products.advance_to(time);
                campaigns.advance_to(time);
                clock.advance_to(time);
                while probe.less_than(&time) {
                    worker.step();
                }
            };
        }
        if index == 0 {
            for (key, campaign) in &load.campaigns {
                campaigns.send(Upsert {
                    key: key.clone(),
                    seq,
                    value: Some(campaign.clone()),
                });
                seq += 1;
            }
        }
        for chunk in load.products.chunks(LOAD_BATCH) {
            for (position, (key, product)) in chunk.iter().enumerate().filter(|(i, _)| i % peers == index) {
                products.send(Upsert {
                    key: key.clone(),
                    seq: position as u64,
                    value: Some(*product),
                });
            }
            step!();
        }

        let mut timings = Vec::new();
        for round in 0..load.rounds as u64 {
            let starts_ms = CLOCK_START_MS + round * 10_000 + 1_000;
            let window = Window {
                starts_at: Some(EpochNanos::from_millis(starts_ms)),
                ends_at: Some(EpochNanos::from_millis(starts_ms + 1_000)),
            };
            // (what worker 0 sends, the step it is timed as)
            let plan: [(Option<Campaign>, Option<u64>, Option<Step>); 6] = [
                (Some(load.campaign(window, true)), Some(starts_ms - 500), None),
                (None, Some(starts_ms), Some(Step::Open)),
                (None, Some(starts_ms + 1_000), Some(Step::Close)),
                (Some(load.campaign(Window::default(), false)), None, None),
                (Some(load.campaign(Window::default(), true)), None, Some(Step::Activate)),
                (
                    Some(load.campaign(Window::default(), false)),
                    None,
                    Some(Step::Deactivate),
                ),
            ];
            for (campaign, reading, timed) in plan {
                let before = written.load(Ordering::SeqCst);
                let started = Instant::now();
                if index == 0 {
                    if let Some(campaign) = campaign {
                        seq += 1;
                        campaigns.send(Upsert {
                            key: CAMPAIGN.to_owned(),
                            seq,
                            value: Some(campaign),
                        });
                    }
                    if let Some(reading) = reading {
                        clock.send(reading);
                    }
                }
                step!();
                let elapsed = started.elapsed().as_secs_f64() * 1e3;
                if let Some(step) = timed {
                    timings.push((step, elapsed, written.load(Ordering::SeqCst) - before));
                }
            }
        }
        if index == 0 {
            *shared.lock().expect("poisoned") = Some(timings);
        }
    })
    .map_err(|e| anyhow!("cannot start the timely workers: {e}"))?
    .join()
    .into_iter()
    .collect::<Result<Vec<()>, String>>()
    .map_err(|e| anyhow!("a worker failed: {e}"))?;
    let timings = results
        .lock()
        .expect("poisoned")
        .take()
        .ok_or_else(|| anyhow!("worker 0 reported nothing"))?;
    let steps = Step::ALL
        .iter()
        .map(|&step| {
            let of_step = timings.iter().filter(|(s, _, _)| *s == step);
            StepFigures {
                step,
                ms: of_step.clone().map(|(_, ms, _)| *ms).collect(),
                pairs_written: of_step.map(|(_, _, pairs)| *pairs).collect(),
            }
        })
        .collect();
    Ok(WorkersRun { workers, steps })
}

impl WindowReport {
    pub fn to_markdown(&self) -> String {
        let mut text = format!(
            "Scheduled campaign against an edit of `active`: {} products, the campaign reaches {:.1}% of them; median of {} rounds, ms from the record in to the last pair change out.\n\n",
            self.products,
            self.share_reached * 100.0,
            self.rounds
        );
        text.push_str("| workers | step | median ms | min-max ms | pair changes | ratio to the `active` edit |\n|---|---|---|---|---|---|\n");
        for run in &self.runs {
            for step in Step::ALL {
                let figures = run.step(step);
                let against = match step {
                    Step::Open => Some(run.step(Step::Activate)),
                    Step::Close => Some(run.step(Step::Deactivate)),
                    _ => None,
                };
                let ratio = against.map_or_else(
                    || "–".to_owned(),
                    |other| format!("{:.2}", figures.median_ms() / other.median_ms()),
                );
                let min = figures.ms.iter().copied().fold(f64::INFINITY, f64::min);
                let max = figures.ms.iter().copied().fold(0.0, f64::max);
                text.push_str(&format!(
                    "| {} | {} | {:.1} | {:.1}-{:.1} | {} | {} |\n",
                    run.workers,
                    step.name(),
                    figures.median_ms(),
                    min,
                    max,
                    figures.pairs_written.first().copied().unwrap_or(0),
                    ratio
                ));
            }
        }
        text
    }
}
