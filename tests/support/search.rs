//! Helpers for the tests against the real search node (`scripts/elasticsearch.sh start`).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use dataflows::reference::PairState;
use eligibility::sink::elasticsearch::config::ElasticsearchConfig;
use serde_json::Value;

pub fn url() -> String {
    std::env::var("ELIGIBILITY_SEARCH_URL").unwrap_or_else(|_| "http://127.0.0.1:9200".into())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn client() -> elasticsearch::Elasticsearch {
    eligibility::sink::elasticsearch::client::connect(&ElasticsearchConfig::for_url(&url(), "unused")).unwrap()
}

/// Fails with a clear message when no node answers.
pub fn require_node() {
    let answered =
        runtime().block_on(async { client().ping().send().await.is_ok_and(|r| r.status_code().is_success()) });
    assert!(
        answered,
        "no search node at {}: start one with scripts/elasticsearch.sh start (scripts/test.sh does)",
        url()
    );
}

/// A raw request: (status, JSON body).
pub fn request(method: elasticsearch::http::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    runtime().block_on(async {
        let body: Option<Vec<u8>> = body.map(|b| serde_json::to_vec(&b).unwrap());
        let response = client()
            .send(
                method,
                path,
                elasticsearch::http::headers::HeaderMap::new(),
                Option::<&()>::None,
                body,
                Some(Duration::from_secs(30)),
            )
            .await
            .unwrap();
        let status = response.status_code().as_u16();
        let text = response.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    })
}

/// Every pair in `index` (after a refresh), and each document's version.
pub fn index_content(index: &str) -> (PairState, BTreeMap<String, u64>) {
    let mut attempts = 0;
    let (status, body) = loop {
        request(elasticsearch::http::Method::Post, &format!("/{index}/_refresh"), None);
        let (status, body) = request(
            elasticsearch::http::Method::Post,
            &format!("/{index}/_search"),
            Some(serde_json::json!({"query": {"match_all": {}}, "size": 10000, "version": true})),
        );
        // A node that has just started, or an index just created, may not have its shard yet.
        attempts += 1;
        if status != 503 || attempts == 50 {
            break (status, body);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if status == 404 {
        return (PairState::new(), BTreeMap::new());
    }
    assert_eq!(status, 200, "{body}");
    let mut state = PairState::new();
    let mut versions = BTreeMap::new();
    for hit in body["hits"]["hits"].as_array().unwrap() {
        let source = &hit["_source"];
        let pair = dataflows::model::PairKey {
            campaign_id: source["campaign_id"].as_str().unwrap().to_owned(),
            seller_id: source["seller_id"].as_u64().unwrap(),
        };
        assert_eq!(hit["_id"].as_str().unwrap(), pair.document_id());
        state.insert(
            pair,
            dataflows::model::PairFigures {
                eligible_products: source["eligible_products"].as_u64().unwrap(),
                eligible_stock: source["eligible_stock"].as_u64().unwrap(),
            },
        );
        versions.insert(
            hit["_id"].as_str().unwrap().to_owned(),
            hit["_version"].as_u64().unwrap(),
        );
    }
    assert!(state.len() < 10000, "the test reads at most 10000 documents");
    (state, versions)
}

pub fn delete_index(index: &str) {
    request(elasticsearch::http::Method::Delete, &format!("/{index}"), None);
}
