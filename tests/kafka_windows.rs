//! Scheduled campaigns (SPEC.md, "Campaign windows") against a real Apache Kafka broker
//! (`scripts/kafka.sh start`): under the wall clock a campaign opens and closes within a
//! second of its bounds with no record arriving, and a restart rebuilds with the clock of
//! now; under `[kafka] clock = "records"` a produced log replays as file mode reads it.
//! Each test has its own topics; they run one at a time (the wall-clock measurements want
//! the machine to themselves as much as the suite allows).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dataflows::decode::{decode_line, split_envelope};
use dataflows::instant::{format_rfc3339, EpochNanos};
use dataflows::model::{PairChange, PairKey};
use dataflows::reference::{changes_between, PairState, ReferenceState};
use eligibility::change_log::{fold_state, parse_change, read_changes};
use eligibility::source::kafka::clock::LIVE_TIME_BASE;
use support::kafka::{
    assert_contract, change_log_state, expected_state_with_clock, generated_lines_with, http_get, reference_state,
    serial, wait_until, KafkaCase,
};
use support::{path_str, run_ok};

/// The wall clock, since the Unix epoch.
fn wall() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

fn wall_ms() -> u64 {
    wall().as_millis() as u64
}

/// Sleeps until the wall clock reaches `until` (since the Unix epoch).
fn sleep_until(until: Duration) {
    if let Some(left) = until.checked_sub(wall()) {
        std::thread::sleep(left);
    }
}

/// A product line of the event log.
fn product(key: &str, seller: u64, brand: u64, stock: u64) -> String {
    format!(
        r#"{{"topic": "products", "key": "{key}", "value": {{"seller_id": {seller}, "category_id": 1, "brand_id": {brand}, "price": 10, "stock": {stock}}}}}"#
    )
}

