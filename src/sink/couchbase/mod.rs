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

use std::sync::{Arc, Mutex};

use self::config::CouchbaseConfig;
use self::query::QueryClient;
use self::service::CouchbaseService;
use crate::job::{ChangeOutput, HeldPairs, Route};
use crate::metrics::Metrics;
use crate::sink::bulk::BulkSink;
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
) -> anyhow::Result<ChangeOutput> {
    let keyspace = config.keyspace()?;
    let client = Arc::new(QueryClient::new(config)?);
    let held: HeldPairs = if first_process {
        runtime.block_on(until_ready(NAME, "read what the collection holds", metrics, || {
            read_held(&client, &keyspace, config)
        }))?
    } else {
        Vec::new()
    };
    if first_process {
        tracing::info!(pairs = held.len(), %keyspace, "the collection holds these pairs");
        metrics
            .pairs_live
            .get_or_create(&Metrics::sink(NAME))
            .inc_by(held.len() as i64);
    }
    let service = Arc::new(CouchbaseService { client, keyspace });
    let bulk = config.bulk();
    let metrics = metrics.clone();
    let runtime = runtime.clone();
    Ok(ChangeOutput {
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
    })
}
