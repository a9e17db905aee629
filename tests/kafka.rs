//! The job against a real Apache Kafka broker (start it with `scripts/kafka.sh start`;
//! `scripts/test.sh` does). Each test has its own topics; they run one at a time, since one
//! of them restarts the broker.

mod support;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dataflows::model::{PairChange, PairKey};
use dataflows::reference::changes_between;
use eligibility::change_log::read_changes;
use eligibility::dead_letter::Origin;
use eligibility::metrics::Metrics;
use eligibility::source::kafka::config::{BatchingConfig, KafkaConfig};
use eligibility::source::kafka::start::{plan, StartFrom, StartPlan};
use eligibility::source::kafka::watermark::cached_high_watermark;
use eligibility::source::kafka::KafkaSourceFactory;
use eligibility::source::{SourceFactory, SourceRecord};
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, TopicPartitionList};
use support::kafka::{
    assert_contract, assign_from_beginning, brokers, change_log_state, expected_state, generated_lines, http_get,
    serial, wait_until, KafkaCase, SinkSetup,
};
use support::{binary, free_port, free_port_pair, path_str, service_script};

#[test]
fn a_produced_log_ends_in_the_brute_force_state() {
    let _serial = serial();
    let case = KafkaCase::new("e2e", false);
    let lines = generated_lines(case.dir.path(), 3_000, 6_000, 3);
    case.produce(&lines, 4);
    case.run_to_end(&case.config, &["--workers", "2"]);

    let changes = read_changes(&case.changes_path()).unwrap();
    assert_contract(&changes);
    assert_eq!(change_log_state(&case.changes_path()), expected_state(&lines));
    let rejected = std::fs::read_to_string(case.dir.path().join("rejected.jsonl")).unwrap();
    let expected_rejections = lines
        .iter()
        .filter(|line| dataflows::decode::split_envelope(line.as_bytes()).is_ok())
        .filter(|line| dataflows::decode::decode_envelope(line.as_bytes()).is_err())
        .count();
    assert!(expected_rejections > 0);
    assert_eq!(rejected.lines().count(), expected_rejections);
    for letter in rejected.lines() {
        let letter: serde_json::Value = serde_json::from_str(letter).unwrap();
        assert!(
            letter["topic"].is_string() && letter["partition"].is_number() && letter["offset"].is_number(),
            "{letter}"
        );
    }
}

