//! Helpers for the tests of the shipped monitoring (deploy/prometheus, deploy/grafana): the
//! rule file and the dashboard, read as Prometheus and Grafana read them, the real `promtool`
//! and `prometheus` (Debian package `prometheus`), and which metrics the job exposes.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn rules_path() -> PathBuf {
    root().join("deploy/prometheus/eligibility.rules.yml")
}

pub fn rules_test_path() -> PathBuf {
    root().join("deploy/prometheus/eligibility.rules.test.yml")
}

pub fn dashboard_path() -> PathBuf {
    root().join("deploy/grafana/eligibility.json")
}

pub fn prometheus_rule_path() -> PathBuf {
    root().join("k8s/components/monitoring/prometheusrule.yaml")
}

/// Metrics the rules may use that come from elsewhere than the job, with where from.
pub const EXTERNAL_METRICS: &[(&str, &str)] = &[(
    "kube_pod_container_status_restarts_total",
    "kube-state-metrics: a process that dies before it is scraped shows only there",
)];

/// Fails with a clear message when `promtool` or `prometheus` is missing.
pub fn require_tools() {
    for tool in ["promtool", "prometheus"] {
        let found = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        assert!(
            found,
            "{tool} is not installed: apt-get install prometheus (.ci/run does)"
        );
    }
}

// --- the rule file --------------------------------------------------------------------

/// One rule of a rule file, as Prometheus reads it.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub record: Option<String>,
    pub alert: Option<String>,
    pub expr: String,
    #[serde(rename = "for")]
    pub for_: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    pub name: String,
    pub interval: Option<String>,
    pub rules: Vec<Rule>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    pub groups: Vec<Group>,
}

impl RuleFile {
    pub fn parse(text: &str) -> Self {
        serde_yaml::from_str(text).expect("a rule file")
    }

    pub fn shipped() -> Self {
        Self::parse(&std::fs::read_to_string(rules_path()).unwrap())
    }

    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.groups.iter().flat_map(|group| &group.rules)
    }

    pub fn alerts(&self) -> impl Iterator<Item = &Rule> {
        self.rules().filter(|rule| rule.alert.is_some())
    }

    pub fn recorded_names(&self) -> BTreeSet<String> {
        self.rules().filter_map(|rule| rule.record.clone()).collect()
    }
}

/// A Prometheus duration (`90s`, `5m`, `1h30m`, `500ms`).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            "d" => Duration::from_secs(86_400),
            "w" => Duration::from_secs(7 * 86_400),
            _ => return None,
        };
        total += unit * u32::try_from(number).ok()?;
        rest = &rest[unit_len..];
    }
    Some(total)
}

fn scaled(text: &str, divisor: u32) -> String {
    let duration = parse_duration(text).unwrap_or_else(|| panic!("not a duration: {text:?}"));
    format!("{}ms", (duration / divisor).as_millis())
}

/// `expr` with every range and subquery duration (`[5m]`, `[10m:1m]`) divided by `divisor`.
pub fn scale_expr(expr: &str, divisor: u32) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(open) = rest.find('[') {
        let close = open + rest[open..].find(']').expect("an unclosed [");
        out += &rest[..=open];
        let parts: Vec<String> = rest[open + 1..close]
            .split(':')
            .map(|part| {
                if part.trim().is_empty() {
                    String::new()
                } else {
                    scaled(part, divisor)
                }
            })
            .collect();
        out += &parts.join(":");
        out.push(']');
        rest = &rest[close + 1..];
    }
    out + rest
}

/// The rule file with every `for` and every range in its expressions divided by `divisor`,
/// for a test that cannot wait minutes; thresholds, labels and annotations stay as shipped.
pub fn scaled_rules(text: &str, divisor: u32) -> String {
    let mut file: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
    for group in file["groups"].as_sequence_mut().unwrap() {
        for rule in group["rules"].as_sequence_mut().unwrap() {
            let rule = rule.as_mapping_mut().unwrap();
            let expr = rule["expr"].as_str().unwrap().to_owned();
            rule.insert("expr".into(), scale_expr(&expr, divisor).into());
            if let Some(duration) = rule.get("for").and_then(|d| d.as_str()).map(str::to_owned) {
                rule.insert("for".into(), scaled(&duration, divisor).into());
            }
        }
    }
    serde_yaml::to_string(&file).unwrap()
}

// --- PromQL ---------------------------------------------------------------------------

const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "inf",
    "nan",
    "atan2",
];

