//! Reading back what the index holds, for the reconciliation at start-up.
//!
//! A scroll over the whole index (sorted by `_doc`, the cheapest order), with each hit's
//! `_version`: the greatest one tells the job where its new versions must start.
//!
//! The pairs the index refused (`id_too_long`) are held too, as their markers in the
//! refused index say, so that the reconciliation does not send them again to be refused
//! and dead-lettered again at every start. Only markers at or below the committed time
//! count: the dead letter of a refusal goes out after its marker is written, and only the
//! committed time says it was acknowledged. A later marker (a kill between the two) is not
//! held, so its pair is sent and dead-lettered again: at least once, never lost.

use anyhow::{bail, Context};
use dataflows::model::{PairFigures, PairKey, Time};
use elasticsearch::http::StatusCode;
use elasticsearch::indices::IndicesRefreshParts;
use elasticsearch::{ClearScrollParts, Elasticsearch, ScrollParts, SearchParts};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::sink::contract::{HeldFold, HeldPairs};

#[derive(Deserialize)]
struct PairSource {
    campaign_id: String,
    seller_id: u64,
    eligible_products: u64,
    eligible_stock: u64,
}

/// Every pair the index holds, the pairs it refused whose dead letters are committed
/// (`committed`: the progress record's time), and the greatest version among them all.
pub async fn held_pairs(
    client: &Elasticsearch,
    index: &str,
    refused_index: &str,
    committed: Option<Time>,
) -> anyhow::Result<(HeldPairs, u64)> {
    let mut held = HeldFold::new();
    let written = scroll(client, index, |pair, figures, _| held.push((pair, figures))).await?;
    let refused = scroll(client, refused_index, |pair, figures, version| {
        if committed.is_some_and(|committed| version <= committed) {
            held.push((pair, figures));
        }
    })
    .await?;
    Ok((held.finish(), written.max(refused)))
}

/// Calls `each` with every document of `index` and its version; returns the greatest
/// version (0 for a missing or empty index).
async fn scroll(
    client: &Elasticsearch,
    index: &str,
    mut each: impl FnMut(PairKey, PairFigures, u64),
) -> anyhow::Result<u64> {
    // A search sees only refreshed writes: without this, a restart within a second of the
    // last run misses its last writes (and refusals), and sends them again.
    let refreshed = client
        .indices()
        .refresh(IndicesRefreshParts::Index(&[index]))
        .send()
        .await
        .with_context(|| format!("cannot refresh index {index}"))?;
    if !refreshed.status_code().is_success() && refreshed.status_code() != StatusCode::NOT_FOUND {
        bail!(
            "cannot refresh index {index}: {}",
            refreshed.text().await.unwrap_or_default()
        );
    }
    let response = client
        .search(SearchParts::Index(&[index]))
        .scroll("2m")
        .size(5_000)
        .version(true)
        .body(json!({"query": {"match_all": {}}, "sort": ["_doc"]}))
        .send()
        .await
        .with_context(|| format!("cannot read index {index}"))?;
    if response.status_code() == StatusCode::NOT_FOUND {
        return Ok(0);
    }
    if !response.status_code().is_success() {
        bail!(
            "cannot read index {index}: {}",
            response.text().await.unwrap_or_default()
        );
    }
    let mut page: Value = response.json().await?;
    let mut max_version = 0u64;
    let mut scroll_id = page.get("_scroll_id").and_then(Value::as_str).map(str::to_owned);
    loop {
        let hits = page["hits"]["hits"].as_array().cloned().unwrap_or_default();
        if hits.is_empty() {
            break;
        }
        for hit in hits {
            let source: PairSource = serde_json::from_value(hit["_source"].clone())
                .with_context(|| format!("unexpected document {} in {index}", hit["_id"]))?;
            let version = hit["_version"].as_u64().unwrap_or(0);
            max_version = max_version.max(version);
            each(
                PairKey {
                    campaign_id: source.campaign_id,
                    seller_id: source.seller_id,
                },
                PairFigures {
                    eligible_products: source.eligible_products,
                    eligible_stock: source.eligible_stock,
                },
                version,
            );
        }
        let Some(id) = scroll_id.clone() else { break };
        let response = client
            .scroll(ScrollParts::None)
            .body(json!({"scroll": "2m", "scroll_id": id}))
            .send()
            .await
            .with_context(|| format!("cannot page through index {index}"))?;
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
    Ok(max_version)
}
