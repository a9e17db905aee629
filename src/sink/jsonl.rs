//! The JSONL sinks: the change log and the dead-letter log of SPEC.md.
//!
//! Change lines: `{"op":"upsert","id":"c-9:42","campaign_id":"c-9","seller_id":42,
//! "eligible_products":3,"eligible_stock":40,"time":0}` or `{"op":"delete",…}`, in time
//! order and, within a time, by (seller id, campaign id). Applying them in order gives the
//! current state.
//!
//! Lines are formatted straight into the buffer a thread of its own writes out
//! ([`WriteBehind`]). Durability: `Buffered` acknowledges a time as soon as it is written to the buffer (a
//! one-shot file run has nothing to resume). `Synced` acknowledges only what has been
//! flushed and `fsync`ed, at most once per interval, for jobs that resume from offsets.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use dataflows::model::{PairChange, Time};
use serde::Serialize;

use super::contract::{Sink, SinkError};
use super::write_behind::WriteBehind;
use crate::dead_letter::{DeadLetter, Origin};
use crate::metrics::{Metrics, SinkHandles};

/// When written lines count as acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    Buffered,
    Synced { interval: Duration },
}

/// A line-oriented output: a file or standard output, written behind by a thread.
pub struct JsonlWriter {
    out: WriteBehind,
    durability: Durability,
    last_sync: Instant,
    /// Everything below this time is acknowledged.
    acknowledged: Time,
}

impl JsonlWriter {
    /// Creates (truncates) `path`, or writes to standard output for `-`.
    pub fn create(path: &Path, durability: Durability) -> Result<Self, SinkError> {
        if path == Path::new("-") {
            return Self::new(Box::new(std::io::stdout()), None, durability);
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(SinkError::io(format!("create {}", parent.display())))?;
        }
        let file = File::create(path).map_err(SinkError::io(format!("create {}", path.display())))?;
        let sync_handle = file
            .try_clone()
            .map_err(SinkError::io("duplicate the output file handle"))?;
        Self::new(Box::new(file), Some(sync_handle), durability)
    }

    /// Appends to `path`, creating it if missing (a resumed job keeps its earlier lines).
    pub fn append(path: &Path, durability: Durability) -> Result<Self, SinkError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(SinkError::io(format!("open {} for appending", path.display())))?;
        let sync_handle = file
            .try_clone()
            .map_err(SinkError::io("duplicate the output file handle"))?;
        Self::new(Box::new(file), Some(sync_handle), durability)
    }

    fn new(out: Box<dyn Write + Send>, file: Option<File>, durability: Durability) -> Result<Self, SinkError> {
        Ok(JsonlWriter {
            out: WriteBehind::spawn(out, file).map_err(SinkError::io("start the output's writer thread"))?,
            durability,
            last_sync: Instant::now(),
            acknowledged: 0,
        })
    }

    fn write_line<T: Serialize>(&mut self, value: &T) -> Result<(), SinkError> {
        self.write_with(|buffer| {
            serde_json::to_writer(&mut *buffer, value).expect("a line always serializes");
            buffer.push(b'\n');
        })
    }

    /// Appends what `fill` writes (whole lines) to the output buffer.
    fn write_with(&mut self, fill: impl FnOnce(&mut Vec<u8>)) -> Result<(), SinkError> {
        fill(self.out.buffer());
        self.out.spill_if_full().map_err(SinkError::io("write the output"))
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        let finished = upper.is_none();
        match self.durability {
            Durability::Buffered => {
                if finished {
                    self.out.flush(false).map_err(SinkError::io("flush the output"))?;
                }
                Ok(upper)
            }
            Durability::Synced { interval } => {
                if finished || self.last_sync.elapsed() >= interval {
                    self.out
                        .flush(true)
                        .map_err(SinkError::io("flush the output and sync it to disk"))?;
                    self.last_sync = Instant::now();
                    match upper {
                        Some(upper) => self.acknowledged = upper,
                        None => return Ok(None),
                    }
                }
                Ok(Some(self.acknowledged))
            }
        }
    }
}

