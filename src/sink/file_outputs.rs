//! The file-mode outputs: one change log and one dead-letter log, written by worker 0.
//!
//! Both files are opened before the workers start, so a bad path fails at once. Only the
//! process that holds worker 0 opens them; the other processes of a cluster write none.

use std::path::Path;
use std::sync::Arc;

use super::contract::{on_first_worker, ChangeOutput, OpenSink, SinkError};
use super::jsonl::{Durability, JsonlChangeSink, JsonlDeadLetterSink, JsonlWriter};
use crate::dead_letter::DeadLetter;
use crate::metrics::Metrics;

/// The JSONL change log and dead-letter log of `eligibility run --input`, on process 0 only.
pub fn jsonl_files(
    process: usize,
    output: &Path,
    dead_letter: &Path,
    metrics: &Arc<Metrics>,
) -> Result<(ChangeOutput, OpenSink<DeadLetter>), SinkError> {
    if process != 0 {
        return Ok((
            ChangeOutput::on_first_worker("jsonl", None, Default::default()),
            on_first_worker(None),
        ));
    }
    let changes = JsonlWriter::create(output, Durability::Buffered)?;
    let letters = JsonlWriter::create(dead_letter, Durability::Buffered)?;
    Ok((
        ChangeOutput::on_first_worker(
            "jsonl",
            Some(Box::new(JsonlChangeSink::new(changes, metrics.clone()))),
            Default::default(),
        ),
        on_first_worker(Some(Box::new(JsonlDeadLetterSink::new(letters, metrics.clone())))),
    ))
}
