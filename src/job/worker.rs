//! One timely worker of the job: its dataflow, its inputs, and the loop that feeds them.
//!
//! The probe sees the acknowledged frontier of every sink on every worker. A source says
//! how far it may run ahead of it (`backpressure_floor`), so a slow sink slows the source
//! instead of filling memory. A worker never blocks on its source: it polls, steps the
//! dataflow, and parks only when nothing is ready, for as long as its source allows.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dataflows::model::{Campaign, CampaignId, Category, CategoryId, Product, ProductId, Time};
use dataflows::operators::reconcile::{HeldItem, KeptWaiting};
use dataflows::operators::{reconcile_with_held, Upsert};
use dataflows::state::pairs::PairCount;
use dataflows::state::LentShares;
use dataflows::{render_eligibility, ClockRule, JobClock, QuietRebuild};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::operator::empty;
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Concatenate, Input, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

use super::{Job, JobError};
use crate::cluster::agreement::agree_on_greatest;
use crate::dead_letter::DeadLetter;
use crate::metrics::{Metrics, ReasonLabels};
use crate::progress::operator::commit_progress;
use crate::progress::{Checkpoint, ProgressRecord};
use crate::sink::contract::{HeldState, Route};
use crate::sink::operator::SinkOperator;
use crate::sink::sorted_runs::SortedRun;
use crate::source::{SourceRecord, SourceStatus};
use crate::worker_error::ErrorSlot;

type UpsertInput<K, V> = InputHandle<Time, CapacityContainerBuilder<Vec<Upsert<K, V>>>>;

/// The worker's inputs, advanced together.
struct JobInputs {
    products: UpsertInput<ProductId, Product>,
    campaigns: UpsertInput<CampaignId, Campaign>,
    /// `None` when the source reads no categories: the dataflow then takes an empty stream.
    categories: Option<UpsertInput<CategoryId, Category>>,
    rejected: InputHandle<Time, CapacityContainerBuilder<Vec<DeadLetter>>>,
    checkpoints: InputHandle<Time, CapacityContainerBuilder<Vec<Checkpoint>>>,
    /// `None` when the clock does not follow the records.
    clock: Option<ClockReadings>,
    /// Under the wall clock: where this worker's last frontier goes as it stops.
    finals: Option<InputHandle<Time, CapacityContainerBuilder<Vec<Time>>>>,
}

/// The records' timestamps as clock readings: one per time, the greatest this worker read.
struct ClockReadings {
    input: InputHandle<Time, CapacityContainerBuilder<Vec<u64>>>,
    latest: Option<u64>,
}

impl ClockReadings {
    fn read(&mut self, timestamp: u64) {
        self.latest = self.latest.max(Some(timestamp));
    }

    /// Sends the time's reading before the input moves past it.
    fn advance_to(&mut self, time: Time) {
        self.flush();
        self.input.advance_to(time);
    }

    fn flush(&mut self) {
        if let Some(latest) = self.latest.take() {
            self.input.send(latest);
        }
    }
}

impl Drop for ClockReadings {
    fn drop(&mut self) {
        self.flush();
    }
}

impl JobInputs {
    fn time(&self) -> Time {
        *self.products.time()
    }

    fn advance_to(&mut self, time: Time) {
        if time > self.time() {
            self.products.advance_to(time);
            self.campaigns.advance_to(time);
            if let Some(categories) = self.categories.as_mut() {
                categories.advance_to(time);
            }
            self.rejected.advance_to(time);
            self.checkpoints.advance_to(time);
            if let Some(clock) = self.clock.as_mut() {
                clock.advance_to(time);
            }
            if let Some(finals) = self.finals.as_mut() {
                finals.advance_to(time);
            }
        }
    }

    /// Closes the inputs; under the wall clock, after telling every worker how far this
    /// one got, so that all decide alike which waiting window bound the job reached.
    fn close(mut self) {
        let time = self.time();
        if let Some(finals) = self.finals.as_mut() {
            finals.send(time);
        }
    }