/// Appends `change`'s line to `line`: byte for byte what `serde_json` writes for the line's
/// fields in order, but without a `String` for the id and a serializer per line (a rebuild
/// into an empty sink writes every pair: millions of lines).
pub(crate) fn push_change_line(change: &PairChange, campaign: &mut Vec<u8>, line: &mut Vec<u8>) {
    let mut number = itoa::Buffer::new();
    campaign.clear();
    serde_json::to_writer(&mut *campaign, &change.pair.campaign_id).expect("a string always serializes");
    let seller = number.format(change.pair.seller_id).as_bytes();
    line.extend_from_slice(match change.figures {
        Some(_) => br#"{"op":"upsert","id":"#,
        None => br#"{"op":"delete","id":"#,
    });
    // The id is `campaign_id:seller_id`: the escaped id without its closing quote, then the
    // seller's digits (nothing in `:0-9` is escaped).
    line.extend_from_slice(&campaign[..campaign.len() - 1]);
    line.push(b':');
    line.extend_from_slice(seller);
    line.extend_from_slice(br#"","campaign_id":"#);
    line.extend_from_slice(campaign);
    line.extend_from_slice(br#","seller_id":"#);
    line.extend_from_slice(seller);
    if let Some(figures) = change.figures {
        line.extend_from_slice(br#","eligible_products":"#);
        line.extend_from_slice(number.format(figures.eligible_products).as_bytes());
        line.extend_from_slice(br#","eligible_stock":"#);
        line.extend_from_slice(number.format(figures.eligible_stock).as_bytes());
    }
    line.extend_from_slice(br#","time":"#);
    line.extend_from_slice(number.format(change.time).as_bytes());
    line.extend_from_slice(b"}\n");
}

/// Writes pair changes as JSONL.
pub struct JsonlChangeSink {
    writer: JsonlWriter,
    handles: SinkHandles,
    /// Scratch: one line's escaped campaign id.
    campaign: Vec<u8>,
}

impl JsonlChangeSink {
    pub fn new(writer: JsonlWriter, metrics: Arc<Metrics>) -> Self {
        JsonlChangeSink {
            writer,
            handles: metrics.sink_handles("jsonl"),
            campaign: Vec::with_capacity(64),
        }
    }
}

impl Sink<PairChange> for JsonlChangeSink {
    fn write(&mut self, _time: Time, changes: &[PairChange]) -> Result<(), SinkError> {
        for change in changes {
            let campaign = &mut self.campaign;
            self.writer
                .write_with(|buffer| push_change_line(change, campaign, buffer))?;
        }
        self.handles.record_changes(changes);
        Ok(())
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        self.writer.flush(upper)
    }
}

#[derive(Serialize)]
struct DeadLetterLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    topic: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sink: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    /// The key's exact bytes, when they are not valid UTF-8 and `key` had to replace some.
    #[serde(skip_serializing_if = "Option::is_none")]
    key_base64: Option<String>,
    code: &'a str,
    reason: &'a str,
    raw: String,
    /// The exact bytes, when they are not valid UTF-8 and `raw` had to replace some.
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_base64: Option<String>,
}

impl<'a> From<&'a DeadLetter> for DeadLetterLine<'a> {
    fn from(letter: &'a DeadLetter) -> Self {
        let (line, topic, partition, offset, sink) = match &letter.origin {
            Origin::Line(line) => (Some(*line), None, None, None, None),
            Origin::Kafka {
                topic,
                partition,
                offset,
            } => (None, Some(topic.as_str()), Some(*partition), Some(*offset), None),
            Origin::Document { sink, .. } => (None, None, None, None, Some(sink.as_str())),
        };
        let (raw, raw_base64) = match std::str::from_utf8(&letter.raw) {
            Ok(text) => (text.to_owned(), None),
            Err(_) => (
                String::from_utf8_lossy(&letter.raw).into_owned(),
                Some(base64::engine::general_purpose::STANDARD.encode(&letter.raw)),
            ),
        };
        DeadLetterLine {
            line,
            topic,
            partition,
            offset,
            sink,
            key: letter.key.as_deref(),
            key_base64: letter
                .key_bytes
                .as_ref()
                .map(|bytes| base64::engine::general_purpose::STANDARD.encode(bytes)),
            code: &letter.code,
            reason: &letter.reason,
            raw,
            raw_base64,
        }
    }
}

/// The JSON of one dead letter, as the file and the Kafka topic carry it.
pub fn dead_letter_json(letter: &DeadLetter) -> String {
    serde_json::to_string(&DeadLetterLine::from(letter)).expect("a dead letter always serializes")
}

/// Writes rejected records as JSONL.
pub struct JsonlDeadLetterSink {
    writer: JsonlWriter,
    metrics: Arc<Metrics>,
}

impl JsonlDeadLetterSink {
    pub fn new(writer: JsonlWriter, metrics: Arc<Metrics>) -> Self {
        JsonlDeadLetterSink { writer, metrics }
    }
}

impl Sink<DeadLetter> for JsonlDeadLetterSink {
    fn write(&mut self, _time: Time, letters: &[DeadLetter]) -> Result<(), SinkError> {
        for letter in letters {
            self.writer.write_line(&DeadLetterLine::from(letter))?;
        }
        self.metrics.dead_letters_written.inc_by(letters.len() as u64);
        Ok(())
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        self.writer.flush(upper)
    }
}

#[cfg(test)]
mod tests {
    use dataflows::model::{PairFigures, PairKey};
    use proptest::prelude::*;

    use super::*;

    /// The line as `serde_json` writes its fields: what `push_change_line` must equal.
    #[derive(Serialize)]
    struct ChangeLine<'a> {
        op: &'static str,
        id: String,
        campaign_id: &'a str,
        seller_id: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        eligible_products: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        eligible_stock: Option<u64>,
        time: Time,
    }

    fn serde_line(change: &PairChange) -> Vec<u8> {
        let line = ChangeLine {
            op: if change.figures.is_some() { "upsert" } else { "delete" },
            id: change.pair.document_id(),
            campaign_id: &change.pair.campaign_id,
            seller_id: change.pair.seller_id,
            eligible_products: change.figures.map(|f| f.eligible_products),
            eligible_stock: change.figures.map(|f| f.eligible_stock),
            time: change.time,
        };
        let mut bytes = serde_json::to_vec(&line).expect("serializes");
        bytes.push(b'\n');
        bytes
    }

    proptest! {
        #[test]
        fn a_change_line_is_what_serde_json_writes(
            campaign_id in prop_oneof![".*", "[\"\\\\\\x00-\\x1f:a-z0-9]{0,12}"],
            seller_id in any::<u64>(),
            figures in proptest::option::of((any::<u64>(), any::<u64>())),
            time in any::<u64>(),
        ) {
            let change = PairChange {
                time,
                pair: PairKey { seller_id, campaign_id },
                figures: figures.map(|(eligible_products, eligible_stock)| PairFigures { eligible_products, eligible_stock }),
                previous: None,
            };
            let (mut campaign, mut line) = (Vec::new(), b"left over".to_vec());
            line.clear();
            push_change_line(&change, &mut campaign, &mut line);
            let expected = serde_line(&change);
            prop_assert_eq!(String::from_utf8_lossy(&line), String::from_utf8_lossy(&expected));
        }
    }
}
