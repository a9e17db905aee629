//! The job: one dataflow per timely worker, fed from a source, drained into sinks.
//!
//! ```text
//!  Source::poll --> inputs (products, campaigns, rejected) at their logical times
//!                     |                                   |
//!              render_eligibility                         |
//!                     |                                   |
//!               pair_changes(route)                Exchange(to worker 0)
//!                     |                                   |
//!              SinkOperator(changes)           SinkOperator(dead letters)
//!                     +------------- probe ---------------+
//! ```
//!
//! The probe sees the acknowledged frontier of both sinks on every worker. The loop keeps
//! the inputs at most `max_inflight_times` ahead of it, so a slow sink slows the source
//! instead of filling memory. A worker never blocks on its source: it polls, steps the
//! dataflow, and parks briefly only when nothing is ready.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use dataflows::model::{Campaign, CampaignId, PairChange, PairKey, Product, ProductId, Time};
use dataflows::operators::{PairChanges, Upsert};
use dataflows::render_eligibility;
use differential_dataflow::Hashable;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::{Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

use crate::cluster::ClusterOptions;
use crate::dead_letter::DeadLetter;
use crate::metrics::JobMetrics;
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

/// Opens the sinks of each worker.
pub trait SinkFactory: Send + Sync + 'static {
    fn route(&self) -> Route;
    /// The change sink of `worker_index`, or `None` on a worker that writes no changes.
    fn change_sink(&self, worker_index: usize)
        -> anyhow::Result<Option<Box<dyn Sink<PairChange>>>>;
    /// The dead-letter sink; dead letters always go to worker 0.
    fn dead_letter_sink(
        &self,
        worker_index: usize,
    ) -> anyhow::Result<Option<Box<dyn Sink<DeadLetter>>>>;
}

/// Everything a run needs.
pub struct Job {
    pub cluster: ClusterOptions,
    pub source: Arc<dyn SourceFactory>,
    pub sinks: Arc<dyn SinkFactory>,
    pub metrics: Arc<JobMetrics>,
    /// How many logical times the inputs may run ahead of the acknowledged output.
    pub max_inflight_times: u64,
    /// How often worker 0 reports progress on stderr; `None` for never.
    pub progress_every: Option<Duration>,
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
    fn from_metrics(metrics: &JobMetrics, elapsed: Duration) -> Self {
        JobReport {
            elapsed,
            records_read: JobMetrics::get(&metrics.records_read),
            records_rejected: JobMetrics::get(&metrics.records_rejected),
            pairs_upserted: JobMetrics::get(&metrics.pairs_upserted),
            pairs_deleted: JobMetrics::get(&metrics.pairs_deleted),
            pairs_live: metrics.pairs_live.load(Ordering::Relaxed),
            dead_letters_written: JobMetrics::get(&metrics.dead_letters_written),
        }
    }
}

/// Runs the job on this process's workers until the source is exhausted and every output
/// is acknowledged.
pub fn run(job: Job) -> anyhow::Result<JobReport> {
    let config = job.cluster.timely_config()?;
    let started = Instant::now();
    let metrics = job.metrics.clone();
    let job = Arc::new(job);
    // Set when a worker of this process fails, so the others stop instead of waiting.
    let abort = Arc::new(AtomicBool::new(false));
    let guards = timely::execute(config, move |worker| {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_worker(worker, &job, &abort)
        }));
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
    Ok(JobReport::from_metrics(&metrics, started.elapsed()))
}

type UpsertInput<K, V> = InputHandle<Time, CapacityContainerBuilder<Vec<Upsert<K, V>>>>;

/// The worker's three inputs, advanced together.
struct JobInputs {
    products: UpsertInput<ProductId, Product>,
    campaigns: UpsertInput<CampaignId, Campaign>,
    rejected: InputHandle<Time, CapacityContainerBuilder<Vec<DeadLetter>>>,
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
        }
    }

    fn send(&mut self, record: SourceRecord, metrics: &JobMetrics) -> anyhow::Result<()> {
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
                JobMetrics::add(&metrics.records_rejected, 1);
                self.rejected.send(letter)
            }
        }
        Ok(())
    }
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

