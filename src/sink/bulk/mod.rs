//! The machinery every bulk sink shares: batching, bounded concurrency, retries, acks.
//!
//! ```text
//!   write(t, changes) -> ops (id, version = t, body | delete) -> buffer
//!   flush(upper):
//!     completed requests -> per op: Done | Retry (backoff) | Rejected (dead letter)
//!     due retries        -> back into the buffer, unless a newer op for the document exists
//!     buffer             -> requests of <= max_actions / max_bytes, <= max_in_flight at once
//!     acknowledged       =  the least time with an op not yet done (else `upper`)
//! ```
//!
//! While the destination is down or blocks writes (`stalled`), retries back off up to
//! `retry_max`, but one document is sent as a probe at most every [`PROBE_INTERVAL`]; the first
//! document written after a stall makes every waiting retry due at once, with fresh
//! attempts, so a recovered destination is written to within a second, not a backoff later.
//!
//! A request goes out when the buffer is full, when its oldest op has waited
//! `flush_interval`, or at once when nothing is in flight: an idle pipeline never waits, and
//! under load requests grow as ops pile up behind the ones in flight. A destination
//! (`BulkService`) only builds requests and reads their answers; Elasticsearch and Couchbase
//! are each one file. Versions only grow with the logical time, so a retried or reordered
//! write can never replace a newer value: the destination refuses the stale version, and a
//! retry whose document was written again since is dropped before it is sent.

pub mod output;
pub mod settings;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataflows::model::{PairChange, Time};
use serde::Serialize;

use super::contract::{Sink, SinkError};
use crate::dead_letter::DeadLetter;
use crate::metrics::{Metrics, SinkHandles};
use crate::retry::Backoff;

/// One document write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DocumentOp {
    /// `campaign_id:seller_id`.
    pub id: String,
    /// Grows with the logical time; a destination keeps the write with the greatest.
    pub version: u64,
    /// The document's JSON, or `None` to delete it.
    pub body: Option<Vec<u8>>,
    /// The logical time the op belongs to.
    pub time: Time,
}

/// The document body every sink writes for a pair (SPEC.md).
#[derive(Serialize)]
struct PairDocument<'a> {
    campaign_id: &'a str,
    seller_id: u64,
    eligible_products: u64,
    eligible_stock: u64,
}

impl DocumentOp {
    pub fn from_change(change: &PairChange) -> Self {
        let body = change.figures.map(|figures| {
            serde_json::to_vec(&PairDocument {
                campaign_id: &change.pair.campaign_id,
                seller_id: change.pair.seller_id,
                eligible_products: figures.eligible_products,
                eligible_stock: figures.eligible_stock,
            })
            .expect("a pair document always serializes")
        });
        DocumentOp {
            id: change.pair.document_id(),
            version: change.time,
            body,
            time: change.time,
        }
    }

    fn size(&self) -> usize {
        self.id.len() + self.body.as_ref().map_or(0, Vec::len) + 64
    }
}

/// What became of one op of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemOutcome {
    /// Written (or already superseded by a newer version, or already deleted).
    Done,
    /// Temporarily refused (overload, timeout, unavailable shard): try again later.
    /// `blocking` marks refusals that need an operator (read-only index, auth): the sink
    /// reports itself unhealthy while they last.
    Retry { reason: String, blocking: bool },
    /// Refused for good: goes to the dead-letter output.
    Rejected { code: String, reason: String },
}

/// A request that failed as a whole; all its ops are retried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestFailure {
    /// No answer: the connection failed, the request timed out, the task stopped.
    #[error("no answer: {0}")]
    Unanswered(String),
    /// The whole request was refused with this HTTP status.
    #[error("answered {status}: {body}")]
    Status { status: u16, body: String },
    /// An answer, but not of the form the protocol promises.
    #[error("unreadable answer: {0}")]
    Unreadable(String),
}

pub type RequestResult = Result<Vec<ItemOutcome>, RequestFailure>;

