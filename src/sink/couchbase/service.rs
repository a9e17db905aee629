//! Batches to Couchbase: per batch one UPSERT for the pairs that exist and one DELETE for
//! those that ended, as the Trendyol team found necessary (one statement for many documents
//! instead of one operation per document).
//!
//! A statement refused for good may be about a single document (too large, say): then each
//! of its documents is tried alone, so that only the culprits go to the dead-letter output.
//! N1QL UPSERT applies the last write it gets, so the bulk sink keeps each document in one
//! request at a time (`needs_ordered_writes`): its writes land in version order.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::query::{QueryClient, QueryFailure};
use super::statements;
use crate::sink::bulk::{BulkService, DocumentOp, ItemOutcome, RequestFailure, RequestResult};

/// Ops with their place in the batch.
type Indexed<'a> = Vec<(usize, &'a DocumentOp)>;

pub struct CouchbaseService {
    pub client: Arc<QueryClient>,
    pub keyspace: String,
}

fn outcome_of(failure: &QueryFailure) -> ItemOutcome {
    match failure {
        QueryFailure::Temporary(reason) => ItemOutcome::Retry {
            reason: reason.clone(),
            blocking: false,
        },
        QueryFailure::Blocking(reason) => ItemOutcome::Retry {
            reason: reason.clone(),
            blocking: true,
        },
        QueryFailure::Permanent { code, reason } => ItemOutcome::Rejected {
            code: code.clone(),
            reason: reason.clone(),
        },
    }
}

/// Runs one statement for `ops` (all upserts or all deletes); on a permanent refusal of
/// several documents, each alone.
async fn write_group(client: &QueryClient, keyspace: &str, ops: &[&DocumentOp], upserts: bool) -> Vec<ItemOutcome> {
    let build = |ops: &[&DocumentOp]| {
        if upserts {
            statements::upsert(keyspace, ops)
        } else {
            statements::delete(keyspace, ops)
        }
    };
    let (statement, args) = build(ops);
    match client.execute(&statement, args, None).await {
        Ok(_) => vec![ItemOutcome::Done; ops.len()],
        Err(QueryFailure::Permanent { .. }) if ops.len() > 1 => {
            let mut outcomes = Vec::with_capacity(ops.len());
            for op in ops {
                let (statement, args) = build(std::slice::from_ref(op));
                outcomes.push(match client.execute(&statement, args, None).await {
                    Ok(_) => ItemOutcome::Done,
                    Err(failure) => outcome_of(&failure),
                });
            }
            outcomes
        }
        Err(failure) => vec![outcome_of(&failure); ops.len()],
    }
}

impl BulkService for CouchbaseService {
    fn send(&self, ops: Arc<Vec<DocumentOp>>) -> Pin<Box<dyn Future<Output = RequestResult> + Send>> {
        let client = self.client.clone();
        let keyspace = self.keyspace.clone();
        Box::pin(async move {
            let (upserts, deletes): (Indexed<'_>, Indexed<'_>) =
                ops.iter().enumerate().partition(|(_, op)| op.body.is_some());
            let mut outcomes = vec![ItemOutcome::Done; ops.len()];
            for (group, is_upsert) in [(upserts, true), (deletes, false)] {
                if group.is_empty() {
                    continue;
                }
                let group_ops: Vec<&DocumentOp> = group.iter().map(|(_, op)| *op).collect();
                let results = write_group(&client, &keyspace, &group_ops, is_upsert).await;
                // A whole batch that could not be sent at all is a failed request.
                if results
                    .iter()
                    .all(|outcome| matches!(outcome, ItemOutcome::Retry { blocking: false, .. }))
                    && group.len() == ops.len()
                {
                    if let Some(ItemOutcome::Retry { reason, .. }) = results.first() {
                        return Err(RequestFailure::Unanswered(reason.clone()));
                    }
                }
                for ((index, _), outcome) in group.iter().zip(results) {
                    outcomes[*index] = outcome;
                }
            }
            Ok(outcomes)
        })
    }

    fn needs_ordered_writes(&self) -> bool {
        true
    }
}
