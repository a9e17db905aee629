//! Helpers for the tests that run against the real Kafka broker (`scripts/kafka.sh start`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dataflows::decode::{decode_envelope, decode_line};
use dataflows::model::PairChange;
use dataflows::reference::{PairState, ReferenceState};
use eligibility::change_log::{fold_state, parse_change};
use eligibility::source::kafka::config::KafkaConfig;

use super::{binary, free_port, path_str, run_ok};

/// Tests that stop the broker must not overlap with the others.
pub static BROKER: Mutex<()> = Mutex::new(());

/// Runs the test alone among those that take it (a failed one does not poison the rest).
pub fn serial() -> MutexGuard<'static, ()> {
    BROKER.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The output contract on a change log: an upsert never repeats the pair's current figures,
/// a delete never names a missing pair.
pub fn assert_contract(changes: &[PairChange]) {
    let mut state = PairState::new();
    for change in changes {
        match change.figures {
            Some(figures) => assert_ne!(
                state.insert(change.pair.clone(), figures),
                Some(figures),
                "repeated upsert: {change:?}"
            ),
            None => assert!(
                state.remove(&change.pair).is_some(),
                "delete of a missing pair: {change:?}"
            ),
        }
    }
}

pub fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// Assigns `consumer` partitions `0..partitions` of `topic`, each read from its beginning.
pub fn assign_from_beginning<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    topic: &str,
    partitions: i32,
) {
    use rdkafka::consumer::Consumer;
    let mut assignment = rdkafka::TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
}

/// Fails with a clear message when no broker answers.
pub fn require_broker() {
    let address = brokers();
    let first = address.split(',').next().unwrap().to_owned();
    let reachable =
        std::net::TcpStream::connect_timeout(&first.parse().expect("host:port"), Duration::from_secs(2)).is_ok();
    assert!(
        reachable,
        "no Kafka broker at {address}: start one with scripts/kafka.sh start (scripts/test.sh does)"
    );
}

/// A test's own topics, job config and output files.
pub struct KafkaCase {
    pub dir: tempfile::TempDir,
    pub products_topic: String,
    pub campaigns_topic: String,
    pub categories_topic: String,
    pub dead_letter_topic: Option<String>,
    pub config: PathBuf,
}

impl KafkaCase {
    pub fn new(name: &str, dead_letter_topic: bool) -> Self {
        require_broker();
        let dir = tempfile::tempdir().unwrap();
        let unique = format!(
            "{name}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        let case = KafkaCase {
            products_topic: format!("{unique}-products"),
            campaigns_topic: format!("{unique}-campaigns"),
            categories_topic: format!("{unique}-categories"),
            dead_letter_topic: dead_letter_topic.then(|| format!("{unique}-dead-letters")),
            config: dir.path().join("job.toml"),
            dir,
        };
        case.write_sinks_config(
            &case.config,
            SinkSetup {
                jsonl: Some("changes.jsonl"),
                ..SinkSetup::default()
            },
        );
        case
    }

    /// The job's Kafka settings for this case's topics, on the test broker.
    pub fn kafka_config(&self) -> KafkaConfig {
        let mut kafka = KafkaConfig::for_brokers(&brokers());
        kafka.products_topic = self.products_topic.clone();
        kafka.campaigns_topic = self.campaigns_topic.clone();
        kafka.categories_topic = self.categories_topic.clone();
        kafka
    }

    pub fn changes_path(&self) -> PathBuf {
        self.dir.path().join("changes.jsonl")
    }

    /// Writes `lines` as an event log and loads it into the topics.
    pub fn produce(&self, lines: &[String], partitions: i32) {
        let log = self.dir.path().join(format!("events-{}.jsonl", rand_suffix()));
        std::fs::write(&log, lines.join("\n") + "\n").unwrap();
        run_ok(&[
            "produce",
            "--input",
            path_str(&log),
            "--config",
            path_str(&self.config),
            "--partitions",
            &partitions.to_string(),
        ]);
    }

