//! `eligibility produce`: load an event log into the Kafka topics.
//!
//! Each line's envelope gives the topic (`products` or `campaigns`, mapped to the
//! configured names), the key and the value; the value's JSON text is sent as it is, so
//! records the job will reject reach the topics too. A null value is a tombstone. Lines
//! whose envelope cannot be read have no topic to go to: they are counted and reported.
//! A line's `timestamp` is its record's timestamp; a line without one after the first that
//! has one gets the greatest before it, so the records' clock (`[kafka] clock = "records"`)
//! reads what file mode's does.

use std::io::BufRead;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use dataflows::decode::split_envelope;
use dataflows::model::Topic;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::cli::ProduceArgs;
use crate::config::JobConfig;
use crate::source::kafka::client::{admin_config, producer_config};
use crate::source::kafka::config::KafkaConfig;
use crate::source::kafka::topics::{ensure_topics, TopicSpec};

/// Counts what the brokers refused (a timestamp past `log.message.timestamp.after.max.ms`,
/// a record too large), which a producer otherwise drops without a word.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _opaque: ()) {
        if let Err((error, _message)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            let mut first = self.first_error.lock().expect("poisoned");
            first.get_or_insert_with(|| error.to_string());
        }
    }
}

/// The Kafka timestamps of a log's lines, in order.
#[derive(Default)]
struct RecordStamps {
    latest: Option<u64>,
    /// Lines without a timestamp given the greatest before them.
    restamped: u64,
}

impl RecordStamps {
    /// A line's own timestamp; for a line without one, once the log has timestamps, the
    /// greatest so far, which moves the records' clock nowhere (the broker's "now" would
    /// move it to the present). `None` before the first: the broker stamps it.
    fn stamp(&mut self, line: Option<u64>) -> Option<u64> {
        match line {
            Some(timestamp) => {
                self.latest = self.latest.max(Some(timestamp));
                Some(timestamp)
            }
            None => {
                self.restamped += u64::from(self.latest.is_some());
                self.latest
            }
        }
    }
}

pub fn run(args: &ProduceArgs) -> anyhow::Result<()> {
    let kafka = match &args.config {
        Some(path) => JobConfig::load(path)?.1.kafka,
        None => KafkaConfig::for_brokers(&args.brokers),
    };
    let properties = kafka.client_properties()?;
    ensure_topics(
        &admin_config(&kafka, &properties, "eligibility-produce"),
        &[
            TopicSpec {
                name: &kafka.products_topic,
                partitions: args.partitions,
                replication_factor: args.replication_factor,
                compacted: true,
            },
            TopicSpec {
                name: &kafka.campaigns_topic,
                partitions: args.partitions,
                replication_factor: args.replication_factor,
                compacted: true,
            },
            TopicSpec {
                name: &kafka.categories_topic,
                partitions: args.partitions,
                replication_factor: args.replication_factor,
                compacted: true,
            },
        ],
    )?;

    let producer: BaseProducer<Deliveries> = producer_config(&kafka, &properties, "eligibility-produce")
        .create_with_context(Deliveries::default())
        .context("cannot create the Kafka producer")?;
    let file = std::fs::File::open(&args.input).with_context(|| format!("cannot open {}", args.input.display()))?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = ProgressBar::new(size).with_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}")
            .expect("a valid template"),
    );
    let started = Instant::now();
    let (mut sent, mut unreadable) = (0u64, 0u64);
    let mut stamps = RecordStamps::default();
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 {
            break;
        }
        bar.inc(read as u64);
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        let envelope = match split_envelope(text) {
            Ok(envelope) => envelope,
            Err(error) => {
                unreadable += 1;
                tracing::debug!(%error, "line without a usable envelope skipped");
                continue;
            }
        };
        let topic = match envelope.topic {
            Topic::Products => &kafka.products_topic,
            Topic::Campaigns => &kafka.campaigns_topic,
            Topic::Categories => &kafka.categories_topic,
        };
        let mut record = BaseRecord::<str, str>::to(topic).key(envelope.key.as_str());
        if let Some(value) = envelope.value {
            record = record.payload(value);
        }
        // The line's clock reading travels as the record's timestamp (`clock = "records"`).
        let timestamp = stamps.stamp(envelope.timestamp);
        if let Some(timestamp) = timestamp {
            record = record.timestamp(timestamp as i64);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    returned,
                )) => {
                    producer.poll(Duration::from_millis(50));
                    record = returned;
                }
                Err((error, _)) => return Err(error).context("cannot produce"),
            }
        }
        sent += 1;
        producer.poll(Duration::ZERO);
    }
    producer
        .flush(Duration::from_secs(60))
        .context("not every record was delivered")?;
    bar.finish_and_clear();
    if producer.in_flight_count() > 0 {
        bail!("{} records were not delivered", producer.in_flight_count());
    }
    let failed = producer.context().failed.load(Ordering::Relaxed);
    if failed > 0 {
        let error = producer.context().first_error.lock().expect("poisoned").clone();
        bail!(
            "the brokers refused {failed} of {sent} records (first: {}); a timestamp more than \
             log.message.timestamp.after.max.ms (1 hour by default) ahead of the brokers' clock is refused",
            error.unwrap_or_default()
        );
    }
    eprintln!(
        "produced {sent} records to {}, {} and {} in {:.1} s; skipped {unreadable} lines without a usable envelope",
        kafka.products_topic,
        kafka.campaigns_topic,
        kafka.categories_topic,
        started.elapsed().as_secs_f64()
    );
    let restamped = stamps.restamped;
    if restamped > 0 {
        eprintln!("{restamped} lines without a timestamp, after the first that had one, took the greatest before them");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::RecordStamps;

    #[test]
    fn a_line_without_a_timestamp_takes_the_greatest_before_it_once_there_is_one() {
        let mut stamps = RecordStamps::default();
        let lines = [None, Some(5_000), None, Some(3_000), None, Some(9_000), None];
        let stamped: Vec<Option<u64>> = lines.into_iter().map(|line| stamps.stamp(line)).collect();
        // A late line keeps its own stamp; the clock it feeds keeps the greatest.
        assert_eq!(
            stamped,
            vec![
                None,
                Some(5_000),
                Some(5_000),
                Some(3_000),
                Some(5_000),
                Some(9_000),
                Some(9_000)
            ]
        );
        assert_eq!(stamps.restamped, 3);
    }
}
