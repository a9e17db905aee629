//! The connections between the processes that timely's cluster allocator runs on.
//!
//! Timely makes them itself inside `execute` (`CommunicationConfig::Cluster`), but it retries
//! a refused connection after a second and looks at its listener once a second: a cluster
//! start lost 1-2 s there (2.0 s of a 2-process rebuild of 10M products, measured), and every
//! restart of every pod pays it. The same connections are made here, waiting milliseconds,
//! and handed to timely whole (`initialize_networking_from_sockets`), as timely would have
//! them: process `i` connects to every process below it and says its index, and accepts the
//! ones above it.

use std::any::Any;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use thiserror::Error;
use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
use timely::communication::allocator::ProcessBuilder;
use timely::communication::{AllocatorBuilder, Hooks};

/// How long a refused or missing connection waits before it is tried again.
const RETRY: Duration = Duration::from_millis(10);

#[derive(Debug, Error)]
pub enum ConnectError {
    #[error("cannot listen on {address}: {source}")]
    Listen { address: String, source: std::io::Error },
    #[error("process {peer} at {address} did not accept a connection within {} s: {source}", .patience.as_secs())]
    Connect {
        peer: usize,
        address: String,
        patience: Duration,
        source: std::io::Error,
    },
    #[error("processes {missing:?} did not connect within {} s", .patience.as_secs())]
    NotConnected { missing: Vec<usize>, patience: Duration },
    #[error("a connection from a process failed: {0}")]
    Handshake(std::io::Error),
    #[error("a connection said it came from process {0}, which is not above this one in the cluster")]
    UnexpectedPeer(u64),
}

/// Connects this process (`process` of `addresses.len()`) to every other, within `patience`:
/// entry `j` is the stream to process `j`, `None` for this one.
pub fn connect_processes(
    addresses: &[String],
    process: usize,
    patience: Duration,
) -> Result<Vec<Option<TcpStream>>, ConnectError> {
    let deadline = Instant::now() + patience;
    // Listening first: a process above that connects before this one accepts waits in the
    // backlog instead of being refused.
    let own = &addresses[process];
    let listeners = own
        .split_whitespace()
        .map(|address| {
            let listener = TcpListener::bind(address).map_err(|source| ConnectError::Listen {
                address: address.to_owned(),
                source,
            })?;
            listener.set_nonblocking(true).map_err(|source| ConnectError::Listen {
                address: address.to_owned(),
                source,
            })?;
            Ok(listener)
        })
        .collect::<Result<Vec<_>, ConnectError>>()?;
    let mut streams: Vec<Option<TcpStream>> = (0..addresses.len()).map(|_| None).collect();
    for (peer, address) in addresses.iter().enumerate().take(process) {
        streams[peer] = Some(connect_to(peer, address, process, deadline, patience)?);
    }
    while let Some(missing) = missing_above(&streams, process) {
        let mut accepted = false;
        for listener in &listeners {
            match listener.accept() {
                Ok((stream, _)) => {
                    let (peer, stream) = handshake(stream)?;
                    match usize::try_from(peer) {
                        Ok(index) if index > process && index < streams.len() => streams[index] = Some(stream),
                        _ => return Err(ConnectError::UnexpectedPeer(peer)),
                    }
                    accepted = true;
                }
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(ConnectError::Handshake(error)),
            }
        }
        if !accepted {
            if Instant::now() > deadline {
                return Err(ConnectError::NotConnected { missing, patience });
            }
            std::thread::sleep(RETRY);
        }
    }
    Ok(streams)
}

/// The processes above this one not connected yet, if any.
fn missing_above(streams: &[Option<TcpStream>], process: usize) -> Option<Vec<usize>> {
    let missing: Vec<usize> = (process + 1..streams.len())
        .filter(|&peer| streams[peer].is_none())
        .collect();
    (!missing.is_empty()).then_some(missing)
}

fn connect_to(
    peer: usize,
    address: &str,
    process: usize,
    deadline: Instant,
    patience: Duration,
) -> Result<TcpStream, ConnectError> {
    loop {
        match TcpStream::connect(address) {
            Ok(mut stream) => {
                let said = stream
                    .set_nodelay(true)
                    .and_then(|()| stream.write_all(&(process as u64).to_le_bytes()));
                return said.map(|()| stream).map_err(ConnectError::Handshake);
            }
            Err(source) if Instant::now() > deadline => {
                return Err(ConnectError::Connect {
                    peer,
                    address: address.to_owned(),
                    patience,
                    source,
                })
            }
            Err(_) => std::thread::sleep(RETRY),
        }
    }
}

/// Reads which process an accepted connection comes from.
fn handshake(mut stream: TcpStream) -> Result<(u64, TcpStream), ConnectError> {
    let mut index = [0; 8];
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_nodelay(true))
        .and_then(|()| stream.read_exact(&mut index))
        .map_err(ConnectError::Handshake)?;
    Ok((u64::from_le_bytes(index), stream))
}

/// Timely's allocators for the `workers` of this process over `streams`, as
/// `CommunicationConfig::Cluster` (not zero-copy) builds them.
pub fn cluster_allocators(
    streams: Vec<Option<TcpStream>>,
    process: usize,
    workers: usize,
) -> std::io::Result<(Vec<AllocatorBuilder>, Box<dyn Any + Send>)> {
    let hooks = Hooks::default();
    let local = ProcessBuilder::new_typed_vector(workers, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) = initialize_networking_from_sockets(local, streams, process, workers, hooks)?;
    Ok((
        builders.into_iter().map(AllocatorBuilder::Tcp).collect(),
        Box::new(guard),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three processes started highest first connect each pair once: the stream process `p`
    /// holds for `q` is the one `q` holds for `p`, seen from the other end.
    #[test]
    fn processes_started_apart_connect_each_pair_once() {
        let addresses: Vec<String> = (0..3)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port())
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        // The lowest last: the others must wait for it.
        let handles: Vec<_> = [2, 1, 0]
            .into_iter()
            .map(|process| {
                let addresses = addresses.clone();
                let handle =
                    std::thread::spawn(move || connect_processes(&addresses, process, Duration::from_secs(10)));
                std::thread::sleep(Duration::from_millis(50));
                (process, handle)
            })
            .collect();
        let mut streams: Vec<Vec<Option<TcpStream>>> = (0..3).map(|_| Vec::new()).collect();
        for (process, handle) in handles {
            streams[process] = handle.join().unwrap().unwrap();
        }
        for (p, own) in streams.iter().enumerate() {
            assert!(own[p].is_none());
            for q in (0..3).filter(|&q| q != p) {
                let (ours, theirs) = (own[q].as_ref().unwrap(), streams[q][p].as_ref().unwrap());
                assert_eq!(ours.peer_addr().unwrap(), theirs.local_addr().unwrap(), "{p} to {q}");
            }
        }
    }

    #[test]
    fn a_process_that_never_comes_is_named_after_the_patience() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addresses = vec![format!("127.0.0.1:{port}"), "127.0.0.1:1".to_owned()];
        let error = connect_processes(&addresses, 0, Duration::from_millis(100)).unwrap_err();
        assert!(
            matches!(error, ConnectError::NotConnected { ref missing, .. } if missing == &[1]),
            "{error}"
        );
    }
}