    /// Runs the job to the end of the topics and waits for it.
    pub fn run_to_end(&self, config: &Path, extra: &[&str]) {
        let mut args = vec![
            "run",
            "--config",
            path_str(config),
            "--stop-at-end",
            "--progress-secs",
            "0",
        ];
        args.extend_from_slice(extra);
        run_ok(&args);
    }

    /// Starts the job in the background, following the topics.
    pub fn spawn(&self, config: &Path, extra: &[&str]) -> JobProcess {
        let child = Command::new(binary())
            .args(["run", "--config", path_str(config), "--progress-secs", "0"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        JobProcess(child)
    }
}

/// A job running in the background; killed when dropped, so a failing test leaves none behind.
pub struct JobProcess(pub Child);

impl JobProcess {
    /// Kills it hard (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    pub fn is_running(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for JobProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The pair state a log of events should lead to, by brute force.
pub fn expected_state(lines: &[String]) -> PairState {
    let mut state = ReferenceState::default();
    for line in lines {
        if let Ok(record) = decode_envelope(line.as_bytes()) {
            state.apply(&record.key, &record.change);
        }
    }
    state.pairs()
}

/// The brute-force state of a log of events with the job's clock (SPEC.md, "Campaign
/// windows"): every accepted line applied, the clock at the greatest `timestamp` of the
/// accepted lines (the beginning of time without one). Set `clock` to read it at another
/// instant.
pub fn reference_state(lines: &[String]) -> ReferenceState {
    let mut state = ReferenceState::default();
    for line in lines {
        if let Ok(line) = decode_line(line.as_bytes()) {
            state.apply(&line.record.key, &line.record.change);
            if let Some(timestamp) = line.timestamp {
                state.advance_clock(timestamp);
            }
        }
    }
    state
}

/// The pair state a log of events should lead to, by brute force, with the clock at the
/// greatest timestamp of its accepted lines: file mode's state at the end of the log, and
/// the Kafka job's under `clock = "records"`.
pub fn expected_state_with_clock(lines: &[String]) -> PairState {
    reference_state(lines).pairs()
}

/// The state the complete lines of a change log describe (empty if it does not exist yet).
/// The job may be writing the log while a test polls it, so a partial last line (a buffer
/// flushed mid-line) is not read yet.
pub fn change_log_state(path: &Path) -> PairState {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return PairState::new(),
        Err(error) => panic!("cannot read {}: {error}", path.display()),
    };
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |end| end + 1);
    let text = std::str::from_utf8(&bytes[..complete]).unwrap();
    let changes: Vec<_> = text
        .lines()
        .filter(|line| !line.is_empty())
        .map(|line| parse_change(line).unwrap())
        .collect();
    fold_state(&changes)
}

/// A plain HTTP GET on loopback: (status, body).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

/// Waits until `condition` holds, failing after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Generates an event log with the project's generator.
pub fn generated_lines(dir: &Path, products: u64, updates: u64, seed: u64) -> Vec<String> {
    generated_lines_with(dir, products, updates, seed, &[])
}

/// [`generated_lines`] with more of `eligibility generate`'s options, e.g.
/// `["--scheduled-campaigns", "0.5"]` (which turns on `--line-timestamps`).
pub fn generated_lines_with(dir: &Path, products: u64, updates: u64, seed: u64, options: &[&str]) -> Vec<String> {
    let path = match options.is_empty() {
        true => dir.join(format!("generated-{seed}.jsonl")),
        false => dir.join(format!("generated-{seed}-{}.jsonl", rand_suffix())),
    };
    let (products, updates, seed_text) = (products.to_string(), updates.to_string(), seed.to_string());
    let mut args = vec![
        "generate",
        "--products",
        &products,
        "--sellers",
        "40",
        "--categories",
        "25",
        "--brands",
        "20",
        "--campaigns",
        "12",
        "--updates",
        &updates,
        "--malformed",
        "0.01",
        "--seed",
        &seed_text,
        "--output",
        path_str(&path),
    ];
    args.extend_from_slice(options);
    run_ok(&args);
    std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Which sinks a test's job writes to.
#[derive(Default)]
pub struct SinkSetup<'a> {
    /// The JSONL change log's file name in the case's folder (its progress record beside it).
    pub jsonl: Option<&'a str>,
    pub elasticsearch_index: Option<&'a str>,
    pub couchbase_url: Option<&'a str>,
    pub metrics_port: Option<u16>,
}

/// The password the Couchbase model expects, passed through the environment.
pub const COUCHBASE_PASSWORD_ENV: &str = "ELIGIBILITY_TEST_COUCHBASE_PASSWORD";

impl KafkaCase {
    /// A case whose job writes the JSONL change log `changes.jsonl` and serves `/metrics`
    /// on the port returned.
    pub fn with_change_log_and_metrics(name: &str) -> (Self, u16) {
        let case = KafkaCase::new(name, false);
        let port = free_port();
        case.write_sinks_config(
            &case.config,
            SinkSetup {
                jsonl: Some("changes.jsonl"),
                metrics_port: Some(port),
                ..SinkSetup::default()
            },
        );
        (case, port)
    }

