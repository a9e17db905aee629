//! A partition's backlog: the records it has read that the sinks have not yet acknowledged.
//!
//! The consumer lag (end offset minus read position) is ~0 once a flood is read, while the
//! flood's changes may still wait for the sink; the honest figure is the end offset minus
//! the acknowledged offset (what the next progress save commits). The source keeps, per
//! partition, the times it has read records at, each with the offset after its last record
//! and when its first was read; the job tells it the acknowledged frontier, and the lag
//! watcher publishes the gauges from what is shared here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use dataflows::model::Time;

/// What the lag watcher reads: the acknowledged offset and when the oldest unacknowledged
/// record was read (unix ms; 0 when none waits).
#[derive(Debug, Default)]
pub struct SharedBacklog {
    pub acknowledged_offset: AtomicI64,
    pub oldest_read_unix_ms: AtomicU64,
}

#[derive(Debug)]
struct ReadAt {
    time: Time,
    first_read_unix_ms: u64,
    /// The offset after the last record read at `time`.
    end_offset: i64,
}

#[derive(Debug)]
pub struct PartitionBacklog {
    waiting: VecDeque<ReadAt>,
    pub shared: Arc<SharedBacklog>,
}

impl PartitionBacklog {
    /// `acknowledged`: the offset below which the previous run acknowledged everything
    /// (the start plan's committed offset); records below it re-read for state do not count.
    pub fn new(acknowledged: i64) -> Self {
        let shared = Arc::new(SharedBacklog::default());
        shared.acknowledged_offset.store(acknowledged, Ordering::Relaxed);
        PartitionBacklog {
            waiting: VecDeque::new(),
            shared,
        }
    }

    /// A record at `offset` was read into logical time `time`.
    pub fn read(&mut self, time: Time, offset: i64, now_unix_ms: u64) {
        if offset < self.shared.acknowledged_offset.load(Ordering::Relaxed) {
            return;
        }
        match self.waiting.back_mut() {
            Some(last) if last.time == time => last.end_offset = offset + 1,
            _ => {
                if self.waiting.is_empty() {
                    self.shared.oldest_read_unix_ms.store(now_unix_ms, Ordering::Relaxed);
                }
                self.waiting.push_back(ReadAt {
                    time,
                    first_read_unix_ms: now_unix_ms,
                    end_offset: offset + 1,
                });
            }
        }
    }

    /// Every time below `frontier` (every time, if `None`) is acknowledged by every sink.
    pub fn acknowledged(&mut self, frontier: Option<Time>) {
        let mut moved = false;
        while let Some(first) = self.waiting.front() {
            if frontier.is_some_and(|frontier| first.time >= frontier) {
                break;
            }
            self.shared
                .acknowledged_offset
                .fetch_max(first.end_offset, Ordering::Relaxed);
            self.waiting.pop_front();
            moved = true;
        }
        if moved {
            let oldest = self.waiting.front().map_or(0, |first| first.first_read_unix_ms);
            self.shared.oldest_read_unix_ms.store(oldest, Ordering::Relaxed);
        }
    }
}

/// Milliseconds since the Unix epoch, as the backlog records read times.
pub fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_acknowledged_offset_follows_the_frontier_and_the_oldest_read_with_it() {
        let mut backlog = PartitionBacklog::new(10);
        backlog.read(0, 5, 100); // re-read for state: acknowledged before
        backlog.read(7, 10, 200);
        backlog.read(7, 11, 210);
        backlog.read(9, 12, 300);
        let shared = backlog.shared.clone();
        assert_eq!(shared.acknowledged_offset.load(Ordering::Relaxed), 10);
        assert_eq!(shared.oldest_read_unix_ms.load(Ordering::Relaxed), 200);
        backlog.acknowledged(Some(7));
        assert_eq!(shared.acknowledged_offset.load(Ordering::Relaxed), 10);
        backlog.acknowledged(Some(8));
        assert_eq!(shared.acknowledged_offset.load(Ordering::Relaxed), 12);
        assert_eq!(shared.oldest_read_unix_ms.load(Ordering::Relaxed), 300);
        backlog.acknowledged(None);
        assert_eq!(shared.acknowledged_offset.load(Ordering::Relaxed), 13);
        assert_eq!(shared.oldest_read_unix_ms.load(Ordering::Relaxed), 0, "nothing waits");
    }
}
