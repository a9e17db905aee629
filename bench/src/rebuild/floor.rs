//! The floor of a rebuild: a plain consumer that reads every record of the three topics
//! from the beginning to the high watermarks at its start, decodes each with the job's own
//! decoder, and keeps the latest value per key. Nothing else: no dataflow, no sink. One
//! consumer, every partition assigned, the job's own client settings (fetch sizes,
//! prefetch queue) and its way of reading (a queue per partition, a batch of messages per
//! call), so what it costs is what reading the topics costs.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use dataflows::decode::{decode_message, Change, Record};
use dataflows::hashing::FastMap;
use dataflows::model::{Campaign, Category, Product, Topic};
use eligibility::source::kafka::client::consumer_config;
use eligibility::source::kafka::config::KafkaConfig;
use eligibility::source::kafka::partition_reader::{assign_with_queues, PartitionReader, Read};
use eligibility::source::kafka::start::assigned_offset;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;
use rdkafka::TopicPartitionList;
use serde::{Deserialize, Serialize};

use super::config::Topics;

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);
/// A partition that sends nothing for this long while not at its end fails the run.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// The most messages taken from a partition's queue at once.
const BATCH: usize = 4096;
/// How long a round that found nothing ready waits before the next.
const IDLE_WAIT: Duration = Duration::from_millis(1);

/// What the floor read and kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FloorOutput {
    pub partitions: usize,
    pub records: u64,
    /// Records the decoder rejected (the job dead-letters them).
    pub rejected: u64,
    /// Live keys at the end, per topic (tombstones removed theirs).
    pub products: u64,
    pub campaigns: u64,
    pub categories: u64,
    /// From the consumer's creation to the last record, inside the process.
    pub seconds: f64,
}

impl FloorOutput {
    pub fn keys(&self) -> u64 {
        self.products + self.campaigns + self.categories
    }
}

