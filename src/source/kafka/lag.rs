//! Consumer lag from the partitions' high watermarks, fetched on a thread of its own.
//!
//! librdkafka's statistics arrive only while the consumer is polled, and the job stops
//! polling exactly when lag matters (a sink outage holds the source back). So a watcher
//! fetches each partition's high watermark every interval, whether or not the worker
//! reads, and sets `eligibility_consumer_lag` = high watermark - the next offset the worker
//! will hand to the dataflow.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::backlog::{unix_millis, SharedBacklog};
use super::context::SourceContext;
use crate::metrics::Metrics;

/// How often the high watermarks are fetched.
pub const LAG_INTERVAL: Duration = Duration::from_secs(2);

/// One partition the watcher reports on: its name and the worker's position in it.
pub struct Watched {
    pub topic: String,
    pub partition: i32,
    pub position: Arc<AtomicI64>,
    pub backlog: Arc<SharedBacklog>,
}

/// Stops the watcher when dropped (with the source).
pub struct LagWatcher {
    stop: Arc<AtomicBool>,
}

impl LagWatcher {
    pub fn start(consumer: Arc<BaseConsumer<SourceContext>>, watched: Vec<Watched>, metrics: Arc<Metrics>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        if !watched.is_empty() {
            let stop = stop.clone();
            let spawned = std::thread::Builder::new()
                .name("kafka-lag".into())
                .spawn(move || watch(&consumer, &watched, &metrics, &stop));
            if let Err(error) = spawned {
                tracing::warn!(%error, "cannot start the consumer lag watcher; eligibility_consumer_lag stays unset");
            }
        }
        LagWatcher { stop }
    }
}

impl Drop for LagWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn watch(consumer: &BaseConsumer<SourceContext>, watched: &[Watched], metrics: &Metrics, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        for partition in watched {
            // While the broker is unreachable the last known lag stays: it is not known to be 0.
            match consumer.fetch_watermarks(&partition.topic, partition.partition, LAG_INTERVAL) {
                Ok((_low, high)) => {
                    let labels = Metrics::partition(&partition.topic, partition.partition);
                    let position = partition.position.load(Ordering::Relaxed);
                    metrics.consumer_lag.get_or_create(&labels).set((high - position).max(0));
                    let acknowledged = partition.backlog.acknowledged_offset.load(Ordering::Relaxed);
                    metrics
                        .records_unacknowledged
                        .get_or_create(&labels)
                        .set((high - acknowledged).max(0));
                }
                Err(error) => {
                    tracing::debug!(topic = %partition.topic, partition = partition.partition, %error, "cannot fetch the high watermark")
                }
            }
        }
        // The age of the oldest waiting record needs no broker.
        let now = unix_millis();
        for partition in watched {
            let oldest = partition.backlog.oldest_read_unix_ms.load(Ordering::Relaxed);
            let age = match oldest {
                0 => 0.0,
                read => now.saturating_sub(read) as f64 / 1000.0,
            };
            metrics
                .oldest_unacknowledged_seconds
                .get_or_create(&Metrics::partition(&partition.topic, partition.partition))
                .set(age);
        }
        // Sleep in short steps so that a stopped source does not keep the thread long.
        let mut slept = Duration::ZERO;
        while slept < LAG_INTERVAL && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            slept += Duration::from_millis(100);
        }
    }
}
