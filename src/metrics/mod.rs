//! What the job has done and how it is doing: Prometheus metrics and component health.
//!
//! One `Metrics` per process, shared by its workers; every handle is cheap to update from
//! any thread. Labels stay few: topic and partition, a rejection code, a sink name.

pub mod health;
pub mod http;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use self::health::Health;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub topic: String,
    pub partition: i32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    pub sink: String,
}

fn histogram_of_seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 18))
}

fn histogram_of_records() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 4.0, 12))
}

/// Every metric of the job.
pub struct Metrics {
    registry: Registry,
    pub health: Health,
    /// Records read (rejected ones included).
    pub records_read: Counter,
    pub records_consumed: Family<PartitionLabels, Counter>,
    /// Records on another partition than murmur2 gives their key (`source/kafka/placement.rs`).
    pub records_misplaced: Family<PartitionLabels, Counter>,
    pub consumer_lag: Family<PartitionLabels, Gauge>,
    pub records_unacknowledged: Family<PartitionLabels, Gauge>,
    pub oldest_unacknowledged_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
    pub committed_offset: Family<PartitionLabels, Gauge>,
    pub records_rejected: Family<ReasonLabels, Counter>,
    /// All rejections, for the run summary.
    pub rejected: Counter,
    pub batches_closed: Counter,
    pub batch_records: Histogram,
    /// From closing a batch to every sink acknowledging it.
    pub batch_latency_seconds: Histogram,
    /// The acknowledged frontier (logical time) of all sinks.
    pub output_frontier: Gauge,
    /// Per change sink: pair upserts and deletes written, and pairs that exist as far as
    /// this process's instances of the sink have seen.
    pub pairs_upserted: Family<SinkLabels, Counter>,
    pub pairs_deleted: Family<SinkLabels, Counter>,
    pub pairs_live: Family<SinkLabels, Gauge>,
    pub dead_letters_written: Counter,
    /// The most rebuilt pairs the reconcile kept waiting for the held pairs at this process's
    /// restart, set once the restart's first live time is acknowledged: 0 is right.
    pub reconcile_kept_waiting: Gauge,
    /// Sink-specific counters register themselves here.
    pub sinks: SinkMetrics,
    /// When a worker loop last went round (Unix ms; 0 before the workers start).
    pub heartbeat: std::sync::atomic::AtomicU64,
}

/// Counters every sink keeps, labelled by sink.
pub struct SinkMetrics {
    pub requests: Family<SinkLabels, Counter>,
    pub retries: Family<SinkLabels, Counter>,
    pub documents_written: Family<SinkLabels, Counter>,
    pub documents_deleted: Family<SinkLabels, Counter>,
    pub documents_rejected: Family<SinkLabels, Counter>,
    pub writes_coalesced: Family<SinkLabels, Counter>,
    pub requests_in_flight: Family<SinkLabels, Gauge>,
    pub request_seconds: Family<SinkLabels, Histogram>,
}

/// One sink's series, as handles sharing the registered values.
#[derive(Clone)]
pub struct SinkHandles {
    pub pairs_upserted: Counter,
    pub pairs_deleted: Counter,
    pub pairs_live: Gauge,
    pub requests: Counter,
    pub retries: Counter,
    pub documents_written: Counter,
    pub documents_deleted: Counter,
    pub documents_rejected: Counter,
    pub writes_coalesced: Counter,
    pub requests_in_flight: Gauge,
    pub request_seconds: Histogram,
}

