//! The progress record as a document in Elasticsearch, beside the pairs it describes.
//!
//! Every process can read it (unlike a local file), and it is durable once the index
//! request returns (the translog is synced per request by default).

use std::sync::Arc;

use anyhow::{bail, Context};
use elasticsearch::http::StatusCode;
use elasticsearch::{Elasticsearch, GetParts, IndexParts};
use serde_json::{json, Value};

use super::config::ElasticsearchConfig;
use super::index::ensure_index;
use super::NAME;
use crate::metrics::Metrics;
use crate::progress::{ProgressError, ProgressRecord, ProgressStore};
use crate::sink::contract::SinkError;
use crate::sink::startup::until_ready;

pub struct ElasticsearchProgressStore {
    pub client: Elasticsearch,
    pub index: String,
    pub id: String,
    /// Replicas of the progress index when the job creates it (as for the pairs index).
    pub replicas: u32,
    pub runtime: tokio::runtime::Handle,
    /// Where start-up waits report why they wait.
    pub metrics: Arc<Metrics>,
}

impl ElasticsearchProgressStore {
    pub fn new(
        config: &ElasticsearchConfig,
        runtime: tokio::runtime::Handle,
        metrics: Arc<Metrics>,
    ) -> Result<Self, SinkError> {
        Ok(ElasticsearchProgressStore {
            client: super::client::connect(config)?,
            index: config.progress_index.clone(),
            id: config.job_id.clone(),
            replicas: config.replicas,
            runtime,
            metrics,
        })
    }

    /// Creates the progress index if missing, waiting for the node as long as it takes
    /// (like the broker), with the reason on `/health`.
    pub async fn ensure_index(&self) -> Result<(), ProgressError> {
        // The record is read by id only: nothing in it needs indexing.
        let body = json!({
            "settings": {"number_of_shards": 1, "number_of_replicas": self.replicas},
            "mappings": {"dynamic": false}
        });
        until_ready(NAME, "prepare the progress index", &self.metrics, || {
            ensure_index(&self.client, &self.index, body.clone())
        })
        .await
        .map_err(|error| ProgressError::Store(format!("{error:#}")))?;
        Ok(())
    }

    /// The stored document, if any (network and node errors only: worth waiting out).
    async fn fetch(&self) -> anyhow::Result<Option<Value>> {
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
        Ok(Some(response.json().await?))
    }
}

impl ProgressStore for ElasticsearchProgressStore {
    fn load(&mut self) -> Result<Option<ProgressRecord>, ProgressError> {
        let document = self
            .runtime
            .block_on(until_ready(NAME, "read the progress record", &self.metrics, || {
                self.fetch()
            }))
            .map_err(|error| ProgressError::Store(format!("{error:#}")))?;
        let place = || format!("{}/{}", self.index, self.id);
        // A record that does not parse is not an outage: stop and say so.
        document
            .map(|document| {
                let record = document["_source"]["record"]
                    .as_str()
                    .ok_or_else(|| ProgressError::Store(format!("the progress document {} has no record", place())))?;
                ProgressRecord::from_json(record).map_err(|source| ProgressError::Corrupt { place: place(), source })
            })
            .transpose()
    }

    fn save(&mut self, record: &ProgressRecord) -> Result<(), ProgressError> {
        self.runtime.block_on(async {
            let response = self
                .client
                .index(IndexParts::IndexId(&self.index, &self.id))
                .body(json!({"record": record.to_json()}))
                .send()
                .await
                .map_err(|error| ProgressError::Store(format!("cannot save the progress record: {error}")))?;
            if !response.status_code().is_success() {
                return Err(ProgressError::Store(format!(
                    "cannot save the progress record: {}",
                    response.text().await.unwrap_or_default()
                )));
            }
            Ok(())
        })
    }
}
