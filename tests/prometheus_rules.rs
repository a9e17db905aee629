//! The shipped monitoring, checked by the real tools without any service: the alerts'
//! unit tests (`promtool test rules`), the rules and the dashboard parsed by promtool and
//! loaded by a real Prometheus, every metric they name exposed by the job, every alert's
//! runbook a section of docs/operations.md, and the PrometheusRule equal to the rule file.
//! Needs `promtool` and `prometheus` (Debian package `prometheus`).

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use support::prometheus::{
    dashboard, dashboard_rows, exposed_metric_names, grafana_to_promql, metric_names, prometheus_rule_path,
    promtool_check_exprs, read, require_tools, root, rules_path, rules_test_path, scale_expr, scaled_rules,
    variable_metric_names, PrometheusServer, RuleFile, EXTERNAL_METRICS,
};

#[test]
fn promtool_unit_tests_of_the_alerts_pass() {
    require_tools();
    let output = Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg(rules_test_path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool test rules failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn every_alert_is_unit_tested_both_firing_and_not() {
    let tests: serde_yaml::Value = serde_yaml::from_str(&read(&rules_test_path())).unwrap();
    let cases: Vec<&serde_yaml::Value> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|test| test["alert_rule_test"].as_sequence().into_iter().flatten())
        .collect();
    for alert in RuleFile::shipped().alerts() {
        let name = alert.alert.as_deref().unwrap();
        let of_alert: Vec<_> = cases
            .iter()
            .filter(|case| case["alertname"].as_str() == Some(name))
            .collect();
        let fires = |case: &&&serde_yaml::Value| case["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty());
        assert!(of_alert.iter().any(fires), "no unit test where {name} fires");
        assert!(
            of_alert.iter().any(|case| !fires(case)),
            "no unit test where {name} must not fire"
        );
    }
}

/// GitHub's anchor of a Markdown heading.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_severity_a_summary_a_description_and_a_runbook_section() {
    let operations = read(&root().join("docs/operations.md"));
    let anchors: BTreeSet<String> = operations
        .lines()
        .filter_map(|line| line.strip_prefix('#'))
        .map(|heading| anchor(heading.trim_start_matches('#')))
        .collect();
    let rules = RuleFile::shipped();
    let alerts: Vec<_> = rules.alerts().collect();
    assert!(alerts.len() >= 9, "the issue's nine alerts at least");
    for alert in alerts {
        let name = alert.alert.as_deref().unwrap();
        let severity = alert.labels.get("severity").map(String::as_str);
        assert!(
            matches!(severity, Some("critical" | "warning")),
            "{name}: severity {severity:?}"
        );
        for annotation in ["summary", "description"] {
            assert!(
                alert.annotations.get(annotation).is_some_and(|text| text.len() > 20),
                "{name} has no {annotation}"
            );
        }
        let runbook = alert.annotations.get("runbook_url").expect("a runbook_url");
        let (page, fragment) = runbook.split_once('#').expect("a runbook anchor");
        assert!(page.ends_with("/docs/operations.md"), "{name}: {runbook}");
        assert_eq!(fragment, name.to_lowercase(), "{name}: the anchor is the alert's name");
        assert!(
            anchors.contains(fragment),
            "{name}: docs/operations.md has no heading for #{fragment}"
        );
    }
}

#[test]
fn the_prometheus_rule_holds_exactly_the_rule_files_groups() {
    let file: serde_yaml::Value = serde_yaml::from_str(&read(&rules_path())).unwrap();
    let object: serde_yaml::Value = serde_yaml::from_str(&read(&prometheus_rule_path())).unwrap();
    assert_eq!(object["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(object["kind"], "PrometheusRule");
    assert_eq!(
        object["spec"], file,
        "k8s/components/monitoring/prometheusrule.yaml differs from deploy/prometheus/eligibility.rules.yml: \
         run deploy/prometheus/prometheusrule.sh"
    );
}

/// The names `exprs` use that are neither exposed by the job, recorded by the rules, nor
/// listed as coming from elsewhere.
fn unknown_names<'a>(exprs: impl IntoIterator<Item = &'a String>) -> BTreeSet<String> {
    let exposed = exposed_metric_names();
    let recorded = RuleFile::shipped().recorded_names();
    exprs
        .into_iter()
        .flat_map(|expr| metric_names(expr))
        .filter(|name| {
            !exposed.contains(name) && !recorded.contains(name) && !EXTERNAL_METRICS.iter().any(|(n, _)| n == name)
        })
        .collect()
}

fn dashboard_exprs() -> Vec<String> {
    dashboard_rows(&dashboard())
        .into_iter()
        .flat_map(|row| row.panels)
        .flat_map(|panel| panel.targets)
        .map(|target| target.expr)
        .collect()
}

#[test]
fn the_rules_and_the_dashboard_name_only_metrics_the_job_exposes() {
    let exposed = exposed_metric_names();
    // The registry's own view, so that the check below cannot pass on an empty set.
    for name in [
        "eligibility_records_read_total",
        "eligibility_batch_latency_seconds_bucket",
        "eligibility_component_healthy",
        "eligibility_process_resident_memory_bytes",
    ] {
        assert!(exposed.contains(name), "{name} not in {exposed:?}");
    }
    let rules = RuleFile::shipped();
    let rule_exprs: Vec<String> = rules.rules().map(|rule| rule.expr.clone()).collect();
    assert_eq!(unknown_names(&rule_exprs), BTreeSet::new(), "names in the rules");
    let exprs = dashboard_exprs();
    assert_eq!(unknown_names(&exprs), BTreeSet::new(), "names in the dashboard");
    let variables = variable_metric_names(&dashboard());
    assert!(!variables.is_empty());
    assert_eq!(
        unknown_names(&variables),
        BTreeSet::new(),
        "names in the dashboard's variables"
    );

    // The rules name every job metric an alert of the issue is about.
    let used: BTreeSet<String> = rule_exprs.iter().flat_map(|expr| metric_names(expr)).collect();
    for name in [
        "eligibility_records_unacknowledged",
        "eligibility_oldest_unacknowledged_seconds",
        "eligibility_output_frontier",
        "eligibility_component_healthy",
        "eligibility_records_rejected_total",
        "eligibility_sink_documents_rejected_total",
        "eligibility_sink_retries_total",
        "eligibility_batch_latency_seconds_bucket",
    ] {
        assert!(used.contains(name), "no rule uses {name}");
    }

    // Negative control: a metric renamed in one expression is caught.
    let renamed = exprs[0].replace("eligibility_records_read_total", "eligibility_records_read_count");
    assert_ne!(renamed, exprs[0]);
    assert_eq!(
        unknown_names(&[renamed]),
        BTreeSet::from(["eligibility_records_read_count".to_owned()])
    );
}

#[test]
fn every_dashboard_expression_parses_in_promtool() {
    require_tools();
    let exprs: Vec<String> = dashboard_exprs()
        .iter()
        .map(|expr| grafana_to_promql(expr, "5m"))
        .collect();
    assert!(exprs.len() >= 20, "{} expressions", exprs.len());
    if let Err(complaint) = promtool_check_exprs(&exprs) {
        panic!("promtool rejects a dashboard expression:\n{complaint}");
    }
    // Negative control: one broken expression among them is rejected.
    let mut broken = exprs.clone();
    broken[3] = broken[3].replacen(')', "", 1);
    let complaint = promtool_check_exprs(&broken).expect_err("promtool accepted an unbalanced expression");
    assert!(
        complaint.contains("dashboard:expr_3") || complaint.contains("parse error"),
        "{complaint}"
    );
}

#[test]
fn the_dashboard_is_importable_with_the_datasource_as_a_variable() {
    let dashboard = dashboard();
    assert!(dashboard["uid"].is_string() && dashboard["title"].is_string());
    assert!(dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 30));
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    let datasource = variables
        .iter()
        .find(|v| v["type"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(datasource["query"], "prometheus");
    let reference = format!("${{{}}}", datasource["name"].as_str().unwrap());
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_u64().expect("an id")), "duplicate panel id");
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24 && grid["h"].as_u64().unwrap() > 0, "{panel}");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], reference.as_str(), "{}", panel["title"]);
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty());
        for target in targets {
            assert_eq!(target["datasource"]["uid"], reference.as_str());
            assert!(target["refId"].is_string() && target["expr"].is_string());
        }
    }
    // The panels the issue lists, by what they query.
    let rows = dashboard_rows(&dashboard);
    let uses = |name: &str| dashboard_exprs().iter().any(|expr| expr.contains(name));
    for name in [
        "eligibility_records_read_total",
        "eligibility_pairs_upserted_total",
        "eligibility_sink_documents_written_total",
        "eligibility_records_unacknowledged",
        "eligibility_oldest_unacknowledged_seconds",
        "eligibility_batch_latency_seconds_bucket",
        "eligibility_batch_records_bucket",
        "eligibility_sink_requests_total",
        "eligibility_sink_retries_total",
        "eligibility_sink_documents_rejected_total",
        "eligibility_sink_writes_coalesced_total",
        "eligibility_process_resident_memory_bytes",
        "eligibility_process_cpu_seconds_total",
        "eligibility_component_healthy",
    ] {
        assert!(uses(name), "no panel shows {name}");
    }
    assert!(rows.len() >= 4 && rows.iter().all(|row| !row.panels.is_empty()));
}

