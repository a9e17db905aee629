//! The Couchbase sink, tested against a model of the Query service's documented REST
//! protocol (`tests/support/query_service.rs`), not against a live Couchbase cluster: none
//! can be installed on these machines. Kafka and the search node are real.

mod support;

use std::collections::BTreeMap;
use std::sync::MutexGuard;
use std::time::Duration;

use dataflows::model::{PairFigures, PairKey};
use dataflows::reference::PairState;
use support::kafka::{
    expected_state, generated_lines, wait_until, KafkaCase, SinkSetup, BROKER, COUCHBASE_PASSWORD_ENV,
};
use support::query_service::{Injected, QueryServiceModel};
use support::search::{delete_index, index_content, require_node};

const KEYSPACE: &str = "`eligibility`.`_default`.`_default`";

fn serial() -> MutexGuard<'static, ()> {
    BROKER.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn model() -> QueryServiceModel {
    std::env::set_var(COUCHBASE_PASSWORD_ENV, "s3cret");
    QueryServiceModel::start(KEYSPACE, "eligibility", "s3cret")
}

/// The pairs the model's collection holds, keyed as the sink keyed them.
fn collection_state(model: &QueryServiceModel) -> PairState {
    let state = model.state.lock().unwrap();
    state
        .documents
        .iter()
        .map(|(id, doc)| {
            let pair = PairKey {
                campaign_id: doc["campaign_id"].as_str().unwrap().to_owned(),
                seller_id: doc["seller_id"].as_u64().unwrap(),
            };
            assert_eq!(*id, pair.document_id(), "the key is campaign_id:seller_id");
            let figures = PairFigures {
                eligible_products: doc["eligible_products"].as_u64().unwrap(),
                eligible_stock: doc["eligible_stock"].as_u64().unwrap(),
            };
            (pair, figures)
        })
        .collect()
}

#[test]
fn both_sinks_at_once_end_exact_with_one_statement_per_batch() {
    let _serial = serial();
    require_node();
    let model = model();
    let case = KafkaCase::new("cb-e2e", false);
    let index = format!("{}-pairs", case.products_topic.trim_end_matches("-products"));
    delete_index(&index);
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            elasticsearch_index: Some(&index),
            couchbase_url: Some(&model.url()),
            ..SinkSetup::default()
        },
    );
    let lines = generated_lines(case.dir.path(), 3_000, 6_000, 51);
    case.produce(&lines, 4);
    case.run_to_end(&case.config, &["--workers", "2"]);

    let expected = expected_state(&lines);
    assert!(expected.len() > 100);
    assert_eq!(
        collection_state(&model),
        expected,
        "the collection holds exactly the pairs"
    );
    assert_eq!(index_content(&index).0, expected, "and so does the index");

    let state = model.state.lock().unwrap();
    let upserts: Vec<usize> = state
        .requests
        .iter()
        .filter(|r| r.statement == "UPSERT")
        .map(|r| r.documents)
        .collect();
    let documents: usize = state.requests.iter().map(|r| r.documents).sum();
    assert!(!upserts.is_empty());
    // Writes come as statements of many documents, never one request per document.
    assert!(
        state.requests.len() * 5 < documents,
        "{} requests for {documents} document writes",
        state.requests.len()
    );
    assert!(
        upserts.iter().any(|n| *n > 50),
        "batches carry many documents: {upserts:?}"
    );
    assert!(upserts.iter().all(|n| *n <= 200), "no batch exceeds max_actions");
}

#[test]
fn temporary_errors_are_retried_and_nothing_is_lost() {
    let _serial = serial();
    let model = model();
    {
        let mut state = model.state.lock().unwrap();
        for injected in [
            Injected::timeout(),
            Injected::queue_full(),
            Injected::temporary_failure(),
            Injected::timeout(),
        ] {
            state.inject.push_back(injected);
        }
    }
    let case = KafkaCase::new("cb-retry", false);
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            couchbase_url: Some(&model.url()),
            ..SinkSetup::default()
        },
    );
    let lines = generated_lines(case.dir.path(), 2_000, 3_000, 53);
    case.produce(&lines, 3);
    case.run_to_end(&case.config, &[]);
    assert_eq!(model.state.lock().unwrap().injected, 4, "every injected error was met");
    assert_eq!(collection_state(&model), expected_state(&lines));
    assert_eq!(
        std::fs::read_to_string(case.dir.path().join("rejected.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("\"sink\""))
            .count(),
        0
    );
}

#[test]
fn a_document_refused_for_good_goes_to_the_dead_letter_output_alone() {
    let _serial = serial();
    let model = model();
    model.state.lock().unwrap().poison.push("c-1:2".into());
    let case = KafkaCase::new("cb-refused", false);
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            couchbase_url: Some(&model.url()),
            ..SinkSetup::default()
        },
    );
    let lines: Vec<String> = vec![
        r#"{"topic": "campaigns", "key": "c-1", "value": {}}"#.into(),
        r#"{"topic": "products", "key": "p-1", "value": {"seller_id": 1, "category_id": 1, "brand_id": 1, "price": 1, "stock": 3}}"#.into(),
        r#"{"topic": "products", "key": "p-2", "value": {"seller_id": 2, "category_id": 1, "brand_id": 1, "price": 1, "stock": 4}}"#.into(),
        r#"{"topic": "products", "key": "p-3", "value": {"seller_id": 3, "category_id": 1, "brand_id": 1, "price": 1, "stock": 5}}"#.into(),
    ];
    case.produce(&lines, 1);
    case.run_to_end(&case.config, &[]);
    let mut expected = expected_state(&lines);
    expected.remove(&PairKey {
        campaign_id: "c-1".into(),
        seller_id: 2,
    });
    assert_eq!(
        collection_state(&model),
        expected,
        "the other documents of the batch are written"
    );
    let letters: Vec<serde_json::Value> = std::fs::read_to_string(case.dir.path().join("rejected.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["sink"], "couchbase");
    assert_eq!(letters[0]["key"], "c-1:2");
    assert_eq!(letters[0]["code"], "query_12009");
    assert!(letters[0]["reason"].as_str().unwrap().contains("Value too large"));
}

#[test]
fn a_killed_job_restarts_without_rewriting_what_the_collection_holds() {
    let _serial = serial();
    let model = model();
    let case = KafkaCase::new("cb-restart", false);
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            couchbase_url: Some(&model.url()),
            ..SinkSetup::default()
        },
    );
    let lines = generated_lines(case.dir.path(), 4_000, 10_000, 57);
    case.produce(&lines, 3);
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    wait_until(
        "the first run has written part of the collection",
        Duration::from_secs(90),
        || model.state.lock().unwrap().documents.len() > 50,
    );
    job.kill();
    let at_kill = collection_state(&model);
    let writes_at_kill: BTreeMap<String, usize> = model.state.lock().unwrap().writes.clone();

    case.run_to_end(&case.config, &["--workers", "2"]);
    let expected = expected_state(&lines);
    assert_eq!(collection_state(&model), expected);
    let writes = model.state.lock().unwrap().writes.clone();
    let mut already_right = 0;
    for (pair, figures) in &at_kill {
        if expected.get(pair) == Some(figures) {
            already_right += 1;
            let id = pair.document_id();
            assert_eq!(
                writes.get(&id),
                writes_at_kill.get(&id),
                "{id} was rewritten with the same figures"
            );
        }
    }
    assert!(already_right > 0);
}
