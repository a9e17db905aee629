//! rdkafka client settings: the job's defaults, the user's pass-through properties over
//! them, and the few settings correctness depends on over both.

use std::collections::BTreeMap;

use rdkafka::ClientConfig;

use super::config::KafkaConfig;

fn build(
    kafka: &KafkaConfig,
    properties: &BTreeMap<String, String>,
    client_id: &str,
    defaults: &[(&str, &str)],
    required: &[(&str, &str)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &kafka.brokers);
    config.set("client.id", client_id);
    for (key, value) in defaults {
        config.set(*key, *value);
    }
    for (key, value) in properties {
        config.set(key, value);
    }
    for (key, value) in required {
        config.set(*key, *value);
    }
    config
}

/// A consumer that reads assigned partitions and never commits to a consumer group.
pub fn consumer_config(kafka: &KafkaConfig, properties: &BTreeMap<String, String>, client_id: &str) -> ClientConfig {
    let defaults = [
        // Only names the client to the brokers: partitions are assigned, never subscribed.
        ("group.id", "eligibility"),
        // Bound what librdkafka prefetches, so memory stays flat during the rebuild.
        // (`queued.min.messages` at 20,000 instead of 100,000 per partition saved ~100 MB at
        // 2M products but made the rebuild 30% slower and a plain consumer 2.4x: kept.)
        ("queued.max.messages.kbytes", "16384"),
        // A partition whose queue is full waits this long before its next fetch: 1 s by
        // default, so a reader as fast as the broker (a rebuild) stalled a second at a time
        // and read a 2M-product topic in 13 s instead of 4 (issue 25).
        ("fetch.queue.backoff.ms", "10"),
        // Per-partition lag for the metrics endpoint.
        ("statistics.interval.ms", "5000"),
        // A trickle of records is fetched every few milliseconds in one answer, not one
        // fetch per record: a lone change waits at most `fetch.wait.max.ms` more.
        ("fetch.min.bytes", "65536"),
        ("fetch.wait.max.ms", "10"),
    ];
    let required = [
        // Offsets are the job's own progress record, advanced only after the sinks acknowledge.
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        // The rebuild at start-up must know when it has reached the end of a partition.
        ("enable.partition.eof", "true"),
        // Partitions are assigned at the start-up plan's oldest offsets: one that no longer
        // exists (retention since the plan) restarts from the oldest record. `latest` would
        // skip records without a word, `error` stop the job.
        ("auto.offset.reset", "earliest"),
    ];
    build(kafka, properties, client_id, &defaults, &required)
}

/// A producer for `eligibility produce` and the dead-letter topic.
pub fn producer_config(kafka: &KafkaConfig, properties: &BTreeMap<String, String>, client_id: &str) -> ClientConfig {
    let defaults = [
        // Java clients place keys with murmur2; so must we, or a key could change partition.
        ("partitioner", "murmur2_random"),
        ("linger.ms", "5"),
    ];
    let required = [
        // Exactly once per send and in order per partition, also across internal retries.
        ("enable.idempotence", "true"),
    ];
    build(kafka, properties, client_id, &defaults, &required)
}

/// An admin client (topic creation).
pub fn admin_config(kafka: &KafkaConfig, properties: &BTreeMap<String, String>, client_id: &str) -> ClientConfig {
    build(kafka, properties, client_id, &[], &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_consumer_batches_fetches_unless_told_otherwise_and_never_commits() {
        let kafka = KafkaConfig::for_brokers("b:9092");
        let defaults = consumer_config(&kafka, &BTreeMap::new(), "test");
        assert_eq!(defaults.get("fetch.min.bytes"), Some("65536"));
        assert_eq!(defaults.get("fetch.wait.max.ms"), Some("10"));
        // The user's `client` table overrides a default, never a required setting.
        let properties = BTreeMap::from([
            ("fetch.wait.max.ms".to_owned(), "0".to_owned()),
            ("enable.auto.commit".to_owned(), "true".to_owned()),
            ("auto.offset.reset".to_owned(), "latest".to_owned()),
        ]);
        let told = consumer_config(&kafka, &properties, "test");
        assert_eq!(told.get("fetch.wait.max.ms"), Some("0"));
        assert_eq!(told.get("enable.auto.commit"), Some("false"));
        assert_eq!(told.get("auto.offset.reset"), Some("earliest"));
    }
}
