//! Skips dead letters an earlier run already wrote.
//!
//! A restarted job reads its topics from the beginning, so it meets every rejected record
//! again. Those below the committed offsets were written and acknowledged before; this
//! wrapper drops them, so each dead letter is written once per acknowledged run (and at
//! least once overall: those after the last commit may be written twice after a crash).

use dataflows::model::Time;

use super::contract::{Sink, SinkError};
use crate::dead_letter::{DeadLetter, Origin};
use crate::progress::Offsets;

pub struct SkipWrittenDeadLetters {
    inner: Box<dyn Sink<DeadLetter>>,
    written_below: Offsets,
}

impl SkipWrittenDeadLetters {
    pub fn new(inner: Box<dyn Sink<DeadLetter>>, written_below: Offsets) -> Self {
        SkipWrittenDeadLetters { inner, written_below }
    }

    fn already_written(&self, letter: &DeadLetter) -> bool {
        match &letter.origin {
            Origin::Kafka {
                topic,
                partition,
                offset,
            } => self
                .written_below
                .get(&(topic.clone(), *partition))
                .is_some_and(|below| offset < below),
            Origin::Line(_) | Origin::Document { .. } => false,
        }
    }
}

impl Sink<DeadLetter> for SkipWrittenDeadLetters {
    fn write(&mut self, time: Time, letters: &[DeadLetter]) -> Result<(), SinkError> {
        if !letters.iter().any(|letter| self.already_written(letter)) {
            return self.inner.write(time, letters);
        }
        let kept: Vec<DeadLetter> = letters
            .iter()
            .filter(|letter| !self.already_written(letter))
            .cloned()
            .collect();
        if kept.is_empty() {
            return Ok(());
        }
        self.inner.write(time, &kept)
    }

    fn flush(&mut self, upper: Option<Time>) -> Result<Option<Time>, SinkError> {
        self.inner.flush(upper)
    }
}
