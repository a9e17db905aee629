//! Campaign windows: a campaign has pairs only while the job's clock is inside its window.
//!
//! ```text
//!  campaigns (broadcast) --+
//!                          +--> CampaignWindows --> campaigns as the matcher sees them
//!  clock (broadcast) ------+        (closed: a tombstone; open: the criteria, window cleared)
//! ```
//!
//! Every time `t` has an instant `clock(t)` (SPEC.md, "Campaign windows"): the greatest
//! record timestamp of times `0..=t` ([`JobClock::Records`]), or the wall clock the time
//! stands for ([`JobClock::Wall`]). Opening and closing are campaign changes at the first
//! time whose clock reaches a bound, so downstream they cost what an edit of `active`
//! costs: that campaign's pairs, no other campaign's. The bounds wait in a heap by
//! instant, so a time looks at the campaigns whose bound it reached and at no other.
//!
//! Under the wall clock, no record need arrive for a bound to be reached: the operator
//! holds a capability at the time of its next bound, and emits there once the sources'
//! frontiers pass it (they follow the wall clock while idle). The time exists because the
//! operator holds it; an idle job does nothing more than it did before. A frontier that
//! empties (the job stopping) ends the wait without emitting: the clock never got there.
//!
//! Every worker sees every campaign and the whole clock, and emits the same changes; what
//! follows expects campaigns broadcast, as they are.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Capability, Operator};
use timely::dataflow::Stream;

use crate::hashing::FastMap;
use crate::instant::EpochNanos;
use crate::model::{Campaign, CampaignId, Time, Window};
use crate::operators::upsert::{LatestUpserts, Upsert};

/// The longest a time waits for the wall clock to reach its instant: a batching step is
/// at most a few hundred milliseconds.
const MAX_EARLY: std::time::Duration = std::time::Duration::from_secs(1);

/// Where the job's clock comes from.
pub enum JobClock<'scope> {
    /// The records' timestamps (ms since the epoch) read at each time, from any worker:
    /// the file mode, and Kafka's `clock = "records"`. Before the first, the clock is at
    /// the beginning of time.
    Records(Stream<'scope, Time, Vec<u64>>),
    /// The wall clock: a time at or above `base` stands for `time - base` ms since the
    /// epoch; the times below it (a rebuild's chunks) read `before_base` ms. `finals`:
    /// each worker's input frontier as it stops (sent once, before its inputs close), so
    /// that every worker decides alike which waiting bound the job reached before stopping.
    Wall {
        base: Time,
        before_base: u64,
        finals: Stream<'scope, Time, Vec<Time>>,
    },
}

impl<'scope> JobClock<'scope> {
    /// A clock that stays at the beginning of time: for inputs that carry no timestamps,
    /// where a campaign with a `starts_at` never opens and every other one stays open.
    pub fn stopped(scope: timely::dataflow::Scope<'scope, Time>) -> Self {
        JobClock::Records(timely::dataflow::operators::generic::operator::empty(scope))
    }
}

/// What the clock follows, as a source states it: [`JobClock`] without the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockRule {
    Records,
    Wall { base: Time, before_base: u64 },
}

impl ClockRule {
    /// The instant the clock reads at `time`, given what the records said up to it.
    fn reading(&self, time: Time, records: EpochNanos) -> EpochNanos {
        match self {
            ClockRule::Records => records,
            ClockRule::Wall { base, before_base } => {
                EpochNanos::from_millis(time.checked_sub(*base).unwrap_or(*before_base))
            }
        }
    }

