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
//! document can have that id. Either way the same request writes (or deletes) the pair's
//! *refusal marker* in the refused index ([`marker_id`]), so that a restart knows the pair
//! was refused with these figures and does not dead-letter it again (`held.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use elasticsearch::http::StatusCode;
use elasticsearch::{BulkParts, Elasticsearch};
use serde::Deserialize;
use serde_json::value::RawValue;
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

/// The id of a refused pair's marker: the campaign's tag (the 64-bit hash the job counts
/// its pairs under, so two ids share a marker exactly when the job already merges their
/// pairs) and the seller id. Always short enough for an `_id`.
pub fn marker_id(document_id: &str) -> String {
    let (campaign_id, seller_id) = document_id.rsplit_once(':').unwrap_or((document_id, ""));
    format!("{:016x}:{seller_id}", dataflows::model::tag_of(campaign_id))
}

/// The write of `op`'s refusal marker: the same version and body, under [`marker_id`].
fn marker_op(op: &DocumentOp) -> DocumentOp {
    DocumentOp {
        id: marker_id(&op.id),
        ..op.clone()
    }
}

pub struct ElasticsearchService {
    pub client: Elasticsearch,
    pub index: String,
    /// Where refused pairs are marked ([`marker_id`]).
    pub refused_index: String,
}

/// One action of a bulk request: an op, in the request's index or in `index`.
#[derive(Clone, Copy)]
pub struct Action<'a> {
    pub op: &'a DocumentOp,
    pub index: Option<&'a str>,
}

impl<'a> From<&'a DocumentOp> for Action<'a> {
    fn from(op: &'a DocumentOp) -> Self {
        Action { op, index: None }
    }
}

/// The NDJSON body of a bulk request for `actions`, written straight into one buffer (no
/// per-line allocation, no copy of a document body but this one).
pub fn bulk_body<'a>(actions: impl IntoIterator<Item = Action<'a>>) -> Vec<u8> {
    let mut body = Vec::new();
    for Action { op, index } in actions {
        let action = if op.body.is_some() { "index" } else { "delete" };
        body.extend_from_slice(b"{\"");
        body.extend_from_slice(action.as_bytes());
        body.extend_from_slice(b"\":{");
        if let Some(index) = index {
            body.extend_from_slice(b"\"_index\":");
            serde_json::to_writer(&mut body, index).expect("a string always serializes");
            body.push(b',');
        }
        body.extend_from_slice(b"\"_id\":");
        serde_json::to_writer(&mut body, &op.id).expect("a string always serializes");
        body.extend_from_slice(b",\"version\":");
        serde_json::to_writer(&mut body, &op.version).expect("a number always serializes");
        body.extend_from_slice(b",\"version_type\":\"external\"}}\n");
        if let Some(document) = &op.body {
            body.extend_from_slice(document);
            body.push(b'\n');
        }
    }
    body
}

/// A bulk answer, read for what the sink needs only: each item's status and error. Strings
/// borrow from the answer, and everything else is skipped unread.
#[derive(Deserialize)]
struct BulkAnswer<'a> {
    #[serde(borrow)]
    items: Vec<BulkItem<'a>>,
}

/// One item: `{"index": {...}}` or `{"delete": {...}}`.
#[derive(Deserialize)]
struct BulkItem<'a> {
    #[serde(alias = "delete", alias = "create", alias = "update", borrow)]
    index: ItemResult<'a>,
}

/// What the node says of one op.
#[derive(Deserialize)]
pub struct ItemResult<'a> {
    #[serde(default)]
    pub status: u16,
    /// Kept raw: read only when the item failed.
    #[serde(default, borrow)]
    pub error: Option<&'a RawValue>,
}

