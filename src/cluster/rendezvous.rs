//! The start-up handshake of a cluster of processes, before timely connects them.
//!
//! Timely, given a wrong layout (another process count, two processes with one index, a
//! peer that never comes), waits forever. So every process first registers with process 0
//! on its rendezvous port (its peer port + 1 by default): index, process count, workers per
//! process, and a fingerprint of the configuration. Process 0 waits until every index has
//! registered, checks that they all agree, and answers each with `ok` or with what is wrong;
//! then all go on to timely. Misconfigured, every process stops with the same clear message.
//!
//! ```text
//!  process i > 0 --connect (retrying)--> process 0 rendezvous
//!                --{"process": i, "processes": n, "workers": w, "fingerprint": f}-->
//!                <--{"ok": true} | {"ok": false, "error": "…"}--
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde::{Deserialize, Serialize};

/// What a process says about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub process: usize,
    pub processes: usize,
    pub workers: usize,
    pub fingerprint: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

/// How long process 0 waits for the others, and they for it.
const PATIENCE: Duration = Duration::from_secs(600);

/// How long a refused registration, or process 0 with no new one, waits to look again: the
/// processes of a restart start together, and each wait here is a wait of every one.
const RETRY: Duration = Duration::from_millis(10);

const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The problems in a full set of registrations, as one message; `None` if they agree.
pub fn disagreement(own: &Registration, registered: &BTreeMap<usize, (Registration, SocketAddr)>) -> Option<String> {
    let mut problems = Vec::new();
    for (registration, from) in registered.values() {
        if registration.processes != own.processes {
            problems.push(format!(
                "process {} ({from}) expects {} processes, process 0 expects {}",
                registration.process, registration.processes, own.processes
            ));
        }
        if registration.workers != own.workers {
            problems.push(format!(
                "process {} ({from}) runs {} workers, process 0 runs {} (all must run the same)",
                registration.process, registration.workers, own.workers
            ));
        }
        if registration.fingerprint != own.fingerprint {
            problems.push(format!(
                "process {} ({from}) has a different configuration than process 0",
                registration.process
            ));
        }
    }
    (!problems.is_empty()).then(|| problems.join("; "))
}

fn read_line(stream: &TcpStream) -> anyhow::Result<String> {
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    Ok(line)
}

fn send<T: Serialize>(mut stream: &TcpStream, message: &T) -> anyhow::Result<()> {
    let mut line = serde_json::to_string(message)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    Ok(())
}

/// Process 0: waits for every other process, checks the layout, answers everyone.
pub fn host(listen: SocketAddr, own: Registration) -> anyhow::Result<()> {
    let listener =
        TcpListener::bind(listen).with_context(|| format!("cannot listen for the cluster rendezvous on {listen}"))?;
    listener.set_nonblocking(true)?;
    tracing::info!(%listen, processes = own.processes, "waiting for the other processes to register");
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut registered: BTreeMap<usize, (Registration, SocketAddr)> = BTreeMap::new();
    let mut streams: Vec<TcpStream> = Vec::new();
    let mut problems: Vec<String> = Vec::new();
    while registered.len() + 1 < own.processes && problems.is_empty() {
        match listener.accept() {
            Ok((stream, from)) => {
                stream.set_nonblocking(false)?;
                stream.set_read_timeout(Some(Duration::from_secs(30)))?;
                let registration: Registration = match read_line(&stream)
                    .ok()
                    .and_then(|line| serde_json::from_str(&line).ok())
                {
                    Some(registration) => registration,
                    None => {
                        tracing::warn!(%from, "ignoring a connection that did not register");
                        continue;
                    }
                };
                if registration.process == 0 || registration.process >= own.processes {
                    problems.push(format!(
                        "{from} registered as process {} of a cluster of {}",
                        registration.process, own.processes
                    ));
                } else if let Some((_, earlier)) = registered.get(&registration.process) {
                    problems.push(format!(
                        "two processes claim index {}: {earlier} and {from}",
                        registration.process
                    ));
                } else {
                    tracing::info!(process = registration.process, %from, "process registered");
                    registered.insert(registration.process, (registration, from));
                }
                streams.push(stream);
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                if started.elapsed() > PATIENCE {
                    let missing: Vec<usize> = (1..own.processes).filter(|i| !registered.contains_key(i)).collect();
                    problems.push(format!(
                        "processes {missing:?} did not register within {} s",
                        PATIENCE.as_secs()
                    ));
                    break;
                }
                if last_report.elapsed() >= REPORT_EVERY {
                    last_report = Instant::now();
                    let missing: Vec<usize> = (1..own.processes).filter(|i| !registered.contains_key(i)).collect();
                    tracing::info!(?missing, "still waiting for processes to register");
                }
                std::thread::sleep(RETRY);
            }
            Err(error) => return Err(error).context("the cluster rendezvous failed"),
        }
    }
    if let Some(problem) = disagreement(&own, &registered) {
        problems.push(problem);
    }
    let answer = match problems.is_empty() {
        true => Answer { ok: true, error: None },
        false => Answer {
            ok: false,
            error: Some(format!("the cluster is misconfigured: {}", problems.join("; "))),
        },
    };
    for stream in &streams {
        let _ = send(stream, &answer);
    }
    match answer.error {
        None => {
            tracing::info!(
                processes = own.processes,
                "every process registered; connecting the workers"
            );
            Ok(())
        }
        Some(error) => bail!(error),
    }
}

