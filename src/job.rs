//! The job: one dataflow per timely worker, fed from a source, drained into sinks.
//!
//! ```text
//!  Source::poll --> inputs: products, campaigns, rejected, checkpoints (and held pairs)
//!                     |                             |               |
//!              render_eligibility                   |               |
//!   pair_changes(route), or on resume               |               |
//!   reconcile_with_held(held, route)         Exchange(worker 0)     |
//!                     |                             |               |
//!              SinkOperator(changes)      SinkOperator(dead letters)|
//!                     +------------+----------------+               |
//!                                  +-- acknowledged frontier --> ProgressCommit (worker 0)
//!                                  +-- probe (every worker)
//! ```
//!
//! The probe sees the acknowledged frontier of both sinks on every worker. A source says
//! how far it may run ahead of it (`backpressure_floor`), so a slow sink slows the source
//! instead of filling memory. A worker never blocks on its source: it polls, steps the
//! dataflow, and parks briefly only when nothing is ready.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use dataflows::model::{Campaign, CampaignId, PairChange, PairFigures, PairKey, Product, ProductId, Time};
use dataflows::operators::reconcile::HeldPair;
use dataflows::operators::{reconcile_with_held, PairChanges, Upsert};
use dataflows::render_eligibility;
use differential_dataflow::Hashable;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Concatenate, Input, Inspect, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

use crate::cluster::ClusterOptions;
use crate::dead_letter::DeadLetter;
use crate::metrics::{Metrics, ReasonLabels};
use crate::progress::operator::commit_progress;
use crate::progress::{Checkpoint, ProgressRecord, ProgressStore};
use crate::sink::operator::ErrorSlot;
use crate::sink::{Sink, SinkOperator};
use crate::source::{SourceFactory, SourceRecord, SourceStatus};

/// Which worker writes a pair's changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Worker 0 writes everything (file outputs, which process 0 owns).
    FirstWorker,
    /// Each worker writes the pairs that hash to it (parallel sinks).
    ByPair,
}

/// The pairs a sink holds: what a resumed run reconciles with.
pub type HeldPairs = Vec<(PairKey, PairFigures)>;

/// Opens the sink of a worker, or `None` on a worker without one.
pub type OpenSink<R> = Box<dyn Fn(usize) -> anyhow::Result<Option<Box<dyn Sink<R>>>> + Send + Sync>;

/// One destination of the pair changes. With several, each gets its own reconciliation
/// and a time is acknowledged once every one of them has acknowledged it.
pub struct ChangeOutput {
    pub name: String,
    pub route: Route,
    pub open: OpenSink<PairChange>,
    /// What the sink holds, for a resumed run; fed in by worker 0.
    pub held: Mutex<Option<HeldPairs>>,
}

impl ChangeOutput {
    /// An output whose one sink, opened already, belongs to worker 0.
    pub fn on_first_worker(name: &str, sink: Option<Box<dyn Sink<PairChange>>>, held: HeldPairs) -> Self {
        let slot = Mutex::new(sink);
        ChangeOutput {
            name: name.to_owned(),
            route: Route::FirstWorker,
            open: Box::new(move |worker| {
                Ok(if worker == 0 {
                    slot.lock().expect("poisoned").take()
                } else {
                    None
                })
            }),
            held: Mutex::new(Some(held)),
        }
    }
}

/// Opens the dead-letter sink on worker 0 (and nowhere else) from one already opened.
pub fn dead_letters_on_first_worker(sink: Option<Box<dyn Sink<DeadLetter>>>) -> OpenSink<DeadLetter> {
    let slot = Mutex::new(sink);
    Box::new(move |worker| {
        Ok(if worker == 0 {
            slot.lock().expect("poisoned").take()
        } else {
            None
        })
    })
}

/// Where and how often the progress record is saved.
pub struct ProgressCommit {
    /// Taken by worker 0.
    pub store: Mutex<Option<Box<dyn ProgressStore>>>,
    pub interval: Duration,
}

/// Everything a run needs.
pub struct Job {
    pub cluster: ClusterOptions,
    pub source: Arc<dyn SourceFactory>,
    pub changes: Vec<ChangeOutput>,
    pub dead_letters: OpenSink<DeadLetter>,
    pub metrics: Arc<Metrics>,
    /// How often worker 0 reports progress on stderr; `None` for never.
    pub progress_every: Option<Duration>,
    /// For a resumed run, this process's proposal for the first time whose changes are
    /// written (earlier times rebuild state; the output starts from what each sink holds).
    /// The workers agree on the greatest proposal, so it is above every version any sink
    /// holds and every committed time, whichever process knows them.
    pub live_from: Option<Time>,
    pub progress: Option<ProgressCommit>,
}