    /// How long until the wall clock reaches the instant `time` stands for, if it has not
    /// yet: a live time's frontier may pass before its instant (the sources' frontiers
    /// step ahead on the batching grid), and a window must not open before its bound.
    /// Returns the wait and the wall clock now. A wait longer than [`MAX_EARLY`] is not
    /// one of the grid's: this host's clock is behind the one that formed the time (a step
    /// back, skew between processes), and output does not stall on it.
    fn early_by(&self, time: Time) -> Option<(std::time::Duration, EpochNanos)> {
        let ClockRule::Wall { base, .. } = *self else {
            return None;
        };
        let due = EpochNanos::from_millis(time.checked_sub(base)?);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos() as i128);
        let early = u64::try_from(due.0 - now).ok().filter(|nanos| *nanos > 0)?;
        let early = std::time::Duration::from_nanos(early);
        (early <= MAX_EARLY).then_some((early, EpochNanos(now)))
    }

    /// The first time whose clock reaches `bound`, if the clock gets there without a
    /// record (the wall clock).
    fn time_reaching(&self, bound: EpochNanos) -> Option<Time> {
        match self {
            ClockRule::Records => None,
            ClockRule::Wall { base, .. } => {
                let millis = u64::try_from(bound.ceil_millis().max(0)).unwrap_or(u64::MAX);
                Some(base.saturating_add(millis))
            }
        }
    }
}

/// Builds the operator; `campaigns` must reach every worker whole (broadcast).
pub fn campaign_windows<'scope>(
    campaigns: Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>>,
    clock: JobClock<'scope>,
) -> Stream<'scope, Time, Vec<Upsert<CampaignId, Campaign>>> {
    let scope = campaigns.scope();
    // Records: timestamps (ms); wall: the workers' final frontiers. Both reach every worker.
    let (second, clock) = match clock {
        JobClock::Records(readings) => (readings.broadcast(), ClockRule::Records),
        JobClock::Wall {
            base,
            before_base,
            finals,
        } => (finals.broadcast(), ClockRule::Wall { base, before_base }),
    };
    campaigns.binary_frontier::<_, CapacityContainerBuilder<Vec<Upsert<CampaignId, Campaign>>>, _, _, _, _>(
        second,
        Pipeline,
        Pipeline,
        "CampaignWindows",
        move |_capability, info| {
            let activator = scope.activator_for(info.address);
            let mut pending: BTreeMap<Time, Pending> = BTreeMap::new();
            let mut schedule = Schedule::default();
            // Held at the time of the next bound the wall clock will reach.
            let mut timer: Option<Capability<Time>> = None;
            // The wall clock's stop: the least final frontier of the workers.
            let mut finals: Option<Time> = None;
            move |(campaigns_in, campaigns_frontier), (second_in, second_frontier), output| {
                campaigns_in.for_each(|capability, data| {
                    let time = *capability.least().expect("a totally ordered stamp has a least time");
                    let entry = pending
                        .entry(time)
                        .or_insert_with(|| Pending::new(capability.retain_least(0).expect("a least time")));
                    data.drain(..).for_each(|update| entry.campaigns.offer(update));
                });
                second_in.for_each(|capability, data| match clock {
                    ClockRule::Records => {
                        let time = *capability.least().expect("a totally ordered stamp has a least time");
                        let entry = pending
                            .entry(time)
                            .or_insert_with(|| Pending::new(capability.retain_least(0).expect("a least time")));
                        entry.latest_reading = data.drain(..).max().max(entry.latest_reading);
                    }
                    ClockRule::Wall { .. } => {
                        finals = data.drain(..).chain(finals).min();
                    }
                });
                let passed = |time: &Time| !campaigns_frontier.less_equal(time) && !second_frontier.less_equal(time);
                let stopped = campaigns_frontier.is_empty() && second_frontier.is_empty();
                // A timer set below may already be passed (the frontier moved on while
                // its time waited): the loop takes it at once rather than at the next move.
                loop {
                    if let Some(held) = timer.take() {
                        let time = *held.time();
                        if stopped {
                            // Reached if every worker's input had passed it when it stopped
                            // (the same on every worker); else never: nothing to emit.
                            if finals.is_some_and(|last| time < last) {
                                pending.entry(time).or_insert_with(|| Pending::new(held));
                            }
                        } else if passed(&time) {
                            pending.entry(time).or_insert_with(|| Pending::new(held));
                        } else {
                            timer = Some(held);
                        }
                    }
                    let Some(entry) = pending.first_entry() else { break };
                    let time = *entry.key();
                    if !passed(&time) {
                        break;
                    }
                    // A time that opens or closes something waits for its instant: the
                    // frontier can pass it up to a batching step early.
                    if let Some((early, now)) = clock.early_by(time) {
                        let reading = clock.reading(time, schedule.clock);
                        if schedule.changes_at(now, reading, &entry.get().campaigns) {
                            activator.activate_after(early);
                            break;
                        }
                    }
                    let Pending {
                        capability,
                        campaigns,
                        latest_reading,
                    } = entry.remove();
                    let records = latest_reading.map_or(schedule.clock, EpochNanos::from_millis);
                    let changes = schedule.advance(clock.reading(time, records), campaigns);
                    output.session(&capability).give_iterator(changes.into_iter());
                    // The next bound: its time, if the clock gets there on its own.
                    let next = schedule.next_bound().and_then(|bound| clock.time_reaching(bound));
                    timer = next.map(|next| capability.delayed(&next.max(time)));
                }
            }
        },
    )
}