/// Keywords followed by a list of label names in parentheses.
const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names a PromQL expression selects: every identifier that is not a function,
/// an operator keyword, a label name, a label value, a number or a duration.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    // Blank out strings, then label matchers and ranges (their contents are never names).
    let mut plain = String::with_capacity(expr.len());
    let mut chars = expr.chars().peekable();
    let mut depth_braces = 0;
    let mut depth_brackets = 0;
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' | '`' => {
                while let Some(inner) = chars.next() {
                    if inner == '\\' && c != '`' {
                        chars.next();
                    } else if inner == c {
                        break;
                    }
                }
                plain.push(' ');
            }
            '#' => {
                // A comment runs to the end of the line.
                for inner in chars.by_ref() {
                    if inner == '\n' {
                        break;
                    }
                }
            }
            '{' => depth_braces += 1,
            '}' => {
                depth_braces -= 1;
                plain.push(' ');
            }
            '[' => depth_brackets += 1,
            ']' => {
                depth_brackets -= 1;
                plain.push(' ');
            }
            _ if depth_braces > 0 || depth_brackets > 0 => {}
            _ => plain.push(c),
        }
    }
    let bytes = plain.as_bytes();
    let is_start = |b: u8| b.is_ascii_alphabetic() || b == b'_' || b == b':';
    let is_part = |b: u8| is_start(b) || b.is_ascii_digit();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_list = false;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_digit() || b == b'.' {
            // A number (1e6, 0.99, 0x1f) or a duration after offset: one token.
            while i < bytes.len() && (is_part(bytes[i]) || bytes[i] == b'.') {
                i += 1;
            }
            continue;
        }
        if !is_start(b) {
            if b == b'(' && skip_list {
                let close = i + plain[i..].find(')').expect("an unclosed label list");
                i = close + 1;
                skip_list = false;
                continue;
            }
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_part(bytes[i]) {
            i += 1;
        }
        let word = &plain[start..i];
        let next = plain[i..].trim_start().chars().next();
        let lower = word.to_ascii_lowercase();
        if LABEL_LISTS.contains(&lower.as_str()) {
            skip_list = true;
        } else if !KEYWORDS.contains(&lower.as_str()) && next != Some('(') {
            names.insert(word.to_owned());
        }
    }
    names
}

/// A Grafana expression as Prometheus would receive it: the dashboard's variables replaced.
pub fn grafana_to_promql(expr: &str, rate_interval: &str) -> String {
    expr.replace("$__rate_interval", rate_interval)
        .replace("${namespace}", ".*")
        .replace("$namespace", ".*")
}

/// Runs `promtool check rules` on `exprs` as recording rules: Ok, or promtool's complaint.
pub fn promtool_check_exprs(exprs: &[String]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let rules: Vec<serde_json::Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, expr)| serde_json::json!({"record": format!("dashboard:expr_{i}"), "expr": expr}))
        .collect();
    let file = dir.path().join("exprs.rules.yml");
    // JSON is YAML: promtool reads it as it reads any rule file.
    let text = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]}).to_string();
    std::fs::write(&file, text).unwrap();
    let output = Command::new("promtool")
        .arg("check")
        .arg("rules")
        .arg(&file)
        .output()
        .unwrap();
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

// --- what the job exposes -------------------------------------------------------------

/// Every series name the job's registry exposes once each labelled family has a series
/// (a family shows nothing before its first), from the job's own `Metrics`. The Prometheus
/// integration test checks the same against a running job.
pub fn exposed_metric_names() -> BTreeSet<String> {
    use eligibility::metrics::{Metrics, ReasonLabels};
    let metrics = Metrics::new();
    metrics.sink_handles("elasticsearch");
    metrics.health.set_healthy("kafka");
    let partition = Metrics::partition("products", 0);
    let _ = metrics.records_consumed.get_or_create(&partition);
    let _ = metrics.consumer_lag.get_or_create(&partition);
    let _ = metrics.records_unacknowledged.get_or_create(&partition);
    let _ = metrics.oldest_unacknowledged_seconds.get_or_create(&partition);
    let _ = metrics.committed_offset.get_or_create(&partition);
    let _ = metrics.records_rejected.get_or_create(&ReasonLabels {
        code: "not_json".into(),
    });
    exposition_names(&metrics.encode())
}

/// The series names an exposition declares: a counter `x` as `x_total`, a histogram as
/// `x_bucket`, `x_sum` and `x_count`, an info as `x_info`; a gauge as itself.
pub fn exposition_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let mut words = declared.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
        } else if !line.starts_with('#') && !line.is_empty() {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

// --- the dashboard --------------------------------------------------------------------

/// One query of a panel.
#[derive(Debug, Clone)]
pub struct Target {
    pub expr: String,
    pub legend: String,
}

#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub unit: String,
    pub targets: Vec<Target>,
}

#[derive(Debug, Clone)]
pub struct Row {
    pub title: String,
    pub panels: Vec<Panel>,
}

pub fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dashboard_path()).unwrap()).expect("the dashboard is JSON")
}

/// The dashboard's rows, each with the panels that follow it (Grafana's layout of an
/// expanded row).
pub fn dashboard_rows(dashboard: &Value) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        if panel["type"] == "row" {
            rows.push(Row {
                title,
                panels: Vec::new(),
            });
            continue;
        }
        let targets = panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|target| Target {
                expr: target["expr"].as_str().unwrap_or_default().to_owned(),
                legend: target["legendFormat"].as_str().unwrap_or_default().to_owned(),
            })
            .collect();
        let unit = panel["fieldConfig"]["defaults"]["unit"]
            .as_str()
            .unwrap_or("short")
            .to_owned();
        rows.last_mut()
            .expect("a panel before the first row")
            .panels
            .push(Panel { title, unit, targets });
    }
    rows
}

