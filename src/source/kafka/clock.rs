//! Logical time for the Kafka source: chunk numbers while rebuilding, wall-clock after.
//!
//! ```text
//!   0, 1, 2, …                  rebuild chunks (a fixed number of records each)
//!   LIVE_TIME_BASE + unix ms    live batches, closed by size, by delay, or when idle
//! ```
//!
//! Every rebuild time is below every live time, so "the frontier has passed
//! `LIVE_TIME_BASE`" means every worker has finished rebuilding. Live times follow the wall
//! clock, so all workers advance together whether their partitions are busy or quiet, and
//! they only grow, also across restarts (they start above the last committed time).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dataflows::model::Time;

/// The first live time; rebuild times are below it.
pub const LIVE_TIME_BASE: Time = 1 << 62;

/// Milliseconds since the Unix epoch, as a live time.
pub fn live_time_now() -> Time {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    LIVE_TIME_BASE + millis as Time
}

/// Numbers the rebuild chunks.
#[derive(Debug)]
pub struct ChunkClock {
    chunk_records: u64,
    time: Time,
    records: u64,
}

impl ChunkClock {
    pub fn new(chunk_records: u64) -> Self {
        ChunkClock {
            chunk_records: chunk_records.max(1),
            time: 0,
            records: 0,
        }
    }

    /// The time of the next record; a full chunk moves on to the next time.
    pub fn time_for_record(&mut self) -> Time {
        if self.records == self.chunk_records {
            self.time += 1;
            self.records = 0;
        }
        self.records += 1;
        self.time
    }

    pub fn frontier(&self) -> Time {
        if self.records == self.chunk_records {
            self.time + 1
        } else {
            self.time
        }
    }
}

/// Groups live records into batches by size and delay, one logical time each.
#[derive(Debug)]
pub struct BatchClock {
    max_records: u64,
    max_delay: Duration,
    /// The least time the next batch may have.
    next: Time,
    open: Option<OpenBatch>,
}

#[derive(Debug)]
struct OpenBatch {
    time: Time,
    opened: Instant,
    records: u64,
}

impl BatchClock {
    /// `not_before`: a lower bound on every time it hands out (the last committed time + 1).
    pub fn new(max_records: u64, max_delay: Duration, not_before: Time) -> Self {
        BatchClock {
            max_records: max_records.max(1),
            max_delay,
            next: not_before.max(LIVE_TIME_BASE),
            open: None,
        }
    }

    /// The time of a record read at `now` (wall clock `wall`): the open batch's, or a new
    /// batch's. A batch that reaches its size closes after this record.
    pub fn time_for_record(&mut self, now: Instant, wall: Time) -> Time {
        let batch = self.open.get_or_insert_with(|| OpenBatch {
            time: self.next.max(wall),
            opened: now,
            records: 0,
        });
        batch.records += 1;
        let time = batch.time;
        if batch.records >= self.max_records {
            self.close();
        }
        time
    }

    /// Closes the open batch if it is old enough, or if nothing more is ready (`idle`).
    /// Returns the time of the batch it closed.
    pub fn tick(&mut self, now: Instant, idle: bool) -> Option<Time> {
        let due = self
            .open
            .as_ref()
            .is_some_and(|batch| idle || now.duration_since(batch.opened) >= self.max_delay);
        if due {
            self.close()
        } else {
            None
        }
    }

    fn close(&mut self) -> Option<Time> {
        let batch = self.open.take()?;
        self.next = batch.time + 1;
        Some(batch.time)
    }

    /// The least time a record not yet read can get. A quiet worker advances it in steps
    /// of `max_delay`, not every millisecond: each new frontier costs a round of progress
    /// messages through the dataflow, and a quiet worker only needs to keep up with the
    /// delay the busy ones allow themselves.
    pub fn frontier(&self, wall: Time) -> Time {
        match &self.open {
            Some(batch) => batch.time,
            None => {
                let step = (self.max_delay.as_millis() as Time).max(1);
                self.next.max(wall - wall.saturating_sub(LIVE_TIME_BASE) % step)
            }
        }
    }

    /// A time for a batch with no records (a checkpoint only), unless one is open.
    pub fn empty_batch(&mut self, wall: Time) -> Option<Time> {
        if self.open.is_some() {
            return None;
        }
        let time = self.next.max(wall);
        self.next = time + 1;
        Some(time)
    }

    /// Whether a batch is open.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_hold_a_fixed_number_of_records() {
        let mut clock = ChunkClock::new(2);
        assert_eq!(clock.frontier(), 0);
        let times: Vec<Time> = (0..5).map(|_| clock.time_for_record()).collect();
        assert_eq!(times, vec![0, 0, 1, 1, 2]);
        assert_eq!(clock.frontier(), 2);
        clock.time_for_record();
        assert_eq!(clock.frontier(), 3, "a full chunk is complete");
    }

    #[test]
    fn batches_close_by_size_delay_or_idleness_and_times_only_grow() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_000;
        let mut clock = BatchClock::new(3, Duration::from_millis(100), 0);
        assert_eq!(clock.frontier(wall), wall);
        // Size: the third record closes the batch; the next record opens a later one.
        assert_eq!(clock.time_for_record(start, wall), wall);
        assert_eq!(clock.time_for_record(start, wall), wall);
        assert_eq!(clock.time_for_record(start, wall), wall);
        assert!(!clock.is_open());
        assert_eq!(
            clock.time_for_record(start, wall),
            wall + 1,
            "same millisecond, next time"
        );
        // Delay: not yet, then yes.
        assert_eq!(clock.tick(start + Duration::from_millis(50), false), None);
        assert_eq!(clock.tick(start + Duration::from_millis(100), false), Some(wall + 1));
        // Idle: closes at once.
        assert_eq!(clock.time_for_record(start, wall + 500), wall + 500);
        assert_eq!(
            clock.frontier(wall + 600),
            wall + 500,
            "an open batch holds the frontier"
        );
        assert_eq!(clock.tick(start, true), Some(wall + 500));
        assert_eq!(
            clock.frontier(wall + 600),
            wall + 600,
            "a quiet worker follows the clock"
        );
        assert_eq!(clock.frontier(wall + 650), wall + 600, "in steps of the batch delay");
        // A wall clock that went backwards never makes times go back.
        assert_eq!(clock.time_for_record(start, wall), wall + 501);
        // An empty batch waits for the open one; then it takes a time of its own.
        assert_eq!(clock.empty_batch(wall + 502), None);
        assert_eq!(clock.tick(start, true), Some(wall + 501));
        assert_eq!(clock.empty_batch(wall + 400), Some(wall + 502));
        assert_eq!(clock.frontier(wall + 400), wall + 503);
    }

    #[test]
    fn live_times_start_above_the_last_committed_time() {
        let mut clock = BatchClock::new(10, Duration::from_millis(10), LIVE_TIME_BASE + 5_000);
        assert_eq!(
            clock.time_for_record(Instant::now(), LIVE_TIME_BASE + 10),
            LIVE_TIME_BASE + 5_000
        );
        assert!(live_time_now() > LIVE_TIME_BASE + 1_700_000_000_000);
    }
}
