//! Bulk requests to Elasticsearch, and what every item of the answer means.
//!
//! Each op becomes an `index` (the whole document) or a `delete`, with `_id` =
//! `campaign_id:seller_id` and an external version that grows with the logical time. A
//! bulk answer of HTTP 200 can still carry failed items (`"errors": true`), so every item
//! is read:
//!
//! | item status | meaning | outcome |
//! |---|---|---|
//! | 200, 201 | written | done |
//! | 404 on a delete | already gone | done |
//! | 409 | a newer version is there | done (this write is stale) |
//! | 429, 5xx | overloaded, unavailable | retried with backoff |
//! | 403 `cluster_block_exception` | index read-only, disk full | retried; sink unhealthy |
//! | other 4xx | the document is refused | dead letter |
//!
//! An `_id` longer than [`MAX_ID_BYTES`] is never sent: the node would refuse the whole
//! request (HTTP 400 `id is too long`), not just that item, and the request would be retried
//! forever. Its upsert becomes a dead letter (`id_too_long`); its delete is done, since no
//! document can have that id.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use elasticsearch::http::StatusCode;
use elasticsearch::{BulkParts, Elasticsearch};
use serde_json::Value;

use crate::sink::bulk::{BulkService, DocumentOp, ItemOutcome, RequestFailure, RequestResult};

/// The longest `_id` Elasticsearch and OpenSearch accept, in UTF-8 bytes.
pub const MAX_ID_BYTES: usize = 512;

/// What becomes of an op the node cannot take at all, decided before sending.
pub fn refused_before_sending(op: &DocumentOp) -> Option<ItemOutcome> {
    if op.id.len() <= MAX_ID_BYTES {
        return None;
    }
    Some(match op.body {
        None => ItemOutcome::Done,
        Some(_) => ItemOutcome::Rejected {
            code: "id_too_long".into(),
            reason: format!(
                "document id is {} bytes; the index accepts at most {MAX_ID_BYTES}",
                op.id.len()
            ),
        },
    })
}

pub struct ElasticsearchService {
    pub client: Elasticsearch,
    pub index: String,
}

/// The NDJSON lines of a bulk request for `ops`.
pub fn bulk_lines(ops: &[DocumentOp]) -> Vec<Vec<u8>> {
    let mut lines = Vec::with_capacity(ops.len() * 2);
    for op in ops {
        let action = if op.body.is_some() { "index" } else { "delete" };
        let meta = serde_json::json!({
            action: {"_id": op.id, "version": op.version, "version_type": "external"}
        });
        lines.push(serde_json::to_vec(&meta).expect("bulk metadata always serializes"));
        if let Some(body) = &op.body {
            lines.push(body.clone());
        }
    }
    lines
}

/// What one item of a bulk answer means for its op.
pub fn item_outcome(op: &DocumentOp, item: &Value) -> ItemOutcome {
    let result = item.get("index").or_else(|| item.get("delete")).unwrap_or(item);
    let status = result.get("status").and_then(Value::as_u64).unwrap_or(0);
    let error = result.get("error");
    let error_type = error
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("unknown_error")
        .to_owned();
    let reason = || {
        let text = error
            .and_then(|e| e.get("reason"))
            .and_then(Value::as_str)
            .unwrap_or("no reason given");
        format!("{status} {error_type}: {text}")
    };
    match status {
        200 | 201 => ItemOutcome::Done,
        404 if op.body.is_none() && error.is_none() => ItemOutcome::Done,
        409 => ItemOutcome::Done,
        429 | 500..=599 => ItemOutcome::Retry {
            reason: reason(),
            blocking: false,
        },
        403 if error_type == "cluster_block_exception" => ItemOutcome::Retry {
            reason: reason(),
            blocking: true,
        },
        401 | 403 => ItemOutcome::Retry {
            reason: reason(),
            blocking: true,
        },
        // Someone deleted the index: writing elsewhere would lose the document.
        404 if error_type == "index_not_found_exception" => ItemOutcome::Retry {
            reason: reason(),
            blocking: true,
        },
        _ => ItemOutcome::Rejected {
            code: error_type.clone(),
            reason: reason(),
        },
    }
}

impl BulkService for ElasticsearchService {
    fn send(&self, ops: Arc<Vec<DocumentOp>>) -> Pin<Box<dyn Future<Output = RequestResult> + Send>> {
        let client = self.client.clone();
        let index = self.index.clone();
        Box::pin(async move {
            let refused: Vec<Option<ItemOutcome>> = ops.iter().map(refused_before_sending).collect();
            let sendable: Vec<DocumentOp> = ops
                .iter()
                .zip(&refused)
                .filter(|(_, refused)| refused.is_none())
                .map(|(op, _)| op.clone())
                .collect();
            let mut sent = if sendable.is_empty() {
                Vec::new().into_iter()
            } else {
                send_bulk(&client, &index, &sendable).await?.into_iter()
            };
            Ok(refused
                .into_iter()
                .map(|refused| refused.unwrap_or_else(|| sent.next().expect("one outcome per op sent")))
                .collect())
        })
    }
}