/// What a run did, as seen from this process.
#[derive(Clone, Debug)]
pub struct JobReport {
    pub elapsed: Duration,
    pub records_read: u64,
    pub records_rejected: u64,
    pub pairs_upserted: u64,
    pub pairs_deleted: u64,
    pub pairs_live: i64,
    pub dead_letters_written: u64,
}

impl JobReport {
    /// The figures of the run, the pairs' as written by `sink`.
    fn from_metrics(metrics: &Metrics, sink: &str, elapsed: Duration) -> Self {
        let (pairs_upserted, pairs_deleted, pairs_live) = metrics.pair_counts(sink);
        JobReport {
            elapsed,
            records_read: metrics.records_read.get(),
            records_rejected: metrics.rejected.get(),
            pairs_upserted,
            pairs_deleted,
            pairs_live,
            dead_letters_written: metrics.dead_letters_written.get(),
        }
    }
}

/// Runs the job on this process's workers until the source is exhausted (or a shutdown is
/// requested) and every output is acknowledged.
pub fn run(job: Job) -> anyhow::Result<JobReport> {
    let config = job.cluster.timely_config()?;
    job.cluster.meet()?;
    let connected = watch_connection(&job.cluster);
    let started = Instant::now();
    let metrics = job.metrics.clone();
    let primary = job
        .changes
        .first()
        .map_or_else(String::new, |output| output.name.clone());
    let job = Arc::new(job);
    // Set when a worker of this process fails, so the others stop instead of waiting.
    let abort = Arc::new(AtomicBool::new(false));
    let guards = timely::execute(config, move |worker| {
        connected.store(true, Ordering::SeqCst);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_worker(worker, &job, &abort)));
        if !matches!(result, Ok(Ok(()))) {
            abort.store(true, Ordering::SeqCst);
        }
        result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
    .map_err(|error| anyhow!("cannot start the timely cluster: {error}"))?;
    let mut first_error = None;
    for result in guards.join() {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(panic) => {
                first_error.get_or_insert(anyhow!("a worker panicked: {panic}"));
            }
        }
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    Ok(JobReport::from_metrics(&metrics, &primary, started.elapsed()))
}

/// How long timely may take to connect the processes once they have all met.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// Timely waits forever for a peer that died after the rendezvous; this stops the process
/// instead, so that the cluster restarts. Returns the flag the workers set once connected.
fn watch_connection(cluster: &ClusterOptions) -> Arc<AtomicBool> {
    let connected = Arc::new(AtomicBool::new(false));
    if cluster.processes > 1 {
        let flag = connected.clone();
        let peers = cluster.addresses().unwrap_or_default();
        std::thread::spawn(move || {
            let deadline = Instant::now() + CONNECT_TIMEOUT;
            while Instant::now() < deadline {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            tracing::error!(
                ?peers,
                timeout_s = CONNECT_TIMEOUT.as_secs(),
                "the processes did not all connect; stopping so the cluster restarts"
            );
            std::process::exit(2);
        });
    }
    connected
}

type UpsertInput<K, V> = InputHandle<Time, CapacityContainerBuilder<Vec<Upsert<K, V>>>>;

/// The worker's inputs, advanced together.
struct JobInputs {
    products: UpsertInput<ProductId, Product>,
    campaigns: UpsertInput<CampaignId, Campaign>,
    rejected: InputHandle<Time, CapacityContainerBuilder<Vec<DeadLetter>>>,
    checkpoints: InputHandle<Time, CapacityContainerBuilder<Vec<Checkpoint>>>,
}

impl JobInputs {
    fn time(&self) -> Time {
        *self.products.time()
    }

    fn advance_to(&mut self, time: Time) {
        if time > self.time() {
            self.products.advance_to(time);
            self.campaigns.advance_to(time);
            self.rejected.advance_to(time);
            self.checkpoints.advance_to(time);
        }
    }

    fn send(
        &mut self,
        record: SourceRecord,
        metrics: &Metrics,
        closed: &mut VecDeque<(Time, Instant)>,
    ) -> anyhow::Result<()> {
        let time = record.time();
        if time < self.time() {
            bail!(
                "the source produced a record at time {time} after advancing to {}",
                self.time()
            );
        }
        self.advance_to(time);
        match record {
            SourceRecord::Product(_, upsert) => self.products.send(upsert),
            SourceRecord::Campaign(_, upsert) => self.campaigns.send(upsert),
            SourceRecord::Rejected(_, letter) => {
                metrics.rejected.inc();
                metrics
                    .records_rejected
                    .get_or_create(&ReasonLabels {
                        code: letter.code.clone(),
                    })
                    .inc();
                self.rejected.send(letter)
            }
            SourceRecord::Checkpoint(_, checkpoints) => {
                closed.push_back((time, Instant::now()));
                for checkpoint in checkpoints {
                    self.checkpoints.send(checkpoint);
                }
            }
        }
        Ok(())
    }
}

/// Every worker proposes a time; every worker gets the greatest proposal.
fn agree_on_greatest(worker: &mut Worker, proposal: Time) -> Time {
    let agreed = Rc::new(RefCell::new(proposal));
    let seen = agreed.clone();
    let (mut input, probe) = worker.dataflow_named::<u64, _, _>("AgreeOnLiveTime", move |scope| {
        let (input, proposals) = scope.new_input::<Vec<Time>>();
        let (probe, _) = proposals
            .broadcast()
            .inspect(move |time| {
                let mut seen = seen.borrow_mut();
                *seen = (*seen).max(*time);
            })
            .probe();
        (input, probe)
    });
    input.send(proposal);
    input.advance_to(1);
    drop(input);
    while !probe.done() {
        worker.step();
    }
    let agreed = *agreed.borrow();
    agreed
}

fn check(errors: &ErrorSlot, abort: &AtomicBool) -> anyhow::Result<()> {
    if let Some(error) = errors.borrow_mut().take() {
        return Err(error);
    }
    if abort.load(Ordering::SeqCst) {
        bail!("stopping: another worker of this process failed");
    }
    Ok(())
}

/// What the worker loop watches while it steps: progress lines, latencies, errors.
struct Watch<'a> {
    probe: ProbeHandle<Time>,
    errors: ErrorSlot,
    abort: &'a AtomicBool,
    metrics: &'a Metrics,
    report_every: Option<Duration>,
    /// The change sink whose counts the progress line shows.
    primary_sink: String,
    started: Instant,
    last_report: Instant,
    /// Closed batches not yet acknowledged, with when they closed.
    closed: VecDeque<(Time, Instant)>,
}

