//! The Kafka source: the `products` and `campaigns` compacted changelogs.
//!
//! Each worker reads a fixed share of the partitions (`assignment.rs`) through its own
//! consumer, one queue per partition, polled without ever blocking. A queue that gets
//! records while the worker sleeps wakes it, so an idle worker sleeps until its batch is
//! due or its frontier moves instead of polling every few milliseconds. It starts every
//! partition at the beginning, because the job rebuilds its state from the compacted logs:
//!
//! ```text
//!  rebuild:  offsets below `rebuild_until`   -> chunk times 0, 1, 2, … (bounded chunks)
//!  live:     the rest                        -> LIVE_TIME_BASE + wall-clock ms batches
//! ```
//!
//! Records become upserts with their offset as sequence number, so the last record of a
//! key in a batch wins. Rejected records become dead letters carrying topic, partition,
//! offset and key. At the close of every live batch the worker emits a checkpoint of the
//! next offset of each of its partitions; the progress record commits it once the sinks
//! have acknowledged that batch.

pub mod assignment;
pub mod backlog;
pub mod client;
pub mod clock;
pub mod config;
pub mod context;
pub mod lag;
pub mod partition_reader;
pub mod placement;
pub mod read_ahead;
pub mod siblings;
pub mod start;
pub mod topics;
pub mod watermark;

use std::ffi::CString;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataflows::decode::decode_message;
use dataflows::model::{Time, Topic};
use dataflows::{ClockRule, ProductPlacement};
use prometheus_client::metrics::counter::Counter;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::TopicPartitionList;

use self::assignment::{partitions_of, PartitionId};
use self::backlog::{unix_millis, PartitionBacklog};
use self::clock::{live_time_now, BatchClock, ChunkClock, LIVE_TIME_BASE};
use self::config::{BatchingConfig, ClockSetting, KafkaConfig};
pub use self::context::HEALTH_COMPONENT;
use self::context::{SourceContext, ERROR_LOG_INTERVAL};
use self::lag::{LagWatcher, Watched};
use self::partition_reader::{assign_with_queues, PartitionReader, RawMessage, Read};
use self::placement::Placement;
use self::read_ahead::ReadAhead;
use self::siblings::SiblingBatches;
use self::start::{assigned_offset, PartitionStart, StartPlan};
use super::{Source, SourceError, SourceFactory, SourceRecord, SourceStatus, IDLE_POLL};
use crate::dead_letter::{DeadLetter, Origin};
use crate::metrics::Metrics;
use crate::progress::Checkpoint;

/// Opens each worker's share of the partitions.
pub struct KafkaSourceFactory {
    pub kafka: KafkaConfig,
    pub batching: BatchingConfig,
    pub plan: StartPlan,
    pub metrics: Arc<Metrics>,
    /// Stop once every partition has been read to its end (for batch runs and tests).
    pub stop_at_end: bool,
    /// The live batches of this process's workers, shared so that they share batch times.
    pub siblings: Arc<SiblingBatches>,
}

impl SourceFactory for KafkaSourceFactory {
    fn reads_categories(&self) -> bool {
        self.plan.of_kind(Topic::Categories).next().is_some()
    }

    /// The plan is the same in every process, so every worker sizes for the same total.
    fn rebuild_product_records(&self) -> Option<u64> {
        Some(
            self.plan
                .of_kind(Topic::Products)
                .map(PartitionStart::rebuild_records)
                .sum(),
        )
    }

    /// Kept where read when every worker reads as many product partitions: each partition
    /// has one reader for the whole run and a key's records stay in one partition, so a
    /// key's records all reach one worker; an uneven deal would leave the workers unequal
    /// shares of the products, so it exchanges them by key instead.
    fn product_placement(&self, peers: usize) -> ProductPlacement {
        match self.plan.of_kind(Topic::Products).count() % peers.max(1) {
            0 => ProductPlacement::AsRead,
            _ => ProductPlacement::ByKey,
        }
    }

