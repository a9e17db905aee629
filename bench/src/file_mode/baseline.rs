//! `eligibility-bench file-baseline`: file mode written by hand, to measure
//! `eligibility run` against.
//!
//! It reads the event log as the file source does (line `n`, rejected or not, belongs to
//! batch `n / batch_size`; each line decoded by `decode_envelope`), applies each batch to
//! the hand-written incremental on one thread, and writes through the job's own JSONL sinks
//! what the engine writes: each batch's pair changes sorted as the sink operator sorts
//! them, and the dead letters. The engine's "last record for a key in a batch wins" is
//! applying the batch in line order, as only each batch's end state is written.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use dataflows::decode::{decode_envelope, Record};
use dataflows::model::{PairChange, Time};

use crate::baselines::incremental::Incremental;
use eligibility::dead_letter::{DeadLetter, Origin};
use eligibility::metrics::Metrics;
use eligibility::sink::contract::Sink;
use eligibility::sink::jsonl::{Durability, JsonlChangeSink, JsonlDeadLetterSink, JsonlWriter};

/// The change log and the dead letters of one batch, as the job writes them.
struct Outputs {
    changes: JsonlChangeSink,
    dead_letters: JsonlDeadLetterSink,
}

/// Runs the event log at `input` through the hand-written incremental.
pub fn run(input: &Path, output: &Path, dead_letter: &Path, batch_size: u64) -> anyhow::Result<()> {
    anyhow::ensure!(batch_size > 0, "--batch-size must be at least 1");
    let metrics = Arc::new(Metrics::new());
    let mut outputs = Outputs {
        changes: JsonlChangeSink::new(JsonlWriter::create(output, Durability::Buffered)?, metrics.clone()),
        dead_letters: JsonlDeadLetterSink::new(JsonlWriter::create(dead_letter, Durability::Buffered)?, metrics),
    };
    let file = File::open(input).with_context(|| format!("cannot open the event log {}", input.display()))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut incremental = Incremental::new();
    let mut records: Vec<Record> = Vec::new();
    let mut rejected: Vec<DeadLetter> = Vec::new();
    let mut line = Vec::new();
    let mut line_number = 0u64;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .context("cannot read the event log")?;
        // The batch of the previous line is complete at the end of the log or of its lines.
        if line_number > 0 && (read == 0 || line_number % batch_size == 0) {
            let time: Time = (line_number - 1) / batch_size;
            outputs.write(time, incremental.apply_changes(time, &records), &rejected)?;
            records.clear();
            rejected.clear();
        }
        if read == 0 {
            break;
        }
        let mut text: &[u8] = &line;
        if let Some(stripped) = text.strip_suffix(b"\n") {
            text = stripped.strip_suffix(b"\r").unwrap_or(stripped);
        }
        match decode_envelope(text) {
            Ok(record) => records.push(record),
            Err(error) => rejected.push(DeadLetter::new(Origin::Line(line_number), None, &error, text)),
        }
        line_number += 1;
    }
    outputs.changes.flush(None)?;
    outputs.dead_letters.flush(None)?;
    Ok(())
}

impl Outputs {
    /// Writes one batch's outputs; the dead letters are already in line order, their order.
    fn write(&mut self, time: Time, mut changes: Vec<PairChange>, rejected: &[DeadLetter]) -> anyhow::Result<()> {
        changes.sort();
        self.changes.write(time, &changes)?;
        Ok(self.dead_letters.write(time, rejected)?)
    }
}
