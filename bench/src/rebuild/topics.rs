//! The topics a rebuild reads: named by the marketplace they hold, generated and produced
//! by the job's own commands (`eligibility generate`, `eligibility produce`) unless a
//! finished earlier run already holds them.
//!
//! A fourth topic, `<prefix>-complete`, gets one record once every record is delivered:
//! topics left half-filled by an interrupted run are never taken for a finished one.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use eligibility::source::kafka::client::{admin_config, consumer_config, producer_config};
use eligibility::source::kafka::config::KafkaConfig;
use eligibility::source::kafka::topics::{ensure_topics, TopicSpec};
use generate::MarketplaceSpec;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use super::config::{config_text, Topics};
use crate::process::run_measured;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The topics' common prefix for a marketplace and partition count: every knob of the
/// generator is in it, so two specs never share topics.
pub fn prefix(spec: &MarketplaceSpec, partitions: i32) -> String {
    format!(
        "eligibility-bench-rebuild-p{}-s{}-c{}-cat{}-b{}-u{}-m{}ppm-k{}-{}-d{}f{}-seed{}-x{partitions}",
        spec.products,
        spec.sellers,
        spec.campaigns,
        spec.categories,
        spec.brands,
        spec.updates,
        (spec.malformed_share * 1e6).round() as u64,
        (spec.seller_skew * 1000.0).round() as u64,
        (spec.category_skew * 1000.0).round() as u64,
        spec.tree_depth,
        spec.tree_fanout,
        spec.seed,
    )
}

pub fn named(prefix: &str) -> Topics {
    Topics {
        products: format!("{prefix}-products"),
        campaigns: format!("{prefix}-campaigns"),
        categories: format!("{prefix}-categories"),
    }
}

/// Makes sure the topics of `spec` hold it: true if they were produced now, false if an
/// earlier run had. The event log is written in `dir` and removed once produced.
pub fn ensure_produced(
    engine: &Path,
    brokers: &str,
    spec: &MarketplaceSpec,
    partitions: i32,
    dir: &Path,
) -> anyhow::Result<(Topics, bool)> {
    let prefix = prefix(spec, partitions);
    let topics = named(&prefix);
    let complete = format!("{prefix}-complete");
    let kafka = KafkaConfig::for_brokers(brokers);
    if holds_a_record(&kafka, &complete)? {
        return Ok((topics, false));
    }
    // Half-filled by an interrupted run: start over in fresh topics would need new names,
    // and records on top would double the log. Refuse instead.
    for topic in [&topics.products, &topics.campaigns] {
        if holds_a_record(&kafka, topic)? {
            bail!(
                "topic {topic} holds records but no finished run produced it (no record in {complete}); \
                 delete the topics of prefix {prefix} and run again"
            );
        }
    }
    let log = dir.join("events.jsonl");
    eprintln!("rebuild: generating {} products into {}", spec.products, log.display());
    let mut generate = Command::new(engine);
    generate
        .arg("generate")
        .args(generate_args(spec))
        .arg("--output")
        .arg(&log);
    run_measured(generate).context("eligibility generate failed")?;
    let config = dir.join("produce.toml");
    std::fs::write(&config, config_text(brokers, &topics, &dir.join("unused.jsonl")))?;
    eprintln!("rebuild: producing into {prefix}-*, {partitions} partitions each");
    let mut produce = Command::new(engine);
    produce.args(["produce", "--partitions", &partitions.to_string(), "--config"]);
    produce.arg(&config).arg("--input").arg(&log);
    run_measured(produce).context("eligibility produce failed")?;
    std::fs::remove_file(&log).ok();
    std::fs::remove_file(&config).ok();
    mark_complete(&kafka, &complete, spec)?;
    Ok((topics, true))
}

/// `eligibility generate`'s options for `spec`, every one spelled out.
fn generate_args(spec: &MarketplaceSpec) -> Vec<String> {
    [
        ("--products", spec.products.to_string()),
        ("--sellers", spec.sellers.to_string()),
        ("--categories", spec.categories.to_string()),
        ("--brands", spec.brands.to_string()),
        ("--campaigns", spec.campaigns.to_string()),
        ("--updates", spec.updates.to_string()),
        ("--malformed", spec.malformed_share.to_string()),
        ("--seller-skew", spec.seller_skew.to_string()),
        ("--category-skew", spec.category_skew.to_string()),
        ("--seed", spec.seed.to_string()),
        ("--tree-depth", spec.tree_depth.to_string()),
        ("--tree-fanout", spec.tree_fanout.to_string()),
    ]
    .into_iter()
    .flat_map(|(flag, value)| [flag.to_owned(), value])
    .collect()
}

/// Whether `topic` exists and holds at least one record.
fn holds_a_record(kafka: &KafkaConfig, topic: &str) -> anyhow::Result<bool> {
    let consumer: BaseConsumer = consumer_config(kafka, &BTreeMap::new(), "eligibility-bench-topics")
        .create()
        .context("cannot create a Kafka consumer")?;
    let metadata = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .with_context(|| format!("cannot read the metadata of {topic} from {}", kafka.brokers))?;
    let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Ok(false);
    };
    if found.error().is_some() {
        return Ok(false);
    }
    for partition in found.partitions() {
        let (low, high) = consumer.fetch_watermarks(topic, partition.id(), TIMEOUT)?;
        if high > low {
            return Ok(true);
        }
    }
    Ok(false)
}

/// One record in `topic`, the spec as its value, delivered before this returns.
fn mark_complete(kafka: &KafkaConfig, topic: &str, spec: &MarketplaceSpec) -> anyhow::Result<()> {
    let properties = BTreeMap::new();
    ensure_topics(
        &admin_config(kafka, &properties, "eligibility-bench-topics"),
        &[TopicSpec {
            name: topic,
            partitions: 1,
            replication_factor: 1,
            compacted: true,
        }],
    )?;
    let producer: ThreadedProducer<DefaultProducerContext> =
        producer_config(kafka, &properties, "eligibility-bench-topics")
            .create()
            .context("cannot create a Kafka producer")?;
    let value = serde_json::to_string(spec)?;
    producer
        .send(BaseRecord::<str, str>::to(topic).key("spec").payload(&value))
        .map_err(|(error, _)| error)
        .context("cannot mark the topics complete")?;
    producer.flush(TIMEOUT).context("cannot mark the topics complete")?;
    Ok(())
}
