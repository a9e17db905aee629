//! The dataflow against a brute-force recomputation, on random event logs.
//!
//! For every batch, the changes the job emits must be exactly the difference between the
//! brute-force pair states before and after that batch: nothing missing, nothing extra,
//! no upsert repeating current figures, no delete of a missing pair. Run with batch sizes
//! 1 and random, on 1 and 3 workers; the logs mix products, campaigns and a category tree
//! (moves, chains, cycles, tombstones, parents without a record, bad records).

mod support;

use std::collections::BTreeMap;

use dataflows::decode::{decode_envelope, decode_line};
use dataflows::model::{PairChange, Time};
use dataflows::reference::{apply_changes, changes_between, PairState, ReferenceState};
use eligibility::dead_letter::Origin;
use proptest::prelude::*;

/// A small id space, so that keys collide, categories are shared and campaigns overlap.
fn product_value() -> impl Strategy<Value = String> {
    (0..4u64, 0..4u64, 0..3u64, 0..600u64, 0..4u32).prop_map(|(seller, category, brand, cents, stock)| {
        format!(
            r#"{{"seller_id": {seller}, "category_id": {category}, "brand_id": {brand}, "price": {}.{:02}, "stock": {stock}}}"#,
            cents / 100,
            cents % 100
        )
    })
}

fn id_list(max: u64) -> impl Strategy<Value = Option<Vec<u64>>> {
    prop::option::weighted(0.5, prop::collection::vec(0..max, 0..3))
}

