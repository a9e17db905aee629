//! The file-mode outputs: one change log and one dead-letter log, written by worker 0.
//!
//! Both files are opened before the workers start, so a bad path fails at once. Only the
//! process that holds worker 0 opens them; the other processes of a cluster write none.

use std::path::Path;
use std::sync::{Arc, Mutex};

use dataflows::model::PairChange;

use super::jsonl::{Durability, JsonlChangeSink, JsonlDeadLetterSink, JsonlWriter};
use super::Sink;
use crate::dead_letter::DeadLetter;
use crate::job::{Route, SinkFactory};
use crate::metrics::Metrics;

type Slot<R> = Mutex<Option<Box<dyn Sink<R>>>>;

/// Hands pre-opened sinks to worker 0.
pub struct FirstWorkerSinks {
    changes: Slot<PairChange>,
    dead_letters: Slot<DeadLetter>,
}

impl FirstWorkerSinks {
    pub fn new(
        changes: Option<Box<dyn Sink<PairChange>>>,
        dead_letters: Option<Box<dyn Sink<DeadLetter>>>,
    ) -> Self {
        FirstWorkerSinks {
            changes: Mutex::new(changes),
            dead_letters: Mutex::new(dead_letters),
        }
    }

    /// The JSONL change log and dead-letter log of `eligibility run`, on process 0 only.
    pub fn jsonl_files(
        process: usize,
        output: &Path,
        dead_letter: &Path,
        metrics: &Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        if process != 0 {
            return Ok(Self::new(None, None));
        }
        let changes = JsonlWriter::create(output, Durability::Buffered)?;
        let dead_letters = JsonlWriter::create(dead_letter, Durability::Buffered)?;
        Ok(Self::new(
            Some(Box::new(JsonlChangeSink::new(changes, metrics.clone()))),
            Some(Box::new(JsonlDeadLetterSink::new(
                dead_letters,
                metrics.clone(),
            ))),
        ))
    }
}

impl SinkFactory for FirstWorkerSinks {
    fn route(&self) -> Route {
        Route::FirstWorker
    }

    fn change_sink(
        &self,
        worker_index: usize,
    ) -> anyhow::Result<Option<Box<dyn Sink<PairChange>>>> {
        Ok(if worker_index == 0 {
            self.changes.lock().expect("poisoned").take()
        } else {
            None
        })
    }

    fn dead_letter_sink(
        &self,
        worker_index: usize,
    ) -> anyhow::Result<Option<Box<dyn Sink<DeadLetter>>>> {
        Ok(if worker_index == 0 {
            self.dead_letters.lock().expect("poisoned").take()
        } else {
            None
        })
    }
}
