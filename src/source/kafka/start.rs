//! Where the Kafka source starts, and how far it rebuilds before it writes again.
//!
//! The job keeps no state of its own across restarts: it rebuilds it by reading both
//! compacted topics from the beginning. What `--from` chooses is where the rebuild ends
//! (records before that point only rebuild state; their changes are reconciled with what
//! the sinks hold instead of written one by one) and which dead letters are already written:
//!
//! | `--from` | rebuild up to | dead letters skipped below |
//! |---|---|---|
//! | `committed` (default) | the end of each partition at start-up | the committed offsets |
//! | `earliest` | the end of each partition at start-up; then every pair is written again | nothing |
//! | `offsets:T/P=O,…` | the given offsets | the given offsets |
//! | `timestamp:…` | the first offset at or after the time | the same offsets |
//!
//! Why `committed` rebuilds to the end rather than to the committed offsets: compaction may
//! have removed a record below the committed offset because a newer record for its key
//! follows it, so the state at the committed offset cannot be read back; the state at the
//! end of the log can. Reconciling with the sinks makes the jump exact.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use dataflows::model::Topic;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::assignment::PartitionId;
use super::client::consumer_config;
use super::config::KafkaConfig;
use crate::progress::ProgressRecord;

/// `--from`: where to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartFrom {
    Committed,
    Earliest,
    /// Per (topic, partition) offsets.
    Offsets(BTreeMap<(String, i32), i64>),
    /// Milliseconds since the Unix epoch.
    Timestamp(i64),
}

impl FromStr for StartFrom {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        if text == "committed" {
            return Ok(StartFrom::Committed);
        }
        if text == "earliest" {
            return Ok(StartFrom::Earliest);
        }
        if let Some(list) = text.strip_prefix("offsets:") {
            let mut offsets = BTreeMap::new();
            for item in list.split(',').filter(|item| !item.is_empty()) {
                let parse = || -> Option<((String, i32), i64)> {
                    let (partition, offset) = item.split_once('=')?;
                    let (topic, partition) = partition.rsplit_once('/')?;
                    Some(((topic.to_owned(), partition.parse().ok()?), offset.parse().ok()?))
                };
                let (key, offset) =
                    parse().ok_or_else(|| anyhow!("--from offsets: {item:?} is not topic/partition=offset"))?;
                offsets.insert(key, offset);
            }
            return Ok(StartFrom::Offsets(offsets));
        }
        if let Some(when) = text.strip_prefix("timestamp:") {
            if let Ok(millis) = when.parse::<i64>() {
                return Ok(StartFrom::Timestamp(millis));
            }
            let time = humantime::parse_rfc3339_weak(when)
                .with_context(|| format!("--from timestamp: {when:?} is neither milliseconds nor an RFC 3339 time"))?;
            let millis = time
                .duration_since(std::time::UNIX_EPOCH)
                .context("--from timestamp before 1970")?
                .as_millis();
            return Ok(StartFrom::Timestamp(millis as i64));
        }
        bail!("--from must be committed, earliest, offsets:topic/partition=offset,… or timestamp:<ms|RFC 3339>, not {text:?}")
    }
}

/// One partition's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionStart {
    pub id: PartitionId,
    /// The oldest offset at start-up: the rebuild reads from it.
    pub first: i64,
    /// Records below this offset rebuild state; from it on, their changes are written.
    pub rebuild_until: i64,
}

/// Where to assign a partition whose oldest offset is `oldest`: at that offset, not at
/// `Beginning`, which librdkafka first resolves with a request of its own (sent ~0.4 s after
/// the assignment, every reader idle meanwhile); `Beginning` only for an unknown (negative)
/// one. Should retention have moved the log's start since, the fetch is out of range and
/// `auto.offset.reset=earliest` reads from the oldest record.
pub fn assigned_offset(oldest: i64) -> Offset {
    if oldest >= 0 {
        Offset::Offset(oldest)
    } else {
        Offset::Beginning
    }
}

