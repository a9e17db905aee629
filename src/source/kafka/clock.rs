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

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dataflows::model::Time;

use super::siblings::SiblingBatches;

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

/// The least age of an open batch whose read rate tells a flood.
const FLOOD_SPAN: Duration = Duration::from_millis(10);

/// How live records are grouped into batches (`[batching]`).
#[derive(Clone, Copy, Debug)]
pub struct BatchPolicy {
    /// A batch closes at this size while the sinks keep up…
    pub max_records: u64,
    /// …and grows to this size while the worker is behind.
    pub max_records_behind: u64,
    /// A batch closes once this old, or once nothing more is ready…
    pub max_delay: Duration,
    /// …but no sooner than this after the previous batch closed.
    pub min_interval: Duration,
}

impl BatchPolicy {
    /// The grid (ms) live batch times sit on: `min_interval`, or `max_delay` where batches
    /// are not spaced. Workers that open batches within one step of it give them the same
    /// time, so a pair whose products sit on several workers changes once, not once per
    /// worker; and a quiet worker's frontier follows the wall clock in these steps.
    fn grid(&self) -> Time {
        let step = match self.min_interval.is_zero() {
            true => self.max_delay,
            false => self.min_interval,
        };
        (step.as_millis() as Time).max(1)
    }
}

/// The first point of the `grid` strictly after `wall` (counted from `LIVE_TIME_BASE`, so
/// on whole wall-clock steps): the time of a batch opened at `wall`.
fn grid_after(wall: Time, grid: Time) -> Time {
    let since_base = wall.saturating_sub(LIVE_TIME_BASE);
    LIVE_TIME_BASE + (since_base / grid + 1) * grid
}

/// Groups live records into batches, one logical time each.
///
/// While the sinks and the reading keep up, a batch closes by size, by delay or when
/// nothing more is ready, at most once per `min_interval`. While the worker is *behind*
/// (its last batch still waits for the sinks, or more records wait to be read than a batch
/// holds), the open batch grows up to `max_records_behind`, so a backlog forms a few large
/// times instead of many intermediate states. A batch that has not grown past `max_records`
/// closes once the sinks catch up; one that has, and any growing batch, closes once nothing
/// more has been read for `max_delay`: a flood read whole then forms one state, and while
/// the sinks still write the previous one they replace its waiting writes instead of
/// writing both.
#[derive(Debug)]
pub struct BatchClock {
    policy: BatchPolicy,
    /// When the last batch closed: batches close at most once per `min_interval`, so a
    /// steady trickle pays the per-batch cost a bounded number of times a second.
    last_closed: Option<Instant>,
    /// The least time the next batch may have.
    next: Time,
    open: Option<OpenBatch>,
    /// The last batch closed, while the sinks have not yet acknowledged it.
    awaited: Option<Time>,
    /// The batches of the process's other workers, and this worker's index among them.
    siblings: Arc<SiblingBatches>,
    worker: usize,
    /// The greatest frontier reported: frontiers never go back.
    reported: Cell<Time>,
}

#[derive(Debug)]
struct OpenBatch {
    time: Time,
    opened: Instant,
    /// When its last record was read.
    last_read: Instant,
    records: u64,
    /// Of `records`, how many the siblings have been told of (`SiblingBatches::read`).
    shared: u64,
    /// How many records the siblings had read at this time when last told.
    siblings_records: u64,
    /// When any worker of the process last read at this time, when last told.
    process_last_read: Instant,
    /// A sibling has closed this time: this worker closes it too at its next tick.
    closed_by_sibling: bool,
}

impl OpenBatch {
    /// When the process last read a record at this time: a growing batch closes once
    /// nothing more has come to any of its workers for `max_delay`.
    fn last_read(&self) -> Instant {
        self.last_read.max(self.process_last_read)
    }
}