/// A destination: how to write a batch of ops in one request.
pub trait BulkService: Send + Sync + 'static {
    /// Writes `ops` in one request and reports each op's outcome, in order.
    fn send(&self, ops: Arc<Vec<DocumentOp>>) -> Pin<Box<dyn Future<Output = RequestResult> + Send>>;

    /// Whether the destination applies whatever write comes last, whatever its version.
    /// Then a document is never in two requests at once, nor twice in one request, so its
    /// writes land in the order of their versions.
    fn needs_ordered_writes(&self) -> bool {
        false
    }
}

/// Limits and timings of a bulk sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BulkConfig {
    pub max_actions: usize,
    pub max_bytes: usize,
    pub flush_interval: Duration,
    pub max_in_flight: usize,
    pub backoff: Backoff,
}

/// While stalled, how often one waiting document is sent early to see if the destination
/// answers again.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

struct Completed {
    ops: Arc<Vec<DocumentOp>>,
    result: RequestResult,
    elapsed: Duration,
}

/// A sink that writes pair changes through a [`BulkService`].
pub struct BulkSink<S: BulkService> {
    name: String,
    service: Arc<S>,
    runtime: tokio::runtime::Handle,
    config: BulkConfig,
    metrics: Arc<Metrics>,
    handles: SinkHandles,
    buffer: VecDeque<DocumentOp>,
    buffer_bytes: usize,
    oldest_buffered: Option<Instant>,
    in_flight: usize,
    completed_tx: mpsc::Sender<Completed>,
    completed: mpsc::Receiver<Completed>,
    /// Ops waiting for their retry, by when they are due.
    retries: BTreeMap<(Instant, u64), (DocumentOp, u32)>,
    retry_sequence: u64,
    /// Attempts so far of ops in flight, by (id, version).
    attempts: HashMap<(String, u64), u32>,
    /// Ops not yet done, per time: what holds the acknowledged frontier back.
    outstanding: BTreeMap<Time, usize>,
    /// Documents in requests in flight (kept only for services that need ordered writes).
    in_flight_documents: HashMap<String, usize>,
    /// Per document with ops outstanding: the newest version written, and how many ops.
    newest: HashMap<String, (u64, usize)>,
    request_failures: u32,
    next_request_at: Instant,
    /// The last answer was a failed request or a blocking refusal: retries wait on the
    /// destination, and a probe goes out every `PROBE_INTERVAL`.
    stalled: bool,
    next_probe_at: Instant,
    rejected: Vec<(Time, DeadLetter)>,
    rng: rand_chacha::ChaCha8Rng,
}

impl<S: BulkService> BulkSink<S> {
    pub fn new(
        name: &str,
        service: Arc<S>,
        runtime: tokio::runtime::Handle,
        config: BulkConfig,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (completed_tx, completed) = mpsc::channel();
        BulkSink {
            name: name.to_owned(),
            handles: metrics.sink_handles(name),
            service,
            runtime,
            config,
            metrics,
            buffer: VecDeque::new(),
            buffer_bytes: 0,
            oldest_buffered: None,
            in_flight: 0,
            completed_tx,
            completed,
            retries: BTreeMap::new(),
            retry_sequence: 0,
            attempts: HashMap::new(),
            outstanding: BTreeMap::new(),
            in_flight_documents: HashMap::new(),
            newest: HashMap::new(),
            request_failures: 0,
            next_request_at: Instant::now(),
            stalled: false,
            next_probe_at: Instant::now(),
            rejected: Vec::new(),
            rng: rand::SeedableRng::from_os_rng(),
        }
    }

    fn buffer_op(&mut self, op: DocumentOp) {
        self.buffer_bytes += op.size();
        self.oldest_buffered.get_or_insert_with(Instant::now);
        self.buffer.push_back(op);
    }

    fn done(&mut self, op: &DocumentOp) {
        if let Some(count) = self.outstanding.get_mut(&op.time) {
            *count -= 1;
            if *count == 0 {
                self.outstanding.remove(&op.time);
            }
        }
        if let Some((_, open)) = self.newest.get_mut(&op.id) {
            *open -= 1;
            if *open == 0 {
                self.newest.remove(&op.id);
            }
        }
    }

    fn schedule_retry(&mut self, op: DocumentOp, attempt: u32) {
        let due = Instant::now() + self.config.backoff.delay(attempt, &mut self.rng);
        self.retry_sequence += 1;
        self.retries.insert((due, self.retry_sequence), (op, attempt));
        self.handles.retries.inc();
    }