    /// The wall clock by default: the rebuild's times read the agreed first live time,
    /// every live time the wall clock it stands for.
    fn clock(&self, live_from: Option<Time>) -> ClockRule {
        match self.kafka.clock {
            ClockSetting::Records => ClockRule::Records,
            ClockSetting::Wall => ClockRule::Wall {
                base: LIVE_TIME_BASE,
                // Agreed by every worker; a clock read here would differ between them.
                before_base: live_from
                    .expect("a Kafka job agrees on its first live time before its dataflow")
                    .saturating_sub(LIVE_TIME_BASE),
            },
        }
    }

    fn open(&self, worker_index: usize, peers: usize, live_from: Option<Time>) -> Result<Box<dyn Source>, SourceError> {
        let all: Vec<PartitionId> = self.plan.partitions.iter().map(|start| start.id.clone()).collect();
        let owned: Vec<PartitionStart> = partitions_of(&all, worker_index, peers)
            .into_iter()
            .map(|id| {
                self.plan
                    .partitions
                    .iter()
                    .find(|start| start.id == id)
                    .expect("planned")
                    .clone()
            })
            .collect();
        let properties = self.kafka.client_properties()?;
        let client_id = format!("eligibility-worker-{worker_index}");
        let context = SourceContext::new(self.metrics.clone());
        let mut consumer: BaseConsumer<SourceContext> = client::consumer_config(&self.kafka, &properties, &client_id)
            .create_with_context(context)
            .map_err(SourceError::kafka("create the Kafka consumer"))?;
        // `open` runs on the worker's thread: records arriving, or an error, wake it.
        let worker_thread = std::thread::current();
        consumer.set_nonempty_callback(wake(&worker_thread));
        let consumer = Arc::new(consumer);
        let mut assignment = TopicPartitionList::new();
        for start in &owned {
            assignment
                .add_partition_offset(&start.id.topic, start.id.partition, assigned_offset(start.first))
                .map_err(SourceError::kafka("assign a partition"))?;
        }
        // Split before assigned: records fetched at once must not reach the consumer's queue.
        let readers = assign_with_queues(&consumer, &assignment)?;
        let mut partitions = Vec::with_capacity(owned.len());
        let mut queues = Vec::with_capacity(owned.len());
        for (start, mut queue) in owned.into_iter().zip(readers) {
            tracing::debug!(worker = worker_index, topic = %start.id.topic, partition = start.id.partition, rebuild_until = start.rebuild_until, "reading partition");
            queue.set_nonempty_callback(wake(&worker_thread));
            queues.push(queue);
            let consumed = self
                .metrics
                .records_consumed
                .get_or_create(&Metrics::partition(&start.id.topic, start.id.partition))
                .clone();
            let topic_name = CString::new(start.id.topic.as_str())
                .map_err(|_| SourceError::Config(format!("topic name {:?} holds a NUL byte", start.id.topic)))?;
            let placement = Placement::new(
                start.id.partition,
                all.iter().filter(|id| id.topic == start.id.topic).count() as i32,
                self.metrics
                    .records_misplaced
                    .get_or_create(&Metrics::partition(&start.id.topic, start.id.partition))
                    .clone(),
            );
            partitions.push(OwnedPartition {
                placement,
                topic_name,
                consumed,
                backlog: PartitionBacklog::new(start.rebuild_until.max(0)),
                reached: start.rebuild_until <= 0,
                id: start.id,
                rebuild_until: start.rebuild_until,
                next_offset: 0,
                position: Arc::new(AtomicI64::new(0)),
                held_back: Vec::new(),
                at_end: false,
            });
        }
        let watched = partitions
            .iter()
            .map(|p| Watched {
                topic: p.id.topic.clone(),
                partition: p.id.partition,
                position: p.position.clone(),
                backlog: p.backlog.shared.clone(),
            })
            .collect();
        let lag = LagWatcher::start(consumer.clone(), watched, self.metrics.clone());
        let rebuilding = partitions.iter().any(|p| !p.reached);
        Ok(Box::new(KafkaSource {
            _lag: lag,
            consumer,
            partitions,
            queues,
            phase: if rebuilding { Phase::Rebuilding } else { Phase::Live },
            chunks: ChunkClock::new(self.kafka.rehydration_chunk_records),
            batches: BatchClock::new(
                self.batching.policy(),
                // The reconciliation happens at `live_from`; live batches come after it.
                live_from.map_or(LIVE_TIME_BASE, |time| time + 1),
            )
            .with_siblings(self.siblings.clone(), worker_index),
            reading_backlog: false,
            backlog_records: self.batching.max_records,
            max_unacknowledged: self.kafka.max_unacknowledged_ms,
            read_ahead: ReadAhead::new(self.kafka.max_unacknowledged_records, LIVE_TIME_BASE),
            metrics: self.metrics.clone(),
            batch_records: 0,
            next_partition: 0,
            worker_index,
            stop_at_end: self.stop_at_end,
            records_clock: self.kafka.clock == ClockSetting::Records,
            last_error_log: None,
            rebuild_started: Instant::now(),
            poll_unix_ms: unix_millis(),
        }))
    }
}

