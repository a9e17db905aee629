//! Reading back what the index holds, for the reconciliation at start-up.
//!
//! A scroll over the whole index (sorted by `_doc`, the cheapest order), with each hit's
//! `_version`: the greatest one tells the job where its new versions must start.

use anyhow::{bail, Context};
use dataflows::model::{PairFigures, PairKey};
use elasticsearch::http::StatusCode;
use elasticsearch::{ClearScrollParts, Elasticsearch, ScrollParts, SearchParts};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::sink::contract::HeldPairs;

#[derive(Deserialize)]
struct PairSource {
    campaign_id: String,
    seller_id: u64,
    eligible_products: u64,
    eligible_stock: u64,
}

/// Every pair the index holds, and the greatest version among them.
pub async fn held_pairs(client: &Elasticsearch, index: &str) -> anyhow::Result<(HeldPairs, u64)> {
    let response = client
        .search(SearchParts::Index(&[index]))
        .scroll("2m")
        .size(5_000)
        .version(true)
        .body(json!({"query": {"match_all": {}}, "sort": ["_doc"]}))
        .send()
        .await
        .context("cannot read the pairs index")?;
    if response.status_code() == StatusCode::NOT_FOUND {
        return Ok((Vec::new(), 0));
    }
    if !response.status_code().is_success() {
        bail!(
            "cannot read the pairs index: {}",
            response.text().await.unwrap_or_default()
        );
    }
    let mut page: Value = response.json().await?;
    let mut held = Vec::new();
    let mut max_version = 0u64;
    let mut scroll_id = page.get("_scroll_id").and_then(Value::as_str).map(str::to_owned);
    loop {
        let hits = page["hits"]["hits"].as_array().cloned().unwrap_or_default();
        if hits.is_empty() {
            break;
        }
        for hit in hits {
            let source: PairSource = serde_json::from_value(hit["_source"].clone())
                .with_context(|| format!("unexpected document {}", hit["_id"]))?;
            max_version = max_version.max(hit["_version"].as_u64().unwrap_or(0));
            held.push((
                PairKey {
                    campaign_id: source.campaign_id,
                    seller_id: source.seller_id,
                },
                PairFigures {
                    eligible_products: source.eligible_products,
                    eligible_stock: source.eligible_stock,
                },
            ));
        }
        let Some(id) = scroll_id.clone() else { break };
        let response = client
            .scroll(ScrollParts::None)
            .body(json!({"scroll": "2m", "scroll_id": id}))
            .send()
            .await
            .context("cannot page through the pairs index")?;
        page = response.json().await?;
        scroll_id = page
            .get("_scroll_id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or(scroll_id);
    }
    if let Some(id) = scroll_id {
        let _ = client
            .clear_scroll(ClearScrollParts::None)
            .body(json!({"scroll_id": [id]}))
            .send()
            .await;
    }
    Ok((held, max_version))
}