#[test]
fn the_shipped_rules_load_and_evaluate_in_a_real_prometheus() {
    require_tools();
    let rules = read(&rules_path());
    let server = PrometheusServer::start(&[], &rules, "1s");
    let expected = RuleFile::shipped().rules().count();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let groups = server.api("/api/v1/rules");
        let loaded: Vec<&serde_json::Value> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|group| group["rules"].as_array().unwrap())
            .collect();
        assert_eq!(
            loaded.len(),
            expected,
            "the server loaded other rules than the file has"
        );
        let evaluated = loaded
            .iter()
            .all(|rule| rule["lastEvaluation"].as_str().is_some_and(|t| !t.starts_with("0001")));
        if evaluated {
            for rule in loaded {
                assert_eq!(rule["health"], "ok", "{rule}");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rules were not evaluated: {}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_metric_names_of_an_expression_are_its_selectors_only() {
    let names = |expr: &str| metric_names(expr).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"sum by (namespace, sink) (rate(a_total{sink="x", code=~"y|z"}[5m] offset 1m)) > 0 and on (namespace) b == bool 1"#
        ),
        ["a_total", "b"]
    );
    assert_eq!(
        names("histogram_quantile(0.99, sum without (pod) (rate(c_bucket[5m:1m]))) / ignoring (le) group_left (x) d:rec:rate5m"),
        ["c_bucket", "d:rec:rate5m"]
    );
    assert_eq!(names(r#"absent(e) or vector(1e6) unless max(f) by (le)"#), ["e", "f"]);
    assert_eq!(names(r#"label_replace(g, "dst", "$1", "src", "(.*)")"#), ["g"]);
}

#[test]
fn the_test_rule_file_shortens_durations_and_keeps_the_rest() {
    assert_eq!(
        scale_expr("rate(x[5m]) + deriv(y[10m:1m]) + z[1h30m]", 20),
        "rate(x[15000ms]) + deriv(y[30000ms:3000ms]) + z[270000ms]"
    );
    let shipped = RuleFile::shipped();
    let scaled = RuleFile::parse(&scaled_rules(&read(&rules_path()), 20));
    for (original, short) in shipped.rules().zip(scaled.rules()) {
        assert_eq!((&original.alert, &original.record), (&short.alert, &short.record));
        assert_eq!(original.labels, short.labels);
        assert_eq!(original.annotations, short.annotations);
        if let Some(duration) = &original.for_ {
            let full = support::prometheus::parse_duration(duration).unwrap();
            let shortened = support::prometheus::parse_duration(short.for_.as_deref().unwrap()).unwrap();
            assert_eq!(shortened * 20, full);
        }
    }
}
