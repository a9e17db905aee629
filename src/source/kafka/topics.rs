//! Creating topics: the two compacted input topics and the dead-letter topic.

use std::time::Duration;

use anyhow::{bail, Context};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

/// How a topic is to be created when missing.
pub struct TopicSpec<'a> {
    pub name: &'a str,
    pub partitions: i32,
    pub replication_factor: i32,
    /// Compacted (`cleanup.policy=compact`), as every changelog must be.
    pub compacted: bool,
}

/// Creates the topics that do not exist yet; existing ones are left as they are.
pub fn ensure_topics(config: &ClientConfig, topics: &[TopicSpec<'_>]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = config.create().context("cannot create the Kafka admin client")?;
    let new_topics: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|spec| {
            let topic = NewTopic::new(
                spec.name,
                spec.partitions,
                TopicReplication::Fixed(spec.replication_factor),
            );
            if spec.compacted {
                topic.set("cleanup.policy", "compact")
            } else {
                topic
            }
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = runtime
        .block_on(admin.create_topics(new_topics.iter(), &options))
        .context("cannot create topics")?;
    for result in results {
        match result {
            Ok(name) => tracing::info!(topic = %name, "created topic"),
            Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => {
                tracing::debug!(topic = %name, "topic exists")
            }
            Err((name, error)) => bail!("cannot create topic {name}: {error}"),
        }
    }
    Ok(())
}