impl Watch<'_> {
    fn acknowledged(&self) -> Option<Time> {
        self.probe.with_frontier(|frontier| frontier.first().copied())
    }

    /// Checks for failures and accounts for newly acknowledged times.
    fn after_step(&mut self) -> anyhow::Result<()> {
        check(&self.errors, self.abort)?;
        self.metrics.beat();
        let acknowledged = self.acknowledged();
        if let Some(time) = acknowledged {
            self.metrics.output_frontier.set(time as i64);
        }
        while let Some((time, closed_at)) = self.closed.front() {
            if acknowledged.is_some_and(|ack| ack <= *time) {
                break;
            }
            self.metrics
                .batch_latency_seconds
                .observe(closed_at.elapsed().as_secs_f64());
            self.closed.pop_front();
        }
        self.maybe_report();
        Ok(())
    }

    fn maybe_report(&mut self) {
        let Some(every) = self.report_every else {
            return;
        };
        if self.last_report.elapsed() < every {
            return;
        }
        self.last_report = Instant::now();
        let records = self.metrics.records_read.get();
        let seconds = self.started.elapsed().as_secs_f64().max(1e-9);
        let (upserts, deletes, live_pairs) = self.metrics.pair_counts(&self.primary_sink);
        tracing::info!(
            acknowledged_time = self.acknowledged().unwrap_or(Time::MAX),
            records,
            records_per_second = (records as f64 / seconds).round() as u64,
            batches = self.metrics.batches_closed.get(),
            upserts,
            deletes,
            live_pairs,
            "progress"
        );
    }
}