/// Unparks the worker's thread: librdkafka calls it when a queue goes from empty to
/// non-empty. A wake-up that lands before the worker parks makes its next park return.
fn wake(worker: &std::thread::Thread) -> impl Fn() + Send + Sync + 'static {
    let worker = worker.clone();
    move || worker.unpark()
}

/// Rebuild chunks a worker may read ahead of what the dataflow has finished.
const REBUILD_CHUNKS_IN_FLIGHT: Time = 4;

/// The longest an idle worker sleeps: also how late it notices a shutdown or a failed peer.
const MAX_IDLE_WAIT: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Rebuilding,
    Live,
}

struct OwnedPartition {
    id: PartitionId,
    /// The topic's name for librdkafka's C calls, made once.
    topic_name: CString,
    rebuild_until: i64,
    /// The offset after the last record handed out.
    next_offset: i64,
    /// `next_offset`, shared with the lag watcher.
    position: Arc<AtomicI64>,
    /// Whether the rebuild of this partition is complete.
    reached: bool,
    /// Records read past `rebuild_until` while other partitions were still rebuilding.
    held_back: Vec<OwnedMessage>,
    /// Whether the last poll reached the partition's end.
    at_end: bool,
    /// This partition's consumed-records counter, looked up once (no label or lock per record).
    consumed: Counter,
    /// What it has read that the sinks have not yet acknowledged.
    backlog: PartitionBacklog,
    /// Counts records murmur2 would have put on another partition.
    placement: Placement,
}

pub struct KafkaSource {
    /// Fetches high watermarks for the lag gauges until the source is dropped.
    _lag: LagWatcher,
    consumer: Arc<BaseConsumer<SourceContext>>,
    partitions: Vec<OwnedPartition>,
    /// One queue per partition, in the order of `partitions`.
    queues: Vec<PartitionReader<SourceContext>>,
    phase: Phase,
    chunks: ChunkClock,
    batches: BatchClock,
    max_unacknowledged: u64,
    /// More records are ready than one batch holds: the open batch grows.
    reading_backlog: bool,
    /// How many records waiting to be read make a backlog (`max_records`).
    backlog_records: u64,
    /// Closed live batches not yet acknowledged, bounded by `max_unacknowledged_records`.
    read_ahead: ReadAhead,
    metrics: Arc<Metrics>,
    batch_records: u64,
    next_partition: usize,
    worker_index: usize,
    stop_at_end: bool,
    /// Whether record timestamps are clock readings (`clock = "records"`).
    records_clock: bool,
    last_error_log: Option<Instant>,
    rebuild_started: Instant,
    /// The wall clock when the current poll began: when its records were read, taken once
    /// per poll rather than once per record (a rebuild reads millions).
    poll_unix_ms: u64,
}

impl KafkaSource {
    /// Turns one message into a record at `time`.
    fn record(id: &PartitionId, time: Time, key: Option<&[u8]>, payload: Option<&[u8]>, offset: i64) -> SourceRecord {
        match decode_message(id.kind, key, payload) {
            Ok(record) => SourceRecord::from_record(time, offset as u64, record),
            Err(error) => {
                let origin = Origin::Kafka {
                    topic: id.topic.clone(),
                    partition: id.partition,
                    offset,
                };
                let letter = DeadLetter::with_raw_key(origin, key, &error, payload.unwrap_or_default());
                SourceRecord::Rejected(time, letter)
            }
        }
    }

