//! The change output of a bulk sink: a [`BulkSink`] on every worker, routed by pair, and
//! the pairs the destination holds (read by process 0) for the reconciliation. Every bulk
//! destination is wired this way; only its service differs.

use std::sync::{Arc, Mutex};

use super::{BulkConfig, BulkService, BulkSink};
use crate::metrics::Metrics;
use crate::sink::contract::{ChangeOutput, HeldPairs, HeldState, Route};

/// `held`: what the destination holds, on process 0 (empty elsewhere); counted as live pairs.
pub fn bulk_output<S: BulkService>(
    name: &'static str,
    service: S,
    held: HeldPairs,
    bulk: BulkConfig,
    metrics: &Arc<Metrics>,
    runtime: &tokio::runtime::Handle,
) -> ChangeOutput {
    metrics
        .pairs_live
        .get_or_create(&Metrics::sink(name))
        .inc_by(held.len() as i64);
    let service = Arc::new(service);
    let metrics = metrics.clone();
    let runtime = runtime.clone();
    ChangeOutput {
        name: name.to_owned(),
        route: Route::ByPair,
        open: Box::new(move |_worker| {
            Ok(Some(Box::new(BulkSink::new(
                name,
                service.clone(),
                runtime.clone(),
                bulk.clone(),
                metrics.clone(),
            )) as _))
        }),
        held: Mutex::new(Some(HeldState::Ready(held))),
    }
}