    fn take_completed(&mut self) {
        while let Ok(Completed { ops, result, elapsed }) = self.completed.try_recv() {
            self.in_flight -= 1;
            for op in ops.iter() {
                if let Some(count) = self.in_flight_documents.get_mut(&op.id) {
                    *count -= 1;
                    if *count == 0 {
                        self.in_flight_documents.remove(&op.id);
                    }
                }
            }
            self.handles.requests_in_flight.dec();
            self.handles.request_seconds.observe(elapsed.as_secs_f64());
            let attempts: Vec<u32> = ops
                .iter()
                .map(|op| self.attempts.remove(&(op.id.clone(), op.version)).unwrap_or(0) + 1)
                .collect();
            match result {
                Err(failure) => {
                    self.request_failures += 1;
                    self.stalled = true;
                    let pause = self.config.backoff.delay(self.request_failures, &mut self.rng);
                    self.next_request_at = Instant::now() + pause;
                    self.metrics
                        .health
                        .set_unhealthy(&self.name, format!("requests fail: {failure}"));
                    tracing::warn!(sink = %self.name, reason = %failure, retry_in_ms = pause.as_millis() as u64, "bulk request failed; retrying");
                    for (op, attempt) in ops.iter().cloned().zip(attempts) {
                        self.schedule_retry(op, attempt);
                    }
                }
                Ok(outcomes) => {
                    self.request_failures = 0;
                    let mut blocked = None;
                    let mut written = false;
                    for ((op, outcome), attempt) in ops.iter().zip(outcomes).zip(attempts) {
                        match outcome {
                            ItemOutcome::Done => {
                                let counter = if op.body.is_some() {
                                    &self.handles.documents_written
                                } else {
                                    &self.handles.documents_deleted
                                };
                                counter.inc();
                                written = true;
                                self.done(op);
                            }
                            ItemOutcome::Retry { reason, blocking } => {
                                if blocking {
                                    blocked = Some(reason);
                                }
                                self.schedule_retry(op.clone(), attempt);
                            }
                            ItemOutcome::Rejected { code, reason } => {
                                tracing::warn!(sink = %self.name, id = %op.id, %reason, "document rejected; sent to the dead-letter output");
                                self.handles.documents_rejected.inc();
                                let body = op.body.clone().unwrap_or_default();
                                self.rejected
                                    .push((op.time, DeadLetter::document(&self.name, &op.id, &code, reason, body)));
                                self.done(op);
                            }
                        }
                    }
                    match blocked {
                        Some(reason) => {
                            self.stalled = true;
                            self.metrics.health.set_unhealthy(&self.name, reason)
                        }
                        None => self.metrics.health.set_healthy(&self.name),
                    }
                    if written && std::mem::take(&mut self.stalled) {
                        self.retry_all_now();
                    }
                }
            }
        }
    }

    /// The next waiting retry due by `until`, unless stale (then it is done and skipped).
    fn take_retry(&mut self, until: Option<Instant>) -> Option<DocumentOp> {
        while let Some(entry) = self.retries.first_entry() {
            if until.is_some_and(|until| entry.key().0 > until) {
                return None;
            }
            let (op, attempt) = entry.remove();
            // A newer write of the same document went out since: this one is stale.
            if self.newest.get(&op.id).is_some_and(|(newest, _)| *newest > op.version) {
                self.done(&op);
                continue;
            }
            self.attempts.insert((op.id.clone(), op.version), attempt);
            return Some(op);
        }
        None
    }

    fn requeue_due_retries(&mut self) {
        let now = Instant::now();
        while let Some(op) = self.take_retry(Some(now)) {
            self.buffer_op(op);
        }
    }

    /// The destination answers again: every waiting retry is due now, its backoff restarted.
    fn retry_all_now(&mut self) {
        tracing::info!(sink = %self.name, waiting = self.retries.len(), "the destination writes again; retrying what waited at once");
        self.next_request_at = Instant::now();
        while let Some(op) = self.take_retry(None) {
            self.attempts.remove(&(op.id.clone(), op.version));
            self.buffer_op(op);
        }
    }

