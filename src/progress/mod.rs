//! The progress record: how far every sink has acknowledged the job's output, per partition.
//!
//! Invariant: a committed offset `o` for a partition means every record of it below `o`
//! has had its effects (pair changes and dead letters) acknowledged by every sink. Offsets
//! are recorded per logical time as the source reads, and committed only once the
//! acknowledged frontier of all sinks has passed that time (see `operator.rs`).

pub mod file;
pub mod operator;
pub mod saver;

use std::collections::BTreeMap;

use dataflows::model::Time;
use serde::{Deserialize, Serialize};

/// Per (topic, partition), the offset of the next record to read.
pub type Offsets = BTreeMap<(String, i32), i64>;

/// What a source has read by the end of one logical time, for one partition.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Checkpoint {
    pub topic: String,
    pub partition: i32,
    pub next_offset: i64,
}

/// The durable progress of the job.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgressRecord {
    pub offsets: Offsets,
    /// The last logical time whose output every sink has acknowledged.
    pub time: Time,
}

#[derive(Serialize, Deserialize)]
struct PartitionOffset {
    topic: String,
    partition: i32,
    offset: i64,
}

#[derive(Serialize, Deserialize)]
struct ProgressDocument {
    time: Time,
    partitions: Vec<PartitionOffset>,
}

impl ProgressRecord {
    pub fn to_json(&self) -> String {
        let document = ProgressDocument {
            time: self.time,
            partitions: self
                .offsets
                .iter()
                .map(|((topic, partition), offset)| PartitionOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                })
                .collect(),
        };
        serde_json::to_string_pretty(&document).expect("a progress record always serializes")
    }

    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        let document: ProgressDocument = serde_json::from_str(text)?;
        Ok(ProgressRecord {
            time: document.time,
            offsets: document
                .partitions
                .into_iter()
                .map(|p| ((p.topic, p.partition), p.offset))
                .collect(),
        })
    }
}

/// Why the progress record could not be read or saved.
#[derive(Debug, thiserror::Error)]
pub enum ProgressError {
    #[error("cannot {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the progress record {place} is corrupt: {source}")]
    Corrupt {
        place: String,
        #[source]
        source: serde_json::Error,
    },
    /// The store refused or failed (an HTTP error, a blocked index).
    #[error("{0}")]
    Store(String),
    #[error("the progress saver stopped")]
    SaverStopped,
    #[error("cannot start the progress saver: {0}")]
    SaverStart(#[source] std::io::Error),
}

impl ProgressError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProgressError {
        let what = what.into();
        move |source| ProgressError::Io { what, source }
    }
}

/// Where the progress record is kept.
pub trait ProgressStore: Send {
    fn load(&mut self) -> Result<Option<ProgressRecord>, ProgressError>;
    /// Replaces the stored record; durable when it returns.
    fn save(&mut self, record: &ProgressRecord) -> Result<(), ProgressError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_round_trips_through_json() {
        let record = ProgressRecord {
            offsets: [(("products".to_owned(), 0), 17), (("campaigns".to_owned(), 2), 0)]
                .into_iter()
                .collect(),
            time: 42,
        };
        assert_eq!(ProgressRecord::from_json(&record.to_json()).unwrap(), record);
    }
}