/// Logs progress on worker 0 at a fixed interval.
struct ProgressReporter {
    every: Option<Duration>,
    started: Instant,
    last: Instant,
}

impl ProgressReporter {
    fn maybe_report(&mut self, probe: &ProbeHandle<Time>, metrics: &JobMetrics) {
        let Some(every) = self.every else { return };
        if self.last.elapsed() < every {
            return;
        }
        self.last = Instant::now();
        let acknowledged = probe.with_frontier(|frontier| frontier.first().copied());
        let records = JobMetrics::get(&metrics.records_read);
        let seconds = self.started.elapsed().as_secs_f64().max(1e-9);
        tracing::info!(
            acknowledged_time = acknowledged.unwrap_or(Time::MAX),
            records,
            records_per_second = (records as f64 / seconds).round() as u64,
            rejected = JobMetrics::get(&metrics.records_rejected),
            upserts = JobMetrics::get(&metrics.pairs_upserted),
            deletes = JobMetrics::get(&metrics.pairs_deleted),
            live_pairs = metrics.pairs_live.load(Ordering::Relaxed),
            "progress"
        );
    }
}

fn run_worker(worker: &mut Worker, job: &Job, abort: &AtomicBool) -> anyhow::Result<()> {
    let index = worker.index();
    let peers = worker.peers();
    let mut source = job.source.open(index, peers)?;
    let change_sink = job.sinks.change_sink(index)?;
    let dead_letter_sink = job.sinks.dead_letter_sink(index)?;
    let route = job.sinks.route();
    let errors: ErrorSlot = Rc::new(RefCell::new(None));

    let probe = ProbeHandle::new();
    let mut inputs = worker.dataflow_named::<Time, _, _>("Eligibility", |scope| {
        let (products_in, products) = scope.new_input::<Vec<Upsert<ProductId, Product>>>();
        let (campaigns_in, campaigns) = scope.new_input::<Vec<Upsert<CampaignId, Campaign>>>();
        let (rejected_in, rejected) = scope.new_input::<Vec<DeadLetter>>();

        let changes = render_eligibility(products, campaigns).pair_changes(
            move |pair: &PairKey| match route {
                Route::FirstWorker => 0,
                Route::ByPair => pair.hashed(),
            },
        );
        changes
            .sink_into(Pipeline, "ChangeSink", change_sink, errors.clone())
            .probe_with(&probe);
        rejected
            .sink_into(
                Exchange::new(|_: &DeadLetter| 0),
                "DeadLetterSink",
                dead_letter_sink,
                errors.clone(),
            )
            .probe_with(&probe);

        JobInputs {
            products: products_in,
            campaigns: campaigns_in,
            rejected: rejected_in,
        }
    });

    let mut reporter = ProgressReporter {
        every: job.progress_every.filter(|_| index == 0),
        started: Instant::now(),
        last: Instant::now(),
    };
    const BUDGET: usize = 8_192;
    let mut staged = Vec::with_capacity(BUDGET);
    loop {
        check(&errors, abort)?;
        let status = source.poll(&mut staged, BUDGET)?;
        let idle = staged.is_empty();
        JobMetrics::add(&job.metrics.records_read, staged.len() as u64);
        for record in staged.drain(..) {
            inputs.send(record, &job.metrics)?;
        }
        if status == SourceStatus::Exhausted {
            break;
        }
        let frontier = source.frontier();
        inputs.advance_to(frontier);
        let floor = frontier.saturating_sub(job.max_inflight_times);
        while probe.less_than(&floor) {
            worker.step_or_park(Some(Duration::from_millis(1)));
            check(&errors, abort)?;
            reporter.maybe_report(&probe, &job.metrics);
        }
        worker.step_or_park(Some(if idle {
            Duration::from_millis(5)
        } else {
            Duration::ZERO
        }));
        reporter.maybe_report(&probe, &job.metrics);
    }
    drop(inputs);
    while !probe.done() {
        worker.step_or_park(Some(Duration::from_millis(1)));
        check(&errors, abort)?;
        reporter.maybe_report(&probe, &job.metrics);
    }
    check(&errors, abort)
}
