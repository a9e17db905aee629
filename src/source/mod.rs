//! Sources: where changelog records come from, and at which logical time they count.
//!
//! A source is opened once per timely worker and owns that worker's share of the input.
//! The job's worker loop polls it without blocking and feeds what it returns into the
//! dataflow. A source states its frontier, the least time any later record can carry, so
//! the loop can tell the dataflow which times are complete.

pub mod event_log;
pub mod kafka;

use std::time::Duration;

use dataflows::model::{Campaign, CampaignId, Category, CategoryId, Product, ProductId, Time};
use dataflows::operators::Upsert;
use dataflows::{ClockRule, ProductPlacement};

use crate::dead_letter::DeadLetter;
use crate::progress::Checkpoint;

/// What a source read: a decoded update or a rejection, at a logical time; or, at the end
/// of a batch, how far it has read each of its partitions.
#[derive(Clone, Debug)]
pub enum SourceRecord {
    Product(Time, Upsert<ProductId, Product>),
    Campaign(Time, Upsert<CampaignId, Campaign>),
    Category(Time, Upsert<CategoryId, Category>),
    Rejected(Time, DeadLetter),
    Checkpoint(Time, Vec<Checkpoint>),
    /// A record's timestamp (ms since the epoch), when the job's clock follows the
    /// records: it moves the clock of its time, given with the record it came with.
    Clock(Time, u64),
}

impl SourceRecord {
    pub fn time(&self) -> Time {
        match self {
            SourceRecord::Product(time, _)
            | SourceRecord::Campaign(time, _)
            | SourceRecord::Category(time, _)
            | SourceRecord::Rejected(time, _)
            | SourceRecord::Checkpoint(time, _)
            | SourceRecord::Clock(time, _) => *time,
        }
    }

    /// Turns a decoded record into an update with the given order and time.
    pub fn from_record(time: Time, seq: u64, record: dataflows::decode::Record) -> Self {
        use dataflows::decode::Change;
        match record.change {
            Change::Product(value) => SourceRecord::Product(
                time,
                Upsert {
                    key: record.key,
                    seq,
                    value,
                },
            ),
            Change::Campaign(value) => SourceRecord::Campaign(
                time,
                Upsert {
                    key: record.key,
                    seq,
                    value,
                },
            ),
            Change::Category(value) => SourceRecord::Category(
                time,
                Upsert {
                    key: dataflows::decode::decode_category_id(&record.key)
                        .expect("the decoder checked the category key"),
                    seq,
                    value,
                },
            ),
        }
    }
}

/// Whether a source may still produce records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceStatus {
    /// More records may come; poll again.
    Open,
    /// The source has nothing more, ever.
    Exhausted,
}

/// Why a source cannot go on. Temporary broker failures are waited out inside the source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot {what}: {source}")]
    Kafka {
        what: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    /// A setting the source cannot work with.
    #[error("{0}")]
    Config(String),
    /// A record reached the consumer's own queue instead of its partition's, where the
    /// source would never read it: the job stops rather than lose it.
    #[error("record {topic}/{partition} at offset {offset} reached the consumer's own queue, not its partition's")]
    Misrouted { topic: String, partition: i32, offset: i64 },
}

impl SourceError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SourceError {
        let what = what.into();
        move |source| SourceError::Io { what, source }
    }

    pub fn kafka(what: impl Into<String>) -> impl FnOnce(rdkafka::error::KafkaError) -> SourceError {
        let what = what.into();
        move |source| SourceError::Kafka { what, source }
    }
}

/// How often a worker whose source cannot wake it polls while nothing is ready.
pub const IDLE_POLL: Duration = Duration::from_millis(2);

/// One worker's share of the input.
pub trait Source {
    /// Appends up to `budget` ready records to `out`, in time order, without blocking long.
    fn poll(&mut self, out: &mut Vec<SourceRecord>, budget: usize) -> Result<SourceStatus, SourceError>;

    /// The least time a record not yet returned can carry.
    fn frontier(&self) -> Time;

    /// The job polls again only once every sink has acknowledged all times below this:
    /// how far the source may run ahead of its output.
    fn backpressure_floor(&self) -> Time;

    /// How long the worker may sleep after a poll that found nothing. A source that wakes
    /// the worker itself when records arrive says how long until it must be polled anyway
    /// (a batch to close, a frontier to move); one that does not, a short poll interval.
    fn idle_wait(&self) -> Duration {
        IDLE_POLL
    }

    /// Every sink has acknowledged every time below `frontier` (every time, if `None`).
    /// Told before each poll; a source may size its batches and report its backlog by it.
    fn acknowledged(&mut self, _frontier: Option<Time>) {}
}

/// Opens each worker's source.
pub trait SourceFactory: Send + Sync + 'static {
    /// Whether the sources may produce category records; without them the dataflow takes
    /// an empty categories stream and pays nothing for the tree.
    fn reads_categories(&self) -> bool {
        true
    }

    /// What the job's clock follows (SPEC.md, "Campaign windows"): by default the records'
    /// timestamps, which the sources then hand out as [`SourceRecord::Clock`].
    /// `live_from` as in [`SourceFactory::open`].
    fn clock(&self, _live_from: Option<Time>) -> ClockRule {
        ClockRule::Records
    }

    /// How many product records a rebuild reads on all workers together, if known before
    /// it starts: the product tables are sized for it instead of growing by doubling.
    fn rebuild_product_records(&self) -> Option<u64> {
        None
    }

    /// Where a product's records meet among `peers` workers: by default exchanged by key;
    /// a source that gives every record of a key to one worker for the whole run may keep
    /// them where they are read ([`ProductPlacement::AsRead`]).
    fn product_placement(&self, _peers: usize) -> ProductPlacement {
        ProductPlacement::ByKey
    }

    /// `live_from`: for a resumed run, the first live time every worker agreed on.
    fn open(&self, worker_index: usize, peers: usize, live_from: Option<Time>) -> Result<Box<dyn Source>, SourceError>;
}
