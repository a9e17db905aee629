//! Kafka -> job -> a real search node with the Elasticsearch REST API (OpenSearch by
//! default; `scripts/elasticsearch.sh start`, which `scripts/test.sh` runs). The tests
//! share the broker and the node, so they run one at a time.

mod support;

use std::sync::MutexGuard;
use std::time::Duration;

use dataflows::model::PairKey;
use elasticsearch::http::Method;
use serde_json::json;
use support::kafka::{expected_state, generated_lines, http_get, wait_until, JobProcess, KafkaCase, SinkSetup, BROKER};
use support::search::{delete_index, index_content, request, require_node};
use support::{free_port, path_str, run_ok, service_script};

fn serial() -> MutexGuard<'static, ()> {
    BROKER.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A case whose job writes to its own index.
fn case(name: &str) -> (KafkaCase, String) {
    require_node();
    let case = KafkaCase::new(name, false);
    let index = format!("{}-pairs", case.products_topic.trim_end_matches("-products"));
    delete_index(&index);
    delete_index(&format!("{index}-refused"));
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            elasticsearch_index: Some(&index),
            ..SinkSetup::default()
        },
    );
    (case, index)
}

#[test]
fn the_index_holds_exactly_the_brute_force_pairs() {
    let _serial = serial();
    let (case, index) = case("es-e2e");
    let lines = generated_lines(case.dir.path(), 3_000, 6_000, 31);
    case.produce(&lines, 4);
    case.run_to_end(&case.config, &["--workers", "2"]);
    let (state, _) = index_content(&index);
    let expected = expected_state(&lines);
    assert!(expected.len() > 100, "the log should make many pairs");
    assert_eq!(
        state, expected,
        "pair for pair, figure for figure; ended pairs are gone"
    );

    // The mapping is the explicit one: ids are keywords, figures longs.
    let (_, mapping) = request(Method::Get, &format!("/{index}/_mapping"), None);
    let properties = &mapping[&index]["mappings"]["properties"];
    assert_eq!(properties["campaign_id"]["type"], "keyword");
    assert_eq!(properties["seller_id"]["type"], "keyword");
    assert_eq!(properties["eligible_products"]["type"], "long");
    assert_eq!(properties["eligible_stock"]["type"], "long");
}