    /// Hands out one message of partition `index` as a record, closing the batch it fills.
    fn emit(&mut self, index: usize, message: &impl Message, now: Instant, out: &mut Vec<SourceRecord>) {
        let (key, payload, offset) = (message.key(), message.payload(), message.offset());
        let (time, closed) = match self.phase {
            Phase::Rebuilding => (self.chunks.time_for_record(), false),
            Phase::Live => {
                self.batch_records += 1;
                let room = self.read_ahead.room();
                let time = self
                    .batches
                    .time_for_record(now, live_time_now(), self.reading_backlog, room);
                (time, !self.batches.is_open())
            }
        };
        let partition = &mut self.partitions[index];
        partition.placement.check(key);
        partition.next_offset = offset + 1;
        partition.position.store(partition.next_offset, Ordering::Relaxed);
        partition.consumed.inc();
        partition.backlog.read(time, offset, self.poll_unix_ms);
        let record = Self::record(&partition.id, time, key, payload, offset);
        let accepted = !matches!(record, SourceRecord::Rejected(..));
        out.push(record);
        // Under `clock = "records"`, an accepted record's timestamp is a clock reading.
        let timestamp = message.timestamp().to_millis();
        if let (true, true, Some(timestamp)) = (self.records_clock, accepted, timestamp) {
            if let Ok(timestamp) = u64::try_from(timestamp) {
                out.push(SourceRecord::Clock(time, timestamp));
            }
        }
        if closed {
            out.push(self.closed_batch(time));
        }
    }

    /// How many records wait beyond what the worker has read, by the high watermarks of
    /// the last fetch answers (the prefetched queues and the brokers' logs). A poll that
    /// comes back short says nothing: it may only have drained a queue between fetches.
    fn waiting_records(&self) -> u64 {
        self.partitions
            .iter()
            .filter_map(|p| {
                let high = watermark::cached_high_watermark(&self.consumer, &p.topic_name, p.id.partition)?;
                Some(high.saturating_sub(p.next_offset).max(0) as u64)
            })
            .sum()
    }

    /// Accounts for a closed batch, and checkpoints the next offset of every partition.
    fn closed_batch(&mut self, time: Time) -> SourceRecord {
        self.metrics.batches_closed.inc();
        tracing::debug!(
            worker = self.worker_index,
            time = time.saturating_sub(LIVE_TIME_BASE),
            records = self.batch_records,
            reading_backlog = self.reading_backlog,
            "batch closed"
        );
        self.metrics.batch_records.observe(self.batch_records as f64);
        if self.phase == Phase::Live {
            // The job loop waits for its floor before it polls again, so the batches
            // below it are acknowledged once reading resumes.
            self.read_ahead.closed(time, self.batch_records);
        }
        self.batch_records = 0;
        let checkpoints = self
            .partitions
            .iter()
            .map(|p| Checkpoint {
                topic: p.id.topic.clone(),
                partition: p.id.partition,
                next_offset: p.next_offset.max(p.rebuild_until),
            })
            .collect();
        SourceRecord::Checkpoint(time, checkpoints)
    }

    fn log_error(&mut self, error: &KafkaError) {
        let due = self
            .last_error_log
            .is_none_or(|last| last.elapsed() >= ERROR_LOG_INTERVAL);
        if due {
            self.last_error_log = Some(Instant::now());
            tracing::warn!(worker = self.worker_index, %error, "Kafka consumer error; librdkafka keeps retrying");
        }
    }