/// What one time brought, waiting for both inputs to pass it.
struct Pending {
    capability: Capability<Time>,
    campaigns: LatestUpserts<CampaignId, Campaign>,
    /// The greatest record timestamp (ms) read at this time, by any worker.
    latest_reading: Option<u64>,
}

impl Pending {
    fn new(capability: Capability<Time>) -> Self {
        Pending {
            capability,
            campaigns: LatestUpserts::default(),
            latest_reading: None,
        }
    }
}

/// Every campaign's latest version and whether it is open, and the bounds to watch.
struct Schedule {
    /// Never goes back.
    clock: EpochNanos,
    campaigns: FastMap<CampaignId, Scheduled>,
    /// (bound, campaign): a bound not yet reached. An entry is stale once its campaign
    /// watches another bound (edited, deleted, or the bound passed by an edit).
    bounds: BinaryHeap<Reverse<(EpochNanos, CampaignId)>>,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            clock: EpochNanos::BEGINNING,
            campaigns: FastMap::default(),
            bounds: BinaryHeap::new(),
        }
    }
}

struct Scheduled {
    campaign: Campaign,
    /// Whether what the matcher holds is the campaign (open) or nothing (closed).
    open: bool,
    /// The bound in `bounds` that stands for this campaign.
    watching: Option<EpochNanos>,
}

impl Schedule {
    /// Moves the clock to `reading` (never back) with a time's campaign records, and
    /// returns the changes the matcher sees: each record, as a tombstone while its
    /// campaign is closed; and each campaign whose bound the clock reached, opened or closed.
    fn advance(
        &mut self,
        reading: EpochNanos,
        mut records: LatestUpserts<CampaignId, Campaign>,
    ) -> Vec<Upsert<CampaignId, Campaign>> {
        self.clock = self.clock.max(reading);
        let clock = self.clock;
        let mut changes = Vec::new();
        for (id, value) in records.drain_latest() {
            let seen = match value {
                None => {
                    self.campaigns.remove(&id);
                    None
                }
                Some(campaign) => {
                    let open = campaign.window.is_open_at(clock);
                    let seen = open.then(|| criteria(&campaign));
                    if campaign.window.is_unbounded() {
                        // Always open while it exists: nothing to watch or keep.
                        self.campaigns.remove(&id);
                    } else {
                        let watching = campaign.window.next_bound_after(clock);
                        let watched = self.campaigns.get(&id).and_then(|scheduled| scheduled.watching);
                        // An edit that keeps the bound keeps its entry, still current.
                        if let Some(bound) = watching.filter(|_| watching != watched) {
                            self.bounds.push(Reverse((bound, id.clone())));
                        }
                        self.campaigns.insert(
                            id.clone(),
                            Scheduled {
                                campaign,
                                open,
                                watching,
                            },
                        );
                    }
                    seen
                }
            };
            changes.push(Upsert {
                key: id,
                seq: 0,
                value: seen,
            });
        }
        self.compact();
        while let Some(Reverse((bound, _))) = self.bounds.peek() {
            if *bound > clock {
                break;
            }
            let Reverse((bound, id)) = self.bounds.pop().expect("peeked");
            let Some(scheduled) = self.campaigns.get_mut(&id) else {
                continue;
            };
            if scheduled.watching != Some(bound) {
                continue;
            }
            scheduled.watching = scheduled.campaign.window.next_bound_after(clock);
            if let Some(next) = scheduled.watching {
                self.bounds.push(Reverse((next, id.clone())));
            }
            let open = scheduled.campaign.window.is_open_at(clock);
            if open != scheduled.open {
                scheduled.open = open;
                let value = open.then(|| criteria(&scheduled.campaign));
                changes.push(Upsert { key: id, seq: 0, value });
            }
        }
        changes
    }