    fn send(
        &mut self,
        record: SourceRecord,
        metrics: &Metrics,
        closed: &mut VecDeque<(Time, Instant)>,
    ) -> Result<(), JobError> {
        let time = record.time();
        if time < self.time() {
            return Err(JobError::SourceOutOfOrder {
                time,
                frontier: self.time(),
            });
        }
        self.advance_to(time);
        match record {
            SourceRecord::Product(_, upsert) => self.products.send(upsert),
            SourceRecord::Campaign(_, upsert) => self.campaigns.send(upsert),
            SourceRecord::Category(_, upsert) => match self.categories.as_mut() {
                Some(categories) => categories.send(upsert),
                None => return Err(JobError::UnexpectedCategory),
            },
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
            SourceRecord::Clock(_, timestamp) => match self.clock.as_mut() {
                Some(clock) => clock.read(timestamp),
                None => return Err(JobError::UnexpectedClock),
            },
        }
        Ok(())
    }
}

type HeldInput = InputHandle<Time, CapacityContainerBuilder<Vec<HeldItem>>>;

/// The held inputs not fed yet: each sink's held pairs, fed once read, then closed. Until
/// then the input follows the rebuild's times (so it holds nothing back), below `below`.
struct HeldFeeds {
    open: Vec<(HeldInput, HeldState)>,
    /// The time held pairs must come before: the reconcile's, `live_from`.
    below: Time,
    /// Where the count of the held pairs goes, for the tables to size from.
    pairs: PairCount,
}

impl HeldFeeds {
    /// Whether the inputs must not take `staged` (the source's records, in time order) or
    /// pass `frontier` (its frontier) yet: held pairs are still to come, and those are past
    /// the reconcile's time. A quiet rebuild's end starts once the inputs pass that time, and
    /// its pairs reach the reconcile as they are summed; fed after that, the held pairs came
    /// in while the end ran (the feed steps the dataflow), and the reconcile kept every
    /// rebuilt pair that came before the last held one: ~400 MB at 10M products, in the runs
    /// where reading the log ended after reading the topics.
    fn hold_back(&self, staged: &[SourceRecord], frontier: Time) -> bool {
        let ahead = || staged.last().map_or(frontier, |record| record.time().max(frontier));
        !self.open.is_empty() && ahead() > self.below.saturating_add(1)
    }

    /// Steps the dataflow until every held pair is fed; the caller keeps its inputs where
    /// they are meanwhile.
    fn wait_until_fed(&mut self, worker: &mut Worker, watch: &mut Watch) -> Result<(), JobError> {
        let frontier = self.below;
        loop {
            self.poll(worker, frontier)?;
            if self.open.is_empty() {
                return Ok(());
            }
            worker.step_or_park(Some(Duration::from_millis(1)));
            watch.after_step()?;
        }
    }

    /// Feeds the held pairs read by now, and advances the other inputs towards `frontier`.
    fn poll(&mut self, worker: &mut Worker, frontier: Time) -> Result<(), JobError> {
        if self.open.is_empty() {
            return Ok(());
        }
        let mut unread = Vec::new();
        for (mut held_in, state) in std::mem::take(&mut self.open) {
            match state.take()? {
                Ok(pairs) => {
                    self.pairs.note(pairs.len());
                    for (sent, item) in pairs.into_items().enumerate() {
                        held_in.send(item);
                        // Steps now and then, so the held pairs move into the reconcile's
                        // map as they go instead of queueing up in the channels beside it.
                        if sent % 65_536 == 65_535 {
                            worker.step();
                        }
                    }
                    // Closed here (dropped): the reconcile then knows every held pair, and
                    // checks the rebuild's pairs as they arrive.
                }
                Err(state) => {
                    let time = frontier.min(self.below);
                    if time > *held_in.time() {
                        held_in.advance_to(time);
                    }
                    unread.push((held_in, state));
                }
            }
        }
        self.open = unread;
        Ok(())
    }
}

