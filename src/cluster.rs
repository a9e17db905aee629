//! Timely cluster start-up: how many workers, in which processes, at which addresses.
//!
//! Worker indices are global (`process * workers + local`), so worker 0 always lives in
//! process 0, the one that writes the file outputs. A lost peer ends every process: the
//! cluster restarts as a whole and replays from its inputs.

use std::path::PathBuf;

use anyhow::{bail, Context};
use timely::{CommunicationConfig, WorkerConfig};

/// Merge effort spent on idle arrangements, so traces compact when input stops.
const IDLE_MERGE_EFFORT: isize = 1_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Worker threads per process.
    pub workers: usize,
    /// Processes in the cluster.
    pub processes: usize,
    /// This process's index, `0..processes`.
    pub process: usize,
    /// A file of `host:port` lines, one per process in index order.
    pub hostfile: Option<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            workers: 1,
            processes: 1,
            process: 0,
            hostfile: None,
        }
    }
}

impl ClusterOptions {
    /// Total workers in the cluster.
    pub fn peers(&self) -> usize {
        self.workers * self.processes
    }

    /// Reads the peer addresses, checking there is one per process.
    pub fn addresses(&self) -> anyhow::Result<Vec<String>> {
        let path = self
            .hostfile
            .as_ref()
            .context("--processes above 1 needs --hostfile, a file of host:port lines, one per process")?;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read the hostfile {}", path.display()))?;
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
        for (index, address) in addresses.iter().enumerate() {
            if !address.contains(':') {
                bail!("hostfile line {} ({address:?}) is not host:port", index + 1);
            }
            if addresses[..index].contains(address) {
                bail!("the hostfile lists {address} twice");
            }
        }
        Ok(addresses.into_iter().take(self.processes).collect())
    }

    /// The timely configuration for this process.
    pub fn timely_config(&self) -> anyhow::Result<timely::Config> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hostfile(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    #[test]
    fn misconfigured_clusters_fail_clearly() {
        let options = |processes, process, hostfile: Option<PathBuf>| ClusterOptions {
            workers: 2,
            processes,
            process,
            hostfile,
        };
        let error = options(2, 2, None).timely_config().unwrap_err().to_string();
        assert!(error.contains("out of range"), "{error}");
        let error = options(2, 0, None).timely_config().unwrap_err().to_string();
        assert!(error.contains("needs --hostfile"), "{error}");
        let short = hostfile("127.0.0.1:2101\n");
        let error = options(2, 0, Some(short.path().into()))
            .timely_config()
            .unwrap_err()
            .to_string();
        assert!(error.contains("lists 1 addresses"), "{error}");
        let twice = hostfile("127.0.0.1:2101\n127.0.0.1:2101\n");
        let error = options(2, 0, Some(twice.path().into()))
            .timely_config()
            .unwrap_err()
            .to_string();
        assert!(error.contains("twice"), "{error}");
        let good = hostfile("# peers\n127.0.0.1:2101\n\n127.0.0.1:2102\n");
        assert_eq!(
            options(2, 1, Some(good.path().into())).addresses().unwrap(),
            vec!["127.0.0.1:2101", "127.0.0.1:2102"]
        );
    }
}