#[test]
fn a_stopped_node_pauses_the_job_which_then_catches_up_exactly() {
    let _serial = serial();
    let (case, index, port) = case_with_metrics("es-node-down");
    let lines = generated_lines(case.dir.path(), 2_000, 4_000, 37);
    let (first, rest) = lines.split_at(3_000);
    case.produce(first, 3);
    let _job = case.spawn(&case.config, &[]);
    let first_state = expected_state(first);
    wait_until("the index has caught up", Duration::from_secs(90), || {
        index_content(&index).0 == first_state
    });

    service_script("elasticsearch", "stop");
    case.produce(rest, 3);
    // The progress record lives in the index too and may report the outage first: wait for
    // the sink's own component, not any unhealthy one that names the node.
    wait_until("/health reports the sink", Duration::from_secs(60), || {
        http_get(port, "/health").is_some_and(|(status, body)| status == 503 && body.contains("elasticsearch"))
            && http_get(port, "/metrics").is_some_and(|(_, metrics)| {
                metrics.contains("eligibility_component_healthy{component=\"elasticsearch\"} 0")
            })
    });
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    assert!(
        metrics.contains("eligibility_sink_retries_total{sink=\"elasticsearch\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("eligibility_component_healthy{component=\"elasticsearch\"} 0"),
        "{metrics}"
    );
    service_script("elasticsearch", "start");

    let all = expected_state(&lines);
    wait_until(
        "the index has caught up after the outage",
        Duration::from_secs(120),
        || index_content(&index).0 == all,
    );
    wait_until("/health recovers", Duration::from_secs(30), || {
        http_get(port, "/health").is_some_and(|(status, _)| status == 200)
    });
    let (_, metrics) = http_get(port, "/metrics").unwrap();
    for expected in [
        "eligibility_sink_requests_total{sink=\"elasticsearch\"}",
        "eligibility_sink_documents_written_total{sink=\"elasticsearch\"}",
        "eligibility_sink_request_seconds_bucket{",
        "eligibility_sink_requests_in_flight{sink=\"elasticsearch\"}",
    ] {
        assert!(metrics.contains(expected), "/metrics lacks {expected}");
    }
}

#[test]
fn a_killed_job_restarts_without_rewriting_what_the_index_holds() {
    let _serial = serial();
    let (case, index) = case("es-restart");
    let lines = generated_lines(case.dir.path(), 4_000, 10_000, 41);
    case.produce(&lines, 3);
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    wait_until(
        "the first run has written part of the index",
        Duration::from_secs(90),
        || index_content(&index).0.len() > 50,
    );
    job.kill();
    let (at_kill, versions_at_kill) = index_content(&index);

    case.run_to_end(&case.config, &["--workers", "2"]);
    let (state, versions) = index_content(&index);
    let expected = expected_state(&lines);
    assert_eq!(state, expected);
    // A pair that was already right is not written again: its version is unchanged.
    let mut already_right = 0;
    let mut rewritten = 0;
    for (pair, figures) in &at_kill {
        let id = pair.document_id();
        if expected.get(pair) == Some(figures) {
            already_right += 1;
            assert_eq!(
                versions.get(&id),
                versions_at_kill.get(&id),
                "{id} was rewritten with the same figures"
            );
        } else if versions.get(&id) != versions_at_kill.get(&id) {
            rewritten += 1;
        }
    }
    assert!(already_right > 0, "the kill should leave some pairs right");
    eprintln!("after the kill: {already_right} pairs were right and left alone, {rewritten} were corrected");
}

#[test]
fn a_document_the_index_refuses_goes_to_the_dead_letter_output() {
    let _serial = serial();
    let (case, index) = case("es-refused");
    // An index whose stock field is a 32-bit integer refuses a sum above 2^31.
    let (status, body) = request(
        Method::Put,
        &format!("/{index}"),
        Some(json!({
            "settings": {"number_of_shards": 1, "number_of_replicas": 0},
            "mappings": {"dynamic": "strict", "properties": {
                "campaign_id": {"type": "keyword"}, "seller_id": {"type": "keyword"},
                "eligible_products": {"type": "long"}, "eligible_stock": {"type": "integer"}}}
        })),
    );
    assert_eq!(status, 200, "{body}");
    let lines: Vec<String> = vec![
        r#"{"topic": "campaigns", "key": "c-1", "value": {}}"#.into(),
        r#"{"topic": "products", "key": "p-1", "value": {"seller_id": 1, "category_id": 1, "brand_id": 1, "price": 1, "stock": 4000000000}}"#.into(),
        r#"{"topic": "products", "key": "p-2", "value": {"seller_id": 2, "category_id": 1, "brand_id": 1, "price": 1, "stock": 5}}"#.into(),
    ];
    case.produce(&lines, 1);
    case.run_to_end(&case.config, &[]);

    let (state, _) = index_content(&index);
    assert_eq!(state.len(), 1, "the other pair is written: {state:?}");
    assert!(state.contains_key(&PairKey {
        campaign_id: "c-1".into(),
        seller_id: 2
    }));
    let letters: Vec<serde_json::Value> = std::fs::read_to_string(case.dir.path().join("rejected.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!(letters[0]["sink"], "elasticsearch");
    assert_eq!(letters[0]["key"], "c-1:1");
    assert!(
        letters[0]["code"].as_str().unwrap().contains("exception"),
        "{}",
        letters[0]
    );
    assert!(letters[0]["raw"].as_str().unwrap().contains("4000000000"));
}

#[test]
fn the_campaigns_command_sorts_a_sellers_campaigns() {
    let _serial = serial();
    let (case, index) = case("es-campaigns");
    let lines = generated_lines(case.dir.path(), 3_000, 2_000, 43);
    case.produce(&lines, 3);
    case.run_to_end(&case.config, &[]);
    let expected = expected_state(&lines);
    // Search is near real time: make the last writes visible.
    assert_eq!(index_content(&index).0, expected);
    let seller = expected.keys().map(|pair| pair.seller_id).min().unwrap();
    for (sort, figure) in [("products", 0), ("stock", 1)] {
        let output = run_ok(&[
            "campaigns",
            "--config",
            path_str(&case.config),
            "--seller",
            &seller.to_string(),
            "--sort",
            sort,
            "--limit",
            "5",
            "--format",
            "json",
        ]);
        let shown: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
        let mut campaigns: Vec<(String, u64, u64)> = expected
            .iter()
            .filter(|(pair, _)| pair.seller_id == seller)
            .map(|(pair, f)| (pair.campaign_id.clone(), f.eligible_products, f.eligible_stock))
            .collect();
        campaigns.sort_by(|a, b| {
            let key = |c: &(String, u64, u64)| if figure == 0 { c.1 } else { c.2 };
            key(b).cmp(&key(a)).then(a.0.cmp(&b.0))
        });
        campaigns.truncate(5);
        let shown: Vec<(String, u64, u64)> = shown
            .iter()
            .map(|c| {
                (
                    c["campaign_id"].as_str().unwrap().to_owned(),
                    c["eligible_products"].as_u64().unwrap(),
                    c["eligible_stock"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(shown, campaigns, "sorted by {sort}");
    }
    let table = run_ok(&[
        "campaigns",
        "--config",
        path_str(&case.config),
        "--seller",
        &seller.to_string(),
    ]);
    assert!(String::from_utf8(table.stdout).unwrap().contains("eligible products"));
}

/// A case whose job also serves `/metrics` and `/health` on a port of its own.
fn case_with_metrics(name: &str) -> (KafkaCase, String, u16) {
    let (case, index) = case(name);
    let port = free_port();
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            elasticsearch_index: Some(&index),
            metrics_port: Some(port),
            ..SinkSetup::default()
        },
    );
    (case, index, port)
}

/// Rewrites the case's job config with `edit`.
fn edit_config(case: &KafkaCase, edit: impl FnOnce(String) -> String) {
    let config = std::fs::read_to_string(&case.config).unwrap();
    std::fs::write(&case.config, edit(config)).unwrap();
}

/// Gives the job's progress record an index of its own (the section is the config's last).
fn own_progress_index(case: &KafkaCase, index: &str) -> String {
    let progress_index = format!("{index}-progress");
    delete_index(&progress_index);
    edit_config(case, |config| {
        config + &format!("progress_index = {progress_index:?}\n")
    });
    progress_index
}

/// A product of seller `n` (and key `p-n`) that every campaign without criteria takes.
fn product(n: u64) -> String {
    format!(
        r#"{{"topic": "products", "key": "p-{n}", "value": {{"seller_id": {n}, "category_id": 1, "brand_id": 1, "price": 1, "stock": 5}}}}"#
    )
}

const CAMPAIGN: &str = r#"{"topic": "campaigns", "key": "c-1", "value": {}}"#;

/// Sets or lifts `index.blocks.write` on `index`.
/// Starts the job on one campaign and one product, waits for their pair in the index, then
/// blocks writes to it. Returns the lines produced so far and the running job.
fn run_until_first_pair_then_block(case: &KafkaCase, index: &str) -> (Vec<String>, JobProcess) {
    let lines: Vec<String> = vec![CAMPAIGN.into(), product(1)];
    case.produce(&lines, 1);
    let job = case.spawn(&case.config, &[]);
    let first = expected_state(&lines);
    wait_until("the first pair is written", Duration::from_secs(90), || {
        index_content(index).0 == first
    });
    block_writes(index, true);
    (lines, job)
}

fn block_writes(index: &str, blocked: bool) {
    let (status, body) = request(
        Method::Put,
        &format!("/{index}/_settings"),
        Some(json!({"index.blocks.write": blocked})),
    );
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_document_id_too_long_for_the_index_is_a_dead_letter_and_the_stream_goes_on() {
    let _serial = serial();
    let (case, index) = case("es-long-id");
    // `_id` is limited to 512 bytes; SPEC allows any non-empty campaign key.
    let long = format!("c-{}", "L".repeat(600));
    let mut lines: Vec<String> = vec![
        format!(r#"{{"topic": "campaigns", "key": "{long}", "value": {{}}}}"#),
        CAMPAIGN.into(),
        product(1),
        product(2),
    ];
    case.produce(&lines, 1);
    let mut job = case.spawn(&case.config, &[]);
    let short_pairs = |lines: &[String]| {
        let mut state = expected_state(lines);
        state.retain(|pair, _| pair.campaign_id != long);
        state
    };
    let first = short_pairs(&lines);
    assert_eq!(first.len(), 2);
    wait_until("the short ids are written", Duration::from_secs(90), || {
        index_content(&index).0 == first
    });
    // A tombstone for the long campaign, then more records: the stream must go on.
    let more = vec![
        format!(r#"{{"topic": "campaigns", "key": "{long}", "value": null}}"#),
        product(3),
    ];
    case.produce(&more, 1);
    lines.extend(more);
    let all = short_pairs(&lines);
    wait_until(
        "the records after the tombstone are written",
        Duration::from_secs(60),
        || index_content(&index).0 == all,
    );
    job.kill();

    let letters: Vec<serde_json::Value> = std::fs::read_to_string(case.dir.path().join("rejected.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let refused: Vec<&serde_json::Value> = letters.iter().filter(|l| l["sink"] == "elasticsearch").collect();
    assert_eq!(refused.len(), 2, "one per pair of the long campaign: {letters:?}");
    for letter in refused {
        assert_eq!(letter["code"], "id_too_long", "{letter}");
        assert!(letter["reason"].as_str().unwrap().contains("512"), "{letter}");
        assert!(letter["key"].as_str().unwrap().starts_with(&long), "{letter}");
    }
}

/// The partitions' offsets in the progress record `id` of `progress_index`, summed.
fn progress_offsets(progress_index: &str, id: &str) -> Option<i64> {
    let (status, document) = request(Method::Get, &format!("/{progress_index}/_doc/{id}"), None);
    if status != 200 {
        return None;
    }
    let record: serde_json::Value = serde_json::from_str(document["_source"]["record"].as_str()?).ok()?;
    Some(
        record["partitions"]
            .as_array()?
            .iter()
            .map(|p| p["offset"].as_i64().unwrap())
            .sum(),
    )
}

#[test]
fn a_progress_record_that_cannot_be_saved_is_retried_and_the_job_keeps_running() {
    let _serial = serial();
    let (case, index, port) = case_with_metrics("es-progress-block");
    let progress_index = own_progress_index(&case, &index);

    let mut lines: Vec<String> = vec![CAMPAIGN.into()];
    lines.extend((1..=3).map(product));
    case.produce(&lines, 1);
    let mut job = case.spawn(&case.config, &[]);
    wait_until("the first records are committed", Duration::from_secs(90), || {
        progress_offsets(&progress_index, &index) == Some(lines.len() as i64)
    });

    block_writes(&progress_index, true);
    let more: Vec<String> = (4..=6).map(product).collect();
    case.produce(&more, 1);
    lines.extend(more);
    let all = expected_state(&lines);
    wait_until("the pairs are written meanwhile", Duration::from_secs(60), || {
        index_content(&index).0 == all
    });
    wait_until("/health names the progress record", Duration::from_secs(30), || {
        http_get(port, "/health").is_some_and(|(status, body)| status == 503 && body.contains("progress"))
    });
    std::thread::sleep(Duration::from_secs(2));
    assert!(job.is_running(), "a refused save must not stop the job");
    assert_eq!(progress_offsets(&progress_index, &index), Some(4), "the block holds");

    block_writes(&progress_index, false);
    wait_until("the record is saved after the block", Duration::from_secs(60), || {
        progress_offsets(&progress_index, &index) == Some(lines.len() as i64)
    });
    wait_until("/health recovers", Duration::from_secs(30), || {
        http_get(port, "/health").is_some_and(|(status, _)| status == 200)
    });
    assert!(job.is_running());
    job.kill();
    delete_index(&progress_index);
}

/// The sum of `eligibility_consumer_lag` over the partitions of `/metrics`.
fn consumer_lag(port: u16) -> Option<i64> {
    let (_, metrics) = http_get(port, "/metrics")?;
    Some(
        metrics
            .lines()
            .filter(|line| line.starts_with("eligibility_consumer_lag{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<i64>().ok())
            .sum(),
    )
}

#[test]
fn consumer_lag_grows_while_a_blocked_sink_holds_the_reading_back() {
    let _serial = serial();
    let (case, index, port) = case_with_metrics("es-lag");
    // Stop reading soon after the sink stops acknowledging.
    edit_config(&case, |config| {
        config.replacen("[kafka]\n", "[kafka]\nmax_unacknowledged_ms = 300\n", 1)
    });
    let mut lines: Vec<String> = vec![CAMPAIGN.into()];
    lines.extend((1..=3).map(product));
    case.produce(&lines, 1);
    let mut job = case.spawn(&case.config, &[]);
    let first = expected_state(&lines);
    wait_until("the first records are written", Duration::from_secs(90), || {
        index_content(&index).0 == first
    });
    wait_until("no lag once caught up", Duration::from_secs(30), || {
        consumer_lag(port) == Some(0)
    });

    block_writes(&index, true);
    // Enough records over time that the source is held back well before the last.
    for round in 0..4u64 {
        let more: Vec<String> = (0..50).map(|n| product(100 + round * 50 + n)).collect();
        case.produce(&more, 1);
        lines.extend(more);
        std::thread::sleep(Duration::from_millis(500));
    }
    wait_until("the lag shows the records not read", Duration::from_secs(30), || {
        consumer_lag(port).is_some_and(|lag| lag >= 100)
    });
    block_writes(&index, false);
    let all = expected_state(&lines);
    wait_until("the index catches up after the block", Duration::from_secs(90), || {
        index_content(&index).0 == all
    });
    wait_until("the lag is gone", Duration::from_secs(30), || {
        consumer_lag(port) == Some(0)
    });
    job.kill();
}

#[test]
fn writes_resume_within_seconds_of_the_index_accepting_them_again() {
    let _serial = serial();
    let (case, index) = case("es-resume");
    // The default longest retry delay: what made a recovered node wait ~40 s.
    edit_config(&case, |config| config.replace("max_ms = 2000", "max_ms = 30000"));
    let (mut lines, mut job) = run_until_first_pair_then_block(&case, &index);
    // Writes refused for long enough that their backoff reaches the longest delay.
    for n in 2..=6 {
        lines.push(product(n));
        case.produce(&lines[lines.len() - 1..], 1);
        std::thread::sleep(Duration::from_secs(7));
    }
    block_writes(&index, false);
    let all = expected_state(&lines);
    wait_until(
        "the index has caught up soon after the block",
        Duration::from_secs(6),
        || index_content(&index).0 == all,
    );
    job.kill();
}

#[test]
fn an_unreachable_node_at_start_up_is_waited_for_with_the_reason_on_health() {
    let _serial = serial();
    let (case, index, port) = case_with_metrics("es-start-wait");
    let progress_index = own_progress_index(&case, &index);
    let lines = generated_lines(case.dir.path(), 500, 500, 53);
    case.produce(&lines, 2);

    service_script("elasticsearch", "stop");
    let mut job = case.spawn(&case.config, &[]);
    wait_until("/health names the search node", Duration::from_secs(30), || {
        http_get(port, "/health").is_some_and(|(status, body)| status == 503 && body.contains("elasticsearch"))
    });
    std::thread::sleep(Duration::from_secs(3));
    assert!(job.is_running(), "the job waits for the node instead of exiting");
    service_script("elasticsearch", "start");

    let expected = expected_state(&lines);
    wait_until(
        "the index is written once the node is up",
        Duration::from_secs(120),
        || index_content(&index).0 == expected,
    );
    assert!(job.is_running());
    job.kill();
    // Created as `replicas` says (0 here), so a one-node cluster stays green.
    let (_, settings) = request(Method::Get, &format!("/{progress_index}/_settings"), None);
    assert_eq!(
        settings[&progress_index]["settings"]["index"]["number_of_replicas"], "0",
        "{settings}"
    );
    delete_index(&progress_index);
}

#[test]
fn a_graceful_stop_that_cannot_drain_ends_within_its_bound_and_the_restart_is_exact() {
    let _serial = serial();
    let (case, index) = case("es-stop-bound");
    edit_config(&case, |config| {
        config.replacen("[dead_letter]", "[shutdown]\ngrace_ms = 3000\n\n[dead_letter]", 1)
    });
    let lines = generated_lines(case.dir.path(), 1_000, 1_000, 59);
    let (first, rest) = lines.split_at(1_000);
    case.produce(first, 2);
    let mut job = case.spawn(&case.config, &[]);
    let first_state = expected_state(first);
    wait_until("the first records are written", Duration::from_secs(90), || {
        index_content(&index).0 == first_state
    });
    // Writes refused: the drain cannot finish.
    block_writes(&index, true);
    case.produce(rest, 2);
    std::thread::sleep(Duration::from_secs(2));
    let stop = std::process::Command::new("kill")
        .args(["-TERM", &job.0.id().to_string()])
        .status()
        .unwrap();
    assert!(stop.success());
    let asked = std::time::Instant::now();
    wait_until("the job stops within its bound", Duration::from_secs(10), || {
        !job.is_running()
    });
    assert!(
        asked.elapsed() >= Duration::from_millis(2_500),
        "it drained for its grace period first"
    );
    let status = job.0.wait().unwrap();
    assert_eq!(status.code(), Some(143), "{status:?}");

    block_writes(&index, false);
    case.run_to_end(&case.config, &[]);
    assert_eq!(index_content(&index).0, expected_state(&lines));
}

/// `eligibility_records_read_total` of `/metrics`.
fn records_read(port: u16) -> Option<u64> {
    let (_, metrics) = http_get(port, "/metrics")?;
    metrics
        .lines()
        .find(|line| line.starts_with("eligibility_records_read_total "))?
        .rsplit(' ')
        .next()?
        .parse()
        .ok()
}

#[test]
fn a_backlog_behind_a_blocked_sink_is_read_only_up_to_the_record_bound() {
    let _serial = serial();
    let (case, index, port) = case_with_metrics("es-backlog");
    edit_config(&case, |config| {
        config.replacen("[kafka]\n", "[kafka]\nmax_unacknowledged_records = 300\n", 1)
    });
    let (mut lines, mut job) = run_until_first_pair_then_block(&case, &index);
    let backlog = generated_lines(case.dir.path(), 10_000, 20_000, 61);
    case.produce(&backlog, 1);
    lines.extend(backlog);
    std::thread::sleep(Duration::from_secs(8));
    // At most the bound, one batch being filled and one poll's budget (8192) past it.
    let read = records_read(port).unwrap();
    assert!(
        read < 2 + 300 + 200 + 8_192,
        "{read} records read behind a blocked sink"
    );
    block_writes(&index, false);
    let all = expected_state(&lines);
    wait_until("the index catches up after the block", Duration::from_secs(180), || {
        index_content(&index).0 == all
    });
    job.kill();
}

/// The sum of a metric's series (`name{…} value` lines), as the job's `/metrics` shows it.
fn metric_sum(port: u16, name: &str) -> Option<f64> {
    let (_, metrics) = http_get(port, "/metrics")?;
    let prefix = format!("{name}{{");
    Some(
        metrics
            .lines()
            .filter(|line| line.starts_with(&prefix) || line.split(' ').next() == Some(name))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// A product of seller `n` with this stock: each update changes its pair's figures.
fn product_with_stock(n: u64, stock: u64) -> String {
    format!(
        r#"{{"topic": "products", "key": "p-{n}", "value": {{"seller_id": {n}, "category_id": 1, "brand_id": 1, "price": 1, "stock": {stock}}}}}"#
    )
}

#[test]
fn a_flood_behind_a_blocked_index_is_coalesced_and_its_backlog_shows_then_clears() {
    let _serial = serial();
    let (case, index, port) = case_with_metrics("es-flood");
    // Small batches even while behind, so that the flood forms many times.
    edit_config(&case, |config| {
        config.replacen("[batching]\n", "[batching]\nmax_records_behind = 300\n", 1)
    });
    let mut lines: Vec<String> = vec![CAMPAIGN.into()];
    lines.extend((1..=20).map(product));
    case.produce(&lines, 1);
    let mut job = case.spawn(&case.config, &[]);
    let first = expected_state(&lines);
    wait_until("the first pairs are written", Duration::from_secs(90), || {
        index_content(&index).0 == first
    });
    wait_until("no backlog once caught up", Duration::from_secs(30), || {
        metric_sum(port, "eligibility_records_unacknowledged") == Some(0.0)
    });

    block_writes(&index, true);
    // A flood of updates to the same 20 pairs, in rounds, while nothing can be written.
    for round in 0..5u64 {
        let flood: Vec<String> = (0..400)
            .map(|n| product_with_stock(1 + n % 20, 10 + round * 400 + n))
            .collect();
        case.produce(&flood, 1);
        lines.extend(flood);
        std::thread::sleep(Duration::from_millis(300));
    }
    wait_until("the backlog shows the flood", Duration::from_secs(30), || {
        metric_sum(port, "eligibility_records_unacknowledged").is_some_and(|backlog| backlog >= 1_000.0)
            && metric_sum(port, "eligibility_oldest_unacknowledged_seconds").is_some_and(|age| age > 0.0)
    });
    std::thread::sleep(Duration::from_secs(2));
    block_writes(&index, false);

    let all = expected_state(&lines);
    wait_until("the index is exact after the block", Duration::from_secs(90), || {
        index_content(&index).0 == all
    });
    wait_until("the backlog returns to 0", Duration::from_secs(30), || {
        metric_sum(port, "eligibility_records_unacknowledged") == Some(0.0)
            && metric_sum(port, "eligibility_oldest_unacknowledged_seconds") == Some(0.0)
    });
    let sum = |name: &str| metric_sum(port, name).unwrap();
    let rows = sum("eligibility_pairs_upserted_total") + sum("eligibility_pairs_deleted_total");
    let writes = sum("eligibility_sink_documents_written_total") + sum("eligibility_sink_documents_deleted_total");
    assert!(
        rows > 40.0,
        "the flood changed the 20 pairs at several times: {rows} rows"
    );
    assert!(
        writes < rows,
        "superseded writes are not sent: {writes} document writes for {rows} changed (pair, time) rows"
    );
    job.kill();
}

/// The `id_too_long` dead letters of the case's dead-letter file.
fn id_too_long_letters(case: &KafkaCase) -> Vec<serde_json::Value> {
    std::fs::read_to_string(case.dir.path().join("rejected.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|letter| letter["code"] == "id_too_long")
        .collect()
}

#[test]
fn a_refused_document_is_dead_lettered_once_whatever_the_restarts() {
    let _serial = serial();
    let (case, index) = case("es-refused-once");
    let long = format!("c-{}", "L".repeat(600));
    let mut lines: Vec<String> = vec![
        format!(r#"{{"topic": "campaigns", "key": "{long}", "value": {{}}}}"#),
        CAMPAIGN.into(),
        product(1),
        product(2),
    ];
    case.produce(&lines, 1);
    case.run_to_end(&case.config, &[]);
    assert_eq!(id_too_long_letters(&case).len(), 2, "one per pair of the long campaign");

    // A stopped and started job: the refused pairs have not changed.
    case.run_to_end(&case.config, &[]);
    assert_eq!(id_too_long_letters(&case).len(), 2, "a restart repeats no dead letter");

    // A live change of one refused pair is a new refusal; then a SIGKILL once it is committed.
    let mut job = case.spawn(&case.config, &[]);
    let change = vec![product_with_stock(1, 9)];
    case.produce(&change, 1);
    lines.extend(change);
    let expected = expected_state(&lines);
    wait_until("the change is written and committed", Duration::from_secs(90), || {
        index_content(&index)
            .0
            .iter()
            .all(|(pair, figures)| expected.get(pair) == Some(figures))
            && progress_offsets("eligibility-progress", &index) == Some(lines.len() as i64)
    });
    job.kill();
    let letters = id_too_long_letters(&case);
    assert_eq!(letters.len(), 3, "{letters:?}");
    assert!(
        letters[2]["raw"].as_str().unwrap().contains(r#""eligible_stock":9"#),
        "{}",
        letters[2]
    );
    case.run_to_end(&case.config, &[]);
    assert_eq!(
        id_too_long_letters(&case).len(),
        3,
        "a restart after a kill repeats none"
    );

    // The campaign ends: its pairs are gone (nothing to dead-letter), and stay gone.
    let tombstone = vec![format!(r#"{{"topic": "campaigns", "key": "{long}", "value": null}}"#)];
    case.produce(&tombstone, 1);
    case.run_to_end(&case.config, &[]);
    case.run_to_end(&case.config, &[]);
    assert_eq!(id_too_long_letters(&case).len(), 3);
    // It comes back with the same figures: a new refusal, once.
    let back = vec![format!(r#"{{"topic": "campaigns", "key": "{long}", "value": {{}}}}"#)];
    case.produce(&back, 1);
    case.run_to_end(&case.config, &[]);
    case.run_to_end(&case.config, &[]);
    assert_eq!(
        id_too_long_letters(&case).len(),
        5,
        "the campaign's two pairs are refused again, once"
    );
}

#[test]
fn a_refusal_marked_after_the_last_commit_is_dead_lettered_again() {
    let _serial = serial();
    let (case, index) = case("es-refused-uncommitted");
    let long = format!("c-{}", "L".repeat(600));
    let lines: Vec<String> = vec![
        format!(r#"{{"topic": "campaigns", "key": "{long}", "value": {{}}}}"#),
        product(1),
    ];
    case.produce(&lines, 1);
    case.run_to_end(&case.config, &[]);
    assert_eq!(id_too_long_letters(&case).len(), 1);

    // As if the job was killed after writing the marker, before its dead letter was
    // committed: the marker's version lies past the progress record's time.
    let (_, progress) = request(Method::Get, &format!("/eligibility-progress/_doc/{index}"), None);
    let record: serde_json::Value = serde_json::from_str(progress["_source"]["record"].as_str().unwrap()).unwrap();
    let committed = record["time"].as_u64().unwrap();
    let refused_index = format!("{index}-refused");
    request(Method::Post, &format!("/{refused_index}/_refresh"), None);
    let (_, found) = request(
        Method::Post,
        &format!("/{refused_index}/_search"),
        Some(json!({"version": true})),
    );
    let hits = found["hits"]["hits"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "one marker for the refused pair: {found}");
    let (id, version) = (hits[0]["_id"].as_str().unwrap(), hits[0]["_version"].as_u64().unwrap());
    assert!(version <= committed, "the run committed past its refusal");
    let (status, body) = request(
        Method::Put,
        &format!(
            "/{refused_index}/_doc/{id}?version={}&version_type=external",
            committed + 1
        ),
        Some(hits[0]["_source"].clone()),
    );
    assert!(status == 200 || status == 201, "{body}");

    case.run_to_end(&case.config, &[]);
    assert_eq!(
        id_too_long_letters(&case).len(),
        2,
        "a dead letter that may be lost is written again"
    );
    case.run_to_end(&case.config, &[]);
    assert_eq!(id_too_long_letters(&case).len(), 2, "once");
}