impl BatchClock {
    /// `not_before`: a lower bound on every time it hands out (the last committed time + 1).
    pub fn new(policy: BatchPolicy, not_before: Time) -> Self {
        BatchClock {
            policy: BatchPolicy {
                max_records: policy.max_records.max(1),
                max_records_behind: policy.max_records_behind.max(policy.max_records).max(1),
                ..policy
            },
            last_closed: None,
            next: not_before.max(LIVE_TIME_BASE),
            open: None,
            awaited: None,
            siblings: Arc::default(),
            worker: 0,
            reported: Cell::new(0),
        }
    }

    /// Shares batch times with the other workers of the process (`siblings.rs`).
    pub fn with_siblings(mut self, siblings: Arc<SiblingBatches>, worker: usize) -> Self {
        self.siblings = siblings;
        self.worker = worker;
        self
    }

    /// The time a batch opened now would get: a sibling's open batch's, if this worker
    /// may still take it and it is not ahead of the wall-clock grid; else the next point of
    /// the grid after `wall`, past every time a sibling has closed.
    fn opening_time(&self, wall: Time) -> Time {
        let floor = self.next.max(self.reported.get());
        let own = grid_after(wall, self.policy.grid());
        let seen = self.siblings.seen_by(self.worker);
        let closed = |time: Time| seen.last_closed.is_some_and(|closed| closed >= time);
        let time = match seen.open {
            Some(open) if open >= floor && open <= own && !closed(open) => open,
            _ => own.max(seen.last_closed.map_or(0, |closed| closed + 1)),
        };
        time.max(floor)
    }

    /// Whether the open batch grows: the worker is behind (its last batch still waits for
    /// the sinks, or `reading_backlog`), or the batch already grew past `max_records`; and
    /// growing is on (`max_records_behind` above `max_records`). A batch that grew stays
    /// growing until the records stop: closed when an earlier small batch is acknowledged,
    /// it would be written while the rest of the same flood forms the next one, and every
    /// pair the two share would be written twice.
    fn grows(&self, now: Instant, reading_backlog: bool) -> bool {
        // A shared time counts every worker's records: a flood spread over the workers is
        // as large as with one.
        let grown = self
            .open
            .as_ref()
            .is_some_and(|batch| batch.records + batch.siblings_records >= self.policy.max_records);
        (self.awaited.is_some() || reading_backlog || grown || self.flooding(now))
            && self.policy.max_records_behind > self.policy.max_records
    }

    /// Whether the open batch is the start of a flood: records come in faster than
    /// `max_records` a second, over at least `FLOOD_SPAN` (so at least what that rate brings
    /// in it: at 20,000/s a flood is told 10 ms after its first record). Closed now, by
    /// idleness or by the sinks catching up, the flood's next batch would change many of
    /// the same pairs again (a flood spread over seconds was written 1.3-5x per pair); it
    /// grows instead, and closes once the records pause for `max_delay`. A lone change, or
    /// a stream slower than that rate, closes as before; the rate is measured again at every
    /// tick, so a poll that brought a trickle's records at once only delays its close until
    /// the rate falls below.
    fn flooding(&self, now: Instant) -> bool {
        let Some(batch) = &self.open else { return false };
        let records = batch.records + batch.siblings_records;
        let age = now.duration_since(batch.opened);
        // A rate needs a span to be measured over: a burst read at once is not yet one.
        age >= FLOOD_SPAN
            && records >= (self.policy.max_records / 100).max(1)
            && records as f64 >= self.policy.max_records as f64 * age.as_secs_f64()
    }

    /// The time of a record read at `now` (wall clock `wall`): the open batch's, or a new
    /// batch's. A batch that reaches its size closes after this record.
    /// `room`: how many more records may wait for the sinks (the memory bound); a growing
    /// batch stops there, though never below `max_records`.
    pub fn time_for_record(&mut self, now: Instant, wall: Time, reading_backlog: bool, room: u64) -> Time {
        let size = match self.grows(now, reading_backlog) {
            true => self.policy.max_records_behind.min(room).max(self.policy.max_records),
            false => self.policy.max_records,
        };
        if self.open.is_none() {
            let time = self.opening_time(wall);
            self.siblings.opened(self.worker, time);
            self.reported.set(self.reported.get().max(time));
            self.open = Some(OpenBatch {
                time,
                opened: now,
                last_read: now,
                records: 0,
                shared: 0,
                siblings_records: 0,
                process_last_read: now,
                closed_by_sibling: false,
            });
        }
        let batch = self.open.as_mut().expect("opened above");
        batch.records += 1;
        batch.last_read = now;
        let time = batch.time;
        if batch.records >= size {
            self.close(now);
        }
        time
    }