    /// Whether a time read at `reading`, early (the wall clock is at `now`), would open or
    /// close a campaign before its instant: a bound reached by the reading, or a record
    /// with a bound between the two.
    fn changes_at(
        &mut self,
        now: EpochNanos,
        reading: EpochNanos,
        records: &LatestUpserts<CampaignId, Campaign>,
    ) -> bool {
        let early = |bound: Option<EpochNanos>| bound.is_some_and(|bound| now < bound && bound <= reading);
        self.next_bound().is_some_and(|bound| bound <= reading)
            || records.any_value(|value| {
                value.is_some_and(|campaign| early(campaign.window.starts_at) || early(campaign.window.ends_at))
            })
    }

    /// Rebuilds the heap from the bounds watched once stale entries (moved bounds, deleted
    /// campaigns, far from the top) outnumber them: its size follows the campaigns, not
    /// the edits.
    fn compact(&mut self) {
        if self.bounds.len() <= 2 * self.campaigns.len() + 1024 {
            return;
        }
        self.bounds = self
            .campaigns
            .iter()
            .filter_map(|(id, scheduled)| scheduled.watching.map(|bound| Reverse((bound, id.clone()))))
            .collect();
    }

    /// The earliest bound some campaign watches; stale entries on top are dropped.
    fn next_bound(&mut self) -> Option<EpochNanos> {
        while let Some(Reverse((bound, id))) = self.bounds.peek() {
            let current = self
                .campaigns
                .get(id)
                .is_some_and(|scheduled| scheduled.watching == Some(*bound));
            if current {
                return Some(*bound);
            }
            self.bounds.pop();
        }
        None
    }
}

/// A campaign as the matcher sees it: its criteria, without the window (already applied),
/// so that a window edit of an open campaign changes nothing downstream.
fn criteria(campaign: &Campaign) -> Campaign {
    Campaign {
        window: Window::default(),
        ..campaign.clone()
    }
}

#[cfg(test)]
mod tests {
    use timely::dataflow::operators::{Capture, Input, Probe};
    use timely::dataflow::ProbeHandle;

    use super::*;
    use crate::model::IdSet;

    const MS: i128 = 1_000_000;

    fn scheduled(starts_ms: Option<i128>, ends_ms: Option<i128>) -> Campaign {
        Campaign {
            brand_ids: IdSet::new(vec![7]),
            window: Window {
                starts_at: starts_ms.map(|ms| EpochNanos(ms * MS)),
                ends_at: ends_ms.map(|ms| EpochNanos(ms * MS)),
            },
            ..Campaign::unrestricted()
        }
    }

    fn records(updates: Vec<(&str, Option<Campaign>)>) -> LatestUpserts<CampaignId, Campaign> {
        let mut latest = LatestUpserts::default();
        for (seq, (key, value)) in updates.into_iter().enumerate() {
            latest.offer(Upsert {
                key: key.to_owned(),
                seq: seq as u64,
                value,
            });
        }
        latest
    }

