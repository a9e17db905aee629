//! The job's configuration file (TOML), for `eligibility run --config job.toml`.
//!
//! Every option has a default except the Kafka brokers and at least one sink; unknown keys
//! are errors, so a typo fails at start-up instead of being ignored. `docs/configuration.md`
//! documents every option; keep the two in step.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cluster::layers::ClusterConfig;
use crate::sink::bulk::settings::reject_unknown;
use crate::sink::couchbase::config::{CouchbaseConfig, SECTION as COUCHBASE_SECTION};
use crate::sink::elasticsearch::config::{ElasticsearchConfig, SECTION as ELASTICSEARCH_SECTION};
use crate::source::kafka::config::{BatchingConfig, KafkaConfig};

/// Why a config file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{0}")]
    Invalid(String),
}

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

/// Where pair changes go; at least one sink must be configured.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinksConfig {
    pub jsonl: Option<JsonlSinkConfig>,
    pub elasticsearch: Option<ElasticsearchConfig>,
    pub couchbase: Option<CouchbaseConfig>,
    /// Threads running the requests of the Elasticsearch and Couchbase sinks (off the
    /// timely workers).
    #[serde(default = "default_io_threads")]
    pub io_threads: usize,
}

fn default_io_threads() -> usize {
    2
}

impl Default for SinksConfig {
    fn default() -> Self {
        SinksConfig {
            jsonl: None,
            elasticsearch: None,
            couchbase: None,
            io_threads: default_io_threads(),
        }
    }
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
    /// Partitions of the dead-letter topic when the job creates it.
    #[serde(default = "one")]
    pub topic_partitions: i32,
    /// Replication factor of the dead-letter topic when the job creates it (1 suits one
    /// broker; set 3 on a production cluster).
    #[serde(default = "one")]
    pub topic_replication_factor: i32,
    /// JSONL file for dead letters, when no topic is set; appended to across restarts.
    #[serde(default = "default_dead_letter_path")]
    pub path: PathBuf,
    /// How often (milliseconds) the dead-letter file is flushed and synced; a time is
    /// acknowledged only once it is synced.
    #[serde(default = "default_sync_interval_ms")]
    pub sync_interval_ms: u64,
}

fn one() -> i32 {
    1
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        DeadLetterConfig {
            topic: None,
            topic_partitions: one(),
            topic_replication_factor: one(),
            path: default_dead_letter_path(),
            sync_interval_ms: default_sync_interval_ms(),
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
    /// The config file's text and the config, checked.
    pub fn load(path: &Path) -> Result<(String, Self), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let config: JobConfig = toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        config.validate()?;
        Ok((text, config))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: &str| Err(ConfigError::Invalid(message.to_owned()));
        if self.sinks.jsonl.is_none() && self.sinks.elasticsearch.is_none() && self.sinks.couchbase.is_none() {
            return invalid("no sink is configured: add [sinks.jsonl], [sinks.elasticsearch] or [sinks.couchbase]");
        }
        if let Some(elasticsearch) = &self.sinks.elasticsearch {
            reject_unknown(ELASTICSEARCH_SECTION, &elasticsearch.unknown).map_err(ConfigError::Invalid)?;
        }
        if let Some(couchbase) = &self.sinks.couchbase {
            reject_unknown(COUCHBASE_SECTION, &couchbase.unknown).map_err(ConfigError::Invalid)?;
            couchbase
                .keyspace()
                .map_err(|error| ConfigError::Invalid(error.to_string()))?;
        }
        if self.batching.max_records == 0 {
            return invalid("batching.max_records must be at least 1");
        }
        let kafka = &self.kafka;
        if kafka.products_topic == kafka.campaigns_topic
            || kafka.products_topic == kafka.categories_topic
            || kafka.campaigns_topic == kafka.categories_topic
        {
            return invalid("kafka.products_topic, campaigns_topic and categories_topic must differ");
        }
        if self.sinks.io_threads == 0 {
            return invalid("sinks.io_threads must be at least 1");
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
    fn sink_tables_take_their_shared_sub_tables_and_refuse_unknown_keys() {
        let config: JobConfig = toml::from_str(
            r#"
            [kafka]
            brokers = "b:9092"
            [sinks.elasticsearch]
            index = "pairs"
            bulk = { max_actions = 300 }
            retry = { initial_ms = 50, max_ms = 2000 }
            tls = { insecure_skip_verify = true }
            auth = { username = "u", password_env = "P" }
            [sinks.couchbase]
            bucket = "b"
            bulk = { max_in_flight = 8 }
            "#,
        )
        .unwrap();
        config.validate().unwrap();
        let elasticsearch = config.sinks.elasticsearch.as_ref().unwrap();
        let bulk = elasticsearch.bulk();
        // Set values win; unset ones take this sink's defaults.
        assert_eq!((bulk.max_actions, bulk.max_in_flight), (300, 4));
        assert_eq!(bulk.backoff.initial, std::time::Duration::from_millis(50));
        assert!(elasticsearch.client.tls.insecure_skip_verify);
        assert_eq!(elasticsearch.client.auth.username.as_deref(), Some("u"));
        let couchbase = config.sinks.couchbase.as_ref().unwrap().bulk();
        assert_eq!((couchbase.max_actions, couchbase.max_in_flight), (500, 8));

        for (table, typo) in [
            ("elasticsearch", "max_actions = 3"),
            ("couchbase", "bucket = \"b\"\nretry_max_ms = 3"),
        ] {
            let text = format!("[kafka]\nbrokers = \"b\"\n[sinks.{table}]\n{typo}\n");
            let config: JobConfig = toml::from_str(&text).unwrap();
            let error = config.validate().unwrap_err().to_string();
            assert!(error.contains("unknown field") && error.contains(table), "{error}");
        }
        let nested_typo = "[kafka]\nbrokers = \"b\"\n[sinks.elasticsearch]\nbulk = { max_action = 3 }\n";
        assert!(toml::from_str::<JobConfig>(nested_typo).is_err());
    }

    #[test]
    fn the_shipped_configs_load() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root.join("config"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "toml"))
            .collect();
        paths.push(root.join("k8s/base/job.toml"));
        assert!(paths.len() >= 2);
        for path in paths {
            JobConfig::load(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        }
    }

    #[test]
    fn the_clock_is_the_wall_by_default_and_records_on_request() {
        use crate::source::kafka::config::ClockSetting;
        let load = |extra: &str| toml::from_str::<JobConfig>(&format!("[kafka]\nbrokers = \"b\"\n{extra}"));
        assert_eq!(load("").unwrap().kafka.clock, ClockSetting::Wall);
        assert_eq!(load("clock = \"records\"").unwrap().kafka.clock, ClockSetting::Records);
        assert_eq!(load("clock = \"wall\"").unwrap().kafka.clock, ClockSetting::Wall);
        let error = load("clock = \"local\"").unwrap_err().to_string();
        assert!(error.contains("wall") && error.contains("records"), "{error}");
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
