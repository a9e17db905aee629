//! A buffered output whose full buffers are written by a thread of its own.
//!
//! A rebuild into an empty JSONL sink ends with one time of every pair: 1.5 GB of lines at
//! 10M products, formatted and written by the one worker that owns the file while the
//! others idle. Copying them into the page cache (`write`) was a fifth of that tail; here
//! it overlaps the formatting of the next megabyte on another core.
//!
//! ```text
//!   caller: buffer() <- lines; spill_if_full() --Write(buf)--> thread: out.write_all(buf)
//!           (blocks when BUFFERS are out)      <--Written(buf)--  (the buffer comes back)
//!           flush(sync) --Flush--> out.flush() [+ fsync] --Flushed--> returns
//! ```
//!
//! Nothing is lost silently: a write error stops the thread and is returned by the next
//! call that waits on it; `flush` returns only once every byte before it is written.

use std::fs::File;
use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

/// A buffer is handed to the thread once it holds this many bytes.
const BUFFER: usize = 1 << 20;
/// Buffers written or waiting on the thread at most: beyond, the caller waits.
const BUFFERS: usize = 4;

enum Job {
    Write(Vec<u8>),
    Flush { sync: bool },
}

enum Done {
    /// A written buffer, emptied, to be filled again.
    Written(Vec<u8>),
    Flushed,
    Failed(io::Error),
}

pub struct WriteBehind {
    buffer: Vec<u8>,
    spare: Vec<Vec<u8>>,
    out_on_thread: usize,
    jobs: Option<SyncSender<Job>>,
    done: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
}