    /// (campaign, open) for each change, sorted.
    fn seen(changes: Vec<Upsert<CampaignId, Campaign>>) -> Vec<(String, bool)> {
        let mut seen: Vec<(String, bool)> = changes
            .into_iter()
            .map(|change| {
                if let Some(campaign) = &change.value {
                    assert_eq!(campaign.window, Window::default(), "the matcher sees criteria only");
                }
                (change.key, change.value.is_some())
            })
            .collect();
        seen.sort();
        seen
    }

    fn at(ms: i128) -> EpochNanos {
        EpochNanos(ms * MS)
    }

    #[test]
    fn a_campaign_opens_and_closes_when_the_clock_reaches_its_bounds_and_only_then() {
        let mut schedule = Schedule::default();
        let first = records(vec![
            ("sale", Some(scheduled(Some(100), Some(200)))),
            ("always", Some(scheduled(None, None))),
            ("until", Some(scheduled(None, Some(150)))),
        ]);
        // Before any reading the clock is at the beginning of time.
        let changes = schedule.advance(EpochNanos::BEGINNING, first);
        assert_eq!(
            seen(changes),
            vec![("always".into(), true), ("sale".into(), false), ("until".into(), true)]
        );
        assert_eq!(schedule.next_bound(), Some(at(100)));
        assert!(seen(schedule.advance(at(99), records(vec![]))).is_empty());
        // A bound is reached when the clock equals it.
        assert_eq!(
            seen(schedule.advance(at(100), records(vec![]))),
            vec![("sale".into(), true)]
        );
        assert_eq!(
            seen(schedule.advance(at(150), records(vec![]))),
            vec![("until".into(), false)]
        );
        assert_eq!(schedule.next_bound(), Some(at(200)));
        // The clock never goes back: an earlier reading changes nothing.
        assert!(seen(schedule.advance(at(10), records(vec![]))).is_empty());
        assert_eq!(
            seen(schedule.advance(at(200), records(vec![]))),
            vec![("sale".into(), false)]
        );
        assert_eq!(schedule.next_bound(), None);
    }

    #[test]
    fn a_clock_that_jumps_over_a_whole_window_changes_nothing() {
        let mut schedule = Schedule::default();
        schedule.advance(at(0), records(vec![("flash", Some(scheduled(Some(10), Some(20))))]));
        assert!(seen(schedule.advance(at(500), records(vec![]))).is_empty());
        // An end at or before the start is never open.
        let backwards = records(vec![("backwards", Some(scheduled(Some(600), Some(600))))]);
        assert_eq!(
            seen(schedule.advance(at(500), backwards)),
            vec![("backwards".into(), false)]
        );
        assert!(seen(schedule.advance(at(600), records(vec![]))).is_empty());
    }

    #[test]
    fn a_window_edit_replaces_the_bounds_watched() {
        let mut schedule = Schedule::default();
        schedule.advance(at(0), records(vec![("sale", Some(scheduled(Some(100), None)))]));
        // Moved later: the old start is stale and opens nothing.
        let moved = records(vec![("sale", Some(scheduled(Some(300), None)))]);
        assert_eq!(seen(schedule.advance(at(50), moved)), vec![("sale".into(), false)]);
        assert!(seen(schedule.advance(at(100), records(vec![]))).is_empty());
        assert_eq!(schedule.next_bound(), Some(at(300)));
        // An edit at the time a bound is reached is what counts, once.
        let edited = records(vec![("sale", Some(scheduled(Some(300), Some(400))))]);
        assert_eq!(seen(schedule.advance(at(300), edited)), vec![("sale".into(), true)]);
        // A tombstone stops the watch.
        assert_eq!(
            seen(schedule.advance(at(350), records(vec![("sale", None)]))),
            vec![("sale".into(), false)]
        );
        assert_eq!(schedule.next_bound(), None);
        assert!(seen(schedule.advance(at(400), records(vec![]))).is_empty());
    }

