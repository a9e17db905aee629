//! The Couchbase sink: one document per pair, written through the Query service with one
//! N1QL UPSERT (and one DELETE) per batch.
//!
//! ```text
//!  changes (routed by pair to every worker) -> BulkSink (batch, order per document, retry, ack)
//!      -> POST /query/service  UPSERT INTO b.s.c (KEY, VALUE) VALUES ($1, $2), …
//!                              DELETE FROM b.s.c USE KEYS $1
//!  start-up (process 0): primary index -> pages of held documents -> reconcile
//! ```
//!
//! Tested against a model of the Query service's documented REST protocol (no Couchbase
//! server can run on the development machines), not against a live cluster.

pub mod config;
pub mod held;
pub mod query;
pub mod service;
pub mod statements;

use std::sync::Arc;

use self::config::CouchbaseConfig;
use self::query::QueryClient;
use self::service::CouchbaseService;
use crate::metrics::Metrics;
use crate::sink::bulk::output::bulk_output;
use crate::sink::contract::{ChangeOutput, HeldPairs, SinkError};
use crate::sink::startup::until_ready;

/// The health component and metrics label of this sink.
pub const NAME: &str = "couchbase";

/// Prepares the primary index (if asked to) and reads what the collection holds.
async fn read_held(client: &QueryClient, keyspace: &str, config: &CouchbaseConfig) -> anyhow::Result<HeldPairs> {
    if config.create_primary_index {
        held::ensure_primary_index(client, keyspace)
            .await
            .map_err(|f| anyhow::anyhow!(f.reason().to_owned()))?;
    }
    held::held_pairs(client, keyspace, &config.scan_consistency).await
}

/// The output: a bulk sink on every worker, routed by pair, and the held pairs (read by
/// process 0) for the reconciliation.
pub fn output(
    config: &CouchbaseConfig,
    metrics: &Arc<Metrics>,
    runtime: &tokio::runtime::Handle,
    first_process: bool,
) -> Result<ChangeOutput, SinkError> {
    let keyspace = config.keyspace()?;
    let client = Arc::new(QueryClient::new(config)?);
    let held: HeldPairs = if first_process {
        let held = runtime
            .block_on(until_ready(NAME, "read what the collection holds", metrics, || {
                read_held(&client, &keyspace, config)
            }))
            .map_err(|error| SinkError::unavailable(NAME, error))?;
        tracing::info!(pairs = held.len(), %keyspace, "the collection holds these pairs");
        held
    } else {
        HeldPairs::new()
    };
    let service = CouchbaseService { client, keyspace };
    Ok(bulk_output(NAME, service, held, config.bulk(), metrics, runtime))
}
