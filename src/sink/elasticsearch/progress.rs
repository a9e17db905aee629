//! The progress record as a document in Elasticsearch, beside the pairs it describes.
//!
//! Every process can read it (unlike a local file), and it is durable once the index
//! request returns (the translog is synced per request by default).

use anyhow::{bail, Context};
use elasticsearch::http::StatusCode;
use elasticsearch::{Elasticsearch, GetParts, IndexParts};
use serde_json::{json, Value};

use super::index::ensure_index;
use crate::progress::{ProgressRecord, ProgressStore};

pub struct ElasticsearchProgressStore {
    pub client: Elasticsearch,
    pub index: String,
    pub id: String,
    pub runtime: tokio::runtime::Handle,
}

impl ElasticsearchProgressStore {
    pub async fn ensure_index(&self) -> anyhow::Result<()> {
        // The record is read by id only: nothing in it needs indexing.
        ensure_index(&self.client, &self.index, json!({"mappings": {"dynamic": false}})).await?;
        Ok(())
    }
}

impl ProgressStore for ElasticsearchProgressStore {
    fn load(&mut self) -> anyhow::Result<Option<ProgressRecord>> {
        self.runtime.block_on(async {
            let response = self
                .client
                .get(GetParts::IndexId(&self.index, &self.id))
                .send()
                .await
                .context("cannot read the progress record")?;
            if response.status_code() == StatusCode::NOT_FOUND {
                return Ok(None);
            }
            if !response.status_code().is_success() {
                bail!(
                    "cannot read the progress record: {}",
                    response.text().await.unwrap_or_default()
                );
            }
            let document: Value = response.json().await?;
            let record = document["_source"]["record"]
                .as_str()
                .context("the progress document has no record")?;
            ProgressRecord::from_json(record).map(Some)
        })
    }

    fn save(&mut self, record: &ProgressRecord) -> anyhow::Result<()> {
        self.runtime.block_on(async {
            let response = self
                .client
                .index(IndexParts::IndexId(&self.index, &self.id))
                .body(json!({"record": record.to_json()}))
                .send()
                .await
                .context("cannot save the progress record")?;
            if !response.status_code().is_success() {
                bail!(
                    "cannot save the progress record: {}",
                    response.text().await.unwrap_or_default()
                );
            }
            Ok(())
        })
    }
}
