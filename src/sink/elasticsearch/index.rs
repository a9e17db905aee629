//! The pairs index: created with an explicit mapping when missing.
//!
//! Ids are `keyword`, figures `long`, and the mapping is strict, so a document that does
//! not fit is refused instead of widening the mapping. A seller's campaigns sorted by
//! either figure is one query: `term` on `seller_id`, sort on the figure.

use anyhow::{bail, Context};
use elasticsearch::http::StatusCode;
use elasticsearch::indices::{IndicesCreateParts, IndicesExistsParts};
use elasticsearch::Elasticsearch;
use serde_json::json;

use super::config::ElasticsearchConfig;

pub fn pairs_mapping(config: &ElasticsearchConfig) -> serde_json::Value {
    json!({
        "settings": {
            "number_of_shards": config.shards,
            "number_of_replicas": config.replicas
        },
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "campaign_id": {"type": "keyword"},
                "seller_id": {"type": "keyword"},
                "eligible_products": {"type": "long"},
                "eligible_stock": {"type": "long"}
            }
        }
    })
}

/// The refused index: markers are read back by scroll only, so nothing in them is indexed
/// (a campaign id too long for an `_id` may be too long for a keyword too).
pub fn refused_mapping(config: &ElasticsearchConfig) -> serde_json::Value {
    json!({
        "settings": {"number_of_shards": 1, "number_of_replicas": config.replicas},
        "mappings": {"dynamic": false}
    })
}

/// Waits until the primary shards of `index` are assigned (health yellow or better).
async fn wait_for_shards(client: &Elasticsearch, index: &str) -> anyhow::Result<()> {
    let response = client
        .cluster()
        .health(elasticsearch::cluster::ClusterHealthParts::Index(&[index]))
        .wait_for_status(elasticsearch::params::WaitForStatus::Yellow)
        .timeout("30s")
        .send()
        .await
        .with_context(|| format!("cannot wait for index {index}"))?;
    if !response.status_code().is_success() {
        bail!(
            "index {index} did not become available: {}",
            response.text().await.unwrap_or_default()
        );
    }
    Ok(())
}

/// Creates `index` with `body` unless it exists (another process may create it first).
pub async fn ensure_index(client: &Elasticsearch, index: &str, body: serde_json::Value) -> anyhow::Result<bool> {
    let exists = client
        .indices()
        .exists(IndicesExistsParts::Index(&[index]))
        .send()
        .await
        .with_context(|| format!("cannot ask whether index {index} exists"))?;
    if exists.status_code() == StatusCode::OK {
        // Another process may have created it a moment ago: its shards may not be up yet.
        wait_for_shards(client, index).await?;
        return Ok(false);
    }
    let response = client
        .indices()
        .create(IndicesCreateParts::Index(index))
        .body(body)
        .send()
        .await
        .with_context(|| format!("cannot create index {index}"))?;
    let status = response.status_code();
    if status.is_success() {
        tracing::info!(index, "created index");
        wait_for_shards(client, index).await?;
        return Ok(true);
    }
    let text = response.text().await.unwrap_or_default();
    if text.contains("resource_already_exists_exception") {
        wait_for_shards(client, index).await?;
        return Ok(false);
    }
    bail!("cannot create index {index}: {status} {text}")
}
