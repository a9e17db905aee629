//! A real Prometheus server scraping the job on loopback, with the shipped rules (their `for`
//! and ranges divided by 20, thresholds as shipped): every metric name the rules and the
//! dashboard use is in what the job exposes and what the server stored, a search node
//! stopped while records flow fires the output-stalled and unhealthy alerts within their
//! `for`, and they resolve once it is back. The dashboard's rows are drawn from the server's
//! range queries of the run (`ELIGIBILITY_DASHBOARD_PLOTS=docs/monitoring` writes the docs'
//! PNGs). Needs the Kafka broker (`scripts/kafka.sh start`), the built search node
//! (`scripts/elasticsearch.sh build`; the test runs a node of its own) and `prometheus`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::dashboard_plot::{draw_row, PanelPlot};
use support::kafka::{generated_lines, http_get, require_broker, KafkaCase, SinkSetup};
use support::prometheus::{
    dashboard, dashboard_rows, exposition_names, grafana_to_promql, legend, metric_names, read, require_tools,
    rules_path, scaled_rules, variable_metric_names, PrometheusServer, RuleFile, ScrapeTarget, EXTERNAL_METRICS,
};
use support::search_node::PrivateSearchNode;
use support::{free_port, path_str};

/// The shipped durations divided by this: 5m -> 15s, 2m -> 6s.
const DIVISOR: u32 = 20;
const STALLED: &str = "EligibilityOutputStalled";
const UNHEALTHY: &str = "EligibilityComponentUnhealthy";
const NAMESPACE: &str = "eligibility-test";

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The shipped `for` of `alert`, divided as in the test's rule file.
fn scaled_for(alert: &str) -> Duration {
    let rules = RuleFile::shipped();
    let rule = rules
        .alerts()
        .find(|rule| rule.alert.as_deref() == Some(alert))
        .unwrap();
    support::prometheus::parse_duration(rule.for_.as_deref().unwrap()).unwrap() / DIVISOR
}

/// The state of `alert` (`pending`, `firing`) on the server, if it is active; of its
/// instance for `component` when one is named.
fn alert_state(server: &PrometheusServer, alert: &str, component: Option<&str>) -> Option<(String, serde_json::Value)> {
    let states = server.alert_states();
    let active: Vec<&serde_json::Value> = states
        .get(alert)?
        .iter()
        .filter(|a| component.is_none_or(|c| a["labels"]["component"] == c))
        .collect();
    let firing = active.iter().find(|a| a["state"] == "firing");
    let any = firing.or(active.first())?;
    Some((any["state"].as_str().unwrap().to_owned(), (*any).clone()))
}

/// The `component` label of every firing instance of `alert`, with the instance.
fn firing_components(server: &PrometheusServer, alert: &str) -> Vec<(String, serde_json::Value)> {
    let states = server.alert_states();
    let active = states.get(alert).map(Vec::as_slice).unwrap_or_default();
    active
        .iter()
        .filter(|a| a["state"] == "firing")
        .map(|a| {
            (
                a["labels"]["component"].as_str().unwrap_or_default().to_owned(),
                a.clone(),
            )
        })
        .collect()
}