/// A campaign line of the event log: `value` is its JSON object.
fn campaign(key: &str, value: &str) -> String {
    format!(r#"{{"topic": "campaigns", "key": "{key}", "value": {value}}}"#)
}

/// An instant `ms` after the epoch as RFC 3339, in UTC (`Z`) or at a `+03:00` offset.
fn rfc3339(ms: u64, offset: bool) -> String {
    let at = EpochNanos::from_millis(ms);
    match offset {
        false => format_rfc3339(at),
        true => generate::format_rfc3339_at_offset(at, 180, 3),
    }
}

/// The brute-force pairs of `reference` with the clock at `ms`.
fn pairs_at(reference: &ReferenceState, ms: u64) -> PairState {
    let mut state = reference.clone();
    state.clock = EpochNanos::from_millis(ms);
    state.pairs()
}

/// Fails with the pairs where `actual` and `expected` differ (a few of them), not both states.
#[track_caller]
fn assert_same_state(actual: &PairState, expected: &PairState, what: &str) {
    if actual == expected {
        return;
    }
    let differences = changes_between(expected, actual, 0);
    let missing = expected.keys().filter(|pair| !actual.contains_key(pair)).count();
    panic!(
        "{what}: {} pairs differ ({missing} missing, the others extra or with other figures); \
         the first, as changes from the expected state: {:?}",
        differences.len() + missing,
        differences.iter().take(5).collect::<Vec<_>>()
    );
}

/// A (pair, figures) set: what a group of change lines says, whatever its order.
fn change_set(changes: &[PairChange]) -> BTreeSet<(PairKey, Option<(u64, u64)>)> {
    changes
        .iter()
        .map(|change| {
            (
                change.pair.clone(),
                change.figures.map(|f| (f.eligible_products, f.eligible_stock)),
            )
        })
        .collect()
}

/// One change line, and when it first showed up in the file (wall clock since the epoch).
struct Seen {
    change: PairChange,
    /// It was not there when the read before this one began: it was written after this.
    not_before: Duration,
    /// It was there when this read ended: it was written by then.
    seen_by: Duration,
}

/// A change log watched while the job writes it.
struct Watch {
    path: PathBuf,
    seen: Vec<Seen>,
    last_read_started: Duration,
}

impl Watch {
    fn new(path: PathBuf) -> Self {
        Watch {
            path,
            seen: Vec::new(),
            last_read_started: wall(),
        }
    }

    /// Reads the log's complete lines and records the new ones.
    fn poll(&mut self) {
        let started = wall();
        let bytes = match std::fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(error) => panic!("cannot read {}: {error}", self.path.display()),
        };
        let finished = wall();
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |end| end + 1);
        let text = std::str::from_utf8(&bytes[..complete]).unwrap();
        for line in text.lines().filter(|line| !line.is_empty()).skip(self.seen.len()) {
            self.seen.push(Seen {
                change: parse_change(line).unwrap(),
                not_before: self.last_read_started,
                seen_by: finished,
            });
        }
        self.last_read_started = started;
    }

    fn state(&self) -> PairState {
        let changes: Vec<PairChange> = self.seen.iter().map(|seen| seen.change.clone()).collect();
        fold_state(&changes)
    }

    /// Polls every 10 ms until `condition` holds or the wall clock reaches `deadline`;
    /// whether it held.
    fn until(&mut self, deadline: Duration, mut condition: impl FnMut(&Watch) -> bool) -> bool {
        loop {
            self.poll();
            if condition(self) {
                return true;
            }
            if wall() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The value of a counter or gauge on `/metrics` (the sum of its series).
fn metric(port: u16, name: &str) -> Option<f64> {
    let (status, body) = http_get(port, "/metrics")?;
    if status != 200 {
        return None;
    }
    let values: Vec<f64> = body
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

/// How far the first and the last of `lines` showed up after `bound` (negative: before).
fn shown_after(lines: &[&Seen], bound: Duration) -> (f64, f64) {
    let offset = |at: Duration| at.as_secs_f64() - bound.as_secs_f64();
    let first = lines.iter().map(|seen| seen.seen_by).min().unwrap();
    let last = lines.iter().map(|seen| seen.seen_by).max().unwrap();
    (offset(first), offset(last))
}

/// A campaign scheduled to open about 8 s after it is produced and to close 4 s later opens
/// and closes under the wall clock (`[kafka] clock = "wall"`, the default) on a job that
/// reads no record in between: its pairs, exactly the brute-force ones, show up in the
/// change log no earlier than `starts_at` and within a second after it, and are deleted no
/// earlier than `ends_at` and within a second after it; nothing else is written. Their
/// times are the first times whose clock reaches the bounds (`LIVE_TIME_BASE` + the bound
/// in ms), and no batch is closed and no record read while the job waits.
///
/// The change log is read every 10 ms; a line counts as shown at the end of the first read
/// that has it, which is at most a read later than its write. "No earlier" is then exact
/// (a line read before the bound was written before it); "within a second" includes that
/// read's slack.
#[test]
fn a_scheduled_campaign_opens_and_closes_within_a_second_of_its_bounds_with_no_record() {
    let _serial = serial();
    let (case, port) = KafkaCase::with_change_log_and_metrics("window-bounds");
    let now = wall_ms();
    // About 8 s ahead, 51 ms before a whole second: 49 ms after a step of the live batches'
    // wall-clock grid (50 ms by default; a whole second is a step of every grid dividing a
    // second), where a clock running up to a step ahead of the wall clock opens it earliest.
    let starts_at = (now + 8_000) / 1_000 * 1_000 + 949;
    let ends_at = starts_at + 4_000;
    let lines = vec![
        product("p1", 1, 1, 5),
        product("p2", 1, 1, 2),
        product("p3", 2, 1, 7),
        product("p4", 2, 2, 1),
        product("p5", 3, 2, 4),
        product("p6", 3, 1, 0),
        // Open all along.
        campaign("always", r#"{"brand_ids": [2]}"#),
        // The scheduled one, its end written at another offset.
        campaign(
            "sale",
            &format!(
                r#"{{"brand_ids": [1], "starts_at": "{}", "ends_at": "{}"}}"#,
                rfc3339(starts_at, false),
                rfc3339(ends_at, true)
            ),
        ),
        // Closed before the job starts, and opening long after the test.
        campaign(
            "expired",
            &format!(r#"{{"ends_at": "{}"}}"#, rfc3339(now - 60_000, false)),
        ),
        campaign(
            "future",
            &format!(r#"{{"starts_at": "{}"}}"#, rfc3339(now + 3_600_000, false)),
        ),
    ];
    let reference = reference_state(&lines);
    let before = pairs_at(&reference, starts_at - 1);
    let open = pairs_at(&reference, starts_at);
    let closed = pairs_at(&reference, ends_at);
    assert_eq!(
        before,
        pairs_at(&reference, now),
        "only `always` has pairs before the sale"
    );
    assert_eq!(closed, before);
    let opening = changes_between(&before, &open, 0);
    let closing = changes_between(&open, &closed, 0);
    assert_eq!(opening.len(), 3, "the sale has a pair for each of the three sellers");
    assert!(opening.iter().all(|change| change.pair.campaign_id == "sale"));

    case.produce(&lines, 2);
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    let mut watch = Watch::new(case.changes_path());
    let bound = |ms: u64| Duration::from_millis(ms);
    // The job must be live, and have written the state before the sale, well before it opens.
    assert!(
        watch.until(bound(starts_at - 1_000), |watch| watch.state() == before),
        "the job did not write the pairs of `always` within {} ms of starting: too slow to \
         measure the sale's opening",
        starts_at - 1_000 - now
    );
    let live_lines = watch.seen.len();
    // Whatever the job does while waiting for the bound, it is not reading: take the
    // counters once the start-up is over.
    let counters = || {
        (
            metric(port, "eligibility_batches_closed_total"),
            metric(port, "eligibility_records_read_total"),
        )
    };
    wait_until("/metrics answers", Duration::from_secs(10), || {
        counters().0.is_some() && counters().1.is_some()
    });
    let idle_counters = counters();

    let expected_lines = live_lines + opening.len() + closing.len();
    let all_written = watch.until(bound(ends_at + 5_000), |watch| watch.seen.len() >= expected_lines);
    // Give a wrong extra write the chance to show up.
    let settle = wall() + Duration::from_millis(700);
    watch.until(settle, |_| false);
    assert!(job.is_running(), "the job exited");
    let final_counters = counters();
    job.kill();

    let new: Vec<&Seen> = watch.seen[live_lines..].iter().collect();
    assert!(
        all_written,
        "within 5 s of ends_at the job wrote {} lines of the sale's {}: {:?}",
        new.len(),
        opening.len() + closing.len(),
        new.iter().map(|seen| &seen.change).collect::<Vec<_>>()
    );
    assert_eq!(
        new.len(),
        opening.len() + closing.len(),
        "only the sale's pairs are written, each once on opening and once on closing: {:?}",
        new.iter().map(|seen| &seen.change).collect::<Vec<_>>()
    );
    let (opened, deleted) = new.split_at(opening.len());
    let opened_changes: Vec<PairChange> = opened.iter().map(|seen| seen.change.clone()).collect();
    let deleted_changes: Vec<PairChange> = deleted.iter().map(|seen| seen.change.clone()).collect();
    assert_eq!(change_set(&opened_changes), change_set(&opening), "the sale opens");
    assert_eq!(change_set(&deleted_changes), change_set(&closing), "the sale closes");
    for (changes, at) in [(&opened_changes, starts_at), (&deleted_changes, ends_at)] {
        for change in changes.iter() {
            assert_eq!(
                change.time,
                LIVE_TIME_BASE + at,
                "the first time whose clock reaches the bound: {change:?}"
            );
        }
    }

    assert_eq!(
        final_counters, idle_counters,
        "(batches closed, records read) moved while the job only waited for the bounds"
    );
    assert_eq!(watch.state(), closed);
    assert_contract(&read_changes(&case.changes_path()).unwrap());

    let (open_first, open_last) = shown_after(opened, bound(starts_at));
    let (close_first, close_last) = shown_after(deleted, bound(ends_at));
    eprintln!(
        "the sale's pairs showed up {open_first:.3}..{open_last:.3} s after starts_at (written after \
         {:.3} s) and were deleted {close_first:.3}..{close_last:.3} s after ends_at (written after {:.3} s)",
        opened.iter().map(|s| s.not_before).min().unwrap().as_secs_f64() - bound(starts_at).as_secs_f64(),
        deleted.iter().map(|s| s.not_before).min().unwrap().as_secs_f64() - bound(ends_at).as_secs_f64(),
    );
    assert!(open_last <= 1.0, "the sale opened {open_last:.3} s after starts_at");
    assert!(close_last <= 1.0, "the sale closed {close_last:.3} s after ends_at");
    assert!(
        open_first >= 0.0 && close_first >= 0.0,
        "the sale's pairs were in the change log {:.3} s before starts_at, and deleted {:.3} s \
         before ends_at",
        -open_first,
        -close_first
    );
}

/// Adds `option` (a `key = value` line) to the `[kafka]` table of a job config.
fn set_kafka_option(config: &Path, option: &str) {
    let text = std::fs::read_to_string(config).unwrap();
    assert!(text.contains("[kafka]\n"));
    std::fs::write(config, text.replacen("[kafka]\n", &format!("[kafka]\n{option}\n"), 1)).unwrap();
}

/// The distinct (topic, partition, offset) of a Kafka job's dead-letter log.
fn dead_letter_offsets(path: &Path) -> BTreeSet<(String, i64, i64)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let letter: serde_json::Value = serde_json::from_str(line).unwrap();
            (
                letter["topic"].as_str().unwrap().to_owned(),
                letter["partition"].as_i64().unwrap(),
                letter["offset"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// A generated log with line timestamps and scheduled campaigns, produced with
/// `eligibility produce` (each record's Kafka timestamp is its line's) and read with
/// `[kafka] clock = "records"`, replays file mode's clock.
///
/// What is exactly comparable between the modes, and what is not:
/// - Batches differ (file mode: `--batch-size` lines; Kafka: a run rebuilds the topics in
///   chunks and writes only the difference with what its change log holds, then batches
///   live records by the wall clock), and Kafka reads partitions in an order of its own, so
///   its intermediate states need not be states of any prefix of the log, and a window
///   that opens and closes between two clock readings of one mode may have pairs in the
///   other. Neither the lines, nor their times, nor the set of campaigns that had pairs at
///   some point are comparable.
/// - The clock at the end of a read of a whole prefix of the log is: the greatest
///   timestamp of its accepted lines, in whatever order they were read. So the state
///   where each run of the Kafka job stops, having read every partition to its end, is
///   the brute-force state of that prefix at that clock, and file mode's state after the
///   batch that ends on the same line. Both are checked: after a first `--stop-at-end` run
///   over the first 3000 lines (a batch boundary), where several scheduled campaigns are
///   open; and after the rest has been produced to a running job (live batches, their clock
///   from the records), where windows have opened and closed since; a last
///   `--stop-at-end` run then rebuilds at that clock and writes nothing.
/// - A line with a bad `timestamp` cannot be a Kafka timestamp: `produce` skips it, with
///   every other line whose envelope it cannot read, while file mode dead-letters it. None
///   of them changes a state or moves the clock, so states agree; the dead letters differ
///   by exactly those lines.
#[test]
fn replaying_with_the_records_clock_gives_the_file_modes_change_log() {
    let _serial = serial();
    let (case, port) = KafkaCase::with_change_log_and_metrics("records-clock");
    set_kafka_option(&case.config, r#"clock = "records""#);
    let lines = generated_lines_with(
        case.dir.path(),
        2_000,
        5_000,
        7,
        &["--scheduled-campaigns", "0.8", "--line-interval-ms", "3"],
    );
    const BATCH: usize = 500;
    const SPLIT: usize = 3_000;
    assert_eq!(SPLIT % BATCH, 0);
    let (first, rest) = lines.split_at(SPLIT);

    // File mode over the whole log.
    let log = case.dir.path().join("log.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let file_changes_path = case.dir.path().join("file-changes.jsonl");
    let file_rejected_path = case.dir.path().join("file-rejected.jsonl");
    run_ok(&[
        "run",
        "--input",
        path_str(&log),
        "--output",
        path_str(&file_changes_path),
        "--dead-letter",
        path_str(&file_rejected_path),
        "--batch-size",
        &BATCH.to_string(),
        "--workers",
        "2",
    ]);
    let file_changes = read_changes(&file_changes_path).unwrap();
    let file_state_after = |lines: usize| {
        let last_time = (lines / BATCH) as u64;
        let prefix: Vec<PairChange> = file_changes
            .iter()
            .filter(|change| change.time < last_time)
            .cloned()
            .collect();
        fold_state(&prefix)
    };

    // The log is worth replaying: windows open and close along it, and the clock matters.
    let at_split = expected_state_with_clock(first);
    let at_end = expected_state_with_clock(&lines);
    let scheduled: BTreeSet<String> = lines
        .iter()
        .filter_map(|line| decode_line(line.as_bytes()).ok())
        .filter(|line| line.record.key.starts_with("c-"))
        .filter(|line| {
            matches!(&line.record.change, dataflows::decode::Change::Campaign(Some(campaign))
                if campaign.window.starts_at.is_some() || campaign.window.ends_at.is_some())
        })
        .map(|line| line.record.key)
        .collect();
    let campaigns_of =
        |state: &PairState| -> BTreeSet<String> { state.keys().map(|pair| pair.campaign_id.clone()).collect() };
    let open_at_split: BTreeSet<String> = campaigns_of(&at_split).intersection(&scheduled).cloned().collect();
    let open_at_end: BTreeSet<String> = campaigns_of(&at_end).intersection(&scheduled).cloned().collect();
    assert!(
        open_at_split.len() >= 2 && open_at_end.len() >= 2 && open_at_split != open_at_end,
        "scheduled campaigns with pairs at line {SPLIT}: {open_at_split:?}; at the end: {open_at_end:?}"
    );
    let mut clockless = reference_state(&lines);
    clockless.clock = EpochNanos::BEGINNING;
    assert_ne!(clockless.pairs(), at_end, "the final clock matters");

    // File mode agrees with the brute force where Kafka will stop.
    assert_same_state(
        &file_state_after(SPLIT),
        &at_split,
        &format!("file mode at line {SPLIT}"),
    );
    assert_same_state(&fold_state(&file_changes), &at_end, "file mode at the end");

    // 1. The first part, rebuilt by a run that stops at the end of the topics.
    case.produce(first, 3);
    case.run_to_end(&case.config, &["--workers", "2"]);
    let split_lines = read_changes(&case.changes_path()).unwrap().len();
    assert_same_state(
        &change_log_state(&case.changes_path()),
        &at_split,
        &format!("Kafka at line {SPLIT}"),
    );

    // 2. The rest, produced to a running job: read live, its clock from the records.
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    wait_until("the job is live", Duration::from_secs(30), || {
        metric(port, "eligibility_output_frontier").is_some_and(|frontier| frontier >= LIVE_TIME_BASE as f64)
    });
    for chunk in rest.chunks(1_000) {
        case.produce(chunk, 3);
    }
    wait_until(
        "the running job reaches the end of the log",
        Duration::from_secs(60),
        || change_log_state(&case.changes_path()) == at_end,
    );
    // Give a wrong extra write the chance to show up.
    std::thread::sleep(Duration::from_millis(500));
    assert!(job.is_running(), "the job exited");
    job.kill();
    let written = read_changes(&case.changes_path()).unwrap();
    assert!(
        written[split_lines..].iter().all(|change| change.time > LIVE_TIME_BASE),
        "the rest was read live"
    );
    assert_contract(&written);
    assert_same_state(&fold_state(&written), &at_end, "Kafka at the end");

    // 3. A restart rebuilds the state at the records' clock and writes nothing.
    case.run_to_end(&case.config, &[]);
    let after_restart = read_changes(&case.changes_path()).unwrap();
    assert_eq!(
        after_restart.len(),
        written.len(),
        "the restart wrote {:?}",
        &after_restart[written.len()..]
    );
    assert_same_state(
        &change_log_state(&case.changes_path()),
        &fold_state(&file_changes),
        "Kafka after a restart, against file mode",
    );

    // Dead letters: file mode's are every rejected line; Kafka's, those `produce` could send.
    let rejected: Vec<&String> = lines
        .iter()
        .filter(|line| decode_line(line.as_bytes()).is_err())
        .collect();
    let unsendable = rejected
        .iter()
        .filter(|line| split_envelope(line.as_bytes()).is_err())
        .count();
    let bad_timestamps = lines
        .iter()
        .filter(|line| {
            let json: Option<serde_json::Value> = serde_json::from_str(line).ok();
            json.is_some_and(|json| json.get("timestamp").is_some_and(|t| !t.is_u64()))
        })
        .count();
    assert!(bad_timestamps > 0, "the log has lines with a bad timestamp");
    assert!(unsendable >= bad_timestamps);
    let file_rejected = std::fs::read_to_string(&file_rejected_path).unwrap();
    assert_eq!(file_rejected.lines().count(), rejected.len());
    assert_eq!(
        dead_letter_offsets(&case.dir.path().join("rejected.jsonl")).len(),
        rejected.len() - unsendable
    );
}

/// Under the wall clock, a job stopped while a campaign is open and started again after
/// its `ends_at` rebuilds its state with the clock of the moment it starts: the campaign
/// has no pairs, so its pairs' deletes are written, and nothing else. A campaign whose
/// `starts_at` passed meanwhile opens the same way. The restart writes these, and only
/// these, at its first live time, whose clock is the restart's wall clock.
#[test]
fn a_restart_rebuilds_with_the_clock_of_now() {
    let _serial = serial();
    let case = KafkaCase::new("window-restart", false);
    let now = wall_ms();
    let ends_at = now + 10_000;
    let starts_at = ends_at + 500;
    let lines = vec![
        product("p1", 1, 1, 5),
        product("p2", 1, 2, 2),
        product("p3", 2, 1, 7),
        product("p4", 2, 3, 1),
        product("p5", 3, 2, 4),
        product("p6", 3, 3, 6),
        campaign("always", r#"{"brand_ids": [2]}"#),
        campaign(
            "ending",
            &format!(
                r#"{{"brand_ids": [1], "starts_at": "{}", "ends_at": "{}"}}"#,
                rfc3339(now - 60_000, false),
                rfc3339(ends_at, true)
            ),
        ),
        campaign(
            "opening",
            &format!(r#"{{"brand_ids": [3], "starts_at": "{}"}}"#, rfc3339(starts_at, false)),
        ),
    ];
    let reference = reference_state(&lines);
    let first = pairs_at(&reference, now);
    assert_eq!(first, pairs_at(&reference, ends_at - 1));
    assert!(campaign_pairs(&first, "ending") > 0 && campaign_pairs(&first, "opening") == 0);

    case.produce(&lines, 2);
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    let deadline = Instant::now() + Duration::from_millis((ends_at - 2_000).saturating_sub(wall_ms()));
    while change_log_state(&case.changes_path()) != first {
        assert!(
            Instant::now() < deadline,
            "the job did not write the first state within 2 s of `ending`'s end: too slow to \
             stop it while the campaign is open"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    job.kill();
    assert!(wall_ms() < ends_at, "the job was stopped after ends_at");
    let written = read_changes(&case.changes_path()).unwrap();
    assert_eq!(fold_state(&written), first, "nothing more was written before the kill");

    // Stopped past both bounds.
    sleep_until(Duration::from_millis(starts_at + 300));
    let restarted_at = wall_ms();
    let after = pairs_at(&reference, restarted_at);
    assert_eq!(campaign_pairs(&after, "ending"), 0);
    assert!(campaign_pairs(&after, "opening") > 0);
    let mut job = case.spawn(&case.config, &["--workers", "2"]);
    wait_until(
        "the restarted job writes the state of now",
        Duration::from_secs(30),
        || change_log_state(&case.changes_path()) == after,
    );
    // Give a wrong extra write the chance to show up.
    std::thread::sleep(Duration::from_millis(700));
    assert!(job.is_running(), "the job exited");
    job.kill();
    let finished_at = wall_ms();

    let changes = read_changes(&case.changes_path()).unwrap();
    assert_contract(&changes);
    let new = &changes[written.len()..];
    assert_eq!(
        change_set(new),
        change_set(&changes_between(&first, &after, 0)),
        "the restart writes `ending`'s deletes and `opening`'s upserts"
    );
    assert_eq!(new.len(), change_set(new).len(), "each pair once");
    assert!(new.iter().any(|change| change.figures.is_none()));
    let times: BTreeSet<u64> = new.iter().map(|change| change.time).collect();
    assert_eq!(times.len(), 1, "one time, the restart's first live time: {times:?}");
    let time = times.into_iter().next().unwrap();
    assert!(
        (LIVE_TIME_BASE + restarted_at..=LIVE_TIME_BASE + finished_at).contains(&time),
        "the restart's time reads the wall clock of the restart: {} ms after it started",
        time as i128 - (LIVE_TIME_BASE + restarted_at) as i128
    );
}

/// How many pairs `campaign` has in `state`.
fn campaign_pairs(state: &PairState, campaign: &str) -> usize {
    state.keys().filter(|pair| pair.campaign_id == campaign).count()
}

/// A line stamped further ahead than the brokers accept (`log.message.timestamp.after.max.ms`,
/// an hour by default) is refused by them: `produce` says so and fails, rather than
/// reporting every record produced.
#[test]
fn produce_fails_when_the_brokers_refuse_a_records_timestamp() {
    let _serial = serial();
    let case = KafkaCase::new("refused-timestamp", false);
    let now = wall_ms();
    let lines = [
        format!(r#"{{"topic": "campaigns", "key": "c-now", "value": {{}}, "timestamp": {now}}}"#),
        format!(
            r#"{{"topic": "campaigns", "key": "c-later", "value": {{}}, "timestamp": {}}}"#,
            now + 2 * 3_600_000
        ),
    ];
    let log = case.dir.path().join("events.jsonl");
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let output = std::process::Command::new(support::binary())
        .args(["produce", "--input", path_str(&log), "--config", path_str(&case.config)])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
}
