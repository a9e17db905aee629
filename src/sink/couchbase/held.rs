//! Reading back what the collection holds, for the reconciliation at start-up: pages of
//! documents by id (keyset pagination), at `request_plus` consistency by default.

use anyhow::anyhow;
use dataflows::model::{PairFigures, PairKey};
use serde::Deserialize;
use serde_json::json;

use super::query::{QueryClient, QueryFailure};
use super::statements;
use crate::sink::contract::{HeldFold, HeldPairs};

const PAGE: usize = 5_000;

#[derive(Deserialize)]
struct Row {
    id: String,
    campaign_id: String,
    seller_id: u64,
    eligible_products: u64,
    eligible_stock: u64,
}

pub async fn held_pairs(client: &QueryClient, keyspace: &str, scan_consistency: &str) -> anyhow::Result<HeldPairs> {
    let statement = statements::held_page(keyspace);
    let mut held = HeldFold::new();
    let mut after = String::new();
    loop {
        let answer = client
            .execute(&statement, json!([after, PAGE]), Some(scan_consistency))
            .await
            .map_err(|failure| anyhow!("cannot read what {keyspace} holds: {}", failure.reason()))?;
        let count = answer.results.len();
        for row in answer.results {
            let row: Row =
                serde_json::from_value(row).map_err(|error| anyhow!("unexpected document in {keyspace}: {error}"))?;
            after = row.id;
            held.push((
                PairKey {
                    campaign_id: row.campaign_id,
                    seller_id: row.seller_id,
                },
                PairFigures {
                    eligible_products: row.eligible_products,
                    eligible_stock: row.eligible_stock,
                },
            ));
        }
        if count < PAGE {
            return Ok(held.finish());
        }
    }
}

/// Creates the primary index the start-up read needs, unless it exists.
pub async fn ensure_primary_index(client: &QueryClient, keyspace: &str) -> Result<(), QueryFailure> {
    match client
        .execute(&statements::create_primary_index(keyspace), json!([]), None)
        .await
    {
        Ok(_) => Ok(()),
        // 4300: the index exists already.
        Err(QueryFailure::Permanent { code, .. }) if code == "query_4300" => Ok(()),
        Err(failure) => Err(failure),
    }
}
