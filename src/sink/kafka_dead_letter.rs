//! Dead letters to a Kafka topic: key = the record's key (its exact bytes), value = the dead-letter JSON
//! (reason, code, origin, original bytes), headers naming the origin.
//!
//! Acknowledgement: a time is acknowledged once every dead letter of it has been
//! delivered. A message librdkafka fails to deliver (after its own retries) is sent again
//! with a growing delay: a dead letter is never dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dataflows::model::Time;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use super::contract::{Sink, SinkError};
use super::jsonl::dead_letter_json;
use crate::dead_letter::{DeadLetter, Origin};
use crate::metrics::Metrics;

#[derive(Default)]
struct Deliveries {
    /// Messages not yet delivered, per time.
    pending: BTreeMap<Time, usize>,
    /// Failed messages to send again, as they were.
    failed: Vec<Undelivered>,
}

/// A message librdkafka gave up on, kept whole (headers too) to be sent again.
struct Undelivered {
    time: Time,
    key: Option<Vec<u8>>,
    value: Vec<u8>,
    headers: OwnedHeaders,
}

impl Undelivered {
    fn of(time: Time, message: &rdkafka::message::BorrowedMessage<'_>) -> Self {
        Undelivered {
            time,
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().unwrap_or_default().to_vec(),
            headers: message
                .headers()
                .map_or_else(OwnedHeaders::new, rdkafka::message::BorrowedHeaders::detach),
        }
    }
}

struct DeliveryContext {
    deliveries: Arc<Mutex<Deliveries>>,
}

impl ClientContext for DeliveryContext {}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = Box<Time>;

    fn delivery(&self, result: &DeliveryResult<'_>, time: Box<Time>) {
        let mut deliveries = self.deliveries.lock().expect("poisoned");
        match result {
            Ok(_) => {
                if let Some(count) = deliveries.pending.get_mut(&time) {
                    *count -= 1;
                    if *count == 0 {
                        deliveries.pending.remove(&time);
                    }
                }
            }
            Err((error, message)) => {
                tracing::warn!(%error, "a dead letter was not delivered; sending it again");
                deliveries.failed.push(Undelivered::of(*time, message));
            }
        }
    }
}

pub struct KafkaDeadLetterSink {
    producer: BaseProducer<DeliveryContext>,
    topic: String,
    deliveries: Arc<Mutex<Deliveries>>,
    metrics: Arc<Metrics>,
    retry_delay: Duration,
    next_retry: Instant,
}

/// The metrics label and error name of this sink.
pub const NAME: &str = "kafka-dead-letters";

impl KafkaDeadLetterSink {
    pub fn new(config: rdkafka::ClientConfig, topic: String, metrics: Arc<Metrics>) -> Result<Self, SinkError> {
        let deliveries = Arc::new(Mutex::new(Deliveries::default()));
        let producer = config
            .create_with_context(DeliveryContext {
                deliveries: deliveries.clone(),
            })
            .map_err(|error| SinkError::Destination {
                sink: NAME,
                reason: format!("cannot create the producer: {error}"),
            })?;
        Ok(KafkaDeadLetterSink {
            producer,
            topic,
            deliveries,
            metrics,
            retry_delay: Duration::from_millis(100),
            next_retry: Instant::now(),
        })
    }

    fn send(&self, time: Time, key: Option<&[u8]>, value: &[u8], headers: OwnedHeaders) -> Result<(), SinkError> {
        let mut record = BaseRecord::with_opaque_to(&self.topic, Box::new(time))
            .payload(value)
            .headers(headers);
        if let Some(key) = key {
            record = record.key(key);
        }
        let mut record = record;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((
                    rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    returned,
                )) => {
                    // The local queue is full: serve deliveries, then try again.
                    self.producer.poll(Duration::from_millis(10));
                    record = returned;
                }
                Err((error, _)) => {
                    return Err(SinkError::Destination {
                        sink: NAME,
                        reason: format!("cannot queue a dead letter: {error}"),
                    })
                }
            }
        }
    }

    fn headers(letter: &DeadLetter) -> OwnedHeaders {
        let mut headers = OwnedHeaders::new().insert(Header {
            key: "eligibility.code",
            value: Some(letter.code.as_bytes()),
        });
        if let Origin::Kafka {
            topic,
            partition,
            offset,
        } = &letter.origin
        {
            headers = headers
                .insert(Header {
                    key: "eligibility.source.topic",
                    value: Some(topic.as_bytes()),
                })
                .insert(Header {
                    key: "eligibility.source.partition",
                    value: Some(partition.to_string().as_bytes()),
                })
                .insert(Header {
                    key: "eligibility.source.offset",
                    value: Some(offset.to_string().as_bytes()),
                });
        }
        headers
    }
}