/// What one item of a bulk answer means for its op.
pub fn item_outcome(op: &DocumentOp, item: &ItemResult) -> ItemOutcome {
    let status = item.status;
    if matches!(status, 200 | 201) || (status == 404 && op.body.is_none() && item.error.is_none()) {
        return ItemOutcome::Done;
    }
    let error: Option<Value> = item.error.and_then(|raw| serde_json::from_str(raw.get()).ok());
    let error = error.as_ref();
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
        let refused_index = self.refused_index.clone();
        Box::pin(async move {
            // A refused op sends its marker in its place.
            let refused: Vec<Option<ItemOutcome>> = ops.iter().map(refused_before_sending).collect();
            let markers: Vec<Option<DocumentOp>> = ops
                .iter()
                .zip(&refused)
                .map(|(op, refused)| refused.as_ref().map(|_| marker_op(op)))
                .collect();
            let actions: Vec<Action> = ops
                .iter()
                .zip(&markers)
                .map(|(op, marker)| match marker {
                    Some(marker) => Action {
                        op: marker,
                        index: Some(&refused_index),
                    },
                    None => Action::from(op),
                })
                .collect();
            let sent = send_bulk(&client, &index, &actions).await?;
            Ok(ops
                .iter()
                .zip(refused)
                .zip(sent)
                .map(|((op, refused), sent)| match refused {
                    None => sent,
                    Some(refused) => with_marker(op, refused, sent),
                })
                .collect())
        })
    }
}

/// The outcome of a refused op whose marker was sent: the refusal once the marker is
/// written, a retry while it cannot be. A marker refused for good does not hold the
/// refusal back (it is dead-lettered again at the next start, as before markers).
fn with_marker(op: &DocumentOp, refused: ItemOutcome, marker: ItemOutcome) -> ItemOutcome {
    match marker {
        ItemOutcome::Done => refused,
        retry @ ItemOutcome::Retry { .. } => retry,
        ItemOutcome::Rejected { reason, .. } => {
            tracing::warn!(id = %op.id, %reason, "the refused index refused the marker of a refused document");
            refused
        }
    }
}

/// What the sink reads of a bulk answer (`BulkAnswer`).
const ANSWER_FIELDS: &[&str] = &["items.*.status", "items.*.error"];