#[test]
fn a_category_tree_meets_campaigns_through_ancestors_and_a_subtree_move_writes_exactly_its_pairs() {
    let _serial = serial();
    let case = KafkaCase::new("tree", false);
    let category = |id: u64, parent: Option<u64>| {
        let parent = parent.map_or("null".to_owned(), |p| p.to_string());
        format!(r#"{{"topic": "categories", "key": "{id}", "value": {{"parent_id": {parent}}}}}"#)
    };
    let product = |key: &str, seller: u64, category: u64| {
        format!(
            r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": {seller}, "category_id": {category}, "brand_id": 1, "price": 10, "stock": 3}}}}"#
        )
    };
    // Electronics (1) > Phones (10) > Smartphones (100); Home (2) > Kitchen (20).
    let mut lines = vec![
        category(1, None),
        category(10, Some(1)),
        category(100, Some(10)),
        category(2, None),
        category(20, Some(2)),
        product("p1", 7, 100),
        product("p2", 7, 10),
        product("p3", 8, 20),
        product("p4", 9, 3), // a category with no record: a root of its own
        r#"{"topic": "campaigns", "key": "electronics", "value": {"category_ids": [1]}}"#.into(),
        r#"{"topic": "campaigns", "key": "home", "value": {"category_ids": [2]}}"#.into(),
        r#"{"topic": "categories", "key": "x", "value": {"parent_id": 1}}"#.into(),
    ];
    case.produce(&lines, 2);
    case.run_to_end(&case.config, &["--workers", "2"]);
    let before = expected_state(&lines);
    assert_eq!(change_log_state(&case.changes_path()), before);
    let electronics = PairKey {
        seller_id: 7,
        campaign_id: "electronics".into(),
    };
    assert_eq!(
        before[&electronics].eligible_products, 2,
        "a grandchild and a child of the root"
    );
    let rejected = std::fs::read_to_string(case.dir.path().join("rejected.jsonl")).unwrap();
    assert_eq!(rejected.lines().count(), 1, "the category key that is not a number");

    // Phones moves under Home: seller 7's products leave Electronics for Home.
    let written = read_changes(&case.changes_path()).unwrap().len();
    let moved = vec![category(10, Some(2))];
    case.produce(&moved, 2);
    lines.extend(moved);
    case.run_to_end(&case.config, &["--workers", "2"]);
    let after = expected_state(&lines);
    let changes = read_changes(&case.changes_path()).unwrap();
    assert_contract(&changes);
    let mut new: Vec<(PairKey, Option<u64>)> = changes[written..]
        .iter()
        .map(|change| (change.pair.clone(), change.figures.map(|f| f.eligible_products)))
        .collect();
    new.sort();
    let mut expected: Vec<(PairKey, Option<u64>)> = changes_between(&before, &after, 0)
        .into_iter()
        .map(|change| (change.pair, change.figures.map(|f| f.eligible_products)))
        .collect();
    expected.sort();
    assert_eq!(new, expected, "the move writes exactly the pairs whose figures changed");
    assert_eq!(expected.len(), 2, "seller 7 leaves electronics and joins home");
    assert_eq!(change_log_state(&case.changes_path()), after);
}

#[test]
fn a_job_killed_mid_stream_resumes_exactly_without_rewriting() {
    let _serial = serial();
    let case = KafkaCase::new("restart", false);
    let lines = generated_lines(case.dir.path(), 3_000, 12_000, 5);
    let (first, rest) = lines.split_at(4_000);
    case.produce(first, 3);
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    let chunks: Vec<&[String]> = rest.chunks(1_000).collect();
    for (index, chunk) in chunks.iter().enumerate() {
        case.produce(chunk, 3);
        if index == chunks.len() / 2 {
            wait_until("the first run has written changes", Duration::from_secs(60), || {
                !change_log_state(&case.changes_path()).is_empty()
            });
            job.kill();
        }
    }
    let written_before_restart = read_changes(&case.changes_path()).unwrap().len();
    assert!(
        case.dir.path().join("changes.jsonl.progress.json").exists(),
        "the first run committed progress"
    );

    case.run_to_end(&case.config, &["--workers", "2"]);
    let changes = read_changes(&case.changes_path()).unwrap();
    assert!(changes.len() > written_before_restart, "the second run wrote the rest");
    // Across both runs: nothing written twice with the same figures, nothing lost.
    assert_contract(&changes);
    assert_eq!(change_log_state(&case.changes_path()), expected_state(&lines));

    // A third start finds everything in place and writes nothing.
    case.run_to_end(&case.config, &[]);
    assert_eq!(read_changes(&case.changes_path()).unwrap().len(), changes.len());
}

#[test]
fn a_campaign_edit_on_a_running_job_writes_only_that_campaigns_pairs() {
    let _serial = serial();
    let case = KafkaCase::new("edit", false);
    let mut lines = generated_lines(case.dir.path(), 2_000, 2_000, 8);
    case.produce(&lines, 3);
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    let before = expected_state(&lines);
    wait_until("the job has caught up", Duration::from_secs(60), || {
        change_log_state(&case.changes_path()) == before
    });
    let written_before = read_changes(&case.changes_path()).unwrap().len();

    // The campaign with the most pairs gets a stricter stock floor.
    let mut per_campaign = std::collections::BTreeMap::<String, usize>::new();
    for pair in before.keys() {
        *per_campaign.entry(pair.campaign_id.clone()).or_default() += 1;
    }
    let (campaign, _) = per_campaign.iter().max_by_key(|(_, count)| **count).unwrap();
    let edit = format!(r#"{{"topic": "campaigns", "key": "{campaign}", "value": {{"min_stock": 40}}}}"#);
    lines.push(edit.clone());
    case.produce(&[edit], 3);
    let after = expected_state(&lines);
    wait_until("the edit is written", Duration::from_secs(60), || {
        change_log_state(&case.changes_path()) == after
    });
    // Give a wrong extra write the chance to show up.
    std::thread::sleep(Duration::from_millis(500));
    job.kill();

    let new_changes: Vec<PairChange> = read_changes(&case.changes_path()).unwrap().split_off(written_before);
    assert!(!new_changes.is_empty());
    assert!(
        new_changes.iter().all(|change| &change.pair.campaign_id == campaign),
        "another campaign's pair was written"
    );
    let written: BTreeSet<PairKey> = new_changes.iter().map(|change| change.pair.clone()).collect();
    let really_changed: BTreeSet<PairKey> = changes_between(&before, &after, 0)
        .into_iter()
        .map(|change| change.pair)
        .collect();
    assert_eq!(written, really_changed);
    assert_eq!(
        new_changes.len(),
        really_changed.len(),
        "each changed pair is written once"
    );
}

#[test]
fn a_broker_restart_pauses_the_job_and_loses_nothing() {
    let _serial = serial();
    let (case, port) = KafkaCase::with_change_log_and_metrics("broker-restart");
    let lines = generated_lines(case.dir.path(), 2_000, 4_000, 13);
    let (first, rest) = lines.split_at(3_000);
    case.produce(first, 3);
    let mut job = case.spawn(&case.config, &[]);
    let first_state = expected_state(first);
    wait_until("the job has caught up", Duration::from_secs(60), || {
        change_log_state(&case.changes_path()) == first_state
    });

    // The metrics endpoint says what the job did, and that it is healthy.
    wait_until("/health says healthy", Duration::from_secs(30), || {
        http_get(port, "/health").is_some_and(|(status, _)| status == 200)
    });
    let partition_zero = format!(r#"topic="{}",partition="0""#, case.products_topic);
    for expected in [
        format!("eligibility_records_consumed_total{{{partition_zero}}}"),
        "eligibility_records_rejected_total{code=".to_owned(),
        "eligibility_batches_closed_total ".to_owned(),
        "eligibility_batch_records_bucket".to_owned(),
        "eligibility_batch_latency_seconds_bucket".to_owned(),
        "eligibility_output_frontier ".to_owned(),
        format!("eligibility_committed_offset{{{partition_zero}}}"),
        "eligibility_consumer_lag{".to_owned(),
    ] {
        wait_until(&format!("/metrics shows {expected}"), Duration::from_secs(30), || {
            http_get(port, "/metrics").is_some_and(|(status, metrics)| status == 200 && metrics.contains(&expected))
        });
    }

    service_script("kafka", "stop");
    wait_until("/health reports the broker outage", Duration::from_secs(60), || {
        http_get(port, "/health").is_some_and(|(status, body)| status == 503 && body.contains("kafka"))
    });
    assert!(job.is_running(), "the job must wait for the broker, not exit");
    service_script("kafka", "start");

    case.produce(rest, 3);
    let all = expected_state(&lines);
    wait_until("the job has resumed and caught up", Duration::from_secs(120), || {
        change_log_state(&case.changes_path()) == all
    });
    wait_until("/health recovers", Duration::from_secs(60), || {
        http_get(port, "/health").is_some_and(|(status, _)| status == 200)
    });
    job.kill();
    assert_contract(&read_changes(&case.changes_path()).unwrap());
}

#[test]
fn malformed_records_land_in_the_dead_letter_topic_with_their_offsets() {
    let _serial = serial();
    let case = KafkaCase::new("dead-letters", true);
    let good = r#"{"topic": "products", "key": "p-1", "value": {"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 9.99, "stock": 4}}"#;
    let campaign = r#"{"topic": "campaigns", "key": "c-1", "value": {}}"#;
    case.produce(&[good.to_owned(), campaign.to_owned()], 1);

    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    // (key, value, the code its dead letter must carry)
    type BadRecord<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, &'a str);
    let bad: Vec<BadRecord> = vec![
        // A compacted topic refuses records without a key; an empty key gets through.
        (
            Some(b""),
            Some(br#"{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 1, "stock": 1}"#),
            "missing_key",
        ),
        (Some(b"p-2"), Some(b"\xff\xfe"), "not_utf8"),
        (Some(b"p-3"), Some(b"{not json"), "invalid_json"),
        (
            Some(b"p-1"),
            Some(br#"{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 1, "stock": -1}"#),
            "negative",
        ),
        (
            Some(b"p-4"),
            Some(br#"{"category_id": 2, "brand_id": 3, "price": 1, "stock": 1}"#),
            "missing_field",
        ),
        // The key's exact bytes are kept (as base64), like a value's.
        (
            Some(b"p-\xff"),
            Some(br#"{"seller_id": 1, "category_id": 2, "brand_id": 3, "price": 1, "stock": 1}"#),
            "not_utf8",
        ),
    ];
    for (key, value, _) in &bad {
        let mut record = BaseRecord::<[u8], [u8]>::to(&case.products_topic).partition(0);
        if let Some(key) = key {
            record = record.key(*key);
        }
        if let Some(value) = value {
            record = record.payload(*value);
        }
        producer.send(record).map_err(|(error, _)| error).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", "dead-letter-test")
        .create()
        .unwrap();
    let (_, end) = consumer
        .fetch_watermarks(&case.products_topic, 0, Duration::from_secs(10))
        .unwrap();
    assert_eq!(end, 1 + bad.len() as i64, "every bad record is on the topic");
    case.run_to_end(&case.config, &[]);
    // The bad update to p-1 (stock -1) left its previous state in place.
    assert_eq!(
        change_log_state(&case.changes_path()),
        expected_state(&[good.to_owned(), campaign.to_owned()])
    );
    assert_eq!(
        change_log_state(&case.changes_path())
            .values()
            .next()
            .map(|f| f.eligible_stock),
        Some(4)
    );

    let topic = case.dead_letter_topic.clone().unwrap();
    assign_from_beginning(&consumer, &topic, 1);
    let mut letters = Vec::new();
    let mut message_keys = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while letters.len() < bad.len() && std::time::Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let value: serde_json::Value = serde_json::from_slice(message.payload().unwrap()).unwrap();
            letters.push(value);
            message_keys.push(message.key().map(<[u8]>::to_vec));
        }
    }
    assert_eq!(letters.len(), bad.len(), "{letters:?}");
    for (index, (key, _, code)) in bad.iter().enumerate() {
        let letter = &letters[index];
        assert_eq!(letter["code"], *code, "{letter}");
        assert_eq!(letter["topic"], case.products_topic.as_str());
        assert_eq!(letter["partition"], 0);
        assert_eq!(letter["offset"], index as i64 + 1, "{letter}");
        assert_eq!(message_keys[index].as_deref(), *key, "the message key is the record's");
        assert!(!letter["reason"].as_str().unwrap().is_empty());
        match std::str::from_utf8(key.unwrap()) {
            Ok(text) => assert_eq!(letter["key"], text, "{letter}"),
            Err(_) => assert_eq!(letter["key_base64"], "cC3/", "{letter}"),
        }
    }
    assert_eq!(letters[1]["raw_base64"], "//4=");
}

#[test]
fn two_processes_of_two_workers_agree_with_one_worker() {
    let _serial = serial();
    let case = KafkaCase::new("cluster", false);
    let lines = generated_lines(case.dir.path(), 3_000, 5_000, 21);
    case.produce(&lines, 6);
    case.run_to_end(&case.config, &[]);

    let cluster_config = case.dir.path().join("cluster.toml");
    case.write_sinks_config(
        &cluster_config,
        SinkSetup {
            jsonl: Some("cluster-changes.jsonl"),
            ..SinkSetup::default()
        },
    );
    let hostfile = case.dir.path().join("hosts.txt");
    std::fs::write(
        &hostfile,
        format!("127.0.0.1:{}\n127.0.0.1:{}\n", free_port_pair(), free_port()),
    )
    .unwrap();
    let processes: Vec<_> = (0..2)
        .map(|process| {
            Command::new(binary())
                .args([
                    "run",
                    "--config",
                    path_str(&cluster_config),
                    "--stop-at-end",
                    "--progress-secs",
                    "0",
                ])
                .args(["--workers", "2", "--processes", "2", "--hostfile", path_str(&hostfile)])
                .args(["--process", &process.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for process in processes {
        let output = process.wait_with_output().unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    }
    let single = change_log_state(&case.changes_path());
    assert_eq!(single, expected_state(&lines));
    assert_eq!(change_log_state(&case.dir.path().join("cluster-changes.jsonl")), single);
}

/// The source tells a backlog from librdkafka's cached high watermark (no request to the
/// broker): after one record of a partition is read, the cache holds the partition's end.
#[test]
fn the_cached_high_watermark_is_the_partitions_end_once_a_fetch_has_answered() {
    let _serial = serial();
    let case = KafkaCase::new("watermark", false);
    let lines = generated_lines(case.dir.path(), 40, 0, 7);
    case.produce(&lines, 1);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", "watermark-test")
        .create()
        .unwrap();
    let topic = std::ffi::CString::new(case.products_topic.as_str()).unwrap();
    assert_eq!(cached_high_watermark(&consumer, &topic, 0), None, "nothing fetched yet");
    let (_, end) = consumer
        .fetch_watermarks(&case.products_topic, 0, Duration::from_secs(10))
        .unwrap();
    assert!(end > 1);
    assign_from_beginning(&consumer, &case.products_topic, 1);
    let first = match consumer.poll(Duration::from_secs(10)) {
        Some(Ok(message)) => message.offset(),
        Some(Err(error)) => panic!("consumer error: {error}"),
        None => panic!("no record within 10 s"),
    };
    assert_eq!(first, 0);
    assert_eq!(
        cached_high_watermark(&consumer, &topic, 0),
        Some(end),
        "the end of the partition, with {} records left to read",
        end - 1
    );
}

/// Partitions are assigned at the oldest offset the start-up plan saw, not at a logical
/// "beginning" librdkafka would first look up itself: the source reads from the plan's
/// offset, and records removed between the plan and the assignment (retention,
/// `DeleteRecords`) neither stop the rebuild nor are waited for: it reads from the oldest
/// record left.
#[test]
fn partitions_are_read_from_the_plans_offset_skipping_records_removed_since() {
    let _serial = serial();
    let case = KafkaCase::new("removed", false);
    let lines = generated_lines(case.dir.path(), 30, 0, 5);
    case.produce(&lines, 1);
    let kafka = case.kafka_config();
    let start = plan(&kafka, &StartFrom::Earliest, None).unwrap();
    let products = |plan: &StartPlan| {
        plan.partitions
            .iter()
            .position(|partition| partition.id.topic == case.products_topic)
            .unwrap()
    };
    let planned = &start.partitions[products(&start)];
    assert_eq!(planned.first, 0);
    let end = planned.rebuild_until;
    assert!(end > 12, "{end} product records");
    remove_records_below(&case.products_topic, 10);
    // The product offsets a source opened on `plan` reads, once it has read `count`.
    let read = |plan: StartPlan, count: i64| -> Vec<i64> {
        let factory = KafkaSourceFactory {
            plan,
            kafka: kafka.clone(),
            batching: BatchingConfig::default(),
            metrics: Arc::new(Metrics::new()),
            stop_at_end: true,
            siblings: Default::default(),
        };
        let mut source = factory.open(0, 1, None).unwrap();
        let mut out = Vec::new();
        let from_products = |out: &[SourceRecord]| -> Vec<i64> {
            out.iter()
                .filter_map(|record| match record {
                    SourceRecord::Product(_, update) => Some(update.seq as i64),
                    SourceRecord::Rejected(_, letter) => match &letter.origin {
                        Origin::Kafka { topic, offset, .. } if *topic == case.products_topic => Some(*offset),
                        _ => None,
                    },
                    _ => None,
                })
                .collect()
        };
        let started = Instant::now();
        while (from_products(&out).len() as i64) < count {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "read {:?} of {count} records",
                from_products(&out)
            );
            source.poll(&mut out, 1024).unwrap();
        }
        let mut offsets = from_products(&out);
        offsets.sort_unstable();
        offsets
    };
    // Planned from 0, the log now starting at 10: everything left, nothing waited for.
    assert_eq!(read(start.clone(), end - 10), (10..end).collect::<Vec<i64>>());
    // Planned from 12: from there, not from the log's start.
    let mut later = start;
    let at = products(&later);
    later.partitions[at].first = 12;
    assert_eq!(read(later, end - 12), (12..end).collect::<Vec<i64>>());
}

/// Deletes the records of `topic`'s partition 0 below `offset` and waits until the log
/// starts there. A compacted topic refuses `DeleteRecords`, so the topic gets retention
/// too; the broker may apply that a moment after it answers, so a refusal is retried.
fn remove_records_below(topic: &str, offset: i64) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let policy = AlterConfig::new(ResourceSpecifier::Topic(topic)).set("cleanup.policy", "compact,delete");
    let altered = runtime
        .block_on(admin.alter_configs([&policy], &AdminOptions::new()))
        .unwrap();
    assert!(altered.iter().all(Result::is_ok), "{altered:?}");
    let mut below = TopicPartitionList::new();
    below
        .add_partition_offset(topic, 0, rdkafka::Offset::Offset(offset))
        .unwrap();
    let started = Instant::now();
    loop {
        let deleted = runtime
            .block_on(admin.delete_records(&below, &AdminOptions::new()))
            .unwrap();
        match deleted.elements()[0].error() {
            Ok(()) => break,
            Err(error) if started.elapsed() < Duration::from_secs(10) => {
                eprintln!("DeleteRecords refused ({error}); retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(error) => panic!("DeleteRecords refused for 10 s: {error}"),
        }
    }
    let watcher: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let (oldest, _) = watcher.fetch_watermarks(topic, 0, Duration::from_secs(10)).unwrap();
    assert_eq!(oldest, offset, "the log now starts at offset {offset}");
}

/// An idle live worker sleeps (here: parks for up to 10 s, as the job loop would for its
/// source's `idle_wait`), and the partition queue wakes it the moment a record arrives.
#[test]
fn a_record_arriving_wakes_a_sleeping_worker() {
    let _serial = serial();
    let case = KafkaCase::new("wake", false);
    let lines = generated_lines(case.dir.path(), 5, 1, 3);
    case.produce(&lines, 1);
    let kafka = case.kafka_config();
    let factory = KafkaSourceFactory {
        plan: plan(&kafka, &StartFrom::Earliest, None).unwrap(),
        kafka,
        batching: BatchingConfig::default(),
        metrics: Arc::new(Metrics::new()),
        stop_at_end: false,
        siblings: Default::default(),
    };
    // Opened on this thread: this is the thread the queues wake.
    let mut source = factory.open(0, 1, None).unwrap();
    let mut out = Vec::new();
    let read = |out: &[SourceRecord]| {
        out.iter()
            .filter(|record| !matches!(record, SourceRecord::Checkpoint(..)))
            .count()
    };
    // Read the log to its end and go live.
    let rebuilt = Instant::now();
    while read(&out) < lines.len() {
        assert!(
            rebuilt.elapsed() < Duration::from_secs(30),
            "the rebuild did not finish"
        );
        source.poll(&mut out, 1024).unwrap();
    }
    let quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(500) {
        source.poll(&mut out, 1024).unwrap();
    }
    out.clear();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let topic = case.products_topic.clone();
    // The sender stays alive until the test is done: a thread that ends (a scoped one)
    // would unpark this one itself.
    let (done, until_done) = std::sync::mpsc::channel::<()>();
    let started = Instant::now();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let value = r#"{"seller_id":1,"category_id":1,"brand_id":1,"price":1,"stock":1}"#;
        producer
            .send(BaseRecord::to(&topic).key("woken").payload(value))
            .unwrap();
        producer.flush(Duration::from_secs(10)).unwrap();
        let _ = until_done.recv();
    });
    // Without the wake-up only the 10 s timeout would end each park.
    while read(&out) == 0 && started.elapsed() < Duration::from_secs(10) {
        std::thread::park_timeout(Duration::from_secs(10).saturating_sub(started.elapsed()));
        source.poll(&mut out, 1024).unwrap();
    }
    let woken = started.elapsed();
    drop(done);
    sender.join().unwrap();
    assert_eq!(read(&out), 1, "the record was read");
    assert!(
        woken < Duration::from_secs(5),
        "woken {woken:?} after the park began; the record was sent after 300 ms"
    );
}

/// The sum of `eligibility_records_misplaced_total` over the partitions of `/metrics`.
fn records_misplaced(port: u16) -> Option<u64> {
    let (_, metrics) = http_get(port, "/metrics")?;
    let series: Vec<u64> = metrics
        .lines()
        .filter(|line| line.starts_with("eligibility_records_misplaced_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    (!series.is_empty()).then(|| series.iter().sum())
}

#[test]
fn records_a_producer_placed_elsewhere_than_murmur2_are_counted() {
    let _serial = serial();
    let (case, port) = KafkaCase::with_change_log_and_metrics("misplaced");
    let product =
        |stock: u64| format!(r#"{{"seller_id": 1, "category_id": 1, "brand_id": 1, "price": 1, "stock": {stock}}}"#);
    let keys: Vec<String> = (1..=40).map(|n| format!("p-{n}")).collect();
    let mut lines = vec![r#"{"topic": "campaigns", "key": "c-1", "value": {}}"#.to_owned()];
    lines.extend(
        keys.iter()
            .map(|key| format!(r#"{{"topic": "products", "key": "{key}", "value": {}}}"#, product(5))),
    );
    // `eligibility produce` places keys with murmur2, as the Java clients do.
    case.produce(&lines, 4);
    // A producer on librdkafka's default partitioner sends an update of every key.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("partitioner", "consistent_random")
        .create()
        .unwrap();
    for key in &keys {
        let value = product(7);
        producer
            .send(BaseRecord::to(&case.products_topic).key(key).payload(&value))
            .unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();

    // Where each record landed: the murmur2 copy (stock 5) gives the key's partition.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", "misplaced-test")
        .create()
        .unwrap();
    assign_from_beginning(&consumer, &case.products_topic, 4);
    let mut placed: Vec<(String, bool, i32)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while placed.len() < 2 * keys.len() {
        assert!(
            Instant::now() < deadline,
            "read {} records of {}",
            placed.len(),
            2 * keys.len()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.unwrap();
            let key = String::from_utf8(message.key().unwrap().to_vec()).unwrap();
            let value: serde_json::Value = serde_json::from_slice(message.payload().unwrap()).unwrap();
            let murmur2 = value["stock"] == 5;
            placed.push((key, murmur2, message.partition()));
        }
    }
    let home = |key: &str| {
        placed
            .iter()
            .find(|(k, murmur2, _)| k == key && *murmur2)
            .map(|(_, _, partition)| *partition)
            .unwrap()
    };
    let elsewhere = placed
        .iter()
        .filter(|(key, murmur2, partition)| !murmur2 && *partition != home(key))
        .count() as u64;
    assert!(
        elsewhere > 0,
        "consistent_random puts some of 40 keys on another of 4 partitions"
    );

    let _job = case.spawn(&case.config, &["--workers", "2"]);
    wait_until("the misplaced records are counted", Duration::from_secs(60), || {
        records_misplaced(port) == Some(elsewhere)
    });
    // Only those: the job's murmur2 places every `eligibility produce` record at home.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(records_misplaced(port), Some(elsewhere));
}

/// The job's partition reader against the broker: every record of a partition once, in
/// offset order, with its key, value (tombstones and keyless records too) and timestamp,
/// however the reads cut the batches; then the partition's end; an empty partition gives
/// its end alone; a detached copy keeps every field. Nothing reaches the consumer's own
/// queue, even when the fetch has half a second after the assignment before the caller goes
/// on (with the queues split after the assignment, the first records went there and were
/// lost to the reader: a 3-process cluster test caught it).
#[test]
fn a_partition_reader_gives_each_record_once_in_order_then_the_end() {
    use eligibility::source::kafka::client::consumer_config;
    use eligibility::source::kafka::partition_reader::{assign_with_queues_then, PartitionReader, Read};
    use eligibility::source::kafka::topics::{ensure_topics, TopicSpec};
    use rdkafka::message::Timestamp;

    let _serial = serial();
    let case = KafkaCase::new("reader", false);
    let kafka = KafkaConfig::for_brokers(&brokers());
    let admin = ClientConfig::new().set("bootstrap.servers", brokers()).clone();
    ensure_topics(
        &admin,
        &[TopicSpec {
            name: &case.products_topic,
            partitions: 2,
            replication_factor: 1,
            // A compacted topic refuses records without a key.
            compacted: false,
        }],
    )
    .unwrap();
    // Record i: key k-i (none for every 7th), value v-i (a tombstone for every 5th).
    /// A record as read: key, value, timestamp.
    type Fields = (Option<Vec<u8>>, Option<Vec<u8>>, i64);
    let expected: Vec<Fields> = (0..500i64)
        .map(|i| {
            let key = (i % 7 != 3).then(|| format!("k-{i}").into_bytes());
            let value = (i % 5 != 1).then(|| format!("v-{i}").into_bytes());
            (key, value, 1_700_000_000_000 + i)
        })
        .collect();
    struct Delivered(std::sync::Mutex<Vec<String>>);
    impl rdkafka::ClientContext for Delivered {}
    impl rdkafka::producer::ProducerContext for Delivered {
        type DeliveryOpaque = ();
        fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
            if let Err((error, _)) = result {
                self.0.lock().unwrap().push(error.to_string());
            }
        }
    }
    let producer: BaseProducer<Delivered> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create_with_context(Delivered(Default::default()))
        .unwrap();
    for (key, value, timestamp) in &expected {
        let mut record: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(&case.products_topic).partition(1).timestamp(*timestamp);
        if let Some(key) = key {
            record = record.key(&key[..]);
        }
        if let Some(value) = value {
            record = record.payload(&value[..]);
        }
        producer.send(record).map_err(|(error, _)| error).unwrap();
    }
    producer.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(
        producer.context().0.lock().unwrap()[..],
        [] as [String; 0],
        "delivery errors"
    );

    let consumer: BaseConsumer = consumer_config(&kafka, &Default::default(), "reader-test")
        .create()
        .unwrap();
    let watermarks = consumer
        .fetch_watermarks(&case.products_topic, 1, Duration::from_secs(10))
        .unwrap();
    assert_eq!(watermarks, (0, 500), "every record produced");
    // At absolute offsets, as the job assigns: the fetch starts at once.
    let mut assignment = TopicPartitionList::new();
    for partition in 0..2 {
        assignment
            .add_partition_offset(&case.products_topic, partition, rdkafka::Offset::Offset(0))
            .unwrap();
    }
    let consumer = Arc::new(consumer);
    // Whatever the fetch brings while the assignment's caller is slow to go on must be in
    // the partitions' queues.
    let mut readers: Vec<PartitionReader<_>> = assign_with_queues_then(&consumer, &assignment, || {
        std::thread::sleep(Duration::from_millis(500))
    })
    .unwrap();
    let mut read: Vec<Vec<Fields>> = vec![Vec::new(), Vec::new()];
    let mut offsets: Vec<Vec<i64>> = vec![Vec::new(), Vec::new()];
    let mut ends = [0usize; 2];
    let mut detached = None;
    let started = Instant::now();
    // Batches of 1 to 13, so that the cuts fall everywhere.
    let mut batch = 1;
    while ends.contains(&0) {
        assert!(started.elapsed() < Duration::from_secs(30), "no end within 30 s");
        for (partition, reader) in readers.iter_mut().enumerate() {
            let taken = reader.read(batch, |item| match item {
                Read::Message(message) => {
                    assert_eq!(message.partition(), partition as i32);
                    assert_eq!(message.topic(), case.products_topic);
                    assert_eq!(ends[partition], 0, "a record after the end");
                    let Timestamp::CreateTime(timestamp) = message.timestamp() else {
                        panic!("no create time: {:?}", message.timestamp());
                    };
                    if message.offset() == 10 {
                        detached = Some(message.detach());
                    }
                    offsets[partition].push(message.offset());
                    read[partition].push((
                        message.key().map(<[u8]>::to_vec),
                        message.payload().map(<[u8]>::to_vec),
                        timestamp,
                    ));
                }
                Read::End => ends[partition] += 1,
                Read::Error(error) => panic!("read error: {error}"),
            });
            assert!(taken <= batch, "{taken} taken for a batch of {batch}");
            batch = batch % 13 + 1;
        }
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(1)) {
            panic!(
                "a record reached the consumer's own queue: {}/{}",
                message.partition(),
                message.offset()
            );
        }
    }
    assert_eq!(read[0].len(), 0, "partition 0 holds nothing");
    assert_eq!(read[1].len(), expected.len());
    assert_eq!(read[1], expected);
    assert_eq!(offsets[1], (0..500).collect::<Vec<i64>>());
    assert_eq!(ends, [1, 1]);
    let detached = detached.expect("offset 10 was read");
    assert_eq!(
        (
            detached.key(),
            detached.payload(),
            detached.offset(),
            detached.partition()
        ),
        (expected[10].0.as_deref(), expected[10].1.as_deref(), 10, 1)
    );
    assert_eq!(detached.timestamp(), Timestamp::CreateTime(expected[10].2));
    assert_eq!(detached.topic(), case.products_topic);
}