    /// Writes a job config for these topics with the given sinks.
    pub fn write_sinks_config(&self, path: &Path, sinks: SinkSetup<'_>) {
        let mut text = format!(
            r#"
[kafka]
brokers = {brokers:?}
products_topic = {products:?}
campaigns_topic = {campaigns:?}
categories_topic = {categories:?}
rehydration_chunk_records = 500

[batching]
max_records = 200
max_delay_ms = 20

[dead_letter]
{dead_letter}

[progress]
interval_ms = 20
{progress}

[metrics]
listen = {listen:?}
"#,
            brokers = brokers(),
            products = self.products_topic,
            campaigns = self.campaigns_topic,
            categories = self.categories_topic,
            dead_letter = match &self.dead_letter_topic {
                Some(topic) => format!("topic = {topic:?}"),
                None => format!("path = {:?}", path_str(&self.dir.path().join("rejected.jsonl"))),
            },
            // Without a change log, the record gets a file of its own per config.
            progress = match sinks.jsonl {
                Some(_) => String::new(),
                None => format!("path = {:?}", path_str(&path.with_extension("progress.json"))),
            },
            listen = sinks
                .metrics_port
                .map(|port| format!("127.0.0.1:{port}"))
                .unwrap_or_default(),
        );
        if let Some(changes) = sinks.jsonl {
            text += &format!(
                "\n[sinks.jsonl]\npath = {:?}\nsync_interval_ms = 20\n",
                path_str(&self.dir.path().join(changes))
            );
        }
        if let Some(index) = sinks.elasticsearch_index {
            text += &format!(
                "\n[sinks.elasticsearch]\nurls = [{:?}]\nindex = {index:?}\nreplicas = 0\njob_id = {index:?}\n\
                 request_timeout_ms = 5000\nbulk = {{ max_actions = 300, flush_interval_ms = 20 }}\n\
                 retry = {{ initial_ms = 50, max_ms = 2000 }}\n",
                super::search::url()
            );
        }
        if let Some(url) = sinks.couchbase_url {
            text += &format!(
                "\n[sinks.couchbase]\nurl = {url:?}\nbucket = \"eligibility\"\n\
                 bulk = {{ max_actions = 200, flush_interval_ms = 20 }}\nretry = {{ initial_ms = 20, max_ms = 500 }}\n\
                 auth = {{ username = \"eligibility\", password_env = {COUCHBASE_PASSWORD_ENV:?} }}\n"
            );
        }
        std::fs::write(path, text).unwrap();
    }
}