/// One `_bulk` request for `actions`, and each one's outcome.
async fn send_bulk(client: &Elasticsearch, index: &str, actions: &[Action<'_>]) -> RequestResult {
    let body = bulk_body(actions.iter().copied());
    let response = client
        .bulk(BulkParts::Index(index))
        // The node answers each item's status and error only: the rest of an item (index,
        // id, version, shards, sequence number) is most of the answer, and unread.
        .filter_path(ANSWER_FIELDS)
        .body(vec![body])
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
    let bytes = response
        .bytes()
        .await
        .map_err(|error| RequestFailure::Unanswered(error.to_string()))?;
    let ops: Vec<&DocumentOp> = actions.iter().map(|action| action.op).collect();
    outcomes(&ops, &bytes)
}

/// Each op's outcome, from the bulk answer's bytes.
fn outcomes(ops: &[&DocumentOp], answer: &[u8]) -> RequestResult {
    let answer: BulkAnswer =
        serde_json::from_slice(answer).map_err(|error| RequestFailure::Unreadable(format!("bulk answer: {error}")))?;
    if answer.items.len() != ops.len() {
        return Err(RequestFailure::Unreadable(format!(
            "bulk answer has {} items for {} operations",
            answer.items.len(),
            ops.len()
        )));
    }
    Ok(ops
        .iter()
        .zip(&answer.items)
        .map(|(op, item)| item_outcome(op, &item.index))
        .collect())
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
    fn the_bulk_body_carries_the_external_version() {
        let tricky = DocumentOp {
            id: "c \"quoted\" \\ é:1".into(),
            ..op(true)
        };
        let body = bulk_body([&op(true), &op(false), &tricky].map(Action::from));
        assert!(body.ends_with(b"\n"));
        let lines: Vec<&[u8]> = body.split(|b| *b == b'\n').filter(|line| !line.is_empty()).collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(
            serde_json::from_slice::<Value>(lines[0]).unwrap(),
            json!({"index": {"_id": "c:1", "version": 9, "version_type": "external"}})
        );
        assert_eq!(lines[1], b"{}");
        assert_eq!(
            serde_json::from_slice::<Value>(lines[2]).unwrap(),
            json!({"delete": {"_id": "c:1", "version": 9, "version_type": "external"}})
        );
        assert_eq!(
            serde_json::from_slice::<Value>(lines[3]).unwrap(),
            json!({"index": {"_id": "c \"quoted\" \\ é:1", "version": 9, "version_type": "external"}})
        );
    }

    #[test]
    fn a_bulk_answer_is_read_item_by_item_and_must_match_the_ops() {
        let answer = br#"{"took": 3, "errors": true, "items": [
            {"index": {"_index": "i", "_id": "c:1", "status": 201, "result": "created"}},
            {"delete": {"_index": "i", "_id": "c:1", "status": 503,
                        "error": {"type": "unavailable_shards_exception", "reason": "primary shard is not active"}}}
        ]}"#;
        let (upsert, delete) = (op(true), op(false));
        let outcomes = outcomes(&[&upsert, &delete], answer).unwrap();
        assert_eq!(outcomes[0], ItemOutcome::Done);
        assert_eq!(
            outcomes[1],
            ItemOutcome::Retry {
                reason: "503 unavailable_shards_exception: primary shard is not active".into(),
                blocking: false
            }
        );
        assert!(matches!(
            super::outcomes(&[&upsert], answer),
            Err(RequestFailure::Unreadable(message)) if message.contains("2 items for 1 operations")
        ));
        assert!(matches!(
            super::outcomes(&[&upsert], b"<html>"),
            Err(RequestFailure::Unreadable(_))
        ));
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
    fn a_refused_op_sends_its_marker_to_the_refused_index_instead() {
        let long = format!("{}:42", "c".repeat(MAX_ID_BYTES));
        let marker = marker_id(&long);
        assert_eq!(
            marker,
            format!("{:016x}:42", dataflows::model::tag_of(&"c".repeat(MAX_ID_BYTES)))
        );
        assert_eq!(marker, marker_id(&long), "the same pair, the same marker");
        assert_ne!(marker, marker_id(&format!("{}:43", "c".repeat(MAX_ID_BYTES))));
        let upsert = marker_op(&DocumentOp { id: long, ..op(true) });
        let body = bulk_body([Action {
            op: &upsert,
            index: Some("pairs-refused"),
        }]);
        let lines: Vec<&[u8]> = body.split(|b| *b == b'\n').filter(|line| !line.is_empty()).collect();
        assert_eq!(
            serde_json::from_slice::<Value>(lines[0]).unwrap(),
            json!({"index": {"_index": "pairs-refused", "_id": marker, "version": 9, "version_type": "external"}})
        );
        assert_eq!(lines[1], b"{}", "the marker holds the refused document");

        // The refusal stands once the marker is written, and waits while it cannot be.
        assert_eq!(refused_before_sending(&upsert), None, "the marker's own id is short");
        let rejected = ItemOutcome::Rejected {
            code: "id_too_long".into(),
            reason: "long".into(),
        };
        let retry = ItemOutcome::Retry {
            reason: "503".into(),
            blocking: false,
        };
        assert_eq!(with_marker(&upsert, rejected.clone(), ItemOutcome::Done), rejected);
        assert_eq!(with_marker(&upsert, rejected.clone(), retry.clone()), retry);
        let marker_refused = ItemOutcome::Rejected {
            code: "strict_dynamic_mapping_exception".into(),
            reason: "no".into(),
        };
        assert_eq!(with_marker(&upsert, rejected.clone(), marker_refused), rejected);
    }

    #[test]
    fn every_item_status_has_its_outcome() {
        // The outcome of one item, read from a bulk answer as the sink reads it.
        let item_outcome = |op: &DocumentOp, item: &Value| {
            let answer = serde_json::to_vec(&json!({ "items": [item] })).unwrap();
            outcomes(&[op], &answer).unwrap().remove(0)
        };
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
