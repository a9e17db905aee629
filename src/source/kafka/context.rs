//! The consumer's context: librdkafka's errors, logs and statistics, turned into health
//! and log lines.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientContext;

use crate::metrics::Metrics;

/// The health component name of the source.
pub const HEALTH_COMPONENT: &str = "kafka";

/// How often a repeated consumer error is logged.
pub const ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Feeds librdkafka's errors and statistics into the health report and the lag gauges.
pub struct SourceContext {
    metrics: Arc<Metrics>,
    last_error_log: Mutex<Option<Instant>>,
}

impl SourceContext {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        SourceContext {
            metrics,
            last_error_log: Mutex::new(None),
        }
    }
}

impl ClientContext for SourceContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        // Connection failures also arrive through `error`, which says them once per interval.
        use rdkafka::config::RDKafkaLogLevel as Level;
        let serious = matches!(
            level,
            Level::Emerg | Level::Alert | Level::Critical | Level::Error | Level::Warning
        );
        if serious && fac != "FAIL" {
            tracing::warn!(facility = fac, "librdkafka: {log_message}");
        } else {
            tracing::debug!(facility = fac, "librdkafka: {log_message}");
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // The end of a partition is news for the partition queue, not an error.
        if matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        ) {
            return;
        }
        if matches!(error, KafkaError::Global(RDKafkaErrorCode::AllBrokersDown)) {
            self.metrics
                .health
                .set_unhealthy(HEALTH_COMPONENT, format!("no broker reachable: {reason}"));
        }
        let mut last = self.last_error_log.lock().expect("poisoned");
        if last.is_none_or(|at| at.elapsed() >= ERROR_LOG_INTERVAL) {
            *last = Some(Instant::now());
            tracing::warn!(%error, reason, "Kafka client error; librdkafka keeps retrying");
        }
    }

    fn stats(&self, statistics: Statistics) {
        let connected = statistics
            .brokers
            .values()
            .any(|broker| broker.nodeid >= 0 && broker.state == "UP");
        if connected {
            self.metrics.health.set_healthy(HEALTH_COMPONENT);
        } else {
            self.metrics
                .health
                .set_unhealthy(HEALTH_COMPONENT, "no connection to any broker");
        }
        // The lag gauges come from `lag.rs`: statistics arrive only while the worker polls.
    }
}

impl ConsumerContext for SourceContext {}
