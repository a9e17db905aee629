//! The CPU time of the Kafka broker on this machine, read from `/proc`, so a rebuild's
//! figures can count what serving the topics cost: on a machine with few cores the broker
//! competes with the job for them.

use std::path::Path;

/// The main class every Kafka broker (ZooKeeper or KRaft) runs under.
const BROKER_CLASS: &str = "kafka.Kafka";

/// A broker process running on this machine.
#[derive(Clone, Copy, Debug)]
pub struct LocalBroker {
    pid: u32,
}

impl LocalBroker {
    /// The one process whose command line names the broker's main class; `None` when there
    /// is none (a remote broker) or several (which one serves the topics is unknown).
    pub fn find() -> Option<Self> {
        find_by_command_line(BROKER_CLASS).map(|pid| LocalBroker { pid })
    }

    /// Its user and system CPU time so far, in seconds (`None` once it is gone).
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds_of(self.pid)
    }
}

/// The pid of the one process with `needle` among its arguments, other than this one.
fn find_by_command_line(needle: &str) -> Option<u32> {
    match processes_with_argument(needle)[..] {
        [pid] => Some(pid),
        _ => None,
    }
}

/// Every process with `needle` among its arguments, other than this one.
fn processes_with_argument(needle: &str) -> Vec<u32> {
    let own = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let command = std::fs::read(Path::new("/proc").join(pid.to_string()).join("cmdline")).ok()?;
            let matches = command.split(|byte| *byte == 0).any(|arg| arg == needle.as_bytes());
            (matches && pid != own).then_some(pid)
        })
        .collect()
}

/// User and system CPU time of process `pid`, in seconds.
fn cpu_seconds_of(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf only reads a constant of the system.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks_per_second > 0).then(|| cpu_ticks(&stat).map(|ticks| ticks as f64 / ticks_per_second as f64))?
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line; the command name (field 2)
/// is in parentheses and may hold spaces and parentheses itself, so fields count from the last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_count_from_the_end_of_the_command_name() {
        let stat = "9643 (java (x) y) S 1 9600 9600 0 -1 4194560 5000 0 3 0 1234 56 0 0 20 0 80 0 100 0 0";
        assert_eq!(cpu_ticks(stat), Some(1234 + 56));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn a_process_is_found_by_an_argument_and_its_cpu_time_read() {
        // Unique to this run: seconds to sleep, with this process's id as the fraction.
        let needle = format!("30.{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg(&needle)
            .spawn()
            .expect("sleep runs");
        // The child's command line may read empty for a moment while it is exec'd.
        let waiting = std::time::Instant::now();
        let mut found = processes_with_argument(&needle);
        while found.is_empty() && waiting.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            found = processes_with_argument(&needle);
        }
        let one = find_by_command_line(&needle);
        child.kill().ok();
        child.wait().ok();
        assert_eq!(found, vec![child.id()], "the sleeping child, by its argument");
        assert_eq!(one, Some(child.id()));
        assert_eq!(find_by_command_line("no-process-has-this-argument-7f3a"), None);
        // Spin until the clock ticks (10 ms at most on Linux), then the time must have grown.
        let own = std::process::id();
        let before = cpu_seconds_of(own).expect("this process has a stat");
        let busy = std::time::Instant::now();
        let mut after = before;
        while after <= before && busy.elapsed().as_secs() < 10 {
            std::hint::black_box((0..10_000u64).sum::<u64>());
            after = cpu_seconds_of(own).expect("this process has a stat");
        }
        assert!(after > before, "{before} -> {after}");
    }
}
