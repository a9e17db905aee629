//! The shared bulk machinery against a scripted destination: batching, concurrency,
//! retries, rejections and acknowledgement. (The real destinations are tested in
//! `tests/elasticsearch.rs` and `tests/couchbase.rs`.)

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use dataflows::model::{PairFigures, PairKey};

use super::*;

/// Per document id: the version held, and the body (none for a delete).
type Documents = BTreeMap<String, (u64, Option<Vec<u8>>)>;

/// A destination that keeps the newest version per document and answers from a script.
#[derive(Default)]
struct ScriptedService {
    /// Outcome overrides for (id, attempt number).
    script: Mutex<HashMap<(String, u32), ItemOutcome>>,
    /// Fail whole requests while this is above zero.
    failing_requests: AtomicUsize,
    /// Panic inside the request's future while this is above zero.
    panicking_requests: AtomicUsize,
    attempts: Mutex<HashMap<String, u32>>,
    documents: Mutex<Documents>,
    writes: Mutex<Vec<(String, u64)>>,
    batch_sizes: Mutex<Vec<usize>>,
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    /// Whether it applies the last write it gets, whatever the version (like N1QL UPSERT).
    last_write_wins: bool,
    /// Documents of the requests being served, to catch one in two at once.
    serving: Arc<Mutex<Vec<String>>>,
    overlaps: AtomicUsize,
}

impl BulkService for ScriptedService {
    fn send(&self, ops: Arc<Vec<DocumentOp>>) -> Pin<Box<dyn Future<Output = RequestResult> + Send>> {
        {
            let mut serving = self.serving.lock().unwrap();
            let mut seen = std::collections::HashSet::new();
            for op in ops.iter() {
                if serving.contains(&op.id) || !seen.insert(op.id.clone()) {
                    self.overlaps.fetch_add(1, Ordering::SeqCst);
                }
            }
            serving.extend(ops.iter().map(|op| op.id.clone()));
        }
        let panicking = self
            .panicking_requests
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if panicking {
            self.serving.lock().unwrap().clear();
            return Box::pin(async { panic!("a bug in building the request") });
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let failing = self
            .failing_requests
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let result = if failing {
            Err(RequestFailure::Unanswered("connection refused".into()))
        } else {
            self.batch_sizes.lock().unwrap().push(ops.len());
            let outcomes = ops
                .iter()
                .map(|op| {
                    let attempt = {
                        let mut attempts = self.attempts.lock().unwrap();
                        let attempt = attempts.entry(op.id.clone()).or_default();
                        *attempt += 1;
                        *attempt
                    };
                    let scripted = self.script.lock().unwrap().remove(&(op.id.clone(), attempt));
                    let outcome = scripted.unwrap_or(ItemOutcome::Done);
                    if outcome == ItemOutcome::Done {
                        let mut documents = self.documents.lock().unwrap();
                        let newer = !self.last_write_wins
                            && documents.get(&op.id).is_some_and(|(version, _)| *version >= op.version);
                        if !newer {
                            documents.insert(op.id.clone(), (op.version, op.body.clone()));
                            self.writes.lock().unwrap().push((op.id.clone(), op.version));
                        }
                    }
                    outcome
                })
                .collect();
            Ok(outcomes)
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        let ids: Vec<String> = ops.iter().map(|op| op.id.clone()).collect();
        let serving = self.serving.clone();
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let mut serving = serving.lock().unwrap();
            for id in ids {
                if let Some(position) = serving.iter().position(|held| *held == id) {
                    serving.remove(position);
                }
            }
            result
        })
    }

    fn needs_ordered_writes(&self) -> bool {
        self.last_write_wins
    }
}

fn config(max_actions: usize, max_in_flight: usize) -> BulkConfig {
    BulkConfig {
        max_actions,
        max_bytes: 1 << 20,
        flush_interval: Duration::from_millis(1),
        max_in_flight,
        backoff: Backoff {
            initial: Duration::from_millis(2),
            max: Duration::from_millis(10),
        },
    }
}

