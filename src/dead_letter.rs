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
    /// The record's key, when it had one (a lossy rendering if it is not UTF-8).
    pub key: Option<String>,
    /// The key's exact bytes, when they are not UTF-8 (so `key` had to replace some).
    pub key_bytes: Option<Vec<u8>>,
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
            key_bytes: None,
            code: code.to_owned(),
            reason,
            raw: body,
        }
    }

    /// A record with a raw key: kept as text, and as bytes too when it is not UTF-8.
    pub fn with_raw_key(
        origin: Origin,
        key: Option<&[u8]>,
        error: &dataflows::decode::DecodeError,
        raw: &[u8],
    ) -> Self {
        let text = key.map(|key| String::from_utf8_lossy(key).into_owned());
        let mut letter = Self::new(origin, text, error, raw);
        letter.key_bytes = key.filter(|key| std::str::from_utf8(key).is_err()).map(<[u8]>::to_vec);
        letter
    }

    pub fn new(origin: Origin, key: Option<String>, error: &dataflows::decode::DecodeError, raw: &[u8]) -> Self {
        DeadLetter {
            origin,
            key,
            key_bytes: None,
            code: error.code().to_owned(),
            reason: error.to_string(),
            raw: raw.to_vec(),
        }
    }
}
