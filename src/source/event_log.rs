//! The file source: a JSONL event log, one envelope per line (SPEC.md).
//!
//! Line `n` (0-based; every line counts, rejected ones too) belongs to batch
//! `n / batch_size`. Every worker scans the whole log but decodes only the lines
//! `n % peers == worker`, so decoding runs on all workers; the line number is the record's
//! sequence number, so "last record for a key in a batch wins" holds across workers. A
//! line's `timestamp` is a reading of the job's clock (SPEC.md, "Campaign windows").

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor};
use std::path::PathBuf;
use std::sync::Arc;

use dataflows::decode::decode_line;
use dataflows::model::Time;

use super::{Source, SourceError, SourceFactory, SourceRecord, SourceStatus};
use crate::dead_letter::{DeadLetter, Origin};

/// Where the event log's bytes are.
#[derive(Clone, Debug)]
pub enum EventLogInput {
    Path(PathBuf),
    /// An event log held in memory (the demo and the benchmarks).
    Bytes(Arc<Vec<u8>>),
}

/// Opens an event log for each worker.
#[derive(Clone, Debug)]
pub struct EventLogFactory {
    pub input: EventLogInput,
    pub batch_size: u64,
    /// How many lines the source may read past the last acknowledged batch: the bound on
    /// the records (decoded, exchanged, pending) held in memory at once.
    pub max_unacknowledged_records: u64,
}

impl SourceFactory for EventLogFactory {
    fn open(
        &self,
        worker_index: usize,
        peers: usize,
        _live_from: Option<Time>,
    ) -> Result<Box<dyn Source>, SourceError> {
        let reader: Box<dyn BufRead> = match &self.input {
            EventLogInput::Path(path) => {
                let file =
                    File::open(path).map_err(SourceError::io(format!("open the event log {}", path.display())))?;
                Box::new(BufReader::with_capacity(1 << 20, file))
            }
            EventLogInput::Bytes(bytes) => Box::new(Cursor::new(SharedBytes(bytes.clone()))),
        };
        Ok(Box::new(EventLogSource {
            reader,
            batch_size: self.batch_size.max(1),
            max_unacknowledged_records: self.max_unacknowledged_records,
            worker_index: worker_index as u64,
            peers: peers as u64,
            next_line: 0,
            line: Vec::new(),
            exhausted: false,
            reading: None,
        }))
    }
}

/// Lets several workers read one in-memory log.
struct SharedBytes(Arc<Vec<u8>>);

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

pub struct EventLogSource {
    reader: Box<dyn BufRead>,
    batch_size: u64,
    max_unacknowledged_records: u64,
    worker_index: u64,
    peers: u64,
    next_line: u64,
    line: Vec<u8>,
    exhausted: bool,
    /// The greatest timestamp read at a time, handed out once per time and poll.
    reading: Option<(Time, u64)>,
}

impl EventLogSource {
    fn time_of(&self, line: u64) -> Time {
        line / self.batch_size
    }

    /// Skips lines owned by other workers without copying them.
    fn skip_line(&mut self) -> Result<bool, SourceError> {
        loop {
            let buffer = self.reader.fill_buf().map_err(SourceError::io("read the event log"))?;
            if buffer.is_empty() {
                return Ok(false);
            }
            match memchr::memchr(b'\n', buffer) {
                Some(end) => {
                    self.reader.consume(end + 1);
                    return Ok(true);
                }
                None => {
                    let length = buffer.len();
                    self.reader.consume(length);
                    // A final line without a newline still counts as a line.
                    if self
                        .reader
                        .fill_buf()
                        .map_err(SourceError::io("read the event log"))?
                        .is_empty()
                    {
                        return Ok(true);
                    }
                }
            }
        }
    }
}

impl Source for EventLogSource {
    fn poll(&mut self, out: &mut Vec<SourceRecord>, budget: usize) -> Result<SourceStatus, SourceError> {
        let mut produced = 0;
        while produced < budget && !self.exhausted {
            let line_number = self.next_line;
            if line_number % self.peers != self.worker_index {
                if self.skip_line()? {
                    self.next_line += 1;
                } else {
                    self.exhausted = true;
                }
                continue;
            }
            self.line.clear();
            let read = self
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(SourceError::io("read the event log"))?;
            if read == 0 {
                self.exhausted = true;
                break;
            }
            self.next_line += 1;
            let mut text: &[u8] = &self.line;
            if let Some(stripped) = text.strip_suffix(b"\n") {
                text = stripped.strip_suffix(b"\r").unwrap_or(stripped);
            }
            let time = self.time_of(line_number);
            // The previous time's reading goes out before this time's first record.
            if let Some((at, latest)) = self.reading.filter(|(at, _)| *at != time) {
                out.push(SourceRecord::Clock(at, latest));
                self.reading = None;
            }
            match decode_line(text) {
                Ok(line) => {
                    out.push(SourceRecord::from_record(time, line_number, line.record));
                    // Only an accepted line moves the clock; one reading per time and poll.
                    if let Some(timestamp) = line.timestamp {
                        let latest = self.reading.map_or(timestamp, |(_, latest)| latest.max(timestamp));
                        self.reading = Some((time, latest));
                    }
                }
                Err(error) => out.push(SourceRecord::Rejected(
                    time,
                    DeadLetter::new(Origin::Line(line_number), None, &error, text),
                )),
            }
            produced += 1;
        }
        if let Some((time, latest)) = self.reading.take() {
            out.push(SourceRecord::Clock(time, latest));
        }
        Ok(if self.exhausted {
            SourceStatus::Exhausted
        } else {
            SourceStatus::Open
        })
    }

    fn frontier(&self) -> Time {
        self.time_of(self.next_line)
    }