/// The metric names of the dashboard's variable queries (`label_values(metric, label)`).
pub fn variable_metric_names(dashboard: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for variable in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or(variable["query"].as_str())
            .unwrap_or_default();
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .unwrap_or_else(|| panic!("an unexpected variable query {query:?}"));
        let metric = inner.rsplit_once(',').map_or(inner, |(metric, _)| metric);
        names.extend(metric_names(metric));
    }
    names
}

// --- a real Prometheus server ---------------------------------------------------------

/// A series' labels.
pub type Labels = BTreeMap<String, String>;

/// A series of a range query: its labels and (Unix seconds, value) points.
pub type RangeSeries = (Labels, Vec<(f64, f64)>);

/// A target to scrape, with labels as a Kubernetes service discovery would give it.
pub struct ScrapeTarget {
    pub address: String,
    pub labels: BTreeMap<String, String>,
}

/// A `prometheus` process of a test's own: its own config, data dir and loopback port.
pub struct PrometheusServer {
    child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl PrometheusServer {
    /// Starts a server that scrapes `targets` and evaluates `rules` every `interval`, and
    /// waits until it is ready.
    pub fn start(targets: &[ScrapeTarget], rules: &str, interval: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rules.yml"), rules).unwrap();
        let static_configs: Vec<Value> = targets
            .iter()
            .map(|target| serde_json::json!({"targets": [target.address], "labels": target.labels}))
            .collect();
        let config = serde_json::json!({
            "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
            "rule_files": ["rules.yml"],
            "scrape_configs": [{"job_name": "eligibility", "static_configs": static_configs}],
        });
        std::fs::write(dir.path().join("prometheus.yml"), config.to_string()).unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let port = super::free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", dir.path().join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start prometheus");
        let mut server = PrometheusServer { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while server.get_raw("/-/ready").map(|(status, _)| status) != Some(200) {
            let exited = server.child.try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "prometheus did not become ready: {}",
                server.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        server
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// A GET over HTTP/1.0 (so no chunked body): (status, body).
    fn get_raw(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())?;
        Some((status, body))
    }

    /// The `data` of an API answer, failing the test on an error.
    pub fn api(&self, path: &str) -> Value {
        let (status, body) = self.get_raw(path).unwrap_or_else(|| panic!("no answer to {path}"));
        let answer: Value = serde_json::from_str(&body).unwrap_or_else(|_| panic!("{path}: {status} {body}"));
        assert_eq!(answer["status"], "success", "{path}: {body}");
        answer["data"].clone()
    }

    /// An instant query: each series' labels and value.
    pub fn query(&self, expr: &str) -> Vec<(Labels, f64)> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(expr)));
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|series| (labels(&series["metric"]), sample_value(&series["value"])))
            .collect()
    }

    /// A range query from `start` to `end` (Unix seconds): each series' labels and points.
    pub fn query_range(&self, expr: &str, start: f64, end: f64, step: f64) -> Vec<RangeSeries> {
        let data = self.api(&format!(
            "/api/v1/query_range?query={}&start={start:.3}&end={end:.3}&step={step}",
            encode(expr)
        ));
        data["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|series| {
                let points = series["values"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|point| (point[0].as_f64().unwrap(), sample_value(point)))
                    .collect();
                (labels(&series["metric"]), points)
            })
            .collect()
    }

    /// The state of every alert: name -> (state, labels, annotations), `inactive` when none.
    pub fn alert_states(&self) -> BTreeMap<String, Vec<Value>> {
        let data = self.api("/api/v1/alerts");
        let mut states: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for alert in data["alerts"].as_array().unwrap() {
            let name = alert["labels"]["alertname"].as_str().unwrap().to_owned();
            states.entry(name).or_default().push(alert.clone());
        }
        states
    }

    /// Every metric name the server has stored.
    pub fn stored_names(&self) -> BTreeSet<String> {
        let data = self.api("/api/v1/label/__name__/values");
        data.as_array()
            .unwrap()
            .iter()
            .map(|name| name.as_str().unwrap().to_owned())
            .collect()
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn labels(metric: &Value) -> BTreeMap<String, String> {
    metric
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, value)| (name.clone(), value.as_str().unwrap_or_default().to_owned()))
        .collect()
}

/// `[time, "value"]` -> value.
fn sample_value(point: &Value) -> f64 {
    point[1].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
}

/// Percent-encodes a query parameter.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `legend` (`"{{sink}} p99"`) filled from a series' labels.
pub fn legend(legend: &str, labels: &BTreeMap<String, String>) -> String {
    let mut out = legend.to_owned();
    for (name, value) in labels {
        out = out.replace(&format!("{{{{{name}}}}}"), value);
    }
    out
}

/// Reads a file under the repository root.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()))
}