    /// Closes the open batch, spaced by `min_interval`: while the worker keeps up, once it
    /// is full, old enough or nothing more is ready (`idle`); while it is behind, once
    /// nothing more has been read at its time for `max_delay` by any worker of the process.
    /// At once when a sibling has closed its time. Returns the time of the batch it closed.
    pub fn tick(&mut self, now: Instant, idle: bool, reading_backlog: bool) -> Option<Time> {
        // Once a poll, not once a record: the count goes through a lock.
        if let Some(batch) = self.open.as_mut() {
            let shared = self
                .siblings
                .read(batch.time, batch.records - batch.shared, batch.last_read);
            batch.shared = batch.records;
            batch.siblings_records = shared.records.saturating_sub(batch.records);
            batch.process_last_read = shared.last_read.unwrap_or(batch.last_read);
            batch.closed_by_sibling = shared.closed;
        }
        let grows = self.grows(now, reading_backlog);
        let batch = self.open.as_ref()?;
        let spaced = self
            .last_closed
            .is_none_or(|closed| now.duration_since(closed) >= self.policy.min_interval);
        let due = match grows {
            // Kept open, the time would hold the process's frontier for nothing, and this
            // worker's next records would form a second state of the same flood.
            _ if batch.closed_by_sibling => true,
            true => spaced && now.duration_since(batch.last_read()) >= self.policy.max_delay,
            false => {
                batch.records >= self.policy.max_records
                    || (spaced && (idle || now.duration_since(batch.opened) >= self.policy.max_delay))
            }
        };
        if due {
            self.close(now)
        } else {
            None
        }
    }

    fn close(&mut self, now: Instant) -> Option<Time> {
        let batch = self.open.take()?;
        self.siblings.closed(self.worker, batch.time);
        self.next = batch.time + 1;
        self.last_closed = Some(now);
        self.awaited = Some(batch.time);
        Some(batch.time)
    }

    /// How long until `tick` may close the open batch or the frontier moves, if nothing
    /// more is read: how long a worker woken by new records may sleep. Without an open
    /// batch, the frontier moves at the next point of the grid.
    pub fn idle_wait(&self, now: Instant, wall: Time, reading_backlog: bool) -> Duration {
        let Some(batch) = &self.open else {
            return Duration::from_millis(grid_after(wall, self.policy.grid()) - wall);
        };
        let spaced = self.last_closed.map_or(now, |closed| closed + self.policy.min_interval);
        let due = match self.grows(now, reading_backlog) {
            _ if batch.closed_by_sibling => now,
            true => spaced.max(batch.last_read() + self.policy.max_delay),
            // Nothing more is ready (the worker is idle): it closes once spaced.
            false => spaced,
        };
        due.saturating_duration_since(now)
    }

    /// Every time below `frontier` (every time, if `None`) is acknowledged by the sinks.
    pub fn acknowledged(&mut self, frontier: Option<Time>) {
        if self
            .awaited
            .is_some_and(|time| frontier.is_none_or(|frontier| time < frontier))
        {
            self.awaited = None;
        }
    }

    /// The least time a record not yet read can get. A quiet worker advances it in steps
    /// of the grid, not every millisecond: each new frontier costs a round of progress
    /// messages through the dataflow. It passes a batch time the moment the wall clock
    /// reaches it, so another worker's lone change waits at most one step for this one.
    pub fn frontier(&self, wall: Time) -> Time {
        let frontier = match &self.open {
            Some(batch) => batch.time,
            None => self.opening_time(wall),
        };
        self.reported.set(self.reported.get().max(frontier));
        frontier
    }