    /// While stalled with nothing in flight, sends one waiting document early.
    fn probe(&mut self) {
        let now = Instant::now();
        if !self.stalled || self.in_flight > 0 || !self.buffer.is_empty() || now < self.next_probe_at {
            return;
        }
        if let Some(op) = self.take_retry(None) {
            self.next_probe_at = now + PROBE_INTERVAL;
            self.send_request(vec![op]);
        }
    }

    /// Takes the next request's ops off the buffer, in order. For a destination that needs
    /// ordered writes, a document already in flight or already in this request waits.
    fn next_batch(&mut self) -> Option<(Vec<DocumentOp>, usize)> {
        let ordered = self.service.needs_ordered_writes();
        let mut ops = Vec::new();
        let mut bytes = 0;
        let mut waiting = Vec::new();
        let mut in_batch = std::collections::HashSet::new();
        while let Some(op) = self.buffer.pop_front() {
            if !ops.is_empty() && (ops.len() >= self.config.max_actions || bytes + op.size() > self.config.max_bytes) {
                self.buffer.push_front(op);
                break;
            }
            if ordered && (self.in_flight_documents.contains_key(&op.id) || !in_batch.insert(op.id.clone())) {
                waiting.push(op);
                continue;
            }
            bytes += op.size();
            ops.push(op);
        }
        for op in waiting.into_iter().rev() {
            self.buffer.push_front(op);
        }
        (!ops.is_empty()).then_some((ops, bytes))
    }

    fn dispatch(&mut self, closing: bool) {
        while !self.buffer.is_empty()
            && self.in_flight < self.config.max_in_flight
            && Instant::now() >= self.next_request_at
        {
            let full = self.buffer.len() >= self.config.max_actions || self.buffer_bytes >= self.config.max_bytes;
            let waited = self
                .oldest_buffered
                .is_some_and(|since| since.elapsed() >= self.config.flush_interval);
            if !(full || waited || closing || self.in_flight == 0) {
                break;
            }
            let Some((ops, bytes)) = self.next_batch() else { break };
            self.buffer_bytes -= bytes;
            self.oldest_buffered = (!self.buffer.is_empty()).then(Instant::now);
            self.send_request(ops);
        }
    }

    fn send_request(&mut self, ops: Vec<DocumentOp>) {
        if self.service.needs_ordered_writes() {
            for op in &ops {
                *self.in_flight_documents.entry(op.id.clone()).or_default() += 1;
            }
        }
        let ops = Arc::new(ops);
        let service = self.service.clone();
        let completed = self.completed_tx.clone();
        self.in_flight += 1;
        self.handles.requests.inc();
        self.handles.requests_in_flight.inc();
        self.runtime.spawn(async move {
            let started = Instant::now();
            // The request runs in a task of its own, so that a panic in it still reports
            // back (as a failed request): a lost answer would hold the frontier for good.
            let request = tokio::spawn({
                let ops = ops.clone();
                async move { service.send(ops).await }
            });
            let result = request
                .await
                .unwrap_or_else(|error| Err(RequestFailure::Unanswered(format!("the request task failed: {error}"))));
            let _ = completed.send(Completed {
                ops,
                result,
                elapsed: started.elapsed(),
            });
        });
    }
}

impl<S: BulkService> Sink<PairChange> for BulkSink<S> {
    fn write(&mut self, time: Time, changes: &[PairChange]) -> Result<(), SinkError> {
        if changes.is_empty() {
            return Ok(());
        }
        *self.outstanding.entry(time).or_default() += changes.len();
        for change in changes {
            let op = DocumentOp::from_change(change);
            let newest = self.newest.entry(op.id.clone()).or_insert((op.version, 0));
            newest.0 = newest.0.max(op.version);
            newest.1 += 1;
            self.buffer_op(op);
        }
        self.handles.record_changes(changes);
        Ok(())
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        self.take_completed();
        self.requeue_due_retries();
        self.probe();
        self.dispatch(upper.is_none());
        Ok(match self.outstanding.keys().next() {
            Some(first) => Some(upper.map_or(*first, |upper| upper.min(*first))),
            None => upper,
        })
    }

    fn take_rejected(&mut self) -> Vec<(Time, DeadLetter)> {
        std::mem::take(&mut self.rejected)
    }
}

#[cfg(test)]
mod tests;