/// Reads the topics to their ends and keeps the latest value per key.
pub fn run(brokers: &str, topics: &Topics) -> anyhow::Result<FloorOutput> {
    let started = Instant::now();
    let kafka = KafkaConfig::for_brokers(brokers);
    let consumer: BaseConsumer<FloorContext> = consumer_config(&kafka, &BTreeMap::new(), "eligibility-bench-floor")
        .create_with_context(FloorContext)
        .context("cannot create the Kafka consumer")?;
    // Per partition, the offset it is read to: its high watermark now. Keyed by the topic's
    // kind, so that a record finds its partition without allocating the topic's name.
    let mut ends: BTreeMap<(Topic, i32), i64> = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    // The assignment's partitions, in its order.
    let mut assigned: Vec<(Topic, i32)> = Vec::new();
    for (kind, topic) in topics.by_kind() {
        let partitions = match partitions_of(&consumer, topic)? {
            Some(partitions) => partitions,
            None if kind == Topic::Categories => continue,
            None => bail!("topic {topic} does not exist"),
        };
        for partition in partitions {
            let (low, high) = consumer
                .fetch_watermarks(topic, partition, METADATA_TIMEOUT)
                .with_context(|| format!("cannot read the watermarks of {topic}/{partition}"))?;
            // As the job assigns: `Beginning` would add librdkafka's own look-up of the
            // oldest offset, which is not what reading costs.
            assignment.add_partition_offset(topic, partition, assigned_offset(low))?;
            assigned.push((kind, partition));
            if high > low {
                ends.insert((kind, partition), high);
            }
        }
    }
    let mut output = FloorOutput {
        partitions: assignment.count(),
        ..FloorOutput::default()
    };
    // Each entity's latest value, in a map of its own type: a map of the decoder's `Change`
    // would give every product the room of a campaign (its id lists), five times its size.
    let mut products: FastMap<String, Product> = FastMap::default();
    let mut campaigns: FastMap<String, Campaign> = FastMap::default();
    let mut categories: FastMap<String, Category> = FastMap::default();
    // Read as the job reads: each partition from a queue of its own, split before the
    // assignment, a batch per call.
    let consumer = Arc::new(consumer);
    let mut readers: Vec<((Topic, i32), PartitionReader<FloorContext>)> = assigned
        .into_iter()
        .zip(assign_with_queues(&consumer, &assignment)?)
        .filter(|(key, _reader)| ends.contains_key(key))
        .collect();
    let mut last_record = Instant::now();
    while !ends.is_empty() {
        let mut read_any = false;
        let mut failed = None;
        for (key, reader) in &mut readers {
            let Some(&high) = ends.get(key) else {
                continue;
            };
            let mut ended = false;
            let taken = reader.read(BATCH, |read| match read {
                // Past the watermark taken at the start: not part of this rebuild.
                Read::Message(message) if message.offset() >= high => {}
                Read::Message(message) => {
                    output.records += 1;
                    match decode_message(key.0, message.key(), message.payload()) {
                        Ok(Record { key, change }) => match change {
                            Change::Product(value) => latest(&mut products, key, value),
                            Change::Campaign(value) => latest(&mut campaigns, key, value),
                            Change::Category(value) => latest(&mut categories, key, value),
                        },
                        Err(_) => output.rejected += 1,
                    }
                    ended |= message.offset() + 1 >= high;
                }
                // A partition whose last offsets hold no record (compacted away, markers)
                // ends here rather than at its watermark.
                Read::End => ended = true,
                Read::Error(error) => failed = Some(error),
            });
            if ended {
                ends.remove(key);
            }
            read_any |= taken > 0;
        }
        if let Some(error) = failed {
            return Err(error).context("cannot read the topics");
        }
        if read_any {
            last_record = Instant::now();
            continue;
        }
        if last_record.elapsed() > STALL_TIMEOUT {
            bail!("no record for {STALL_TIMEOUT:?}; partitions left: {:?}", ends.keys());
        }
        // Nothing ready: waits a moment on the consumer's own queue (errors, statistics).
        match consumer.poll(IDLE_WAIT) {
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(error)) => return Err(error).context("cannot read the topics"),
            // Fetched before its partition's queue was split: the count would miss it.
            Some(Ok(message)) => bail!(
                "a record of {}/{} reached the consumer's own queue",
                message.topic(),
                message.partition()
            ),
        }
    }
    output.products = products.len() as u64;
    output.campaigns = campaigns.len() as u64;
    output.categories = categories.len() as u64;
    output.seconds = started.elapsed().as_secs_f64();
    Ok(output)
}

/// rust-rdkafka's default context logs the end of a partition as an error; here it is news.
struct FloorContext;

impl ClientContext for FloorContext {
    // The job's client settings ask for statistics; parsing and logging them is not reading.
    fn stats_raw(&self, _statistics: &[u8]) {}

    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        ) {
            eprintln!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for FloorContext {}

/// Keeps `value` as the latest for `key`; a tombstone (`None`) removes the key.
fn latest<V>(map: &mut FastMap<String, V>, key: String, value: Option<V>) {
    match value {
        Some(value) => {
            map.insert(key, value);
        }
        None => {
            map.remove(&key);
        }
    }
}

/// The partitions of `topic`, or `None` if it does not exist.
fn partitions_of(consumer: &BaseConsumer<FloorContext>, topic: &str) -> anyhow::Result<Option<Vec<i32>>> {
    let metadata = consumer
        .fetch_metadata(Some(topic), METADATA_TIMEOUT)
        .with_context(|| format!("cannot read the metadata of topic {topic}"))?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match found.error() {
        Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => Ok(None),
        Some(error) => bail!("topic {topic} is not available: {error:?}"),
        None if found.partitions().is_empty() => Ok(None),
        None => Ok(Some(found.partitions().iter().map(|p| p.id()).collect())),
    }
}