    /// A time for a batch with no records (a checkpoint only), unless one is open.
    pub fn empty_batch(&mut self, wall: Time) -> Option<Time> {
        if self.open.is_some() {
            return None;
        }
        let time = self.opening_time(wall);
        self.siblings.closed(self.worker, time);
        self.next = time + 1;
        self.awaited = Some(time);
        Some(time)
    }

    /// Whether a batch is open.
    pub fn is_open(&self) -> bool {
        self.open.is_some()
    }
}

impl Drop for BatchClock {
    fn drop(&mut self) {
        self.siblings.left(self.worker);
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

    /// Batches of `max_records` (behind: `max_records_behind`), a 100 ms delay, spaced
    /// by `min_interval_ms`.
    fn policy(max_records: u64, max_records_behind: u64, min_interval_ms: u64) -> BatchPolicy {
        BatchPolicy {
            max_records,
            max_records_behind,
            max_delay: Duration::from_millis(100),
            min_interval: Duration::from_millis(min_interval_ms),
        }
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn behind_the_sinks_a_batch_grows_while_records_come_and_closes_when_they_catch_up() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_000;
        // Without min_interval the grid is max_delay (100 ms): the next point after `wall`.
        let time = wall + 100;
        let mut clock = BatchClock::new(policy(2, 6, 0), 0);
        // A first batch closes at its size; it waits for the sinks.
        clock.time_for_record(start, wall, false, u64::MAX);
        clock.time_for_record(start, wall, false, u64::MAX);
        assert!(!clock.is_open());
        // Behind the sinks: neither size nor delay nor idleness closes the next while
        // records keep coming (the last one 5 s after the first)…
        for at in [0, 1, 2, 5_000] {
            assert_eq!(clock.time_for_record(start + ms(at), wall, false, u64::MAX), time + 1);
        }
        let last_read = start + ms(5_000);
        assert_eq!(clock.tick(last_read + ms(99), true, false), None);
        assert!(clock.is_open());
        // …nor the sinks acknowledging the first: past the usual size, it is part of a
        // flood, and closes once nothing more has been read for max_delay.
        clock.acknowledged(Some(time + 1));
        assert_eq!(clock.tick(last_read + ms(99), false, false), None);
        assert_eq!(clock.time_for_record(last_read, wall, false, u64::MAX), time + 1);
        assert_eq!(clock.tick(last_read + ms(99), true, false), None);
        assert_eq!(clock.tick(last_read + ms(100), true, false), Some(time + 1));
        // Still behind, a batch closes once nothing more has been read for max_delay: the
        // sinks get its changes while they still write the previous batch's.
        let last_read = last_read + ms(100);
        clock.time_for_record(last_read, wall, false, u64::MAX);
        assert_eq!(clock.tick(last_read + ms(99), true, false), None);
        assert_eq!(clock.tick(last_read + ms(100), true, false), Some(time + 2));
        // A batch still below the usual size closes at once when the sinks catch up.
        clock.time_for_record(last_read + ms(100), wall, false, u64::MAX);
        assert_eq!(clock.tick(last_read + ms(101), true, false), None, "behind");
        clock.acknowledged(Some(time + 3));
        assert_eq!(clock.tick(last_read + ms(101), true, false), Some(time + 3));
        // Records waiting to be read make a worker behind too, and the larger size closes it.
        let mut reading = BatchClock::new(policy(2, 6, 0), 0);
        for _ in 0..5 {
            reading.time_for_record(start, wall, true, u64::MAX);
        }
        assert_eq!(reading.tick(start, true, true), None, "idle, but more is waiting");
        assert_eq!(reading.time_for_record(start, wall, true, u64::MAX), time);
        assert!(!reading.is_open(), "closed at the larger size");
        // Growing stops where the memory bound leaves no more room (never below max_records).
        let mut bounded = BatchClock::new(policy(2, 10, 0), 0);
        for _ in 0..3 {
            bounded.time_for_record(start, wall, true, 4);
        }
        assert!(bounded.is_open());
        bounded.time_for_record(start, wall, true, 4);
        assert!(!bounded.is_open(), "closed at the room left");
        // Growing off (`max_records_behind` = `max_records`): behind changes nothing.
        let mut fixed = BatchClock::new(policy(2, 2, 0), 0);
        fixed.time_for_record(start, wall, true, u64::MAX);
        assert_eq!(fixed.tick(start, true, true), Some(time), "idle closes it");
        fixed.time_for_record(start, wall, true, u64::MAX);
        fixed.time_for_record(start, wall, true, u64::MAX);
        assert!(!fixed.is_open(), "the usual size closes it");
    }

    #[test]
    fn an_idle_worker_sleeps_until_its_batch_is_due_or_its_frontier_moves() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_020;
        let mut clock = BatchClock::new(policy(100, 1_000, 50), 0);
        // Nothing open: the frontier moves at the next grid point (50 ms), not before.
        let wait = clock.idle_wait(start, wall, false);
        assert_eq!(wait, ms(30));
        let frontier = clock.frontier(wall);
        assert_eq!(clock.frontier(wall + 29), frontier);
        assert!(clock.frontier(wall + 30) > frontier);
        // A batch closed at `start`; the next opens 10 ms later while the sinks keep up:
        // idle, it is due once spaced by min_interval, 40 ms on.
        let time = clock.time_for_record(start, wall + 30, false, u64::MAX);
        assert_eq!(clock.tick(start, true, false), Some(time));
        clock.acknowledged(Some(time + 1));
        let later = start + ms(10);
        clock.time_for_record(later, wall + 40, false, u64::MAX);
        assert_eq!(clock.idle_wait(later, wall + 40, false), ms(40));
        assert_eq!(clock.tick(later + ms(39), true, false), None);
        assert!(clock.tick(later + ms(40), true, false).is_some());
        // Behind (the last batch unacknowledged), a growing batch is due once nothing more
        // has been read for max_delay (100 ms).
        let read = later + ms(60);
        clock.time_for_record(read, wall + 100, false, u64::MAX);
        assert_eq!(clock.idle_wait(read, wall + 100, false), ms(100));
        assert_eq!(clock.tick(read + ms(99), true, false), None);
        assert!(clock.tick(read + ms(100), true, false).is_some());
    }