fn run_worker(worker: &mut Worker, job: &Job, abort: &AtomicBool) -> anyhow::Result<()> {
    let index = worker.index();
    let peers = worker.peers();
    let live_from = job.live_from.map(|proposal| agree_on_greatest(worker, proposal));
    let mut source = job.source.open(index, peers, live_from)?;
    let mut change_sinks = Vec::with_capacity(job.changes.len());
    let mut held_pairs = Vec::with_capacity(job.changes.len());
    for output in &job.changes {
        change_sinks.push((output.open)(index)?);
        held_pairs.push(match index {
            0 => output.held.lock().expect("poisoned").take().unwrap_or_default(),
            _ => Vec::new(),
        });
    }
    let dead_letter_sink = (job.dead_letters)(index)?;
    let progress_store = match (&job.progress, index) {
        (Some(progress), 0) => progress.store.lock().expect("poisoned").take(),
        _ => None,
    };
    let progress_interval = job.progress.as_ref().map_or(Duration::from_secs(1), |p| p.interval);
    let errors: ErrorSlot = Rc::new(RefCell::new(None));

    let probe = ProbeHandle::new();
    let metrics = job.metrics.clone();
    let (mut inputs, held_inputs) = worker.dataflow_named::<Time, _, _>("Eligibility", |scope| {
        let (products_in, products) = scope.new_input::<Vec<Upsert<ProductId, Product>>>();
        let (campaigns_in, campaigns) = scope.new_input::<Vec<Upsert<CampaignId, Campaign>>>();
        let (rejected_in, rejected) = scope.new_input::<Vec<DeadLetter>>();
        let (checkpoints_in, checkpoints) = scope.new_input::<Vec<Checkpoint>>();

        let changes = render_eligibility(products, campaigns, live_from);
        let mut held_inputs = Vec::new();
        let mut outputs = Vec::new();
        for (output, sink) in job.changes.iter().zip(change_sinks) {
            let (held_in, held) = scope.new_input::<Vec<HeldPair>>();
            held_inputs.push(held_in);
            let route = output.route;
            let route = move |pair: &PairKey| match route {
                Route::FirstWorker => 0,
                Route::ByPair => pair.hashed(),
            };
            let changes = match live_from {
                Some(live_from) => reconcile_with_held(changes.clone(), held, live_from, route),
                None => changes.clone().pair_changes(route),
            };
            // What the sink refuses for good comes out as dead letters.
            outputs.push(changes.sink_into(Pipeline, &output.name, sink, errors.clone()));
        }
        let letters = scope.concatenate(outputs.iter().cloned().chain([rejected]));
        let letter_acks = letters.sink_into(
            Exchange::new(|_: &DeadLetter| 0),
            "DeadLetterSink",
            dead_letter_sink,
            errors.clone(),
        );
        let acknowledged = scope
            .concatenate(outputs.into_iter().chain([letter_acks]))
            .probe_with(&probe);
        let on_commit_metrics = metrics.clone();
        commit_progress(
            checkpoints,
            acknowledged,
            progress_store,
            progress_interval,
            errors.clone(),
            Box::new(move |record: &ProgressRecord| {
                for ((topic, partition), offset) in &record.offsets {
                    on_commit_metrics
                        .committed_offset
                        .get_or_create(&Metrics::partition(topic, *partition))
                        .set(*offset);
                }
            }),
            metrics.clone(),
        );

        let inputs = JobInputs {
            products: products_in,
            campaigns: campaigns_in,
            rejected: rejected_in,
            checkpoints: checkpoints_in,
        };
        (inputs, held_inputs)
    });
    // One held input per change output: what its sink holds, fed in by worker 0 at time 0.
    for (mut held_in, pairs) in held_inputs.into_iter().zip(held_pairs) {
        for (sent, pair) in pairs.into_iter().enumerate() {
            held_in.send(pair);
            // Steps now and then, so the held pairs move into the reconcile's map as they
            // go instead of queueing up in the channels beside it (millions of pairs).
            if sent % 65_536 == 65_535 {
                worker.step();
            }
        }
        // Closed at once (dropped here): the reconcile then knows every held pair, and checks
        // the rebuild's pairs as they arrive instead of keeping them all until `live_from`.
    }

    let mut watch = Watch {
        probe,
        errors,
        abort,
        metrics: &job.metrics,
        report_every: job.progress_every.filter(|_| index == 0),
        primary_sink: job
            .changes
            .first()
            .map_or_else(String::new, |output| output.name.clone()),
        started: Instant::now(),
        last_report: Instant::now(),
        closed: VecDeque::new(),
    };
    const BUDGET: usize = 8_192;
    let mut staged = Vec::with_capacity(BUDGET);
    loop {
        watch.after_step()?;
        if crate::shutdown::requested() {
            tracing::info!(worker = index, "shutdown requested: finishing the batches in flight");
            break;
        }
        let status = source.poll(&mut staged, BUDGET)?;
        let idle = staged.is_empty();
        let read = staged
            .iter()
            .filter(|record| !matches!(record, SourceRecord::Checkpoint(..)))
            .count();
        job.metrics.records_read.inc_by(read as u64);
        for record in staged.drain(..) {
            inputs.send(record, &job.metrics, &mut watch.closed)?;
        }
        if status == SourceStatus::Exhausted {
            break;
        }
        inputs.advance_to(source.frontier());
        let floor = source.backpressure_floor();
        while watch.probe.less_than(&floor) {
            worker.step_or_park(Some(Duration::from_millis(1)));
            watch.after_step()?;
        }
        worker.step_or_park(Some(if idle { Duration::from_millis(2) } else { Duration::ZERO }));
    }
    drop(inputs);
    while !watch.probe.done() {
        worker.step_or_park(Some(Duration::from_millis(1)));
        watch.after_step()?;
    }
    // The progress operator may still be saving after the sinks finished.
    while worker.step_or_park(Some(Duration::from_millis(1))) {
        check(&watch.errors, abort)?;
    }
    check(&watch.errors, abort)
}
