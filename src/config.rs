//! The job's configuration file (TOML), for `eligibility run --config job.toml`.
//!
//! Every option has a default except the Kafka brokers and at least one sink; unknown keys
//! are errors, so a typo fails at start-up instead of being ignored. `docs/configuration.md`
//! documents every option; keep the two in step.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    #[serde(default)]
    pub cluster: ClusterConfig,
    pub kafka: KafkaConfig,
    #[serde(default)]
    pub batching: BatchingConfig,
    #[serde(default)]
    pub sinks: SinksConfig,
    #[serde(default)]
    pub dead_letter: DeadLetterConfig,
    #[serde(default)]
    pub progress: ProgressConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub shutdown: ShutdownConfig,
}

/// Cluster layout; command-line options override it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Worker threads per process.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Processes in the cluster.
    #[serde(default = "default_processes")]
    pub processes: usize,
    /// File of `host:port` lines, one per process.
    pub hostfile: Option<PathBuf>,
    /// The peers as a `host:port` pattern with `{i}` for the process index.
    pub peers: Option<String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            workers: default_workers(),
            processes: default_processes(),
            hostfile: None,
            peers: None,
        }
    }
}

fn default_workers() -> usize {
    1
}

fn default_processes() -> usize {
    1
}

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
}

fn default_products_topic() -> String {
    "products".into()
}

fn default_campaigns_topic() -> String {
    "campaigns".into()
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
            client: BTreeMap::new(),
            client_env: BTreeMap::new(),
            rehydration_chunk_records: default_rehydration_chunk_records(),
            max_unacknowledged_records: default_max_unacknowledged_records(),
            max_unacknowledged_ms: default_max_unacknowledged_ms(),
        }
    }

    /// The client properties with secrets resolved from the environment.
    pub fn client_properties(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let mut properties = self.client.clone();
        for (property, variable) in &self.client_env {
            let value = std::env::var(variable).with_context(|| {
                format!("kafka.client_env: environment variable {variable} (for {property}) is not set")
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
    /// …or when it has been open this long (milliseconds), whichever comes first.
    #[serde(default = "default_batch_max_delay_ms")]
    pub max_delay_ms: u64,
}

impl Default for BatchingConfig {
    fn default() -> Self {
        BatchingConfig {
            max_records: default_batch_max_records(),
            max_delay_ms: default_batch_max_delay_ms(),
        }
    }
}

fn default_batch_max_records() -> u64 {
    10_000
}

fn default_batch_max_delay_ms() -> u64 {
    100
}

/// Where pair changes go; at least one sink must be configured.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinksConfig {
    pub jsonl: Option<JsonlSinkConfig>,
    pub elasticsearch: Option<crate::sink::elasticsearch::config::ElasticsearchConfig>,
    pub couchbase: Option<crate::sink::couchbase::config::CouchbaseConfig>,
}

/// The JSONL change log, written by process 0.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JsonlSinkConfig {
    /// The change log; appended to across restarts.
    pub path: PathBuf,
    /// How often (milliseconds) the file is flushed and synced; a time is acknowledged only
    /// once it is synced.
    #[serde(default = "default_sync_interval_ms")]
    pub sync_interval_ms: u64,
}

fn default_sync_interval_ms() -> u64 {
    200
}

/// Where rejected records go: a Kafka topic when `topic` is set, else a JSONL file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterConfig {
    /// Kafka topic for dead letters (created if missing, on the source's brokers).
    pub topic: Option<String>,
    /// JSONL file for dead letters, when no topic is set; appended to across restarts.
    #[serde(default = "default_dead_letter_path")]
    pub path: PathBuf,
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        DeadLetterConfig {
            topic: None,
            path: default_dead_letter_path(),
        }
    }
}

fn default_dead_letter_path() -> PathBuf {
    "rejected.jsonl".into()
}

/// The progress record: per partition, the offset below which every record's output is
/// acknowledged by every sink.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProgressConfig {
    /// File holding the progress record (default: the JSONL change log's path with
    /// `.progress.json` appended).
    pub path: Option<PathBuf>,
    /// How often (milliseconds) the progress record is written at most.
    #[serde(default = "default_progress_interval_ms")]
    pub interval_ms: u64,
}

impl Default for ProgressConfig {
    fn default() -> Self {
        ProgressConfig {
            path: None,
            interval_ms: default_progress_interval_ms(),
        }
    }
}