    #[test]
    fn the_bounds_heap_follows_the_campaigns_not_the_edits() {
        let mut schedule = Schedule::default();
        for edit in 0..5_000 {
            // An edit that keeps its bound keeps its one entry…
            schedule.advance(at(0), records(vec![("kept", Some(scheduled(Some(1_000_000), None)))]));
            // …one that moves it leaves a stale entry, compacted away in time.
            let moved = scheduled(Some(2_000_000 + edit), None);
            schedule.advance(at(0), records(vec![("moved", Some(moved))]));
        }
        assert!(schedule.bounds.len() <= 2 * 2 + 1024 + 2, "{}", schedule.bounds.len());
        // A campaign without a window is always open: nothing is kept for it.
        schedule.advance(at(0), records(vec![("plain", Some(scheduled(None, None)))]));
        assert!(!schedule.campaigns.contains_key("plain"));
        assert_eq!(schedule.next_bound(), Some(at(1_000_000)));
        assert_eq!(
            seen(schedule.advance(at(1_000_000), records(vec![]))),
            vec![("kept".into(), true)]
        );
        assert!(seen(schedule.advance(at(2_004_998), records(vec![]))).is_empty());
        assert_eq!(
            seen(schedule.advance(at(2_004_999), records(vec![]))),
            vec![("moved".into(), true)]
        );
    }

    #[test]
    fn a_time_waits_for_its_instant_a_second_at_most() {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let wall = ClockRule::Wall {
            base: 1_000,
            before_base: 0,
        };
        let (early, _) = wall.early_by(1_000 + now_ms + 500).expect("half a second ahead waits");
        assert!(
            early > std::time::Duration::from_millis(400) && early <= MAX_EARLY,
            "{early:?}"
        );
        assert_eq!(wall.early_by(1_000 + now_ms - 10), None, "a passed instant");
        assert_eq!(wall.early_by(1_000 + now_ms + 60_000), None, "a clock a minute behind");
        assert_eq!(wall.early_by(999), None, "a rebuild time");
        assert_eq!(ClockRule::Records.early_by(1_000 + now_ms + 500), None);
    }

    #[test]
    fn bounds_compare_to_the_nanosecond() {
        let mut schedule = Schedule::default();
        let campaign = Campaign {
            window: Window {
                starts_at: Some(EpochNanos(100 * MS + 1)),
                ends_at: None,
            },
            ..Campaign::unrestricted()
        };
        schedule.advance(at(0), records(vec![("c", Some(campaign))]));
        assert!(seen(schedule.advance(at(100), records(vec![]))).is_empty());
        assert_eq!(
            seen(schedule.advance(at(101), records(vec![]))),
            vec![("c".into(), true)]
        );
    }

    /// Runs the operator under the wall clock (base 1,000): the inputs advance through
    /// `frontiers` without a record after the first time, and stop; returns each
    /// (time, campaign, open) emitted.
    fn under_the_wall_clock(campaign: Campaign, frontiers: &[Time]) -> Vec<(Time, String, bool)> {
        under_the_wall_clock_from(campaign, 50, frontiers, false)
    }