fn change(time: Time, seller: u64, products: Option<u64>) -> PairChange {
    PairChange {
        time,
        pair: PairKey {
            campaign_id: "c".into(),
            seller_id: seller,
        },
        figures: products.map(|p| PairFigures {
            eligible_products: p,
            eligible_stock: p,
        }),
        previous: None,
    }
}

/// Flushes until everything below `upper` is acknowledged (or a second has passed).
fn settle(sink: &mut BulkSink<ScriptedService>, upper: Option<Time>) -> Option<Time> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let acknowledged = sink.flush(upper).unwrap();
        if acknowledged == upper || Instant::now() > deadline {
            return acknowledged;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn sink(
    service: Arc<ScriptedService>,
    config: BulkConfig,
    runtime: &tokio::runtime::Runtime,
) -> BulkSink<ScriptedService> {
    BulkSink::new(
        "test",
        service,
        runtime.handle().clone(),
        config,
        Arc::new(Metrics::new()),
    )
}

#[test]
fn batches_respect_the_action_limit_and_the_in_flight_bound() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = Arc::new(ScriptedService::default());
    let mut sink = sink(service.clone(), config(10, 2), &runtime);
    let changes: Vec<PairChange> = (0..95).map(|seller| change(5, seller, Some(1))).collect();
    sink.write(5, &changes).unwrap();
    assert_eq!(
        sink.flush(Some(6)).unwrap(),
        Some(5),
        "nothing is acknowledged before it is written"
    );
    assert_eq!(settle(&mut sink, Some(6)), Some(6));
    assert_eq!(service.documents.lock().unwrap().len(), 95);
    assert!(service.batch_sizes.lock().unwrap().iter().all(|size| *size <= 10));
    assert!(service.most_in_flight.load(Ordering::SeqCst) <= 2);
}

#[test]
fn temporary_refusals_are_retried_and_hold_the_acknowledgement() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = Arc::new(ScriptedService::default());
    for attempt in 1..=3 {
        service.script.lock().unwrap().insert(
            ("c:1".into(), attempt),
            ItemOutcome::Retry {
                reason: "429 es_rejected_execution_exception".into(),
                blocking: false,
            },
        );
    }
    service.failing_requests.store(2, Ordering::SeqCst);
    let mut sink = sink(service.clone(), config(100, 1), &runtime);
    sink.write(7, &[change(7, 1, Some(3)), change(7, 2, Some(4))]).unwrap();
    assert_eq!(settle(&mut sink, Some(8)), Some(8));
    assert_eq!(service.documents.lock().unwrap()["c:1"].0, 7);
    assert_eq!(
        service.attempts.lock().unwrap()["c:1"],
        4,
        "three refusals, then written"
    );
    assert!(sink.take_rejected().is_empty());
}

#[test]
fn refused_documents_become_dead_letters_at_their_time() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = Arc::new(ScriptedService::default());
    service.script.lock().unwrap().insert(
        ("c:2".into(), 1),
        ItemOutcome::Rejected {
            code: "mapper_parsing_exception".into(),
            reason: "failed to parse field [eligible_stock]".into(),
        },
    );
    let mut sink = sink(service.clone(), config(100, 1), &runtime);
    sink.write(9, &[change(9, 1, Some(1)), change(9, 2, Some(2))]).unwrap();
    assert_eq!(
        settle(&mut sink, Some(10)),
        Some(10),
        "a rejected document does not block the stream"
    );
    let rejected = sink.take_rejected();
    assert_eq!(rejected.len(), 1);
    assert_eq!(rejected[0].0, 9);
    assert_eq!(rejected[0].1.code, "mapper_parsing_exception");
    assert_eq!(rejected[0].1.key.as_deref(), Some("c:2"));
    assert!(String::from_utf8_lossy(&rejected[0].1.raw).contains("\"eligible_products\":2"));
}