impl PartitionStart {
    /// How many records the rebuild reads from this partition (compaction may have left
    /// gaps, so at most this many).
    pub fn rebuild_records(&self) -> u64 {
        u64::try_from(self.rebuild_until.saturating_sub(self.first)).unwrap_or(0)
    }
}

/// How this run starts, the same in every process.
#[derive(Clone, Debug)]
pub struct StartPlan {
    pub partitions: Vec<PartitionStart>,
    /// Dead letters below these offsets were written by an earlier run.
    pub dead_letters_written_below: BTreeMap<(String, i32), i64>,
}

impl StartPlan {
    /// The partitions of one kind of topic.
    pub fn of_kind(&self, kind: Topic) -> impl Iterator<Item = &PartitionStart> {
        self.partitions.iter().filter(move |start| start.id.kind == kind)
    }
}

const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the topics' metadata and offsets and works out the plan, waiting for the brokers
/// if they are not up yet.
pub fn plan(kafka: &KafkaConfig, from: &StartFrom, committed: Option<&ProgressRecord>) -> anyhow::Result<StartPlan> {
    let properties = kafka.client_properties()?;
    let consumer: BaseConsumer = consumer_config(kafka, &properties, "eligibility-start")
        .create()
        .context("cannot create the Kafka client")?;
    let mut delay = Duration::from_millis(200);
    let partitions = loop {
        match list_partitions(&consumer, kafka) {
            Ok(partitions) => break partitions,
            Err(error) if is_missing_topic(&error) || crate::shutdown::requested() => return Err(error),
            Err(error) => {
                tracing::warn!(brokers = %kafka.brokers, error = %error, retry_in_ms = delay.as_millis() as u64, "waiting for Kafka");
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    };

    let mut starts = Vec::with_capacity(partitions.len());
    let timestamps = match from {
        StartFrom::Timestamp(millis) => Some(offsets_for_time(&consumer, &partitions, *millis)?),
        _ => None,
    };
    for id in partitions {
        let key = (id.topic.clone(), id.partition);
        let (first, high) = consumer
            .fetch_watermarks(&id.topic, id.partition, METADATA_TIMEOUT)
            .with_context(|| format!("cannot read the offsets of {}/{}", id.topic, id.partition))?;
        let rebuild_until = match from {
            StartFrom::Committed | StartFrom::Earliest => high,
            StartFrom::Offsets(offsets) => *offsets
                .get(&key)
                .ok_or_else(|| anyhow!("--from offsets: no offset given for {}/{}", id.topic, id.partition))?,
            StartFrom::Timestamp(_) => timestamps.as_ref().and_then(|t| t.get(&key).copied()).unwrap_or(0),
        };
        starts.push(PartitionStart {
            id,
            first,
            rebuild_until,
        });
    }

    let dead_letters_written_below = match from {
        StartFrom::Committed => committed.map(|record| record.offsets.clone()).unwrap_or_default(),
        StartFrom::Earliest => BTreeMap::new(),
        StartFrom::Offsets(_) | StartFrom::Timestamp(_) => starts
            .iter()
            .map(|start| ((start.id.topic.clone(), start.id.partition), start.rebuild_until))
            .collect(),
    };
    Ok(StartPlan {
        partitions: starts,
        dead_letters_written_below,
    })
}

#[derive(Debug, thiserror::Error)]
#[error(
    "topic {0} does not exist; create it compacted (`eligibility produce` does) or fix the topic name in the config"
)]
struct MissingTopic(String);

fn is_missing_topic(error: &anyhow::Error) -> bool {
    error.downcast_ref::<MissingTopic>().is_some()
}

