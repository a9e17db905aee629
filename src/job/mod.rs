//! The job: one dataflow per timely worker, fed from a source, drained into sinks.
//!
//! ```text
//!  Source::poll --> inputs: products, campaigns, rejected, checkpoints (and held pairs)
//!                     |                             |               |
//!              render_eligibility                   |               |
//!   on resume, reconcile_with_held(held)            |               |
//!   (on the pair's worker)                          |               |
//!                     |                             |               |
//!   SinkOperator(changes): sorted runs       SinkOperator(dead      |
//!   to the writer (worker 0 or own)          letters): to worker 0  |
//!                     +------------+----------------+               |
//!                                  +-- acknowledged frontier --> ProgressCommit (worker 0)
//!                                  +-- probe (every worker)
//! ```
//!
//! The job only wires and runs: the composition root (`compose`) builds the source, the
//! sinks and the progress store; `worker` builds each worker's dataflow and feeds it. The
//! run waits for the workers on a thread of its own, so a cluster that never connects or
//! a stop that outlasts its grace period ends in an error for the edge, not in a hang.

pub mod worker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataflows::model::Time;
use dataflows::operators::reconcile::KeptWaiting;
use dataflows::state::pairs::PairCount;
use dataflows::state::LentShares;

use crate::cluster::ClusterOptions;
use crate::dead_letter::DeadLetter;
use crate::metrics::Metrics;
use crate::progress::ProgressStore;
use crate::shutdown::GraceWatch;
use crate::sink::contract::{ChangeOutput, OpenSink, SinkError};
use crate::source::{SourceError, SourceFactory};
use crate::worker_error::OperatorError;

/// Why a run stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("cannot start the cluster: {0:#}")]
    ClusterStart(anyhow::Error),
    #[error(
        "the processes did not all connect within {} s; stopping so that the cluster restarts (peers: {peers:?})",
        timeout.as_secs()
    )]
    PeersNotConnected { peers: Vec<String>, timeout: Duration },
    #[error(
        "the graceful stop did not finish within {} ms; the progress record holds the last acknowledged offsets and the next start redoes the rest",
        grace.as_millis()
    )]
    StopCutShort { grace: Duration },
    #[error(transparent)]
    Operator(#[from] OperatorError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("the source produced a record at time {time} after advancing to {frontier}")]
    SourceOutOfOrder { time: Time, frontier: Time },
    #[error("the source produced a category record although it said it reads none")]
    UnexpectedCategory,
    #[error("the source produced a clock reading although it said the clock follows the wall")]
    UnexpectedClock,
    #[error("stopping: another worker of this process failed")]
    AnotherWorkerFailed,
    #[error("a worker panicked: {0}")]
    WorkerPanicked(String),
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
    /// How long a requested stop may drain before the run gives up (`None`: no bound).
    pub shutdown_grace: Option<Duration>,
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
    /// The most rebuilt pairs a restart's reconcile kept waiting for the held pairs: 0 when
    /// the held pairs are in before the rebuild's end, as the workers make sure.
    pub rebuilt_pairs_kept_waiting: usize,
}

impl JobReport {
    /// The figures of the run, the pairs' as written by `sink`.
    fn from_metrics(metrics: &Metrics, sink: &str, elapsed: Duration, kept_waiting: usize) -> Self {
        let (pairs_upserted, pairs_deleted, pairs_live) = metrics.pair_counts(sink);
        JobReport {
            elapsed,
            records_read: metrics.records_read.get(),
            records_rejected: metrics.rejected.get(),
            pairs_upserted,
            pairs_deleted,
            pairs_live,
            dead_letters_written: metrics.dead_letters_written.get(),
            rebuilt_pairs_kept_waiting: kept_waiting,
        }
    }
}

/// How long timely may take to connect the processes once they have all met.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs the job on this process's workers until the source is exhausted (or a shutdown is
/// requested) and every output is acknowledged.
pub fn run(job: Job) -> Result<JobReport, JobError> {
    let config = job.cluster.timely_config().map_err(JobError::ClusterStart)?;
    job.cluster.meet().map_err(JobError::ClusterStart)?;
    let multi_process = job.cluster.processes > 1;
    let peers = job.cluster.addresses().unwrap_or_default();
    let mut grace = job.shutdown_grace.map(GraceWatch::new);
    let started = Instant::now();
    let metrics = job.metrics.clone();
    let primary = job
        .changes
        .first()
        .map_or_else(String::new, |output| output.name.clone());
    let job = Arc::new(job);
    // Set once the workers run, so a stalled connection is told from a long run.
    let connected = Arc::new(AtomicBool::new(false));
    // Set when a worker of this process fails, so the others stop instead of waiting.
    let abort = Arc::new(AtomicBool::new(false));
    // How many pairs the sinks hold, once worker 0 has read them: sizes the pair tables.
    let held_pairs = PairCount::default();
    // Where this process's workers lend each other their products at a rebuild's end.
    let lent_shares = LentShares::new(job.cluster.workers);
    let kept_waiting = KeptWaiting::default();
    let waited = kept_waiting.clone();
    let (done_tx, done) = mpsc::channel();
    let workers_connected = connected.clone();
    // Connecting the processes may wait for a peer that died after the rendezvous: the
    // workers start on a thread of their own, watched here.
    std::thread::Builder::new()
        .name("timely".into())
        .spawn(move || {
            let timely::Config { communication, worker } = config;
            let allocators = job.cluster.communication(communication, CONNECT_TIMEOUT);
            let result = allocators
                .and_then(|(allocators, guard)| {
                    timely::execute::execute_from(allocators, guard, worker, move |worker| {
                        workers_connected.store(true, Ordering::SeqCst);
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            worker::run_worker(worker, &job, &held_pairs, &lent_shares, &kept_waiting, &abort)
                        }));
                        if !matches!(result, Ok(Ok(()))) {
                            abort.store(true, Ordering::SeqCst);
                            // Timely steps a worker's dataflows until they complete once this
                            // closure returns: with a failed worker they never would, and the
                            // job would hang instead of failing.
                            for dataflow in worker.installed_dataflows() {
                                worker.drop_dataflow(dataflow);
                            }
                        }
                        result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                })
                .map(|guards| guards.join());
            done_tx.send(result).ok();
        })
        .map_err(|error| JobError::ClusterStart(error.into()))?;
    let results = loop {
        match done.recv_timeout(Duration::from_millis(100)) {
            Ok(Ok(results)) => break results,
            Ok(Err(error)) => {
                return Err(JobError::ClusterStart(anyhow::anyhow!(
                    "cannot start the timely cluster: {error}"
                )))
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(JobError::WorkerPanicked("the timely thread ended".into()))
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if multi_process && !connected.load(Ordering::SeqCst) && started.elapsed() > CONNECT_TIMEOUT {
            return Err(JobError::PeersNotConnected {
                peers,
                timeout: CONNECT_TIMEOUT,
            });
        }
        if let Some(grace) = grace.as_mut() {
            if grace.overrun() {
                return Err(JobError::StopCutShort { grace: grace.grace() });
            }
        }
    };
    let mut first_error = None;
    for result in results {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(panic) => {
                first_error.get_or_insert(JobError::WorkerPanicked(panic));
            }
        }
    }
    if let Some(error) = first_error {
        return Err(error);
    }
    Ok(JobReport::from_metrics(
        &metrics,
        &primary,
        started.elapsed(),
        waited.most(),
    ))
}
