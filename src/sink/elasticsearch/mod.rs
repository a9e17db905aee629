//! The Elasticsearch sink: one document per pair, written in bulk, effectively once.
//!
//! Works on Elasticsearch 7.x and 8.x and on OpenSearch: it uses only the REST API they
//! share (index creation, `_bulk` with external versions, scroll, get/index by id).
//!
//! ```text
//!  changes (routed by pair to every worker) -> BulkSink (batch, retry, ack) -> _bulk
//!  start-up (process 0): ensure indices -> scroll held pairs (and refused ones) -> reconcile
//! ```

pub mod client;
pub mod config;
pub mod held;
pub mod index;
pub mod progress;
pub mod service;

use std::sync::Arc;

use dataflows::model::Time;

use self::config::ElasticsearchConfig;
use self::service::ElasticsearchService;
use crate::metrics::Metrics;
use crate::sink::bulk::output::bulk_output;
use crate::sink::contract::{ChangeOutput, HeldPairs, SinkError};
use crate::sink::startup::until_ready;

/// The health component and metrics label of this sink.
pub const NAME: &str = "elasticsearch";

/// Waits for the cluster to answer, creating the pairs and refused indices if missing.
pub async fn prepare(
    client: &elasticsearch::Elasticsearch,
    config: &ElasticsearchConfig,
    metrics: &Metrics,
) -> anyhow::Result<()> {
    until_ready(NAME, "prepare the pairs index", metrics, || async {
        index::ensure_index(client, &config.index, index::pairs_mapping(config)).await?;
        index::ensure_index(client, &config.refused_index(), index::refused_mapping(config))
            .await
            .map(drop)
    })
    .await
}

/// The output: a bulk sink on every worker, routed by pair; the held pairs (read by
/// process 0) and the greatest version already written. `committed`: the time of the
/// progress record, up to which the refused pairs' dead letters are written.
pub fn output(
    config: &ElasticsearchConfig,
    metrics: &Arc<Metrics>,
    runtime: &tokio::runtime::Handle,
    first_process: bool,
    committed: Option<Time>,
) -> Result<(ChangeOutput, u64), SinkError> {
    let client = client::connect(config)?;
    runtime
        .block_on(prepare(&client, config, metrics))
        .map_err(|error| SinkError::unavailable(NAME, error))?;
    let refused_index = config.refused_index();
    let (held, max_version): (HeldPairs, u64) = if first_process {
        let (held, max_version) = runtime
            .block_on(until_ready(NAME, "read what the index holds", metrics, || {
                held::held_pairs(&client, &config.index, &refused_index, committed)
            }))
            .map_err(|error| SinkError::unavailable(NAME, error))?;
        tracing::info!(pairs = held.len(), index = %config.index, "the index holds these pairs");
        (held, max_version)
    } else {
        (HeldPairs::new(), 0)
    };
    let service = ElasticsearchService {
        client,
        index: config.index.clone(),
        refused_index,
    };
    let output = bulk_output(NAME, service, held, config.bulk(), metrics, runtime);
    Ok((output, max_version))
}