impl SinkHandles {
    /// Counts the pair changes of one time: upserts, deletes, and pairs begun or ended.
    pub fn record_changes(&self, changes: &[dataflows::PairChange]) {
        let mut upserts = 0;
        let mut live = 0i64;
        for change in changes {
            match (change.figures.is_some(), change.previous.is_some()) {
                (true, false) => live += 1,
                (false, true) => live -= 1,
                _ => {}
            }
            upserts += u64::from(change.figures.is_some());
        }
        self.pairs_upserted.inc_by(upserts);
        self.pairs_deleted.inc_by(changes.len() as u64 - upserts);
        self.pairs_live.inc_by(live);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("eligibility");
        let metrics = Metrics {
            health: Health::default(),
            records_read: Counter::default(),
            records_consumed: Family::default(),
            records_misplaced: Family::default(),
            consumer_lag: Family::default(),
            records_unacknowledged: Family::default(),
            oldest_unacknowledged_seconds: Family::default(),
            committed_offset: Family::default(),
            records_rejected: Family::default(),
            rejected: Counter::default(),
            batches_closed: Counter::default(),
            batch_records: histogram_of_records(),
            batch_latency_seconds: histogram_of_seconds(),
            output_frontier: Gauge::default(),
            pairs_upserted: Family::default(),
            pairs_deleted: Family::default(),
            pairs_live: Family::default(),
            dead_letters_written: Counter::default(),
            reconcile_kept_waiting: Gauge::default(),
            sinks: SinkMetrics {
                requests: Family::default(),
                retries: Family::default(),
                documents_written: Family::default(),
                documents_deleted: Family::default(),
                documents_rejected: Family::default(),
                writes_coalesced: Family::default(),
                requests_in_flight: Family::default(),
                request_seconds: Family::new_with_constructor(histogram_of_seconds),
            },
            registry: Registry::default(),
            heartbeat: std::sync::atomic::AtomicU64::new(0),
        };
        registry.register(
            "component_healthy",
            "1 while a component (source, sink) can make progress, 0 while not",
            metrics.health.gauge.clone(),
        );
        registry.register(
            "records_read",
            "Records read from the sources, rejected ones included",
            metrics.records_read.clone(),
        );
        registry.register(
            "records_consumed",
            "Kafka records consumed, per topic and partition",
            metrics.records_consumed.clone(),
        );
        registry.register(
            "records_misplaced",
            "Kafka records on another partition than the Java clients' murmur2 gives their key: a producer places keys otherwise, so a key may live in two partitions",
            metrics.records_misplaced.clone(),
        );
        registry.register(
            "consumer_lag",
            "Records between the consumer's position and the partition's end",
            metrics.consumer_lag.clone(),
        );
        registry.register(
            "records_unacknowledged",
            "Records between the offset every sink has acknowledged (what the next progress save commits) and the partition's end: the backlog",
            metrics.records_unacknowledged.clone(),
        );
        registry.register(
            "oldest_unacknowledged_seconds",
            "Seconds since the oldest record read and not yet acknowledged by every sink was read, per partition; 0 when none waits",
            metrics.oldest_unacknowledged_seconds.clone(),
        );
        registry.register(
            "committed_offset",
            "Offset below which every record's output is acknowledged",
            metrics.committed_offset.clone(),
        );
        registry.register(
            "records_rejected",
            "Records rejected as malformed, by reason",
            metrics.records_rejected.clone(),
        );
        registry.register(
            "batches_closed",
            "Logical times (batches) closed by the sources",
            metrics.batches_closed.clone(),
        );
        registry.register(
            "batch_records",
            "Records per closed batch",
            metrics.batch_records.clone(),
        );
        registry.register(
            "batch_latency_seconds",
            "From closing a batch to every sink acknowledging its output",
            metrics.batch_latency_seconds.clone(),
        );
        registry.register(
            "output_frontier",
            "Logical time below which every sink has acknowledged",
            metrics.output_frontier.clone(),
        );
        registry.register("pairs_upserted", "Pair upserts written", metrics.pairs_upserted.clone());
        registry.register("pairs_deleted", "Pair deletes written", metrics.pairs_deleted.clone());
        registry.register(
            "pairs_live",
            "Pairs that exist, as written by this process",
            metrics.pairs_live.clone(),
        );
        registry.register(
            "dead_letters_written",
            "Rejected records written to the dead-letter output",
            metrics.dead_letters_written.clone(),
        );
        registry.register(
            "reconcile_kept_waiting_pairs",
            "Most rebuilt pairs the restart's reconcile kept waiting for the held pairs (0 is right)",
            metrics.reconcile_kept_waiting.clone(),
        );
        let sinks = &metrics.sinks;
        registry.register("sink_requests", "Requests sent to a sink", sinks.requests.clone());
        registry.register(
            "sink_retries",
            "Requests or documents retried after a temporary failure",
            sinks.retries.clone(),
        );
        registry.register(
            "sink_documents_written",
            "Documents written (upserted) by a sink",
            sinks.documents_written.clone(),
        );
        registry.register(
            "sink_documents_deleted",
            "Documents deleted by a sink",
            sinks.documents_deleted.clone(),
        );
        registry.register(
            "sink_documents_rejected",
            "Documents a sink rejected for good (sent to the dead-letter output)",
            sinks.documents_rejected.clone(),
        );
        registry.register(
            "sink_writes_coalesced",
            "Document writes a sink dropped unsent because a newer version of the document replaced them",
            sinks.writes_coalesced.clone(),
        );
        registry.register(
            "sink_requests_in_flight",
            "Requests to a sink not yet answered",
            sinks.requests_in_flight.clone(),
        );
        registry.register(
            "sink_request_seconds",
            "Latency of sink requests",
            sinks.request_seconds.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector));
        Metrics { registry, ..metrics }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry).expect("writing to a string cannot fail");
        text
    }

    /// The handles of one sink's series, looked up once (its writes then take no lock).
    pub fn sink_handles(&self, name: &str) -> SinkHandles {
        let labels = Self::sink(name);
        SinkHandles {
            pairs_upserted: self.pairs_upserted.get_or_create(&labels).clone(),
            pairs_deleted: self.pairs_deleted.get_or_create(&labels).clone(),
            pairs_live: self.pairs_live.get_or_create(&labels).clone(),
            requests: self.sinks.requests.get_or_create(&labels).clone(),
            retries: self.sinks.retries.get_or_create(&labels).clone(),
            documents_written: self.sinks.documents_written.get_or_create(&labels).clone(),
            documents_deleted: self.sinks.documents_deleted.get_or_create(&labels).clone(),
            documents_rejected: self.sinks.documents_rejected.get_or_create(&labels).clone(),
            writes_coalesced: self.sinks.writes_coalesced.get_or_create(&labels).clone(),
            requests_in_flight: self.sinks.requests_in_flight.get_or_create(&labels).clone(),
            request_seconds: self.sinks.request_seconds.get_or_create(&labels).clone(),
        }
    }

    /// (upserts, deletes, live pairs) of `sink`.
    pub fn pair_counts(&self, sink: &str) -> (u64, u64, i64) {
        let labels = Self::sink(sink);
        (
            self.pairs_upserted.get_or_create(&labels).get(),
            self.pairs_deleted.get_or_create(&labels).get(),
            self.pairs_live.get_or_create(&labels).get(),
        )
    }

    /// Notes that a worker loop is going round.
    pub fn beat(&self) {
        self.heartbeat
            .store(unix_millis(), std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the workers are alive: not started yet, or a loop went round within `within`.
    pub fn alive(&self, within: std::time::Duration) -> bool {
        let beat = self.heartbeat.load(std::sync::atomic::Ordering::Relaxed);
        beat == 0 || unix_millis().saturating_sub(beat) <= within.as_millis() as u64
    }

    pub fn partition(topic: &str, partition: i32) -> PartitionLabels {
        PartitionLabels {
            topic: topic.to_owned(),
            partition,
        }
    }

    pub fn sink(name: &str) -> SinkLabels {
        SinkLabels { sink: name.to_owned() }
    }
}

/// The process's CPU time and resident memory, read at each scrape: the dashboard's per-pod
/// panels and the plots of a local run need no cAdvisor.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `usage` is valid for writes of one `rusage`, which the call fills on success.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) } == 0 {
            // SAFETY: filled by the successful call above.
            let usage = unsafe { usage.assume_init() };
            let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            let cpu = ConstCounter::new(seconds(usage.ru_utime) + seconds(usage.ru_stime));
            let help = "User and system CPU time of the process, in seconds";
            cpu.encode(encoder.encode_descriptor("process_cpu_seconds", help, None, cpu.metric_type())?)?;
        }
        // `VmRSS:   123456 kB` (Linux); elsewhere the gauge is absent.
        let rss_kib = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<i64>().ok()
        });
        if let Some(kib) = rss_kib {
            let rss = ConstGauge::new(kib * 1024);
            let help = "Resident memory of the process, in bytes";
            rss.encode(encoder.encode_descriptor("process_resident_memory_bytes", help, None, rss.metric_type())?)?;
        }
        Ok(())
    }
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_cpu_time_and_resident_memory_are_exposed() {
        let text = Metrics::new().encode();
        let value = |name: &str| -> f64 {
            let line = text.lines().find(|line| line.starts_with(&format!("{name} ")));
            line.and_then(|line| line.rsplit(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {text}"))
        };
        assert!(value("eligibility_process_cpu_seconds_total") > 0.0);
        assert!(
            value("eligibility_process_resident_memory_bytes") > 1e6,
            "a running test holds more than 1 MB"
        );
    }
}
