//! `[kafka]` and `[batching]`: the Kafka source's connection, topics and logical times.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::clock::BatchPolicy;
use crate::source::SourceError;

/// The Kafka source.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]`.
    pub brokers: String,
    #[serde(default = "default_products_topic")]
    pub products_topic: String,
    #[serde(default = "default_campaigns_topic")]
    pub campaigns_topic: String,
    /// The category tree (`id -> parent`); optional: without this topic on the brokers,
    /// every category is a root and the job reads only the other two.
    #[serde(default = "default_categories_topic")]
    pub categories_topic: String,
    /// librdkafka properties passed through as they are (`security.protocol`,
    /// `sasl.mechanism`, `ssl.ca.location`, …). Never put secrets here: use `client_env`.
    #[serde(default)]
    pub client: BTreeMap<String, String>,
    /// librdkafka properties read from environment variables: property -> variable name,
    /// e.g. `"sasl.password" = "KAFKA_PASSWORD"`. A missing variable is an error.
    #[serde(default)]
    pub client_env: BTreeMap<String, String>,
    /// Records per logical time while rebuilding state at start-up.
    #[serde(default = "default_rehydration_chunk_records")]
    pub rehydration_chunk_records: u64,
    /// How far (milliseconds of logical time) the input may run ahead of what the sinks have
    /// acknowledged before the job stops reading.
    #[serde(default = "default_max_unacknowledged_ms")]
    pub max_unacknowledged_ms: u64,
    /// How many records of closed batches a worker may have read and not yet had
    /// acknowledged before it stops reading: bounds the memory a backlog can fill.
    #[serde(default = "default_max_unacknowledged_records")]
    pub max_unacknowledged_records: u64,
    /// What the job's clock follows, which decides when scheduled campaigns open and close
    /// (SPEC.md, "Campaign windows"): `"wall"`, the wall clock (UTC) when a time is formed,
    /// with a time formed at every window bound even when no record arrives; or
    /// `"records"`, the greatest timestamp of the records read, which replays a log
    /// exactly as file mode reads it.
    #[serde(default)]
    pub clock: ClockSetting,
}

/// `[kafka] clock`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockSetting {
    #[default]
    Wall,
    Records,
}

fn default_products_topic() -> String {
    "products".into()
}

fn default_campaigns_topic() -> String {
    "campaigns".into()
}

fn default_categories_topic() -> String {
    "categories".into()
}

fn default_rehydration_chunk_records() -> u64 {
    100_000
}

fn default_max_unacknowledged_ms() -> u64 {
    30_000
}

fn default_max_unacknowledged_records() -> u64 {
    100_000
}

impl KafkaConfig {
    /// Every default, with these brokers.
    pub fn for_brokers(brokers: &str) -> Self {
        KafkaConfig {
            brokers: brokers.to_owned(),
            products_topic: default_products_topic(),
            campaigns_topic: default_campaigns_topic(),
            categories_topic: default_categories_topic(),
            client: BTreeMap::new(),
            client_env: BTreeMap::new(),
            rehydration_chunk_records: default_rehydration_chunk_records(),
            max_unacknowledged_records: default_max_unacknowledged_records(),
            max_unacknowledged_ms: default_max_unacknowledged_ms(),
            clock: ClockSetting::default(),
        }
    }

    /// The client properties with secrets resolved from the environment.
    pub fn client_properties(&self) -> Result<BTreeMap<String, String>, SourceError> {
        let mut properties = self.client.clone();
        for (property, variable) in &self.client_env {
            let value = std::env::var(variable).map_err(|_| {
                SourceError::Config(format!(
                    "kafka.client_env: environment variable {variable} (for {property}) is not set"
                ))
            })?;
            properties.insert(property.clone(), value);
        }
        Ok(properties)
    }
}

/// How records are grouped into logical times.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchingConfig {
    /// A batch closes when a worker has read this many records into it…
    #[serde(default = "default_batch_max_records")]
    pub max_records: u64,
    /// …or when it has been open this long (milliseconds), or as soon as nothing more is
    /// ready, whichever comes first…
    #[serde(default = "default_batch_max_delay_ms")]
    pub max_delay_ms: u64,
    /// …but no sooner than this (milliseconds) after the previous batch closed: a steady
    /// trickle then pays the per-batch cost at most 1000 / `min_interval_ms` times a second,
    /// for at most this much freshness. A lone change after a quiet spell waits for nothing.
    #[serde(default = "default_batch_min_interval_ms")]
    pub min_interval_ms: u64,
    /// While an earlier batch still waits for the sinks' acknowledgement, or records are
    /// waiting to be read (by the cached high watermarks, or a poll that fills its budget),
    /// a batch stays open and grows up to this many records: a backlog forms fewer, larger
    /// batches, and the intermediate states between them are never computed or written. A
    /// batch that grew past `max_records` (counting every worker of the process at its
    /// time) keeps growing until nothing more is read for `max_delay_ms`. Equal to
    /// `max_records`, batches never grow.
    #[serde(default = "default_batch_max_records_behind")]
    pub max_records_behind: u64,
}

impl Default for BatchingConfig {
    fn default() -> Self {
        BatchingConfig {
            max_records: default_batch_max_records(),
            max_delay_ms: default_batch_max_delay_ms(),
            min_interval_ms: default_batch_min_interval_ms(),
            max_records_behind: default_batch_max_records_behind(),
        }
    }
}

fn default_batch_max_records() -> u64 {
    10_000
}

fn default_batch_max_delay_ms() -> u64 {
    100
}

fn default_batch_min_interval_ms() -> u64 {
    50
}

fn default_batch_max_records_behind() -> u64 {
    100_000
}

impl BatchingConfig {
    pub fn policy(&self) -> BatchPolicy {
        BatchPolicy {
            max_records: self.max_records,
            max_records_behind: self.max_records_behind,
            max_delay: Duration::from_millis(self.max_delay_ms),
            min_interval: Duration::from_millis(self.min_interval_ms),
        }
    }
}