impl WriteBehind {
    /// Starts the thread that writes to `out`; `sync`, if given, is the file `out` writes,
    /// synced to disk by `flush(true)`.
    pub fn spawn(out: Box<dyn Write + Send>, sync: Option<File>) -> io::Result<Self> {
        let (jobs, job_queue) = mpsc::sync_channel(BUFFERS);
        let (done_sender, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("jsonl-writer".to_owned())
            .spawn(move || write_jobs(out, sync, job_queue, done_sender))?;
        Ok(WriteBehind {
            buffer: Vec::with_capacity(BUFFER),
            spare: Vec::new(),
            out_on_thread: 0,
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Where the next bytes go; call [`spill_if_full`](Self::spill_if_full) after.
    pub fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.buffer
    }

    /// Hands the buffer to the thread once it is full.
    pub fn spill_if_full(&mut self) -> io::Result<()> {
        if self.buffer.len() >= BUFFER {
            self.spill()?;
        }
        Ok(())
    }

    /// Writes everything given so far and flushes it to the output (and to disk if `sync`).
    pub fn flush(&mut self, sync: bool) -> io::Result<()> {
        if !self.buffer.is_empty() {
            self.spill()?;
        }
        self.send(Job::Flush { sync })?;
        while !self.receive()? {}
        Ok(())
    }

    fn spill(&mut self) -> io::Result<()> {
        while self.spare.is_empty() && self.out_on_thread >= BUFFERS {
            self.receive()?;
        }
        let next = self.spare.pop().unwrap_or_else(|| Vec::with_capacity(BUFFER));
        let full = std::mem::replace(&mut self.buffer, next);
        self.send(Job::Write(full))?;
        self.out_on_thread += 1;
        Ok(())
    }

    fn send(&mut self, job: Job) -> io::Result<()> {
        let sent = self.jobs.as_ref().is_some_and(|jobs| jobs.send(job).is_ok());
        if sent {
            return Ok(());
        }
        // The thread stopped: its error is waiting.
        loop {
            self.receive()?;
        }
    }

    /// Waits for the thread's next answer (a written buffer goes back to the spares);
    /// whether it was a flush's.
    fn receive(&mut self) -> io::Result<bool> {
        match self.done.recv() {
            Ok(Done::Written(buffer)) => {
                self.out_on_thread -= 1;
                self.spare.push(buffer);
                Ok(false)
            }
            Ok(Done::Flushed) => Ok(true),
            Ok(Done::Failed(error)) => Err(error),
            Err(_) => Err(io::Error::other("the output's writer thread stopped")),
        }
    }
}

impl Drop for WriteBehind {
    /// What is still buffered is written before the thread ends (as a `BufWriter`'s drop
    /// would, errors ignored: a caller that needs them calls `flush`).
    fn drop(&mut self) {
        if !self.buffer.is_empty() {
            let _ = self.spill();
        }
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Bytes written between two starts of the file's writeback ([`start_writeback`]).
const WRITEBACK_EVERY: usize = if cfg!(test) { 1 << 16 } else { 32 << 20 };

fn write_jobs(mut out: Box<dyn Write + Send>, sync: Option<File>, jobs: Receiver<Job>, done: mpsc::Sender<Done>) {
    let mut unsynced = 0;
    for job in jobs {
        let result = match job {
            Job::Write(mut buffer) => out.write_all(&buffer).map(|()| {
                unsynced += buffer.len();
                if unsynced >= WRITEBACK_EVERY {
                    unsynced = 0;
                    if let Some(file) = &sync {
                        start_writeback(file);
                    }
                }
                buffer.clear();
                Done::Written(buffer)
            }),
            Job::Flush { sync: to_disk } => out
                .flush()
                .and_then(|()| match (&sync, to_disk) {
                    (Some(file), true) => file.sync_data(),
                    _ => Ok(()),
                })
                .map(|()| Done::Flushed),
        };
        let failed = result.is_err();
        let _ = done.send(result.unwrap_or_else(Done::Failed));
        if failed {
            return;
        }
    }
}

/// Starts writing the file's dirty pages to disk without waiting for them, so that the sync
/// that acknowledges a large time (a rebuild's 1.5 GB of lines) waits only for its last
/// megabytes: the kernel would otherwise hold them all until the sync (0.37-0.56 s measured
/// for 1.5 GB, every worker idle). Durability still comes from `sync_data` alone.
fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // Offset 0 and length 0: the whole file. A hint: a failure only loses the overlap.
        // SAFETY: the descriptor is the open file's, valid while `file` lives.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// An output that keeps what it is given and can be told to fail.
    #[derive(Clone, Default)]
    struct Recorded {
        bytes: Arc<Mutex<Vec<u8>>>,
        flushes: Arc<Mutex<usize>>,
        fail_after: Option<usize>,
    }

    impl Write for Recorded {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            let mut bytes = self.bytes.lock().unwrap();
            if self.fail_after.is_some_and(|limit| bytes.len() + data.len() > limit) {
                return Err(io::Error::other("disk full"));
            }
            bytes.extend_from_slice(data);
            Ok(data.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            *self.flushes.lock().unwrap() += 1;
            Ok(())
        }
    }

    fn lines(count: usize) -> Vec<u8> {
        (0..count).flat_map(|n| format!("line {n}\n").into_bytes()).collect()
    }

    #[test]
    fn every_byte_arrives_in_order_across_many_buffers_and_flushes() {
        let out = Recorded::default();
        let mut writer = WriteBehind::spawn(Box::new(out.clone()), None).unwrap();
        let expected = lines(400_000);
        for (n, line) in expected.split_inclusive(|b| *b == b'\n').enumerate() {
            writer.buffer().extend_from_slice(line);
            writer.spill_if_full().unwrap();
            if n == 1_000 {
                writer.flush(false).unwrap();
                assert_eq!(
                    out.bytes.lock().unwrap().len(),
                    lines(1_001).len(),
                    "flush waits for the thread"
                );
            }
        }
        writer.flush(false).unwrap();
        assert!(
            expected.len() > BUFFERS * BUFFER,
            "more buffers than may be out at once"
        );
        assert_eq!(*out.bytes.lock().unwrap(), expected);
        assert_eq!(*out.flushes.lock().unwrap(), 2);
        assert!(writer.spare.len() <= BUFFERS + 1, "buffers are reused, not made anew");
    }

    #[test]
    fn a_synced_file_written_past_many_writeback_starts_holds_every_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("changes.jsonl");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let sync = file.try_clone().unwrap();
        let mut writer = WriteBehind::spawn(Box::new(file), Some(sync)).unwrap();
        let expected = lines(200_000);
        assert!(expected.len() > 20 * WRITEBACK_EVERY, "the writeback starts many times");
        for line in expected.split_inclusive(|b| *b == b'\n') {
            writer.buffer().extend_from_slice(line);
            writer.spill_if_full().unwrap();
        }
        writer.flush(true).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn what_is_buffered_is_written_on_drop() {
        let out = Recorded::default();
        let mut writer = WriteBehind::spawn(Box::new(out.clone()), None).unwrap();
        writer.buffer().extend_from_slice(b"last line\n");
        drop(writer);
        assert_eq!(*out.bytes.lock().unwrap(), b"last line\n");
    }

    #[test]
    fn a_write_error_reaches_the_caller_and_every_later_call() {
        let out = Recorded {
            fail_after: Some(BUFFER + 10),
            ..Recorded::default()
        };
        let mut writer = WriteBehind::spawn(Box::new(out), None).unwrap();
        let mut first_error = None;
        for _ in 0..3 * BUFFERS {
            writer.buffer().resize(BUFFER, b'x');
            if let Err(error) = writer.spill_if_full() {
                first_error = Some(error);
                break;
            }
        }
        let error = first_error
            .or_else(|| writer.flush(false).err())
            .expect("the error surfaces");
        assert!(error.to_string().contains("disk full"), "{error}");
        assert!(writer.flush(false).is_err(), "a stopped writer keeps failing");
    }
}