    /// As [`under_the_wall_clock`], the rebuild reading `before_base` ms.
    fn under_the_wall_clock_from(
        campaign: Campaign,
        before_base: u64,
        frontiers: &[Time],
        jump_at_stop: bool,
    ) -> Vec<(Time, String, bool)> {
        let (sink, captured) = std::sync::mpsc::channel();
        let frontiers = frontiers.to_vec();
        timely::execute_directly(move |worker| {
            let probe = ProbeHandle::new();
            let (mut input, mut finals) = worker.dataflow::<Time, _, _>(|scope| {
                let (input, campaigns) = scope.new_input::<Vec<Upsert<CampaignId, Campaign>>>();
                let (finals_in, finals) = scope.new_input::<Vec<Time>>();
                let clock = JobClock::Wall {
                    base: 1_000,
                    before_base,
                    finals,
                };
                campaign_windows(campaigns, clock)
                    .probe_with(&probe)
                    .capture_into(sink.clone());
                (input, finals_in)
            });
            input.send(Upsert {
                key: "sale".to_owned(),
                seq: 0,
                value: Some(campaign),
            });
            let last = frontiers.len().saturating_sub(1);
            for (n, frontier) in frontiers.into_iter().enumerate() {
                input.advance_to(frontier);
                finals.advance_to(frontier);
                // Jumping: the last frontier and the stop reach the operator together.
                if !(jump_at_stop && n == last) {
                    worker.step_while(|| probe.less_than(input.time()));
                }
            }
            // As the job's worker stops: its last frontier, then the inputs close.
            finals.send(*input.time());
        });
        let mut emitted = Vec::new();
        for event in captured.try_iter() {
            if let timely::dataflow::operators::capture::Event::Messages(time, data) = event {
                for change in data {
                    emitted.push((
                        *time.least().expect("a time"),
                        change.key.clone(),
                        change.value.is_some(),
                    ));
                }
            }
        }
        emitted.sort();
        emitted
    }

    #[test]
    fn under_the_wall_clock_a_bound_forms_its_own_time_with_no_record() {
        // Sent at a rebuild time (clock 50 ms); opens at 120 ms, closes at 130.5 ms.
        let campaign = Campaign {
            window: Window {
                starts_at: Some(at(120)),
                ends_at: Some(EpochNanos(130 * MS + MS / 2)),
            },
            ..Campaign::unrestricted()
        };
        let emitted = under_the_wall_clock(campaign.clone(), &[1, 1_000, 1_100, 1_125, 1_200, 5_000]);
        assert_eq!(
            emitted,
            vec![
                (0, "sale".into(), false),
                (1_120, "sale".into(), true),
                (1_131, "sale".into(), false)
            ]
        );
        // A frontier that jumps past both bounds at once still forms both times, in order.
        let jumped = under_the_wall_clock(campaign.clone(), &[1, 5_000]);
        assert_eq!(jumped, emitted);
        // Inputs that stop past the start and before the end: the opening only.
        let stopped_open = under_the_wall_clock(campaign.clone(), &[1, 1_125]);
        assert_eq!(stopped_open, emitted[..2].to_vec());
        // A worker that sees its frontier pass both bounds only as the job stops still
        // forms both times: the workers' final frontiers decide, alike on every worker.
        let jumped_at_stop = under_the_wall_clock_from(campaign.clone(), 50, &[1, 5_000], true);
        assert_eq!(jumped_at_stop, emitted);
        // Inputs that stop before a bound end the wait: nothing is emitted for it.
        let stopped = under_the_wall_clock(campaign, &[1, 1_000, 1_100]);
        assert_eq!(stopped, vec![(0, "sale".into(), false)]);
    }

    #[test]
    fn under_the_wall_clock_a_window_never_opens_before_its_instant() {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i128;
        let starts_ms = now_ms + 300;
        let campaign = Campaign {
            window: Window {
                starts_at: Some(at(starts_ms)),
                ends_at: None,
            },
            ..Campaign::unrestricted()
        };
        // The frontier runs 10 s ahead of the wall clock at once, as a grid step does on
        // a smaller scale: the opening still waits for its instant.
        let began = std::time::Instant::now();
        let emitted = under_the_wall_clock_from(campaign, now_ms as u64, &[1, 1_000 + now_ms as u64 + 10_000], false);
        let opened_after = began.elapsed();
        assert_eq!(
            emitted,
            vec![
                (0, "sale".into(), false),
                (1_000 + starts_ms as u64, "sale".into(), true)
            ]
        );
        assert!(
            opened_after >= std::time::Duration::from_millis(290),
            "{opened_after:?}"
        );
    }
}
