//! `eligibility campaigns --seller 42`: the question the whole system exists to answer.
//!
//! One query on the pairs index: `term` on the seller, sorted by eligible products or
//! eligible stock (ties by campaign id), printed as a table or as JSON.

use anyhow::{bail, Context};
use elasticsearch::SearchParts;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::cli::{CampaignSort, CampaignsArgs, OutputFormat};
use crate::config::JobConfig;
use crate::sink::elasticsearch::client::connect;
use crate::sink::elasticsearch::config::ElasticsearchConfig;

#[derive(Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct SellerCampaign {
    pub campaign_id: String,
    pub eligible_products: u64,
    pub eligible_stock: u64,
}

/// The body of the serving query.
pub fn query(seller: u64, sort: CampaignSort, limit: usize) -> Value {
    let field = match sort {
        CampaignSort::Products => "eligible_products",
        CampaignSort::Stock => "eligible_stock",
    };
    json!({
        "query": {"term": {"seller_id": seller.to_string()}},
        "sort": [{field: "desc"}, {"campaign_id": "asc"}],
        "size": limit,
        "_source": ["campaign_id", "eligible_products", "eligible_stock"]
    })
}

pub async fn seller_campaigns(
    config: &ElasticsearchConfig,
    seller: u64,
    sort: CampaignSort,
    limit: usize,
) -> anyhow::Result<Vec<SellerCampaign>> {
    let client = connect(config)?;
    let response = client
        .search(SearchParts::Index(&[&config.index]))
        .body(query(seller, sort, limit))
        .send()
        .await
        .context("cannot query the pairs index")?;
    if !response.status_code().is_success() {
        bail!("the query failed: {}", response.text().await.unwrap_or_default());
    }
    let body: Value = response.json().await?;
    let hits = body["hits"]["hits"].as_array().cloned().unwrap_or_default();
    hits.into_iter()
        .map(|hit| serde_json::from_value(hit["_source"].clone()).context("unexpected document"))
        .collect()
}

pub fn run(args: &CampaignsArgs) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => JobConfig::load(path)?
            .1
            .sinks
            .elasticsearch
            .context("the config has no [sinks.elasticsearch]")?,
        None => ElasticsearchConfig::for_url(&args.url, &args.index),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let campaigns = runtime.block_on(seller_campaigns(&config, args.seller, args.sort, args.limit))?;
    match args.format {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&campaigns)?),
        OutputFormat::Table => {
            println!(
                "{:<24} {:>18} {:>16}",
                "campaign", "eligible products", "eligible stock"
            );
            for campaign in &campaigns {
                println!(
                    "{:<24} {:>18} {:>16}",
                    campaign.campaign_id, campaign.eligible_products, campaign.eligible_stock
                );
            }
            if campaigns.is_empty() {
                println!("(seller {} can join no campaign)", args.seller);
            }
        }
    }
    Ok(())
}