/// Stops the feeding thread when the test leaves its scope, also by a failed assertion.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn wait_for(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_real_prometheus_sees_every_metric_and_fires_the_stall_alerts_when_the_search_node_stops() {
    require_tools();
    require_broker();
    let node = PrivateSearchNode::start();
    let case = KafkaCase::new("prometheus", false);
    let index = format!("{}-pairs", case.products_topic.trim_end_matches("-products"));
    let metrics_port = free_port();
    case.write_sinks_config(
        &case.config,
        SinkSetup {
            elasticsearch_index: Some(&index),
            metrics_port: Some(metrics_port),
            ..SinkSetup::default()
        },
    );
    let config = read(&case.config);
    let shared = format!("{:?}", support::search::url());
    assert!(config.contains(&shared), "{config}");
    std::fs::write(&case.config, config.replace(&shared, &format!("{:?}", node.url()))).unwrap();

    let lines = generated_lines(case.dir.path(), 2_000, 60_000, 71);
    let (first, updates) = lines.split_at(3_000);
    case.produce(first, 3);
    let mut job = case.spawn(&case.config, &[]);
    let labels = BTreeMap::from([
        ("namespace".to_owned(), NAMESPACE.to_owned()),
        ("pod".to_owned(), "eligibility-0".to_owned()),
    ]);
    let target = ScrapeTarget {
        address: format!("127.0.0.1:{metrics_port}"),
        labels,
    };
    let server = PrometheusServer::start(&[target], &scaled_rules(&read(&rules_path()), DIVISOR), "1s");
    let began = now();

    let stop_feeding = AtomicBool::new(false);
    let outage = std::thread::scope(|scope| {
        // Records flow all along: a chunk of updates every ~second.
        scope.spawn(|| {
            for chunk in updates.chunks(120) {
                if stop_feeding.load(Ordering::Relaxed) {
                    break;
                }
                case.produce(chunk, 3);
                std::thread::sleep(Duration::from_millis(600));
            }
        });
        let _stop = StopOnDrop(&stop_feeding);

        wait_for(
            "the job writes and every component is healthy",
            Duration::from_secs(120),
            || {
                let moved = server.query("changes(eligibility_output_frontier[15s]) > 0");
                let healthy = server.query("min(eligibility_component_healthy)");
                !moved.is_empty() && healthy.first().is_some_and(|(_, value)| *value == 1.0)
            },
        );
        // Healthy, with records flowing: neither alert fires. (Pending is tolerated: with
        // every window divided by 20, a loaded 2-core CI machine can hold one batch for
        // the stalled alert's 21 s window while the dev build catches up; firing needs
        // that and its `for` besides.)
        let calm = Instant::now() + Duration::from_secs(25);
        while Instant::now() < calm {
            for alert in [STALLED, UNHEALTHY] {
                let state = alert_state(&server, alert, None).map(|(state, _)| state);
                assert_ne!(state.as_deref(), Some("firing"), "{alert} while the node is up");
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        assert!(
            !server.query("rate(eligibility_records_read_total[15s]) > 0").is_empty(),
            "records flow"
        );

        let stopped_at = Instant::now();
        let outage_began = now();
        node.stop();
        let mut fired: BTreeMap<&str, Duration> = BTreeMap::new();
        while fired.len() < 2 {
            assert!(
                stopped_at.elapsed() < Duration::from_secs(120),
                "not both alerts fired within 120 s of the stop: {fired:?}; alerts: {}",
                server.api("/api/v1/alerts")
            );
            // The progress store lives on the same node, so its component may fire too;
            // the sink's must, and nothing else may.
            for (component, details) in firing_components(&server, UNHEALTHY) {
                assert!(["elasticsearch", "progress"].contains(&component.as_str()), "{details}");
            }
            for alert in [STALLED, UNHEALTHY] {
                let component = (alert == UNHEALTHY).then_some("elasticsearch");
                if let Some((state, details)) = alert_state(&server, alert, component) {
                    if state == "firing" && !fired.contains_key(alert) {
                        fired.insert(alert, stopped_at.elapsed());
                        assert_eq!(details["labels"]["namespace"], NAMESPACE, "{details}");
                        if alert == UNHEALTHY {
                            assert_eq!(details["labels"]["component"], "elasticsearch", "{details}");
                            assert_eq!(details["labels"]["pod"], "eligibility-0", "{details}");
                        } else {
                            let description = details["annotations"]["description"].as_str().unwrap();
                            assert!(description.contains("records wait"), "{description}");
                        }
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        // Stalled: the frontier's last move leaves the (scaled) 5-minute window, then its
        // `for` runs. Unhealthy: the sink reports the failing requests, then its `for` runs.
        // Never before the `for`, and within it plus the window and a few scrapes.
        let window = Duration::from_secs(5 * 60) / DIVISOR;
        let slack = Duration::from_secs(15);
        for (alert, before) in [(STALLED, window), (UNHEALTHY, Duration::ZERO)] {
            let at = fired[alert];
            let r#for = scaled_for(alert);
            assert!(
                at >= r#for,
                "{alert} fired {at:?} after the stop, before its for of {:?}",
                r#for
            );
            assert!(
                at <= before + r#for + slack,
                "{alert} fired {at:?} after the stop, later than {:?} + {:?} + {slack:?}",
                before,
                r#for
            );
        }
        eprintln!("alerts fired after the stop: {fired:?}");

        let restarted_at = Instant::now();
        node.restart();
        let outage_ended = now();
        wait_for(
            "both alerts resolve once the node is back",
            Duration::from_secs(90),
            || {
                [STALLED, UNHEALTHY]
                    .iter()
                    .all(|alert| alert_state(&server, alert, None).is_none())
            },
        );
        let resumed = Instant::now();
        std::thread::sleep(Duration::from_secs(20));
        stop_feeding.store(true, Ordering::Relaxed);
        eprintln!("resolved {:?} after the restart", resumed - restarted_at);
        wait_for("the backlog is written", Duration::from_secs(90), || {
            server
                .query("sum(eligibility_records_unacknowledged)")
                .first()
                .is_some_and(|(_, value)| *value == 0.0)
        });
        std::thread::sleep(Duration::from_secs(5));
        (outage_began - began, outage_ended - began)
    });
    let ended = now();

    // Every name the rules and the dashboard use: in what the job exposes, and stored by the
    // server from its scrapes (recorded series included).
    let rules = RuleFile::shipped();
    let dashboard = dashboard();
    let rows = dashboard_rows(&dashboard);
    let mut used: BTreeSet<String> = rules.rules().flat_map(|rule| metric_names(&rule.expr)).collect();
    used.extend(
        rows.iter()
            .flat_map(|row| &row.panels)
            .flat_map(|panel| &panel.targets)
            .flat_map(|target| metric_names(&target.expr)),
    );
    used.extend(variable_metric_names(&dashboard));
    used.retain(|name| !EXTERNAL_METRICS.iter().any(|(external, _)| external == name));
    let (_, exposition) = http_get(metrics_port, "/metrics").expect("the job's /metrics");
    let exposed = exposition_names(&exposition);
    let recorded = rules.recorded_names();
    let stored = server.stored_names();
    for name in &used {
        assert!(
            exposed.contains(name) || recorded.contains(name),
            "{name} is not in the job's /metrics"
        );
        assert!(stored.contains(name), "Prometheus stored no {name}");
    }
    for name in &recorded {
        assert!(stored.contains(name), "the rule recording {name} stored nothing");
    }
    job.kill();

    // The dashboard, row by row, from the server's range queries of the run.
    let dir = match std::env::var("ELIGIBILITY_DASHBOARD_PLOTS") {
        Ok(dir) => support::prometheus::root().join(dir),
        Err(_) => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-plots"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    let topic_prefix = case.products_topic.trim_end_matches("products").to_owned();
    for row in &rows {
        let panels: Vec<PanelPlot> = row
            .panels
            .iter()
            .map(|panel| {
                let lines: Vec<support::dashboard_plot::Line> = panel
                    .targets
                    .iter()
                    .flat_map(|target| {
                        let expr = grafana_to_promql(&target.expr, "10s");
                        server
                            .query_range(&expr, began, ended, 1.0)
                            .into_iter()
                            .map(|(labels, points)| {
                                let points = points.into_iter().map(|(t, v)| (t - began, v)).collect();
                                // The case's unique topic prefix says nothing on a plot.
                                let name = legend(&target.legend, &labels).replace(&topic_prefix, "");
                                (name, points)
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect();
                let finite = lines
                    .iter()
                    .flat_map(|(_, points)| points)
                    .filter(|(_, v)| v.is_finite())
                    .count();
                assert!(finite > 10, "panel {:?} shows nothing of the run", panel.title);
                PanelPlot {
                    title: panel.title.clone(),
                    unit: panel.unit.clone(),
                    lines,
                }
            })
            .collect();
        let file = dir.join(format!("{}.png", row.title.to_lowercase().replace(' ', "-")));
        draw_row(&file, &row.title, &panels, outage).unwrap();
        assert!(
            std::fs::metadata(&file).unwrap().len() > 10_000,
            "{} is nearly empty",
            file.display()
        );
    }
    eprintln!("dashboard rows drawn in {}", path_str(&dir));
}
