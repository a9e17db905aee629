//! Timely cluster start-up: how many workers, in which processes, at which addresses.
//!
//! Worker indices are global (`process * workers + local`), so worker 0 always lives in
//! process 0, the one that writes the file outputs. The peer addresses come from a hostfile
//! or from a pattern (`eligibility-{i}.eligibility-peers:2101`, as a StatefulSet's headless
//! service names its pods); the process index from `--process` or from a pod name's ordinal.
//! Before timely connects, the processes meet in a rendezvous that checks they agree on the
//! layout (`rendezvous.rs`); then they connect to each other (`connect.rs`) and timely runs
//! its workers over those connections. A lost peer ends every process: the cluster restarts
//! as a whole and replays from its inputs.

pub mod agreement;
pub mod connect;
pub mod layers;
pub mod rendezvous;

use std::any::Any;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use timely::communication::AllocatorBuilder;
use timely::{CommunicationConfig, WorkerConfig};

use self::rendezvous::Registration;

/// Merge effort spent on idle arrangements, so traces compact when input stops.
const IDLE_MERGE_EFFORT: isize = 1_000;

/// Where the processes of a cluster listen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Peers {
    /// One process: no peers.
    #[default]
    Alone,
    /// A file of `host:port` lines, one per process in index order.
    Hostfile(PathBuf),
    /// `host:port` with `{i}` standing for the process index.
    Pattern(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Worker threads per process.
    pub workers: usize,
    /// Processes in the cluster.
    pub processes: usize,
    /// This process's index, `0..processes`.
    pub process: usize,
    pub peers: Peers,
    /// Port of process 0's rendezvous; default: its peer port + 1.
    pub rendezvous_port: Option<u16>,
    /// What every process must agree on besides the layout (a hash of its configuration).
    pub fingerprint: u64,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            workers: 1,
            processes: 1,
            process: 0,
            peers: Peers::Alone,
            rendezvous_port: None,
            fingerprint: 0,
        }
    }
}

/// The ordinal at the end of a StatefulSet pod's name: `eligibility-3` is 3.
pub fn ordinal_of(pod_name: &str) -> anyhow::Result<usize> {
    pod_name
        .rsplit_once('-')
        .and_then(|(_, ordinal)| ordinal.parse().ok())
        .ok_or_else(|| anyhow!("the pod name {pod_name:?} does not end in -<ordinal>, as a StatefulSet's pods do"))
}

/// A stable hash of what must be the same in every process (not the process index).
pub fn fingerprint(parts: &[&str]) -> u64 {
    // FNV-1a: stable across builds and platforms, unlike the standard hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for byte in part.bytes().chain([0]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

impl ClusterOptions {
    /// Total workers in the cluster.
    pub fn peers(&self) -> usize {
        self.workers * self.processes
    }

    /// The peer addresses, one per process, checked.
    pub fn addresses(&self) -> anyhow::Result<Vec<String>> {
        let addresses: Vec<String> = match &self.peers {
            Peers::Alone => bail!(
                "--processes above 1 needs the peers: --hostfile (host:port lines) or --peers (a host:port pattern with {{i}})"
            ),
            Peers::Hostfile(path) => {
                let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the hostfile {}", path.display()))?;
                let addresses: Vec<String> = text
                    .lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty() && !line.starts_with('#'))
                    .map(str::to_owned)
                    .collect();
                if addresses.len() < self.processes {
                    bail!(
                        "the hostfile {} lists {} addresses but --processes is {}",
                        path.display(),
                        addresses.len(),
                        self.processes
                    );
                }
                addresses.into_iter().take(self.processes).collect()
            }
            Peers::Pattern(pattern) => {
                if !pattern.contains("{i}") {
                    bail!("the peers pattern {pattern:?} has no {{i}} for the process index");
                }
                (0..self.processes).map(|i| pattern.replace("{i}", &i.to_string())).collect()
            }
        };
        for (index, address) in addresses.iter().enumerate() {
            if address
                .rsplit_once(':')
                .and_then(|(_, port)| port.parse::<u16>().ok())
                .is_none()
            {
                bail!("peer address {} ({address:?}) is not host:port", index);
            }
            if addresses[..index].contains(address) {
                bail!("the peers list {address} twice");
            }
        }
        Ok(addresses)
    }

    /// Process 0's rendezvous address, as the others reach it.
    fn rendezvous_address(&self, addresses: &[String]) -> anyhow::Result<(String, u16)> {
        let (host, port) = addresses[0].rsplit_once(':').expect("checked by addresses()");
        let port: u16 = port.parse().expect("checked by addresses()");
        let rendezvous = self.rendezvous_port.unwrap_or(port.wrapping_add(1));
        Ok((format!("{host}:{rendezvous}"), rendezvous))
    }

    /// Checks the layout; with several processes, waits until every process has met the
    /// others in the rendezvous and can resolve its own address.
    pub fn meet(&self) -> anyhow::Result<()> {
        self.validate()?;
        if self.processes == 1 {
            return Ok(());
        }
        let addresses = self.addresses()?;
        wait_until_resolvable(&addresses[self.process])?;
        let registration = Registration {
            process: self.process,
            processes: self.processes,
            workers: self.workers,
            fingerprint: self.fingerprint,
        };
        let (host, port) = self.rendezvous_address(&addresses)?;
        if self.process == 0 {
            rendezvous::host(SocketAddr::from(([0, 0, 0, 0], port)), registration)
        } else {
            rendezvous::join(&host, registration)
        }
    }

    fn validate(&self) -> anyhow::Result<()> {
        if self.workers == 0 {
            bail!("--workers must be at least 1");
        }
        if self.processes == 0 {
            bail!("--processes must be at least 1");
        }
        if self.process >= self.processes {
            bail!(
                "--process {} is out of range for --processes {}",
                self.process,
                self.processes
            );
        }
        Ok(())
    }

    /// Timely's allocators for this process's workers, connected to the other processes'
    /// within `patience` (`connect.rs`: without timely's waits of a second).
    pub fn communication(
        &self,
        communication: CommunicationConfig,
        patience: Duration,
    ) -> Result<(Vec<AllocatorBuilder>, Box<dyn Any + Send>), String> {
        if self.processes == 1 {
            return communication.try_build();
        }
        let addresses = self.addresses().map_err(|error| format!("{error:#}"))?;
        let streams =
            connect::connect_processes(&addresses, self.process, patience).map_err(|error| error.to_string())?;
        connect::cluster_allocators(streams, self.process, self.workers)
            .map_err(|error| format!("cannot start the connections to the other processes: {error}"))
    }

    /// The timely configuration for this process.
    pub fn timely_config(&self) -> anyhow::Result<timely::Config> {
        self.validate()?;
        let communication = if self.processes == 1 {
            CommunicationConfig::Process(self.workers)
        } else {
            CommunicationConfig::Cluster {
                threads: self.workers,
                process: self.process,
                addresses: self.addresses()?,
                report: false,
                zerocopy: false,
            }
        };
        let mut worker = WorkerConfig::default();
        differential_dataflow::configure(
            &mut worker,
            &differential_dataflow::Config::default().idle_merge_effort(Some(IDLE_MERGE_EFFORT)),
        );
        Ok(timely::Config { communication, worker })
    }
}

