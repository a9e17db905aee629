//! The Elasticsearch sink: one document per pair, written in bulk, effectively once.
//!
//! Works on Elasticsearch 7.x and 8.x and on OpenSearch: it uses only the REST API they
//! share (index creation, `_bulk` with external versions, scroll, get/index by id).
//!
//! ```text
//!  changes (routed by pair to every worker) -> BulkSink (batch, retry, ack) -> _bulk
//!  start-up (process 0): ensure index -> scroll held pairs -> reconcile
//! ```

pub mod client;
pub mod config;
pub mod held;
pub mod index;
pub mod progress;
pub mod service;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::config::ElasticsearchConfig;
use self::service::ElasticsearchService;
use crate::job::{ChangeOutput, HeldPairs, Route};
use crate::metrics::Metrics;
use crate::sink::bulk::BulkSink;

/// The health component and metrics label of this sink.
pub const NAME: &str = "elasticsearch";

/// Waits for the cluster to answer, creating the pairs index if missing.
pub async fn prepare(
    client: &elasticsearch::Elasticsearch,
    config: &ElasticsearchConfig,
    metrics: &Metrics,
) -> anyhow::Result<()> {
    let mut delay = Duration::from_millis(200);
    loop {
        match index::ensure_index(client, &config.index, index::pairs_mapping(config)).await {
            Ok(_) => {
                metrics.health.set_healthy(NAME);
                return Ok(());
            }
            Err(error) if crate::shutdown::requested() => return Err(error),
            Err(error) => {
                metrics.health.set_unhealthy(NAME, format!("{error:#}"));
                tracing::warn!(error = %format!("{error:#}"), retry_in_ms = delay.as_millis() as u64, "waiting for Elasticsearch");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// What the index holds, retried while the cluster cannot answer (a shard moving, say).
async fn read_held(
    client: &elasticsearch::Elasticsearch,
    config: &ElasticsearchConfig,
    metrics: &Metrics,
) -> anyhow::Result<(HeldPairs, u64)> {
    let mut delay = Duration::from_millis(200);
    loop {
        match held::held_pairs(client, &config.index).await {
            Ok(held) => return Ok(held),
            Err(error) if crate::shutdown::requested() => return Err(error.context("cannot read what the index holds")),
            Err(error) => {
                metrics
                    .health
                    .set_unhealthy(NAME, format!("cannot read what the index holds: {error:#}"));
                tracing::warn!(error = %format!("{error:#}"), retry_in_ms = delay.as_millis() as u64, "cannot read what the index holds yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// The output: a bulk sink on every worker, routed by pair; the held pairs (read by
/// process 0) and the greatest version already written.
pub fn output(
    config: &ElasticsearchConfig,
    metrics: &Arc<Metrics>,
    runtime: &tokio::runtime::Handle,
    first_process: bool,
) -> anyhow::Result<(ChangeOutput, u64)> {
    let client = client::connect(config)?;
    runtime.block_on(prepare(&client, config, metrics))?;
    let (held, max_version): (HeldPairs, u64) = if first_process {
        let (held, max_version) = runtime.block_on(read_held(&client, config, metrics))?;
        tracing::info!(pairs = held.len(), index = %config.index, "the index holds these pairs");
        metrics
            .pairs_live
            .get_or_create(&Metrics::sink(NAME))
            .inc_by(held.len() as i64);
        (held, max_version)
    } else {
        (Vec::new(), 0)
    };
    let service = Arc::new(ElasticsearchService {
        client,
        index: config.index.clone(),
    });
    let bulk = config.bulk();
    let metrics = metrics.clone();
    let runtime = runtime.clone();
    let output = ChangeOutput {
        name: NAME.to_owned(),
        route: Route::ByPair,
        open: Box::new(move |_worker| {
            Ok(Some(Box::new(BulkSink::new(
                NAME,
                service.clone(),
                runtime.clone(),
                bulk.clone(),
                metrics.clone(),
            )) as _))
        }),
        held: Mutex::new(Some(held)),
    };
    Ok((output, max_version))
}