fn list_partitions(consumer: &BaseConsumer, kafka: &KafkaConfig) -> anyhow::Result<Vec<PartitionId>> {
    let mut partitions = Vec::new();
    for (kind, topic) in [
        (Topic::Products, &kafka.products_topic),
        (Topic::Campaigns, &kafka.campaigns_topic),
        (Topic::Categories, &kafka.categories_topic),
    ] {
        let metadata = consumer
            .fetch_metadata(Some(topic), METADATA_TIMEOUT)
            .with_context(|| format!("cannot read the metadata of topic {topic} from {}", kafka.brokers))?;
        let missing = match metadata.topics().iter().find(|t| t.name() == topic) {
            None => true,
            Some(found) => match found.error() {
                Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => true,
                Some(error) => bail!("topic {topic} is not available: {error:?}"),
                None => found.partitions().is_empty(),
            },
        };
        // The category tree is optional: without its topic, every category is a root.
        match (missing, kind) {
            (true, Topic::Categories) => {
                tracing::info!(topic = %topic, "no categories topic: every category is a root (a flat tree)");
                continue;
            }
            (true, _) => return Err(MissingTopic(topic.clone()).into()),
            (false, _) => {}
        }
        let found = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .expect("checked above");
        for partition in found.partitions() {
            partitions.push(PartitionId {
                kind,
                topic: topic.clone(),
                partition: partition.id(),
            });
        }
    }
    partitions.sort();
    Ok(partitions)
}

fn offsets_for_time(
    consumer: &BaseConsumer,
    partitions: &[PartitionId],
    millis: i64,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let mut query = TopicPartitionList::new();
    for id in partitions {
        query.add_partition_offset(&id.topic, id.partition, Offset::Offset(millis))?;
    }
    let found = consumer
        .offsets_for_times(query, METADATA_TIMEOUT)
        .context("cannot look up offsets for the timestamp")?;
    let mut offsets = BTreeMap::new();
    for element in found.elements() {
        let offset = match element.offset() {
            Offset::Offset(offset) => offset,
            // No record at or after the time: start at the end.
            _ => {
                consumer
                    .fetch_watermarks(element.topic(), element.partition(), METADATA_TIMEOUT)?
                    .1
            }
        };
        offsets.insert((element.topic().to_owned(), element.partition()), offset);
    }
    Ok(offsets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_rebuilds_the_records_from_its_first_offset_to_its_end() {
        let start = |first, rebuild_until| PartitionStart {
            id: PartitionId {
                kind: Topic::Products,
                topic: "products".into(),
                partition: 0,
            },
            first,
            rebuild_until,
        };
        assert_eq!(start(0, 120).rebuild_records(), 120);
        assert_eq!(
            start(100, 120).rebuild_records(),
            20,
            "compaction or retention removed the first 100"
        );
        assert_eq!(start(100, 100).rebuild_records(), 0);
        assert_eq!(
            start(100, 0).rebuild_records(),
            0,
            "an end before the first record reads nothing"
        );
    }

    #[test]
    fn from_parses_every_form() {
        assert_eq!("committed".parse::<StartFrom>().unwrap(), StartFrom::Committed);
        assert_eq!("earliest".parse::<StartFrom>().unwrap(), StartFrom::Earliest);
        let StartFrom::Offsets(offsets) = "offsets:products/0=10,products/1=0,my.campaigns/0=3".parse().unwrap() else {
            panic!()
        };
        assert_eq!(offsets[&("products".to_owned(), 0)], 10);
        assert_eq!(offsets[&("my.campaigns".to_owned(), 0)], 3);
        assert_eq!(
            "timestamp:1700000000000".parse::<StartFrom>().unwrap(),
            StartFrom::Timestamp(1_700_000_000_000)
        );
        assert_eq!(
            "timestamp:2023-11-14T22:13:20Z".parse::<StartFrom>().unwrap(),
            StartFrom::Timestamp(1_700_000_000_000)
        );
        assert!("offsets:products=1".parse::<StartFrom>().is_err());
        assert!("latest".parse::<StartFrom>().is_err());
    }
}