/// One `_bulk` request for `ops`, and each op's outcome.
async fn send_bulk(client: &Elasticsearch, index: &str, ops: &[DocumentOp]) -> RequestResult {
    let lines = bulk_lines(ops);
    let response = client
        .bulk(BulkParts::Index(index))
        .body(lines)
        .send()
        .await
        .map_err(|error| RequestFailure::Unanswered(error.to_string()))?;
    let status = response.status_code();
    if status != StatusCode::OK {
        let text = response.text().await.unwrap_or_default();
        let text: String = text.chars().take(500).collect();
        return Err(RequestFailure::Status {
            status: status.as_u16(),
            body: text,
        });
    }
    let body: Value = response
        .json()
        .await
        .map_err(|error| RequestFailure::Unreadable(error.to_string()))?;
    let items = body
        .get("items")
        .and_then(Value::as_array)
        .ok_or_else(|| RequestFailure::Unreadable("bulk answer without items".into()))?;
    if items.len() != ops.len() {
        return Err(RequestFailure::Unreadable(format!(
            "bulk answer has {} items for {} operations",
            items.len(),
            ops.len()
        )));
    }
    Ok(ops.iter().zip(items).map(|(op, item)| item_outcome(op, item)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(body: bool) -> DocumentOp {
        DocumentOp {
            id: "c:1".into(),
            version: 9,
            body: body.then(|| b"{}".to_vec()),
            time: 9,
        }
    }

    #[test]
    fn bulk_lines_carry_the_external_version() {
        let lines = bulk_lines(&[op(true), op(false)]);
        assert_eq!(lines.len(), 3);
        assert_eq!(
            serde_json::from_slice::<Value>(&lines[0]).unwrap(),
            json!({"index": {"_id": "c:1", "version": 9, "version_type": "external"}})
        );
        assert_eq!(lines[1], b"{}");
        assert_eq!(
            serde_json::from_slice::<Value>(&lines[2]).unwrap(),
            json!({"delete": {"_id": "c:1", "version": 9, "version_type": "external"}})
        );
    }

    #[test]
    fn an_id_longer_than_the_index_accepts_is_refused_before_sending() {
        let long = |body: bool| DocumentOp {
            id: format!("{}:1", "c".repeat(MAX_ID_BYTES)),
            ..op(body)
        };
        assert_eq!(refused_before_sending(&op(true)), None);
        assert!(matches!(
            refused_before_sending(&long(true)),
            Some(ItemOutcome::Rejected { code, .. }) if code == "id_too_long"
        ));
        // No document can have that id: there is nothing to delete.
        assert_eq!(refused_before_sending(&long(false)), Some(ItemOutcome::Done));
    }

    #[test]
    fn every_item_status_has_its_outcome() {
        let item = |action: &str, status: u64, error_type: Option<&str>| {
            let mut result = json!({"status": status});
            if let Some(error_type) = error_type {
                result["error"] = json!({"type": error_type, "reason": "because"});
            }
            json!({ action: result })
        };
        assert_eq!(item_outcome(&op(true), &item("index", 201, None)), ItemOutcome::Done);
        assert_eq!(item_outcome(&op(false), &item("delete", 404, None)), ItemOutcome::Done);
        assert_eq!(
            item_outcome(
                &op(true),
                &item("index", 409, Some("version_conflict_engine_exception"))
            ),
            ItemOutcome::Done
        );
        assert!(matches!(
            item_outcome(&op(true), &item("index", 429, Some("es_rejected_execution_exception"))),
            ItemOutcome::Retry { blocking: false, .. }
        ));
        assert!(matches!(
            item_outcome(&op(true), &item("index", 503, Some("unavailable_shards_exception"))),
            ItemOutcome::Retry { blocking: false, .. }
        ));
        assert!(matches!(
            item_outcome(&op(true), &item("index", 403, Some("cluster_block_exception"))),
            ItemOutcome::Retry { blocking: true, .. }
        ));
        let rejected = item_outcome(&op(true), &item("index", 400, Some("mapper_parsing_exception")));
        assert_eq!(
            rejected,
            ItemOutcome::Rejected {
                code: "mapper_parsing_exception".into(),
                reason: "400 mapper_parsing_exception: because".into()
            }
        );
        // A missing index is not "already deleted": it waits for an operator.
        assert!(matches!(
            item_outcome(&op(false), &item("delete", 404, Some("index_not_found_exception"))),
            ItemOutcome::Retry { blocking: true, .. }
        ));
    }
}