/// Any other process: registers with process 0 and waits for its answer.
pub fn join(host: &str, own: Registration) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut last_report: Option<Instant> = None;
    loop {
        let attempt = (|| -> anyhow::Result<Answer> {
            let address = host
                .to_socket_addrs()
                .with_context(|| format!("cannot resolve {host}"))?
                .next()
                .ok_or_else(|| anyhow!("{host} resolves to no address"))?;
            let stream = TcpStream::connect_timeout(&address, Duration::from_secs(5))?;
            send(&stream, &own)?;
            stream.set_read_timeout(Some(PATIENCE))?;
            let line = read_line(&stream)?;
            Ok(serde_json::from_str(&line)?)
        })();
        match attempt {
            Ok(Answer { ok: true, .. }) => {
                tracing::info!(
                    process = own.process,
                    "registered with process 0; connecting the workers"
                );
                return Ok(());
            }
            Ok(Answer { error, .. }) => bail!(error.unwrap_or_else(|| "process 0 refused this process".into())),
            Err(error) => {
                if started.elapsed() > PATIENCE {
                    bail!(
                        "process 0 at {host} did not answer within {} s: {error:#}",
                        PATIENCE.as_secs()
                    );
                }
                if last_report.is_none_or(|at| at.elapsed() >= REPORT_EVERY) {
                    last_report = Some(Instant::now());
                    tracing::info!(host, error = %format!("{error:#}"), "waiting for process 0");
                }
                std::thread::sleep(RETRY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registration(process: usize, processes: usize) -> Registration {
        Registration {
            process,
            processes,
            workers: 2,
            fingerprint: 7,
        }
    }

    fn rendezvous(registrations: Vec<Registration>, processes: usize) -> (anyhow::Result<()>, Vec<anyhow::Result<()>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let host_thread = std::thread::spawn(move || host(address, registration(0, processes)));
        let joins: Vec<_> = registrations
            .into_iter()
            .map(|r| std::thread::spawn(move || join(&address.to_string(), r)))
            .collect();
        let hosted = host_thread.join().unwrap();
        (hosted, joins.into_iter().map(|j| j.join().unwrap()).collect())
    }

    #[test]
    fn an_agreeing_cluster_meets() {
        let (hosted, joined) = rendezvous(vec![registration(1, 3), registration(2, 3)], 3);
        hosted.unwrap();
        assert!(joined.iter().all(Result::is_ok));
    }

    #[test]
    fn a_wrong_count_or_a_duplicate_index_stops_everyone_with_the_reason() {
        let (hosted, joined) = rendezvous(vec![registration(1, 4), registration(2, 3)], 3);
        let error = hosted.unwrap_err().to_string();
        assert!(
            error.contains("process 1") && error.contains("expects 4 processes, process 0 expects 3"),
            "{error}"
        );
        assert!(joined
            .iter()
            .all(|j| j.as_ref().unwrap_err().to_string().contains("misconfigured")));

        let (hosted, _) = rendezvous(vec![registration(1, 3), registration(1, 3)], 3);
        assert!(hosted.unwrap_err().to_string().contains("two processes claim index 1"));
    }

    #[test]
    fn different_configurations_are_refused() {
        let mut other = registration(1, 2);
        other.fingerprint = 8;
        let (hosted, _) = rendezvous(vec![other], 2);
        assert!(hosted.unwrap_err().to_string().contains("different configuration"));
    }
}