#[test]
fn a_stale_retry_never_overwrites_a_newer_write() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = Arc::new(ScriptedService::default());
    service.script.lock().unwrap().insert(
        ("c:1".into(), 1),
        ItemOutcome::Retry {
            reason: "503".into(),
            blocking: false,
        },
    );
    let mut config = config(100, 1);
    config.backoff.initial = Duration::from_millis(50);
    config.backoff.max = Duration::from_millis(50);
    let mut sink = sink(service.clone(), config, &runtime);
    sink.write(1, &[change(1, 1, Some(1))]).unwrap();
    // The first write is refused and waits for its retry…
    let deadline = Instant::now() + Duration::from_secs(2);
    while service.attempts.lock().unwrap().get("c:1").is_none() && Instant::now() < deadline {
        sink.flush(Some(2)).unwrap();
    }
    // …while the pair changes again.
    sink.write(2, &[change(2, 1, Some(5))]).unwrap();
    assert_eq!(settle(&mut sink, Some(3)), Some(3));
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(settle(&mut sink, Some(3)), Some(3));
    assert_eq!(
        service.documents.lock().unwrap()["c:1"].0,
        2,
        "the newer version stands"
    );
    assert_eq!(*service.writes.lock().unwrap(), vec![("c:1".to_owned(), 2)]);
    assert_eq!(
        service.attempts.lock().unwrap()["c:1"],
        2,
        "the stale retry was dropped, not sent"
    );
}

#[test]
fn a_last_write_wins_destination_gets_each_document_in_version_order() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = Arc::new(ScriptedService {
        last_write_wins: true,
        ..ScriptedService::default()
    });
    let mut sink = sink(service.clone(), config(3, 4), &runtime);
    for time in 1..=20u64 {
        // The same two pairs change at every time, and a third now and then.
        let mut changes = vec![change(time, 1, Some(time)), change(time, 2, Some(time))];
        if time % 5 == 0 {
            changes.push(change(time, 3, if time % 10 == 0 { None } else { Some(time) }));
        }
        sink.write(time, &changes).unwrap();
        sink.flush(Some(time + 1)).unwrap();
    }
    assert_eq!(settle(&mut sink, Some(21)), Some(21));
    assert_eq!(
        service.overlaps.load(Ordering::SeqCst),
        0,
        "a document was in two requests at once"
    );
    let writes = service.writes.lock().unwrap().clone();
    for id in ["c:1", "c:2", "c:3"] {
        let versions: Vec<u64> = writes.iter().filter(|(w, _)| w == id).map(|(_, v)| *v).collect();
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "{id} written out of order: {versions:?}"
        );
    }
    let documents = service.documents.lock().unwrap();
    assert_eq!(documents["c:1"].0, 20);
    assert_eq!(documents["c:3"], (20, None), "the last write of c:3 is its delete");
}

#[test]
fn deletes_are_ops_without_a_body() {
    let op = DocumentOp::from_change(&change(4, 9, None));
    assert_eq!((op.id.as_str(), op.version, op.body), ("c:9", 4, None));
    let op = DocumentOp::from_change(&change(4, 9, Some(2)));
    assert_eq!(
        String::from_utf8(op.body.unwrap()).unwrap(),
        r#"{"campaign_id":"c","seller_id":9,"eligible_products":2,"eligible_stock":2}"#
    );
}

#[test]
fn a_destination_that_answers_again_is_written_to_without_waiting_out_the_backoff() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = Arc::new(ScriptedService::default());
    service.failing_requests.store(3, Ordering::SeqCst);
    let mut slow = config(100, 1);
    slow.backoff = Backoff {
        initial: Duration::from_secs(20),
        max: Duration::from_secs(60),
    };
    let mut sink = sink(service.clone(), slow, &runtime);
    let started = Instant::now();
    sink.write(
        3,
        &[change(3, 1, Some(1)), change(3, 2, Some(2)), change(3, 3, Some(3))],
    )
    .unwrap();
    // Three failures (the first request, then a probe a second), then everything at once.
    assert_eq!(settle(&mut sink, Some(4)), Some(4));
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert_eq!(service.documents.lock().unwrap().len(), 3);
}

#[test]
fn a_request_that_panics_still_reports_back_and_is_retried() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let service = Arc::new(ScriptedService::default());
    service.panicking_requests.store(1, Ordering::SeqCst);
    let mut sink = sink(service.clone(), config(100, 1), &runtime);
    sink.write(2, &[change(2, 1, Some(1))]).unwrap();
    assert_eq!(settle(&mut sink, Some(3)), Some(3), "the frontier moves on");
    assert_eq!(service.documents.lock().unwrap().len(), 1);
}
