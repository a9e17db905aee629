//! How far a worker reads ahead of the sinks: the records of its closed live batches that
//! are not yet acknowledged (`[kafka] max_unacknowledged_records`).
//!
//! A backlog read at full speed would otherwise put `max_unacknowledged_ms` of it (millions
//! of records) in memory at once. What is left under the bound is also how far an open batch
//! may still grow.

use std::collections::VecDeque;

use dataflows::model::Time;

#[derive(Debug)]
pub struct ReadAhead {
    max_records: u64,
    /// Closed batches not yet acknowledged, oldest first: (time, records).
    waiting: VecDeque<(Time, u64)>,
    records: u64,
    /// Every time below it must be acknowledged before the worker reads on.
    floor: Time,
}

impl ReadAhead {
    pub fn new(max_records: u64, floor: Time) -> Self {
        ReadAhead {
            max_records,
            waiting: VecDeque::new(),
            records: 0,
            floor,
        }
    }

    /// How many more records may wait for the sinks.
    pub fn room(&self) -> u64 {
        self.max_records.saturating_sub(self.records)
    }

    /// A batch of `records` closed at `time`. Past the bound, the oldest batches must be
    /// acknowledged before reading on: the floor rises past them.
    pub fn closed(&mut self, time: Time, records: u64) {
        self.waiting.push_back((time, records));
        self.records += records;
        while self.records > self.max_records {
            let Some((oldest, records)) = self.waiting.pop_front() else {
                break;
            };
            self.records -= records;
            self.floor = self.floor.max(oldest + 1);
        }
    }

    /// Every time below `frontier` (every time, if `None`) is acknowledged by the sinks:
    /// its records no longer count against the bound.
    pub fn acknowledged(&mut self, frontier: Option<Time>) {
        while let Some(&(time, records)) = self.waiting.front() {
            if frontier.is_some_and(|frontier| time >= frontier) {
                break;
            }
            self.records -= records;
            self.waiting.pop_front();
        }
    }

    /// The least time the acknowledged frontier must pass before the worker reads on.
    pub fn floor(&self) -> Time {
        self.floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledged_batches_give_their_room_back() {
        let mut ahead = ReadAhead::new(100, 0);
        ahead.closed(10, 40);
        ahead.closed(11, 40);
        assert_eq!(ahead.room(), 20);
        ahead.acknowledged(Some(11));
        assert_eq!(ahead.room(), 60, "the batch at 10 is acknowledged");
        ahead.acknowledged(None);
        assert_eq!(
            ahead.room(),
            100,
            "a long-running worker reads ahead as much as at its start"
        );
        assert_eq!(ahead.floor(), 0, "nothing went past the bound");
    }

    #[test]
    fn past_the_bound_the_oldest_batches_must_be_acknowledged_before_reading_on() {
        let mut ahead = ReadAhead::new(100, 5);
        ahead.closed(10, 60);
        ahead.closed(11, 30);
        assert_eq!(ahead.floor(), 5);
        ahead.closed(12, 30);
        assert_eq!(ahead.floor(), 11, "the reader waits for the batch at 10");
        assert_eq!(ahead.room(), 40);
        ahead.acknowledged(Some(12));
        assert_eq!(ahead.room(), 70);
        assert_eq!(ahead.floor(), 11, "the floor never goes back");
    }
}