impl Sink<DeadLetter> for KafkaDeadLetterSink {
    fn write(&mut self, time: Time, letters: &[DeadLetter]) -> Result<(), SinkError> {
        if letters.is_empty() {
            return Ok(());
        }
        *self
            .deliveries
            .lock()
            .expect("poisoned")
            .pending
            .entry(time)
            .or_default() += letters.len();
        for letter in letters {
            let value = dead_letter_json(letter);
            self.send(
                time,
                letter.key_bytes.as_deref().or(letter.key.as_deref().map(str::as_bytes)),
                value.as_bytes(),
                Self::headers(letter),
            )?;
        }
        self.metrics.dead_letters_written.inc_by(letters.len() as u64);
        Ok(())
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        self.producer.poll(Duration::ZERO);
        let failed = std::mem::take(&mut self.deliveries.lock().expect("poisoned").failed);
        if !failed.is_empty() {
            if Instant::now() < self.next_retry {
                self.deliveries.lock().expect("poisoned").failed = failed;
            } else {
                for message in failed {
                    self.send(message.time, message.key.as_deref(), &message.value, message.headers)?;
                }
                self.next_retry = Instant::now() + self.retry_delay;
                self.retry_delay = (self.retry_delay * 2).min(Duration::from_secs(10));
            }
        } else {
            self.retry_delay = Duration::from_millis(100);
        }
        let deliveries = self.deliveries.lock().expect("poisoned");
        Ok(match deliveries.pending.keys().next() {
            Some(first_pending) => Some(upper.map_or(*first_pending, |upper| upper.min(*first_pending))),
            None => upper,
        })
    }
}

impl Drop for KafkaDeadLetterSink {
    fn drop(&mut self) {
        let _ = self.producer.flush(Duration::from_secs(10));
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::Headers;

    use super::*;

    #[test]
    fn an_undelivered_dead_letter_is_kept_with_its_headers_for_the_retry() {
        // Nothing listens on port 1: every delivery fails once its timeout passes.
        let mut config = rdkafka::ClientConfig::new();
        config
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("message.timeout.ms", "200");
        let mut sink = KafkaDeadLetterSink::new(config, "dead-letters".into(), Arc::new(Metrics::new())).unwrap();
        let letter = DeadLetter {
            origin: Origin::Kafka {
                topic: "products".into(),
                partition: 3,
                offset: 17,
            },
            key: Some("p-1".into()),
            key_bytes: None,
            code: "negative".into(),
            reason: "stock is negative".into(),
            raw: b"{}".to_vec(),
        };
        sink.write(5, std::slice::from_ref(&letter)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sink.deliveries.lock().unwrap().failed.is_empty() {
            assert!(Instant::now() < deadline, "the delivery never failed");
            sink.producer.poll(Duration::from_millis(50));
        }
        let failed = std::mem::take(&mut sink.deliveries.lock().unwrap().failed);
        let headers: Vec<(String, Vec<u8>)> = failed[0]
            .headers
            .iter()
            .map(|header| (header.key.to_owned(), header.value.unwrap_or_default().to_vec()))
            .collect();
        let expected: Vec<(String, Vec<u8>)> = KafkaDeadLetterSink::headers(&letter)
            .iter()
            .map(|header| (header.key.to_owned(), header.value.unwrap_or_default().to_vec()))
            .collect();
        assert_eq!(headers, expected);
        assert!(headers
            .iter()
            .any(|(key, value)| key == "eligibility.source.offset" && value == b"17"));
        assert_eq!(failed[0].key.as_deref(), Some(&b"p-1"[..]));
    }
}