fn campaign_value() -> impl Strategy<Value = String> {
    (
        id_list(6),
        id_list(3),
        id_list(4),
        id_list(4),
        prop::option::of(0..600u64),
        prop::option::of(0..600u64),
        prop::option::of(0..4u64),
        prop::option::weighted(0.3, any::<bool>()),
    )
        .prop_map(|(categories, brands, sellers, excluded, min, max, min_stock, active)| {
            let mut fields = Vec::new();
            let list = |ids: &Vec<u64>| format!("[{}]", ids.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
            if let Some(ids) = categories {
                fields.push(format!(r#""category_ids": {}"#, list(&ids)));
            }
            if let Some(ids) = brands {
                fields.push(format!(r#""brand_ids": {}"#, list(&ids)));
            }
            if let Some(ids) = sellers {
                fields.push(format!(r#""seller_ids": {}"#, list(&ids)));
            }
            if let Some(ids) = excluded {
                fields.push(format!(r#""excluded_seller_ids": {}"#, list(&ids)));
            }
            if let Some(cents) = min {
                fields.push(format!(r#""min_price": {}.{:02}"#, cents / 100, cents % 100));
            }
            if let Some(cents) = max {
                fields.push(format!(r#""max_price": {}"#, cents as f64 / 100.0));
            }
            if let Some(stock) = min_stock {
                fields.push(format!(r#""min_stock": {stock}"#));
            }
            if let Some(active) = active {
                fields.push(format!(r#""active": {active}"#));
            }
            format!("{{{}}}", fields.join(", "))
        })
}

/// The first instant of the random logs' clocks: 2026-11-27T00:00:00Z, in ms.
const EPOCH_OF_LOGS_MS: u64 = 1_795_737_600_000;

/// A window bound within the logs' first 30 ms, in one of three zones, at a whole
/// millisecond or a nanosecond off one (bounds compare to the nanosecond).
fn window_bound() -> impl Strategy<Value = String> {
    (
        0..30u64,
        prop_oneof![3 => Just(0u64), 1 => Just(1), 1 => Just(999_999)],
        0..3usize,
    )
        .prop_map(|(ms, ns, zone)| {
            let fraction = match ns {
                0 => format!("{ms:03}"),
                _ => format!("{:09}", ms * 1_000_000 + ns),
            };
            match zone {
                0 => format!(r#""2026-11-27T00:00:00.{fraction}Z""#),
                1 => format!(r#""2026-11-27T03:00:00.{fraction}+03:00""#),
                _ => format!(r#""2026-11-26T18:30:00.{fraction}-05:30""#),
            }
        })
}

/// A campaign value with a window: a start, an end, both, or bad bounds now and then.
fn scheduled_campaign_value() -> impl Strategy<Value = String> {
    (
        campaign_value(),
        prop::option::weighted(0.8, window_bound()),
        prop::option::weighted(0.6, window_bound()),
    )
        .prop_map(|(value, starts_at, ends_at)| {
            let mut bounds = Vec::new();
            if let Some(start) = starts_at {
                bounds.push(format!(r#""starts_at": {start}"#));
            }
            if let Some(end) = ends_at {
                bounds.push(format!(r#""ends_at": {end}"#));
            }
            match (value.as_str(), bounds.is_empty()) {
                (_, true) => value,
                ("{}", false) => format!("{{{}}}", bounds.join(", ")),
                _ => format!("{}, {}}}", value.trim_end_matches('}'), bounds.join(", ")),
            }
        })
}

/// A line timestamp within the logs' first 30 ms (late ones included), or a bad one.
fn line_timestamp() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        4 => Just(None),
        8 => (0..30u64).prop_map(|ms| Some((EPOCH_OF_LOGS_MS + ms).to_string())),
        1 => prop_oneof![Just("-1"), Just("\"5\""), Just("1.5"), Just("null")].prop_map(|bad| Some(bad.to_owned())),
    ]
}

/// Lines of the scheduled workloads: the usual mix, scheduled campaigns and bad windows,
/// each line with a timestamp or without.
fn timed_event_line() -> impl Strategy<Value = String> {
    let line = prop_oneof![
        6 => event_line(),
        3 => (0..3u32, scheduled_campaign_value()).prop_map(|(key, value)| format!(r#"{{"topic": "campaigns", "key": "c{key}", "value": {value}}}"#)),
        1 => (0..3u32, prop_oneof![Just(r#""2026-11-27T00:00:00""#), Just("1795737600000"), Just(r#""2026-11-27""#)])
            .prop_map(|(key, bad)| format!(r#"{{"topic": "campaigns", "key": "c{key}", "value": {{"starts_at": {bad}}}}}"#)),
    ];
    (line, line_timestamp()).prop_map(|(line, timestamp)| match timestamp {
        Some(timestamp) if line.ends_with('}') && line.starts_with('{') && decode_envelope(line.as_bytes()).is_ok() => {
            format!(
                r#"{}, "timestamp": {timestamp}}}"#,
                line.trim_end_matches('}').trim_end()
            )
        }
        _ => line,
    })
}

fn event_line() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0..8u32, product_value()).prop_map(|(key, value)| format!(r#"{{"topic": "products", "key": "p{key}", "value": {value}}}"#)),
        2 => (0..9u32).prop_map(|key| format!(r#"{{"topic": "products", "key": "p{key}", "value": null}}"#)),
        3 => (0..3u32, campaign_value()).prop_map(|(key, value)| format!(r#"{{"topic": "campaigns", "key": "c{key}", "value": {value}}}"#)),
        1 => (0..4u32).prop_map(|key| format!(r#"{{"topic": "campaigns", "key": "c{key}", "value": null}}"#)),
        // Bad updates to keys that exist: they must leave the previous state in place.
        1 => (0..8u32).prop_map(|key| format!(r#"{{"topic": "products", "key": "p{key}", "value": {{"seller_id": 1, "price": 2, "stock": -1}}}}"#)),
        1 => (0..3u32).prop_map(|key| format!(r#"{{"topic": "campaigns", "key": "c{key}", "value": {{"min_stock": "x"}}}}"#)),
        1 => Just("{\"topic\": \"products\", \"key\": ".to_owned()),
        // The category tree: products are in categories 0..4, campaigns name 0..4, and
        // parents reach 0..6, so moves, chains, cycles and parents without a record occur.
        3 => (0..6u32, prop::option::weighted(0.8, 0..6u64)).prop_map(|(key, parent)| {
            let parent = parent.map_or("null".to_owned(), |p| p.to_string());
            format!(r#"{{"topic": "categories", "key": "{key}", "value": {{"parent_id": {parent}}}}}"#)
        }),
        1 => (0..6u32).prop_map(|key| format!(r#"{{"topic": "categories", "key": "{key}", "value": null}}"#)),
        1 => (0..6u32).prop_map(|key| format!(r#"{{"topic": "categories", "key": "{key}", "value": {{"parent_id": -1}}}}"#)),
        1 => Just(r#"{"topic": "categories", "key": "c1", "value": {"parent_id": 2}}"#.to_owned()),
    ]
}

/// The changes and rejected lines the brute force expects, per batch.
fn expected(lines: &[String], batch_size: u64) -> (Vec<PairChange>, Vec<u64>) {
    let mut state = ReferenceState::default();
    let mut pairs = PairState::new();
    let mut changes = Vec::new();
    let mut rejected = Vec::new();
    let mut batches: BTreeMap<Time, Vec<(u64, &String)>> = BTreeMap::new();
    for (n, line) in lines.iter().enumerate() {
        batches.entry(n as u64 / batch_size).or_default().push((n as u64, line));
    }
    for (time, batch) in batches {
        // Applying in line order leaves the last valid record of each key in place; the
        // clock is the greatest timestamp of the accepted lines so far.
        for (n, line) in batch {
            match decode_line(line.as_bytes()) {
                Ok(line) => {
                    state.apply(&line.record.key, &line.record.change);
                    if let Some(timestamp) = line.timestamp {
                        state.advance_clock(timestamp);
                    }
                }
                Err(_) => rejected.push(n),
            }
        }
        let next = state.pairs();
        changes.extend(changes_between(&pairs, &next, time));
        pairs = next;
    }
    (changes, rejected)
}

/// A rebuild: the batches before `live_from` are quiet, and what they end at leaves at
/// `live_from` (with that batch's own records) as changes from nothing; later batches as usual.
fn expected_after_rebuild(lines: &[String], batch_size: u64, live_from: Time) -> Vec<PairChange> {
    let (changes, _rejected) = expected(lines, batch_size);
    let mut before = PairState::new();
    let quiet: Vec<PairChange> = changes
        .iter()
        .filter(|change| change.time <= live_from)
        .cloned()
        .collect();
    apply_changes(&mut before, &quiet).expect("the brute force's own changes apply");
    let mut after: Vec<PairChange> = changes_between(&PairState::new(), &before, live_from);
    after.extend(changes.into_iter().filter(|change| change.time > live_from));
    after
}

/// The lines as an event log, one per line.
fn event_log(lines: &[String]) -> Vec<u8> {
    // No lines make an empty log, not one blank line (which the job rightly rejects).
    lines.iter().flat_map(|line| line.bytes().chain([b'\n'])).collect()
}

fn check_rebuild(lines: &[String], batch_size: u64, workers: usize, live_from: Time) -> Result<(), TestCaseError> {
    let (mut emitted, _letters) = support::run_in_memory_from(event_log(lines), batch_size, workers, Some(live_from));
    let mut expected = expected_after_rebuild(lines, batch_size, live_from);
    emitted.sort();
    expected.sort();
    prop_assert_eq!(emitted, expected);
    Ok(())
}

fn check(lines: &[String], batch_size: u64, workers: usize) -> Result<(), TestCaseError> {
    let (mut emitted, letters) = support::run_in_memory(event_log(lines), batch_size, workers);
    let (expected_changes, expected_rejected) = expected(lines, batch_size);

    // The sink saw times in order, each time's changes sorted by pair.
    let mut sorted = emitted.clone();
    sorted.sort_by(|a, b| (a.time, &a.pair).cmp(&(b.time, &b.pair)));
    prop_assert_eq!(&sorted, &emitted, "changes are not in (time, pair) order");

    let mut state = PairState::new();
    apply_changes(&mut state, &emitted).map_err(TestCaseError::fail)?;

    emitted.sort();
    let mut expected_changes = expected_changes;
    expected_changes.sort();
    prop_assert_eq!(emitted, expected_changes);

    let rejected: Vec<u64> = letters
        .iter()
        .map(|letter| match letter.origin {
            Origin::Line(line) => line,
            Origin::Kafka { .. } | Origin::Document { .. } => u64::MAX,
        })
        .collect();
    prop_assert_eq!(rejected, expected_rejected);
    for letter in &letters {
        let Origin::Line(line) = letter.origin else {
            unreachable!()
        };
        prop_assert_eq!(&letter.raw, lines[line as usize].as_bytes());
        prop_assert!(!letter.reason.is_empty());
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_batch_matches_brute_force_one_event_per_batch(lines in prop::collection::vec(event_line(), 1..60)) {
        check(&lines, 1, 1)?;
        check(&lines, 1, 3)?;
    }

    #[test]
    fn every_batch_matches_brute_force_random_batches(
        lines in prop::collection::vec(event_line(), 1..200),
        batch_size in 1..40u64,
    ) {
        check(&lines, batch_size, 1)?;
        check(&lines, batch_size, 3)?;
    }

    /// Scheduled campaigns: windows in three zones, bounds a nanosecond off a millisecond,
    /// line timestamps (late ones, bad ones), with the tree's records in the mix.
    #[test]
    fn every_batch_matches_brute_force_with_campaign_windows(
        lines in prop::collection::vec(timed_event_line(), 1..200),
        batch_size in 1..20u64,
    ) {
        check(&lines, batch_size, 1)?;
        check(&lines, batch_size, 3)?;
    }

    /// The same without category records: a flat marketplace.
    #[test]
    fn every_batch_matches_brute_force_with_campaign_windows_flat(
        lines in prop::collection::vec(timed_event_line(), 1..200),
        batch_size in 1..20u64,
    ) {
        let flat: Vec<String> = lines.into_iter().filter(|line| !line.contains(r#""topic": "categories""#)).collect();
        check(&flat, batch_size, 1)?;
        check(&flat, batch_size, 2)?;
    }

    /// A quiet rebuild up to a random batch (the state's whole contribution given once, at
    /// its end) and the batches after it, with and without the tree.
    #[test]
    fn a_quiet_rebuild_matches_brute_force(
        lines in prop::collection::vec(event_line(), 1..200),
        batch_size in 1..40u64,
        end in 0..12u64,
    ) {
        check_rebuild(&lines, batch_size, 1, end)?;
        check_rebuild(&lines, batch_size, 3, end)?;
        let flat: Vec<String> = lines.into_iter().filter(|line| !line.contains(r#""topic": "categories""#)).collect();
        check_rebuild(&flat, batch_size, 2, end)?;
    }
}

/// A restart whose sink's held pairs are read only after the log: `live_from` cuts the log,
/// the sink holds exactly the pairs the batches up to it reach, and its held pairs come in
/// 200 ms late. The job writes only the later batches' changes, and the workers feed the held
/// pairs before the rebuild's end, so the reconcile never keeps a rebuilt pair waiting (each
/// is checked as it arrives, not held beside the state).
fn check_late_held_pairs(
    lines: &[String],
    batch_size: u64,
    workers: usize,
    live_from: Time,
) -> Result<(), TestCaseError> {
    use eligibility::sink::contract::{HeldPairs, HeldState};
    let (changes, _rejected) = expected(lines, batch_size);
    let (until, after): (Vec<PairChange>, Vec<PairChange>) =
        changes.into_iter().partition(|change| change.time <= live_from);
    let mut reached = PairState::new();
    apply_changes(&mut reached, &until).expect("the brute force's own changes apply");
    let late = HeldState::read_beside(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        Ok(reached.into_iter().collect::<HeldPairs>())
    });
    let (mut emitted, _letters, report) =
        support::run_in_memory_held(event_log(lines), batch_size, workers, Some(live_from), late);
    let mut expected = after;
    emitted.sort();
    expected.sort();
    prop_assert_eq!(emitted, expected);
    prop_assert_eq!(
        report.rebuilt_pairs_kept_waiting,
        0,
        "rebuilt pairs kept waiting for the held ones"
    );
    Ok(())
}

proptest! {
    // Each case waits 200 ms for its held pairs, twice.
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn held_pairs_read_late_go_in_before_the_rebuilds_end(
        lines in prop::collection::vec(event_line(), 20..200),
        batch_size in 1..20u64,
        live_from in 1..8u64,
    ) {
        check_late_held_pairs(&lines, batch_size, 1, live_from)?;
        check_late_held_pairs(&lines, batch_size, 2, live_from)?;
    }
}