fn default_progress_interval_ms() -> u64 {
    1_000
}

/// The graceful stop on SIGTERM or SIGINT.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShutdownConfig {
    /// How long (milliseconds) a graceful stop may drain and flush before the process exits
    /// anyway; below Kubernetes' `terminationGracePeriodSeconds` (60 s).
    #[serde(default = "default_shutdown_grace_ms")]
    pub grace_ms: u64,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            grace_ms: default_shutdown_grace_ms(),
        }
    }
}

fn default_shutdown_grace_ms() -> u64 {
    45_000
}

/// The metrics and health endpoint.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address to serve `/metrics` (Prometheus text) and `/health` on; empty to disable.
    #[serde(default = "default_metrics_listen")]
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: default_metrics_listen(),
        }
    }
}

fn default_metrics_listen() -> String {
    "127.0.0.1:9464".into()
}

impl JobConfig {
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read the config file {}", path.display()))?;
        let config: JobConfig =
            toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.sinks.jsonl.is_none() && self.sinks.elasticsearch.is_none() && self.sinks.couchbase.is_none() {
            bail!("no sink is configured: add [sinks.jsonl], [sinks.elasticsearch] or [sinks.couchbase]");
        }
        if let Some(couchbase) = &self.sinks.couchbase {
            couchbase.keyspace()?;
        }
        if self.batching.max_records == 0 {
            bail!("batching.max_records must be at least 1");
        }
        if self.kafka.products_topic == self.kafka.campaigns_topic {
            bail!("kafka.products_topic and kafka.campaigns_topic must differ");
        }
        Ok(())
    }

    /// Where the progress record lives when it is a file (no Elasticsearch sink): the
    /// configured path, else next to the JSONL change log, else in the working directory.
    pub fn progress_path(&self) -> PathBuf {
        self.progress.path.clone().unwrap_or_else(|| match &self.sinks.jsonl {
            Some(jsonl) => {
                let mut path = jsonl.path.clone().into_os_string();
                path.push(".progress.json");
                PathBuf::from(path)
            }
            None => PathBuf::from("eligibility-progress.json"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_config_gets_every_default() {
        let config: JobConfig = toml::from_str(
            r#"
            [kafka]
            brokers = "127.0.0.1:9092"
            [sinks.jsonl]
            path = "out/changes.jsonl"
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        assert_eq!(config.kafka.products_topic, "products");
        assert_eq!(config.batching.max_records, 10_000);
        assert_eq!(config.batching.max_delay_ms, 100);
        assert_eq!(config.progress_path(), PathBuf::from("out/changes.jsonl.progress.json"));
        assert_eq!(config.dead_letter.path, PathBuf::from("rejected.jsonl"));
        assert_eq!(config.metrics.listen, "127.0.0.1:9464");
    }

    #[test]
    fn unknown_keys_and_missing_sinks_are_errors() {
        let typo = toml::from_str::<JobConfig>("[kafka]\nbrokers = \"b\"\nbatch_size = 3\n");
        assert!(typo.unwrap_err().to_string().contains("unknown field"));
        let no_sink: JobConfig = toml::from_str("[kafka]\nbrokers = \"b\"\n").unwrap();
        assert!(no_sink.validate().unwrap_err().to_string().contains("no sink"));
    }

    #[test]
    fn secrets_come_from_the_environment() {
        let mut config: JobConfig = toml::from_str(
            r#"
            [kafka]
            brokers = "b:9092"
            client = { "security.protocol" = "SASL_SSL" }
            client_env = { "sasl.password" = "ELIGIBILITY_TEST_SECRET_PRESENT" }
            "#,
        )
        .unwrap();
        std::env::set_var("ELIGIBILITY_TEST_SECRET_PRESENT", "hunter2");
        let properties = config.kafka.client_properties().unwrap();
        assert_eq!(properties["sasl.password"], "hunter2");
        assert_eq!(properties["security.protocol"], "SASL_SSL");
        config
            .kafka
            .client_env
            .insert("sasl.username".into(), "ELIGIBILITY_TEST_SECRET_ABSENT".into());
        let error = config.kafka.client_properties().unwrap_err().to_string();
        assert!(error.contains("ELIGIBILITY_TEST_SECRET_ABSENT"), "{error}");
        assert!(!error.contains("hunter2"));
    }
}
