//! Rejected records, as they travel to the dead-letter output.
//!
//! A rejected record changes no state; it goes to the dead-letter output with the reason
//! and its original bytes, so nothing is dropped silently.

use serde::{Deserialize, Serialize};

/// Where a rejected record came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Origin {
    /// A line of a JSONL event log, 0-based.
    Line(u64),
    /// A Kafka message.
    Kafka { topic: String, partition: i32, offset: i64 },
    /// A document a sink's destination refused for good.
    Document { sink: String, id: String },
}

/// One rejected record.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DeadLetter {
    pub origin: Origin,
    /// The record's key, when it had a readable one.
    pub key: Option<String>,
    /// The stable error code (`missing_field`, `negative`, …).
    pub code: String,
    /// The full, human-readable reason.
    pub reason: String,
    /// The original bytes of the record (the value, for a Kafka message).
    pub raw: Vec<u8>,
}

impl DeadLetter {
    /// A document `sink` could not write, with the destination's reason.
    pub fn document(sink: &str, id: &str, code: &str, reason: String, body: Vec<u8>) -> Self {
        DeadLetter {
            origin: Origin::Document {
                sink: sink.to_owned(),
                id: id.to_owned(),
            },
            key: Some(id.to_owned()),
            code: code.to_owned(),
            reason,
            raw: body,
        }
    }

    pub fn new(origin: Origin, key: Option<String>, error: &dataflows::decode::DecodeError, raw: &[u8]) -> Self {
        DeadLetter {
            origin,
            key,
            code: error.code().to_owned(),
            reason: error.to_string(),
            raw: raw.to_vec(),
        }
    }
}
