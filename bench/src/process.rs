//! Runs a child process and measures its wall time, CPU time and peak resident memory.
//!
//! Peak memory is the `ru_maxrss` the kernel reports when the child is reaped with
//! `wait4`: the high-water mark of every page the process held, read after it ended, so
//! nothing is missed between samples and the child need not cooperate (`eligibility run`
//! is measured as it ships). One caveat, which is why the parent stays small: Linux carries
//! the mark of the memory a child had before `exec` (its copy, or with `vfork` the parent's
//! own) into `ru_maxrss`, so no figure can be below the parent's own peak at spawn time;
//! that floor is recorded with every figure.

use std::io::Read;
use std::mem::MaybeUninit;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use super::measure::peak_resident_bytes;

/// What one child process cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessFigures {
    /// From spawn to exit, start-up and workload building included.
    pub wall_seconds: f64,
    /// `ru_maxrss` of the reaped child.
    pub peak_rss_bytes: u64,
    /// The parent's own peak at spawn: the least `peak_rss_bytes` can be (see the module).
    pub floor_rss_bytes: u64,
    /// User and system CPU time of the reaped child, every thread included.
    #[serde(default)]
    pub cpu_seconds: f64,
}

impl ProcessFigures {
    /// (wall, peak RSS) of this process over `other`'s: above 1, this one spent more.
    pub fn versus(&self, other: &ProcessFigures) -> (f64, f64) {
        (
            self.wall_seconds / other.wall_seconds.max(1e-9),
            self.peak_rss_bytes as f64 / other.peak_rss_bytes.max(1) as f64,
        )
    }
}

/// A finished child: what it printed on stdout, and what it cost.
pub struct Finished {
    pub stdout: Vec<u8>,
    pub figures: ProcessFigures,
}

/// Runs `command` to its end, its stdout captured; fails if it does not exit with 0.
pub fn run_measured(mut command: Command) -> anyhow::Result<Finished> {
    command.stdin(Stdio::null()).stdout(Stdio::piped());
    let floor_rss_bytes = peak_resident_bytes();
    let started = Instant::now();
    let mut child = command
        .spawn()
        .with_context(|| format!("cannot start {:?}", command.get_program()))?;
    let mut stdout = Vec::new();
    // Read to the end before waiting, so a child with much to say cannot block on the pipe.
    child
        .stdout
        .take()
        .expect("stdout is piped")
        .read_to_end(&mut stdout)
        .context("cannot read a child's output")?;
    let (status, usage) = wait_with_usage(child.id())?;
    let wall_seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(Finished {
        stdout,
        figures: ProcessFigures {
            wall_seconds,
            peak_rss_bytes: usage.peak_rss_bytes,
            floor_rss_bytes,
            cpu_seconds: usage.cpu_seconds,
        },
    })
}

/// Runs `commands` at once (the processes of one cluster) to their ends, their stdout and
/// stderr as the caller set them; one figure per command, each wall time from the common
/// start. If one fails, the others are killed, as a cluster missing a member would wait.
pub fn run_measured_together(commands: Vec<Command>) -> anyhow::Result<Vec<ProcessFigures>> {
    let floor_rss_bytes = peak_resident_bytes();
    let started = Instant::now();
    let mut children = Vec::with_capacity(commands.len());
    for mut command in commands {
        command.stdin(Stdio::null());
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {:?}", command.get_program()))?;
        children.push((command, child));
    }
    let mut figures = vec![ProcessFigures::default(); children.len()];
    let mut reaped = vec![false; children.len()];
    let mut failure = None;
    while reaped.contains(&false) {
        // Any child: a member that fails first must not wait behind one that waits for it.
        let (pid, status, usage) = wait4(-1)?;
        let pid = pid as u32;
        let Some(index) = children.iter().position(|(_, child)| child.id() == pid) else {
            continue;
        };
        reaped[index] = true;
        figures[index] = ProcessFigures {
            wall_seconds: started.elapsed().as_secs_f64(),
            peak_rss_bytes: usage.peak_rss_bytes,
            floor_rss_bytes,
            cpu_seconds: usage.cpu_seconds,
        };
        if !status.success() && failure.is_none() {
            failure = Some(format!("{:?} failed: {status}", children[index].0));
            for (_, child) in children
                .iter_mut()
                .zip(&reaped)
                .filter(|(_, done)| !**done)
                .map(|(c, _)| c)
            {
                child.kill().ok();
            }
        }
    }
    match failure {
        Some(failure) => bail!(failure),
        None => Ok(figures),
    }
}

/// What a reaped child used, from its `rusage`.
#[derive(Clone, Copy, Debug)]
struct Usage {
    peak_rss_bytes: u64,
    cpu_seconds: f64,
}

/// Reaps the child `pid` (std's `Child::wait` discards the resource usage).
fn wait_with_usage(pid: u32) -> anyhow::Result<(ExitStatus, Usage)> {
    let pid = libc::pid_t::try_from(pid).context("a pid out of range")?;
    let (_, status, usage) = wait4(pid)?;
    Ok((status, usage))
}

/// `wait4` on `pid` (-1: any child): the reaped pid, its status and what it used.
fn wait4(pid: libc::pid_t) -> anyhow::Result<(libc::pid_t, ExitStatus, Usage)> {
    let mut status = 0;
    let mut usage = MaybeUninit::<libc::rusage>::zeroed();
    let reaped = loop {
        // SAFETY: `status` and `usage` are valid for writes for the duration of the call.
        let reaped = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
        if reaped > 0 {
            break reaped;
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error).context("cannot wait for a child");
        }
    };
    // SAFETY: `wait4` returned a child, so it filled `usage` in; zeroed is valid anyway.
    let usage = unsafe { usage.assume_init() };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    let usage = Usage {
        // Linux reports `ru_maxrss` in KiB.
        peak_rss_bytes: u64::try_from(usage.ru_maxrss).unwrap_or(0) * 1024,
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
    };
    Ok((reaped, ExitStatus::from_raw(status), usage))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_child_and_reports_its_failure() {
        let mut command = Command::new("sh");
        command.args(["-c", "echo hello"]);
        let finished = run_measured(command).expect("sh runs");
        assert_eq!(finished.stdout, b"hello\n");
        assert!(finished.figures.peak_rss_bytes > 0 && finished.figures.wall_seconds > 0.0);
        // A child that spins for a while is charged for it.
        let mut spinning = Command::new("sh");
        spinning.args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"]);
        let spun = run_measured(spinning).expect("sh runs");
        assert!(
            spun.figures.cpu_seconds > 0.05 && spun.figures.cpu_seconds <= spun.figures.wall_seconds * 1.5,
            "{:?}",
            spun.figures
        );
        let mut failing = Command::new("sh");
        failing.args(["-c", "exit 3"]);
        let error = run_measured(failing).err().expect("a failing child fails");
        assert!(format!("{error:#}").contains("exit status: 3"), "{error:#}");
    }
}