    fn go_live(&mut self, out: &mut Vec<SourceRecord>) -> Result<(), SourceError> {
        self.phase = Phase::Live;
        tracing::info!(
            worker = self.worker_index,
            seconds = self.rebuild_started.elapsed().as_secs_f64(),
            "rebuild complete; reading live"
        );
        give_back_prefetch_memory();
        let mut paused = TopicPartitionList::new();
        let now = Instant::now();
        for index in 0..self.partitions.len() {
            let held: Vec<OwnedMessage> = std::mem::take(&mut self.partitions[index].held_back);
            if !held.is_empty() {
                let p = &self.partitions[index];
                paused.add_partition(&p.id.topic, p.id.partition);
            }
            for message in held {
                self.emit(index, &message, now, out);
            }
        }
        if paused.count() > 0 {
            self.consumer
                .resume(&paused)
                .map_err(SourceError::kafka("resume the partitions"))?;
        }
        // Everything below the rebuild point is now covered: checkpoint it.
        if let Some(time) = self.batches.empty_batch(live_time_now()) {
            out.push(self.closed_batch(time));
        }
        Ok(())
    }

    /// Handles a message of partition `index`, read at `now`.
    fn accept(
        &mut self,
        index: usize,
        message: &RawMessage<'_>,
        now: Instant,
        out: &mut Vec<SourceRecord>,
    ) -> Result<(), SourceError> {
        let offset = message.offset();
        if self.phase == Phase::Rebuilding && offset >= self.partitions[index].rebuild_until {
            // Past the rebuild point: keep it for the live phase and stop fetching here.
            let partition = &mut self.partitions[index];
            partition.held_back.push(message.detach());
            if !partition.reached {
                partition.reached = true;
                let mut pause = TopicPartitionList::new();
                pause.add_partition(&partition.id.topic, partition.id.partition);
                self.consumer
                    .pause(&pause)
                    .map_err(SourceError::kafka("pause a rebuilt partition"))?;
            }
            return Ok(());
        }
        self.emit(index, message, now, out);
        let partition = &mut self.partitions[index];
        partition.at_end = false;
        if self.phase == Phase::Rebuilding && partition.next_offset >= partition.rebuild_until {
            partition.reached = true;
        }
        Ok(())
    }
}

impl Source for KafkaSource {
    fn poll(&mut self, out: &mut Vec<SourceRecord>, budget: usize) -> Result<SourceStatus, SourceError> {
        let now = Instant::now();
        self.poll_unix_ms = unix_millis();
        // Serves errors and statistics; messages all go to the partition queues, split
        // before the assignment. One that did not would be lost: stop, a restart reads it.
        while let Some(result) = self.consumer.poll(Duration::ZERO) {
            match result {
                Ok(message) => {
                    return Err(SourceError::Misrouted {
                        topic: message.topic().to_owned(),
                        partition: message.partition(),
                        offset: message.offset(),
                    })
                }
                Err(error) => self.log_error(&error),
            }
        }
        let count = self.partitions.len();
        // Messages borrow their queue; the queues are set aside while `self` changes.
        let mut queues = std::mem::take(&mut self.queues);
        let mut taken = 0;
        let mut idle_partitions = 0;
        let share = (budget / count.max(1)).max(1);
        while taken < budget && idle_partitions < count {
            let index = self.next_partition % count;
            self.next_partition = self.next_partition.wrapping_add(1);
            let mut from_this = 0;
            let mut failed = None;
            // Never past the budget: the read-ahead bound counts on it.
            let limit = share.min(budget - taken);
            queues[index].read(limit, |read| match read {
                Read::Message(message) => {
                    if failed.is_none() {
                        failed = self.accept(index, &message, now, out).err();
                    }
                    from_this += 1;
                }
                Read::End => {
                    let partition = &mut self.partitions[index];
                    partition.at_end = true;
                    if self.phase == Phase::Rebuilding && !partition.reached {
                        partition.reached = true;
                    }
                }
                Read::Error(error) => self.log_error(&error),
            });
            if let Some(error) = failed {
                self.queues = queues;
                return Err(error);
            }
            if from_this == 0 {
                idle_partitions += 1;
            } else {
                idle_partitions = 0;
            }
            taken += from_this;
        }
        self.queues = queues;
        self.reading_backlog =
            taken >= budget || (self.phase == Phase::Live && self.waiting_records() >= self.backlog_records);
        if self.phase == Phase::Rebuilding && self.partitions.iter().all(|p| p.reached) {
            self.go_live(out)?;
        }
        if self.phase == Phase::Live {
            if let Some(time) = self.batches.tick(Instant::now(), taken == 0, self.reading_backlog) {
                out.push(self.closed_batch(time));
            }
            let caught_up = self.partitions.iter().all(|p| p.at_end && p.held_back.is_empty());
            if self.stop_at_end && caught_up && !self.batches.is_open() {
                return Ok(SourceStatus::Exhausted);
            }
        }
        Ok(SourceStatus::Open)
    }