    #[test]
    fn a_steady_trickle_closes_at_most_once_per_min_interval() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_000;
        // The grid is min_interval (50 ms): a batch opened at `wall` gets the next point.
        let time = wall + 50;
        let mut clock = BatchClock::new(policy(100, 1_000, 50), 0);
        // The first batch closes when idle: nothing closed before it.
        clock.time_for_record(start, wall, false, u64::MAX);
        assert_eq!(clock.tick(start, true, false), Some(time));
        // The sinks keep up. The next, 10 ms later, waits out the interval though idle…
        clock.acknowledged(Some(time + 1));
        let later = start + ms(10);
        clock.time_for_record(later, wall + 10, false, u64::MAX);
        assert_eq!(clock.tick(later, true, false), None);
        assert_eq!(clock.tick(start + ms(49), true, false), None);
        // …and closes once it has passed.
        assert_eq!(
            clock.tick(start + ms(50), true, false),
            Some(time + 1),
            "the same grid step: the next time"
        );
        // A lone record long after the last batch closes at once: quiet streams pay nothing.
        clock.acknowledged(None);
        let much_later = start + ms(3_000);
        clock.time_for_record(much_later, wall + 3_000, false, u64::MAX);
        assert_eq!(clock.tick(much_later, true, false), Some(wall + 3_050));
    }

    #[test]
    fn batches_close_by_size_delay_or_idleness_and_times_only_grow() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_000;
        // Grid 100 ms (max_delay, no min_interval): a batch opened at `wall` gets `wall + 100`.
        let mut clock = BatchClock::new(policy(3, 3, 0), 0);
        assert_eq!(clock.frontier(wall), wall + 100);
        // Size: the third record closes the batch; the next record opens a later one.
        assert_eq!(clock.time_for_record(start, wall, false, u64::MAX), wall + 100);
        assert_eq!(clock.time_for_record(start, wall, false, u64::MAX), wall + 100);
        assert_eq!(clock.time_for_record(start, wall, false, u64::MAX), wall + 100);
        assert!(!clock.is_open());
        assert_eq!(
            clock.time_for_record(start, wall, false, u64::MAX),
            wall + 101,
            "same grid step, next time"
        );
        // Delay: not yet, then yes.
        assert_eq!(clock.tick(start + ms(50), false, false), None);
        assert_eq!(clock.tick(start + ms(100), false, false), Some(wall + 101));
        // Idle: closes at once.
        assert_eq!(clock.time_for_record(start, wall + 500, false, u64::MAX), wall + 600);
        assert_eq!(
            clock.frontier(wall + 650),
            wall + 600,
            "an open batch holds the frontier"
        );
        assert_eq!(clock.tick(start, true, false), Some(wall + 600));
        assert_eq!(
            clock.frontier(wall + 600),
            wall + 700,
            "a quiet worker follows the clock"
        );
        assert_eq!(clock.frontier(wall + 650), wall + 700, "in steps of the grid");
        // A wall clock that went backwards never takes times below a reported frontier.
        assert_eq!(clock.time_for_record(start, wall, false, u64::MAX), wall + 700);
        // An empty batch waits for the open one; then it takes a time of its own.
        assert_eq!(clock.empty_batch(wall + 502), None);
        assert_eq!(clock.tick(start, true, false), Some(wall + 700));
        assert_eq!(clock.empty_batch(wall + 400), Some(wall + 701));
        assert_eq!(clock.frontier(wall + 400), wall + 702);
    }

    #[test]
    fn workers_batches_opened_within_a_grid_step_share_a_time_and_a_quiet_worker_passes_it_then() {
        let start = Instant::now();
        let step = LIVE_TIME_BASE + 1_000;
        let (mut one, mut other, quiet) = (
            BatchClock::new(policy(100, 100, 50), 0),
            BatchClock::new(policy(100, 100, 50), 0),
            BatchClock::new(policy(100, 100, 50), 0),
        );
        let time = one.time_for_record(start, step + 3, false, u64::MAX);
        assert_eq!(other.time_for_record(start, step + 41, false, u64::MAX), time);
        assert_eq!(time, step + 50);
        // The quiet worker's frontier passes the batch when the wall clock reaches it.
        assert!(quiet.frontier(step + 49) <= time);
        assert!(quiet.frontier(step + 50) > time);
    }

    #[test]
    fn workers_of_one_process_share_an_open_batchs_time_and_pass_a_closed_one_at_once() {
        let start = Instant::now();
        let step = LIVE_TIME_BASE + 1_000;
        let siblings = Arc::new(SiblingBatches::default());
        let clock = |worker| BatchClock::new(policy(100, 1_000, 50), 0).with_siblings(siblings.clone(), worker);
        let (mut one, mut other, mut quiet) = (clock(0), clock(1), clock(2));
        // One opens a batch; the other, opening its own three steps later, takes its time.
        let time = one.time_for_record(start, step + 3, false, u64::MAX);
        assert_eq!(time, step + 50);
        assert_eq!(quiet.frontier(step + 10), time, "held at the open batch");
        assert_eq!(other.time_for_record(start, step + 160, false, u64::MAX), time);
        // One closes it and opens its next: a time of its own (past the one it closed).
        assert_eq!(one.tick(start, true, false), Some(time));
        let next = one.time_for_record(start, step + 170, false, u64::MAX);
        assert_eq!(next, step + 200);
        // The other closes; its next batch takes one's open time.
        assert_eq!(other.tick(start, true, false), Some(time));
        assert_eq!(other.time_for_record(start, step + 180, false, u64::MAX), next);
        // The sinks keep up and both close: the quiet worker passes their time at once,
        // not when the wall clock reaches it.
        let spaced = start + ms(50);
        for clock in [&mut one, &mut other] {
            clock.acknowledged(None);
            assert_eq!(clock.tick(spaced, true, false), Some(next));
        }
        assert!(quiet.frontier(step + 181) > next);
        // Its next record gets a later time.
        assert!(quiet.time_for_record(start, step + 181, false, u64::MAX) > next);
        assert!(quiet.tick(spaced, true, false).is_some());
        // A worker that stops holds nobody with the batch it left open.
        let held = one.time_for_record(start, step + 300, false, u64::MAX);
        assert_eq!(other.frontier(step + 300), held);
        drop(one);
        assert_eq!(other.frontier(step + 400), step + 450);
    }

    #[test]
    fn a_shared_time_counts_every_workers_records_to_tell_a_flood() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_000;
        let siblings = Arc::new(SiblingBatches::default());
        let clock = |worker| BatchClock::new(policy(10, 100, 0), 0).with_siblings(siblings.clone(), worker);
        let (mut one, mut other) = (clock(0), clock(1));
        // Each closes a small first batch, and reads on while the sinks write it.
        for clock in [&mut one, &mut other] {
            clock.time_for_record(start, wall, false, u64::MAX);
            assert!(clock.tick(start, true, false).is_some());
        }
        let read = start + ms(1);
        let mut shared = 0;
        for (clock, records) in [(&mut one, 6), (&mut other, 5)] {
            for _ in 0..records {
                shared = clock.time_for_record(read, wall + 1, false, u64::MAX);
            }
            assert_eq!(clock.tick(read, false, false), None, "behind: grows");
        }
        // The sinks catch up. Each holds fewer than max_records (10), but the time they
        // share holds 11: a flood, so neither closes while records keep coming…
        for clock in [&mut one, &mut other] {
            clock.acknowledged(None);
        }
        assert_eq!(other.tick(read + ms(1), true, false), None);
        assert_eq!(one.tick(read + ms(1), true, false), None);
        // …and both close once nothing more has been read for max_delay.
        assert_eq!(one.tick(read + ms(100), true, false), Some(shared));
        assert_eq!(other.tick(read + ms(100), true, false), Some(shared));
        // One worker alone with 6 of its own is a trickle: it closes when the sinks catch up.
        let mut alone = BatchClock::new(policy(10, 100, 0), 0);
        alone.time_for_record(start, wall, false, u64::MAX);
        let first = alone.tick(start, true, false).expect("idle");
        for _ in 0..6 {
            alone.time_for_record(read, wall + 1, false, u64::MAX);
        }
        assert_eq!(alone.tick(read, true, false), None, "behind: grows");
        alone.acknowledged(Some(first + 1));
        assert!(alone.tick(read + ms(1), true, false).is_some());
    }

    #[test]
    fn a_flood_over_two_workers_forms_one_time_until_neither_reads_and_ends_on_both_at_once() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_000;
        let siblings = Arc::new(SiblingBatches::default());
        let clock = |worker| BatchClock::new(policy(10, 1_000, 0), 0).with_siblings(siblings.clone(), worker);
        let (mut one, mut other) = (clock(0), clock(1));
        // A flood of 2,000 records a second: one a millisecond to each worker.
        let mut time = 0;
        for at in 0..20 {
            for clock in [&mut one, &mut other] {
                time = clock.time_for_record(start + ms(at), wall, false, u64::MAX);
                assert_eq!(clock.tick(start + ms(at), false, false), None, "{at} ms");
            }
        }
        // The first worker's partitions pause for longer than max_delay; the other's go on.
        for at in 20..150 {
            assert_eq!(other.time_for_record(start + ms(at), wall, false, u64::MAX), time);
            assert_eq!(other.tick(start + ms(at), true, false), None, "{at} ms");
            assert_eq!(
                one.tick(start + ms(at), true, false),
                None,
                "the process still reads at {at} ms"
            );
        }
        // The first worker's records come back: still the same time, one state for the flood.
        assert_eq!(one.time_for_record(start + ms(150), wall, false, u64::MAX), time);
        assert_eq!(one.tick(start + ms(150), false, false), None);
        // Both pause: the one whose tick sees it first closes the time, the other follows
        // at its next tick, whatever its own last read.
        assert_eq!(other.tick(start + ms(249), true, false), None);
        assert_eq!(one.tick(start + ms(250), true, false), Some(time));
        assert_eq!(
            other.tick(start + ms(250), false, false),
            Some(time),
            "closed with its sibling"
        );
        // Their next batches share a time again, past the closed one.
        let next = one.time_for_record(start + ms(300), wall + 300, false, u64::MAX);
        assert!(next > time);
        assert_eq!(
            other.time_for_record(start + ms(300), wall + 300, false, u64::MAX),
            next
        );
        // A batch is not opened at a time a sibling has closed, though another still holds it.
        let mut late = BatchClock::new(policy(10, 1_000, 0), 0).with_siblings(siblings.clone(), 2);
        one.acknowledged(None);
        assert_eq!(one.tick(start + ms(300), true, false), Some(next));
        assert!(late.time_for_record(start + ms(300), wall + 300, false, u64::MAX) > next);
    }

    #[test]
    fn live_times_start_above_the_last_committed_time() {
        let mut clock = BatchClock::new(policy(10, 10, 0), LIVE_TIME_BASE + 5_000);
        assert_eq!(
            clock.time_for_record(Instant::now(), LIVE_TIME_BASE + 10, false, u64::MAX),
            LIVE_TIME_BASE + 5_000
        );
        assert!(live_time_now() > LIVE_TIME_BASE + 1_700_000_000_000);
    }

    #[test]
    fn a_flood_arriving_over_time_forms_one_batch_and_a_slow_stream_does_not() {
        let start = Instant::now();
        let wall = LIVE_TIME_BASE + 1_000;
        // max_records 100: a flood is 10+ records at 100+ a second.
        let mut flood = BatchClock::new(policy(100, 1_000, 0), 0);
        for at in 0..30 {
            flood.time_for_record(start + ms(at), wall, false, u64::MAX);
            // Idle between records, past the span: it would close, but it is a flood.
            if at >= 10 {
                assert_eq!(flood.tick(start + ms(at), true, false), None, "closed at {at} ms");
            }
        }
        // It closes once the records pause for max_delay (100 ms).
        assert_eq!(flood.tick(start + ms(29 + 99), true, false), None);
        assert!(flood.tick(start + ms(29 + 100), true, false).is_some());
        // Slower than 100 a second: 20 records over 400 ms close when idle, as before.
        let mut slow = BatchClock::new(policy(100, 1_000, 0), 0);
        slow.time_for_record(start, wall, false, u64::MAX);
        for at in (20..=400).step_by(20) {
            slow.time_for_record(start + ms(at), wall, false, u64::MAX);
        }
        assert!(
            slow.tick(start + ms(400), true, false).is_some(),
            "a slow stream closes when idle"
        );
        // A lone burst read at once closes at once: no rate yet.
        let mut burst = BatchClock::new(policy(100, 1_000, 0), 0);
        for _ in 0..50 {
            burst.time_for_record(start, wall, false, u64::MAX);
        }
        assert!(burst.tick(start, true, false).is_some());
        // A poll that brings a few records at once looks like a flood's start, until the
        // rate, measured again at each tick, falls below 100 a second.
        let mut bunched = BatchClock::new(policy(100, 1_000, 0), 0);
        for _ in 0..3 {
            bunched.time_for_record(start, wall, false, u64::MAX);
        }
        assert_eq!(bunched.tick(start + ms(10), true, false), None, "3 in 10 ms");
        assert!(bunched.tick(start + ms(40), true, false).is_some(), "3 in 40 ms");
    }
}