fn check(errors: &ErrorSlot, abort: &AtomicBool) -> Result<(), JobError> {
    if let Some(error) = errors.borrow_mut().take() {
        return Err(error.into());
    }
    if abort.load(Ordering::SeqCst) {
        return Err(JobError::AnotherWorkerFailed);
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
    /// On worker 0 of a restart: its first live time and the reconcile's count of pairs kept
    /// waiting, reported once that time is acknowledged.
    restart: Option<(Time, KeptWaiting)>,
}

impl Watch<'_> {
    fn acknowledged(&self) -> Option<Time> {
        self.probe.with_frontier(|frontier| frontier.first().copied())
    }

    /// Checks for failures and accounts for newly acknowledged times.
    fn after_step(&mut self) -> Result<(), JobError> {
        check(&self.errors, self.abort)?;
        self.metrics.beat();
        let acknowledged = self.acknowledged();
        if let Some(time) = acknowledged {
            self.metrics.output_frontier.set(time as i64);
        }
        self.report_restart(acknowledged);
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

    /// Once the restart's first live time is acknowledged, the reconcile is done with the
    /// held pairs: what it kept waiting goes to the metric, and to the log if any.
    fn report_restart(&mut self, acknowledged: Option<Time>) {
        let Some((live_from, kept)) = self.restart.as_ref() else {
            return;
        };
        if acknowledged.is_some_and(|ack| ack <= *live_from) {
            return;
        }
        let pairs = kept.most();
        self.metrics.reconcile_kept_waiting.set(pairs as i64);
        if pairs > 0 {
            tracing::warn!(
                pairs,
                "the reconcile kept rebuilt pairs waiting for the held pairs: memory beside the state"
            );
        }
        self.restart = None;
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

pub(super) fn run_worker(
    worker: &mut Worker,
    job: &Job,
    held_pairs: &PairCount,
    lent_shares: &LentShares,
    kept_waiting: &KeptWaiting,
    abort: &AtomicBool,
) -> Result<(), JobError> {
    let index = worker.index();
    let peers = worker.peers();
    let live_from = job.live_from.map(|proposal| agree_on_greatest(worker, proposal));
    let mut source = job.source.open(index, peers, live_from)?;
    let mut change_sinks = Vec::with_capacity(job.changes.len());
    let mut held_states = Vec::with_capacity(job.changes.len());
    for output in &job.changes {
        change_sinks.push((output.open)(index)?);
        held_states.push(match index {
            0 => output.held.lock().expect("poisoned").take().unwrap_or_default(),
            _ => HeldState::default(),
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
        let (categories_in, categories) = match job.source.reads_categories() {
            true => {
                let (input, stream) = scope.new_input::<Vec<Upsert<CategoryId, Category>>>();
                (Some(input), stream)
            }
            false => (None, empty(scope)),
        };
        let (rejected_in, rejected) = scope.new_input::<Vec<DeadLetter>>();
        let (checkpoints_in, checkpoints) = scope.new_input::<Vec<Checkpoint>>();
        let (clock_in, finals_in, clock) = match job.source.clock(live_from) {
            ClockRule::Records => {
                let (input, readings) = scope.new_input::<Vec<u64>>();
                (
                    Some(ClockReadings { input, latest: None }),
                    None,
                    JobClock::Records(readings),
                )
            }
            ClockRule::Wall { base, before_base } => {
                let (input, finals) = scope.new_input::<Vec<Time>>();
                let clock = JobClock::Wall {
                    base,
                    before_base,
                    finals,
                };
                (None, Some(input), clock)
            }
        };

        let rebuild = live_from.map(|until| QuietRebuild {
            until,
            pairs: held_pairs.clone(),
            products: job.source.rebuild_product_records().unwrap_or(0),
            lent: lent_shares.clone(),
        });
        let placement = job.source.product_placement(peers);
        let changes = render_eligibility(products, campaigns, categories, clock, placement, rebuild);
        let mut held_inputs = Vec::new();
        let mut outputs = Vec::new();
        for (output, sink) in job.changes.iter().zip(change_sinks) {
            let (held_in, held) = scope.new_input::<Vec<HeldItem>>();
            held_inputs.push(held_in);
            let changes = match live_from {
                // Held pairs meet the rebuilt ones on the pair's worker, whatever worker
                // writes them: the reconcile and the sort are shared out.
                Some(live_from) => reconcile_with_held(
                    changes.clone(),
                    held,
                    live_from,
                    held_pairs.clone(),
                    kept_waiting.clone(),
                ),
                // Already on the pair's worker (`PairTotals` owns it there).
                None => changes.clone(),
            };
            // Each worker sorts its share; the writing worker merges. What the sink refuses
            // for good comes out as dead letters.
            let letters = match output.route {
                Route::FirstWorker => {
                    changes.sink_into(Exchange::new(|_: &SortedRun| 0), &output.name, sink, errors.clone())
                }
                Route::ByPair => changes.sink_into(Pipeline, &output.name, sink, errors.clone()),
            };
            outputs.push(letters);
        }
        let letters = scope.concatenate(outputs.into_iter().chain([rejected]));
        // What the change sinks reject flows into the dead-letter sink, so its output
        // frontier is the acknowledged frontier of every sink; its output carries nothing
        // (a dead letter has nowhere further to go).
        let acknowledged = letters
            .sink_into(
                Exchange::new(|_: &SortedRun| 0),
                "DeadLetterSink",
                dead_letter_sink,
                errors.clone(),
            )
            .map(drop)
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
            categories: categories_in,
            rejected: rejected_in,
            checkpoints: checkpoints_in,
            clock: clock_in,
            finals: finals_in,
        };
        (inputs, held_inputs)
    });
    // One held input per change output: what its sink holds, fed in by worker 0 as soon as
    // it is read, while the rebuild goes on.
    let mut held = HeldFeeds {
        open: held_inputs.into_iter().zip(held_states).collect(),
        below: live_from.map_or(Time::MAX, |live_from| live_from.saturating_sub(1)),
        pairs: held_pairs.clone(),
    };
    held.poll(worker, 0)?;

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
        restart: live_from
            .filter(|_| index == 0)
            .map(|time| (time, kept_waiting.clone())),
    };
    const BUDGET: usize = 8_192;
    let mut staged = Vec::with_capacity(BUDGET);
    loop {
        watch.after_step()?;
        if crate::shutdown::requested() {
            tracing::info!(worker = index, "shutdown requested: finishing the batches in flight");
            break;
        }
        source.acknowledged(watch.acknowledged());
        let status = source.poll(&mut staged, BUDGET)?;
        if held.hold_back(&staged, source.frontier()) {
            held.wait_until_fed(worker, &mut watch)?;
        }
        let idle = staged.is_empty();
        let read = staged
            .iter()
            .filter(|record| !matches!(record, SourceRecord::Checkpoint(..) | SourceRecord::Clock(..)))
            .count();
        job.metrics.records_read.inc_by(read as u64);
        for record in staged.drain(..) {
            inputs.send(record, &job.metrics, &mut watch.closed)?;
        }
        if status == SourceStatus::Exhausted {
            break;
        }
        inputs.advance_to(source.frontier());
        held.poll(worker, source.frontier())?;
        let floor = source.backpressure_floor();
        while watch.probe.less_than(&floor) {
            worker.step_or_park(Some(Duration::from_millis(1)));
            watch.after_step()?;
            // The reconcile at the first live time waits for the held pairs.
            held.poll(worker, source.frontier())?;
        }
        worker.step_or_park(Some(if idle { source.idle_wait() } else { Duration::ZERO }));
    }
    // Closing passes the reconcile's time: the held pairs go in first (see `hold_back`).
    held.wait_until_fed(worker, &mut watch)?;
    inputs.close();
    while !watch.probe.done() {
        worker.step_or_park(Some(Duration::from_millis(1)));
        watch.after_step()?;
    }
    // Every time is acknowledged, the restart's first live time too.
    watch.report_restart(None);
    // The progress operator may still be saving after the sinks finished.
    while worker.step_or_park(Some(Duration::from_millis(1))) {
        check(&watch.errors, abort)?;
    }
    check(&watch.errors, abort)
}