/// A pod's own DNS name appears only once its headless service knows it.
fn wait_until_resolvable(address: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut reported = false;
    loop {
        match address.to_socket_addrs().map(|mut found| found.next()) {
            Ok(Some(_)) => return Ok(()),
            result => {
                if started.elapsed() > Duration::from_secs(300) {
                    bail!("this process's own peer address {address} does not resolve: {result:?}");
                }
                if !reported {
                    tracing::info!(address, "waiting for this process's own address to resolve");
                    reported = true;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hostfile(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    fn options(processes: usize, process: usize, peers: Peers) -> ClusterOptions {
        ClusterOptions {
            workers: 2,
            processes,
            process,
            peers,
            ..ClusterOptions::default()
        }
    }

    #[test]
    fn misconfigured_clusters_fail_clearly() {
        let error = options(2, 2, Peers::Alone).timely_config().unwrap_err().to_string();
        assert!(error.contains("out of range"), "{error}");
        let error = options(2, 0, Peers::Alone).timely_config().unwrap_err().to_string();
        assert!(error.contains("needs the peers"), "{error}");
        let short = hostfile("127.0.0.1:2101\n");
        let error = options(2, 0, Peers::Hostfile(short.path().into()))
            .timely_config()
            .unwrap_err()
            .to_string();
        assert!(error.contains("lists 1 addresses"), "{error}");
        let twice = hostfile("127.0.0.1:2101\n127.0.0.1:2101\n");
        let error = options(2, 0, Peers::Hostfile(twice.path().into()))
            .timely_config()
            .unwrap_err()
            .to_string();
        assert!(error.contains("twice"), "{error}");
        let good = hostfile("# peers\n127.0.0.1:2101\n\n127.0.0.1:2102\n");
        assert_eq!(
            options(2, 1, Peers::Hostfile(good.path().into())).addresses().unwrap(),
            vec!["127.0.0.1:2101", "127.0.0.1:2102"]
        );
        let error = options(2, 0, Peers::Pattern("peer:2101".into()))
            .addresses()
            .unwrap_err()
            .to_string();
        assert!(error.contains("no {i}"), "{error}");
    }

    #[test]
    fn a_statefulset_names_its_peers_and_its_process() {
        let pattern = Peers::Pattern("eligibility-{i}.eligibility-peers.prod.svc.cluster.local:2101".into());
        assert_eq!(
            options(3, 1, pattern).addresses().unwrap(),
            vec![
                "eligibility-0.eligibility-peers.prod.svc.cluster.local:2101",
                "eligibility-1.eligibility-peers.prod.svc.cluster.local:2101",
                "eligibility-2.eligibility-peers.prod.svc.cluster.local:2101",
            ]
        );
        assert_eq!(ordinal_of("eligibility-12").unwrap(), 12);
        assert_eq!(ordinal_of("my-job-eligibility-0").unwrap(), 0);
        assert!(ordinal_of("eligibility").is_err());
        assert_eq!(fingerprint(&["a", "b"]), fingerprint(&["a", "b"]));
        assert_ne!(fingerprint(&["a", "b"]), fingerprint(&["ab"]));
    }
}