    fn frontier(&self) -> Time {
        match self.phase {
            Phase::Rebuilding => self.chunks.frontier(),
            Phase::Live => self.batches.frontier(live_time_now()),
        }
    }

    fn acknowledged(&mut self, frontier: Option<Time>) {
        self.batches.acknowledged(frontier);
        self.read_ahead.acknowledged(frontier);
        for partition in &mut self.partitions {
            partition.backlog.acknowledged(frontier);
        }
    }

    fn idle_wait(&self) -> Duration {
        match self.phase {
            Phase::Rebuilding => IDLE_POLL,
            Phase::Live => self
                .batches
                .idle_wait(Instant::now(), live_time_now(), self.reading_backlog)
                .min(MAX_IDLE_WAIT),
        }
    }

    fn backpressure_floor(&self) -> Time {
        match self.phase {
            // A few chunks in flight keep the rebuild's memory flat (a chunk is ~10 MB of
            // records); four rather than two let workers that finish a chunk at different
            // moments go on instead of waiting for each other at every chunk.
            Phase::Rebuilding => self.chunks.frontier().saturating_sub(REBUILD_CHUNKS_IN_FLIGHT),
            // Live records wait until the rebuild is reconciled (acknowledged past the base).
            Phase::Live => self
                .frontier()
                .saturating_sub(self.max_unacknowledged)
                .max(LIVE_TIME_BASE)
                .max(self.read_ahead.floor()),
        }
    }
}

/// librdkafka allocates with the C allocator, in arenas of its threads: the rebuild's
/// prefetch queues (millions of messages) leave their memory free in those arenas, but
/// still resident, beside the state the rebuild just built. Trimming returns it to the
/// system once the flood is over (10M-product quiet restart: peak 2,337 -> 2,071 MiB).
fn give_back_prefetch_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the C allocator; it has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn factory(products: i32, campaigns: i32) -> KafkaSourceFactory {
        let starts = |kind: Topic, topic: &'static str, count: i32| {
            (0..count).map(move |partition| PartitionStart {
                id: PartitionId {
                    kind,
                    topic: topic.to_owned(),
                    partition,
                },
                first: 0,
                rebuild_until: 10,
            })
        };
        let partitions = starts(Topic::Products, "products", products)
            .chain(starts(Topic::Campaigns, "campaigns", campaigns))
            .collect();
        KafkaSourceFactory {
            kafka: KafkaConfig::for_brokers("b:9092"),
            batching: BatchingConfig::default(),
            plan: StartPlan {
                partitions,
                dead_letters_written_below: Default::default(),
            },
            metrics: Arc::new(Metrics::new()),
            stop_at_end: false,
            siblings: Default::default(),
        }
    }

    #[test]
    fn products_stay_where_read_only_when_every_worker_reads_as_many_product_partitions() {
        let six = factory(6, 4);
        for peers in [1, 2, 3, 6] {
            assert_eq!(
                six.product_placement(peers),
                ProductPlacement::AsRead,
                "{peers} workers"
            );
        }
        for peers in [4, 5, 7, 12] {
            assert_eq!(six.product_placement(peers), ProductPlacement::ByKey, "{peers} workers");
        }
        // Each worker's product partitions, as the source deals them: as many when divisible.
        let all: Vec<PartitionId> = six.plan.partitions.iter().map(|start| start.id.clone()).collect();
        for peers in 1..=8 {
            let counts: BTreeSet<usize> = (0..peers)
                .map(|worker| {
                    partitions_of(&all, worker, peers)
                        .iter()
                        .filter(|id| id.kind == Topic::Products)
                        .count()
                })
                .collect();
            let even = counts.len() == 1;
            assert_eq!(
                six.product_placement(peers) == ProductPlacement::AsRead,
                even,
                "{peers} workers"
            );
        }
    }
}