    /// Every batch that ended more than `max_unacknowledged_records` lines ago must be
    /// acknowledged first. Counted in lines of the whole log, so the bound holds for the
    /// cluster, not per worker; a bound in batches would let small batches starve the
    /// pipeline and large ones fill memory (64 batches of 10,000 once cost 2 workers 40%
    /// more memory than 1).
    fn backpressure_floor(&self) -> Time {
        self.time_of(self.next_line.saturating_sub(self.max_unacknowledged_records))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(
        log: &str,
        batch_size: u64,
        max_unacknowledged_records: u64,
        worker: usize,
        peers: usize,
    ) -> Box<dyn Source> {
        let factory = EventLogFactory {
            input: EventLogInput::Bytes(Arc::new(log.as_bytes().to_vec())),
            batch_size,
            max_unacknowledged_records,
        };
        factory.open(worker, peers, None).unwrap()
    }

    fn read_all(log: &str, batch_size: u64, worker: usize, peers: usize) -> Vec<(Time, u64, bool)> {
        let mut source = open(log, batch_size, 1, worker, peers);
        let mut out = Vec::new();
        while source.poll(&mut out, 2).unwrap() == SourceStatus::Open {}
        out.into_iter()
            .map(|record| match record {
                SourceRecord::Product(time, upsert) => (time, upsert.seq, true),
                SourceRecord::Campaign(time, upsert) => (time, upsert.seq, true),
                SourceRecord::Category(time, upsert) => (time, upsert.seq, true),
                SourceRecord::Rejected(time, letter) => match letter.origin {
                    Origin::Line(line) => (time, line, false),
                    Origin::Kafka { .. } | Origin::Document { .. } => unreachable!(),
                },
                SourceRecord::Checkpoint(..) => unreachable!("a file has no offsets"),
                SourceRecord::Clock(..) => unreachable!("these logs carry no timestamps"),
            })
            .collect()
    }

    const GOOD: &str = r#"{"topic": "campaigns", "key": "c", "value": {}}"#;

    #[test]
    fn every_line_counts_towards_its_batch() {
        let log = format!("{GOOD}\nnot json\n{GOOD}\r\n\n{GOOD}");
        assert_eq!(
            read_all(&log, 2, 0, 1),
            vec![(0, 0, true), (0, 1, false), (1, 2, true), (1, 3, false), (2, 4, true)]
        );
    }

    #[test]
    fn workers_share_the_lines() {
        let log = format!("{GOOD}\n{GOOD}\n{GOOD}\n{GOOD}\n{GOOD}\n");
        assert_eq!(read_all(&log, 1, 0, 2), vec![(0, 0, true), (2, 2, true), (4, 4, true)]);
        assert_eq!(read_all(&log, 1, 1, 2), vec![(1, 1, true), (3, 3, true)]);
        assert_eq!(read_all(&log, 3, 2, 3), vec![(0, 2, true)]);
    }

    #[test]
    fn frontier_is_the_batch_of_the_next_line() {
        let mut source = open(&format!("{GOOD}\n{GOOD}\n{GOOD}\n"), 2, 1, 0, 1);
        let mut out = Vec::new();
        assert_eq!(source.frontier(), 0);
        source.poll(&mut out, 2).unwrap();
        assert_eq!(source.frontier(), 1);
        assert_eq!(source.poll(&mut out, 10).unwrap(), SourceStatus::Exhausted);
        assert_eq!(source.frontier(), 1, "three lines end in batch 1");
    }

    #[test]
    fn the_floor_trails_the_next_line_by_the_bound() {
        let mut source = open(&format!("{GOOD}\n").repeat(10), 2, 3, 0, 1);
        let mut out = Vec::new();
        let mut floors = Vec::new();
        while source.poll(&mut out, 1).unwrap() == SourceStatus::Open {
            floors.push((source.frontier(), source.backpressure_floor()));
        }
        // After line n: frontier (n + 1) / 2; floor (n + 1 - 3) / 2, never past the frontier.
        assert_eq!(
            floors,
            vec![
                (0, 0),
                (1, 0),
                (1, 0),
                (2, 0),
                (2, 1),
                (3, 1),
                (3, 2),
                (4, 2),
                (4, 3),
                (5, 3)
            ]
        );
    }

    #[test]
    fn an_accepted_lines_timestamp_is_a_clock_reading_and_a_rejected_ones_is_not() {
        let log = [
            r#"{"topic": "campaigns", "key": "c", "value": {}, "timestamp": 1000}"#,
            r#"{"topic": "campaigns", "key": "c", "value": {"active": 3}, "timestamp": 9000}"#,
            r#"{"topic": "campaigns", "key": "c", "value": {}, "timestamp": -5}"#,
            r#"{"topic": "campaigns", "key": "c", "value": {}}"#,
            r#"{"topic": "campaigns", "key": "c", "value": null, "timestamp": 700}"#,
        ]
        .join("\n");
        let mut source = open(&log, 2, 10, 0, 1);
        let mut out = Vec::new();
        while source.poll(&mut out, 10).unwrap() == SourceStatus::Open {}
        let readings: Vec<(Time, u64)> = out
            .iter()
            .filter_map(|record| match record {
                SourceRecord::Clock(time, timestamp) => Some((*time, *timestamp)),
                _ => None,
            })
            .collect();
        // A late reading is handed out as read; the clock keeps the greatest.
        assert_eq!(readings, vec![(0, 1000), (2, 700)]);
        assert!(
            out.windows(2).all(|pair| pair[0].time() <= pair[1].time()),
            "in time order"
        );
        let rejected = out.iter().filter(|r| matches!(r, SourceRecord::Rejected(..))).count();
        assert_eq!(rejected, 2);
    }
}
