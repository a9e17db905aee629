//! The cluster layout in layers: the command line over the config file's `[cluster]` over
//! the defaults.

use std::path::PathBuf;

use clap::Args;
use serde::Deserialize;

use super::{ordinal_of, ClusterOptions, Peers};

/// Cluster layout; command-line options override it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Worker threads per process.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Processes in the cluster.
    #[serde(default = "default_processes")]
    pub processes: usize,
    /// File of `host:port` lines, one per process.
    pub hostfile: Option<PathBuf>,
    /// The peers as a `host:port` pattern with `{i}` for the process index.
    pub peers: Option<String>,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            workers: default_workers(),
            processes: default_processes(),
            hostfile: None,
            peers: None,
        }
    }
}

fn default_workers() -> usize {
    1
}

fn default_processes() -> usize {
    1
}

/// Cluster layout, shared by every command that starts timely workers. Each option
/// overrides the config file's `[cluster]`; each can also come from the environment, as
/// on Kubernetes.
#[derive(Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Worker threads per process [default: 1].
    #[arg(long, env = "ELIGIBILITY_WORKERS")]
    pub workers: Option<usize>,
    /// Number of processes in the cluster [default: 1].
    #[arg(long, env = "ELIGIBILITY_PROCESSES")]
    pub processes: Option<usize>,
    /// Index of this process, 0-based [default: 0].
    #[arg(long, env = "ELIGIBILITY_PROCESS", conflicts_with = "pod_name")]
    pub process: Option<usize>,
    /// A StatefulSet pod name; its ordinal suffix is the process index (`eligibility-2`: 2).
    #[arg(long, env = "ELIGIBILITY_POD_NAME")]
    pub pod_name: Option<String>,
    /// File of host:port lines, one per process, in process order.
    #[arg(long, conflicts_with = "peers")]
    pub hostfile: Option<PathBuf>,
    /// The peers as a host:port pattern, `{i}` standing for the process index.
    #[arg(long, env = "ELIGIBILITY_PEERS")]
    pub peers: Option<String>,
    /// Port of process 0's start-up rendezvous [default: its peer port + 1].
    #[arg(long, env = "ELIGIBILITY_RENDEZVOUS_PORT")]
    pub rendezvous_port: Option<u16>,
}

impl ClusterArgs {
    /// The layout: these options over the config file's, over the defaults. `fingerprint`
    /// is what every process must agree on besides the layout.
    pub fn resolve(&self, config: Option<&ClusterConfig>, fingerprint: u64) -> anyhow::Result<ClusterOptions> {
        let defaults = ClusterOptions::default();
        let process = match (&self.process, &self.pod_name) {
            (Some(process), _) => *process,
            (None, Some(pod_name)) => ordinal_of(pod_name)?,
            (None, None) => defaults.process,
        };
        let peers = match (&self.hostfile, &self.peers, config) {
            (Some(path), _, _) => Peers::Hostfile(path.clone()),
            (None, Some(pattern), _) => Peers::Pattern(pattern.clone()),
            (None, None, Some(config)) => match (&config.hostfile, &config.peers) {
                (Some(path), _) => Peers::Hostfile(path.clone()),
                (None, Some(pattern)) => Peers::Pattern(pattern.clone()),
                (None, None) => Peers::Alone,
            },
            (None, None, None) => Peers::Alone,
        };
        Ok(ClusterOptions {
            workers: self.workers.or(config.map(|c| c.workers)).unwrap_or(defaults.workers),
            processes: self
                .processes
                .or(config.map(|c| c.processes))
                .unwrap_or(defaults.processes),
            process,
            peers,
            rendezvous_port: self.rendezvous_port,
            fingerprint,
        })
    }
}
