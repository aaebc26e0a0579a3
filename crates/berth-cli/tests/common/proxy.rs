//! A TCP proxy for partition tests: it listens on `127.0.0.1:0` and forwards every connection
//! to a target (a head's address), byte for byte, one thread per direction.
//!
//! [`Proxy::cut`] makes a partition: every forwarded connection is shut down at once (both
//! sides see it end) and connections made during the cut are refused (accepted and closed at
//! once, so a client's connect or first call fails quickly and it retries later).
//! [`Proxy::stall`] makes a silent partition instead (a black hole): connections stay open
//! and new ones are accepted, but no byte passes in either direction, so neither side notices
//! anything but silence. [`Proxy::heal`] ends either: new connections are forwarded again, and
//! stalled ones resume where they stopped (what was sent meanwhile arrives late, as TCP does
//! after a partition heals); cut ones are gone for good. [`Proxy::lose_answers`] cuts the
//! next connections at the first byte of their answer: the request reached the head, its
//! answer never reaches the client. Dropping the proxy cuts everything and ends its threads.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// The longest wait for the target to accept a forwarded connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a stalled connection looks whether it may go on.
const STALL_POLL: Duration = Duration::from_millis(5);

struct Shared {
    target: SocketAddr,
    /// Refuse new connections (a partition).
    cut: AtomicBool,
    /// Hold every byte (a silent partition).
    stalled: AtomicBool,
    /// The proxy is being dropped.
    closing: AtomicBool,
    /// Both ends of every forwarded connection still open (clones, to shut them down).
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    /// Connections forwarded so far.
    forwarded: AtomicUsize,
    /// Connections refused so far (during a cut).
    refused: AtomicUsize,
    /// Answers still to lose (see [`Proxy::lose_answers`]).
    to_lose: AtomicUsize,
}

impl Shared {
    fn open(&self) -> MutexGuard<'_, Vec<(TcpStream, TcpStream)>> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Shuts down every forwarded connection (both ends, both directions).
    fn shut_all(&self) {
        for (client, server) in self.open().drain(..) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }
}

/// A TCP proxy to one target; see the [module documentation](self).
pub struct Proxy {
    address: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// A proxy forwarding to `target` (`HOST:PORT`), listening on a free loopback port.
    pub fn start(target: &str) -> Proxy {
        let target: SocketAddr = target.parse().unwrap_or_else(|e| panic!("{target:?}: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("the proxy binds a free port");
        let address = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            target,
            cut: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
            forwarded: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            to_lose: AtomicUsize::new(0),
        });
        let accepting = shared.clone();
        let acceptor = thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept_loop(&listener, &accepting))
            .expect("the proxy's thread starts");
        Proxy { address, shared, acceptor: Some(acceptor) }
    }

    /// The address to connect to instead of the target (`127.0.0.1:PORT`).
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// Partitions: closes every forwarded connection and refuses new ones until [`heal`].
    ///
    /// [`heal`]: Proxy::heal
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.shut_all();
    }

    /// Partitions silently: every connection, open or new, stays open but carries nothing
    /// until [`heal`].
    ///
    /// [`heal`]: Proxy::heal
    pub fn stall(&self) {
        self.shared.stalled.store(true, Ordering::SeqCst);
    }

    /// Ends the partition: new connections are forwarded again, stalled ones resume.
    pub fn heal(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
        self.shared.stalled.store(false, Ordering::SeqCst);
    }

    /// Loses the next `n` answers: a connection whose answer starts is cut instead, before a
    /// byte of it passes (as a head killed, or a network lost, right after it acted).
    pub fn lose_answers(&self, n: usize) {
        self.shared.to_lose.store(n, Ordering::SeqCst);
    }

    /// True while cut.
    pub fn is_cut(&self) -> bool {
        self.shared.cut.load(Ordering::SeqCst)
    }

    /// How many connections were forwarded so far.
    pub fn forwarded(&self) -> usize {
        self.shared.forwarded.load(Ordering::SeqCst)
    }

    /// How many connections were refused so far (made during a cut).
    pub fn refused(&self) -> usize {
        self.shared.refused.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.shut_all();
        // Wake the acceptor blocked in `accept`.
        let _ = TcpStream::connect_timeout(&self.address, CONNECT_TIMEOUT);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for incoming in listener.incoming() {
        if shared.closing.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = incoming else { continue };
        if shared.cut.load(Ordering::SeqCst) {
            // Refused: closed before a byte goes anywhere.
            shared.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let server = match TcpStream::connect_timeout(&shared.target, CONNECT_TIMEOUT) {
            Ok(server) => server,
            Err(_) => {
                let _ = client.shutdown(Shutdown::Both);
                continue;
            }
        };
        if let Err(e) = forward(client, server, shared) {
            eprintln!("proxy: cannot forward a connection: {e}");
        }
    }
}

/// Starts the two copying threads of one connection and records it for [`Proxy::cut`].
fn forward(client: TcpStream, server: TcpStream, shared: &Arc<Shared>) -> io::Result<()> {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    {
        let mut open = shared.open();
        // A cut that came in while connecting wins: nothing gets through.
        if shared.cut.load(Ordering::SeqCst) {
            shared.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return Ok(());
        }
        open.push((client.try_clone()?, server.try_clone()?));
    }
    shared.forwarded.fetch_add(1, Ordering::SeqCst);
    let (client_in, server_in) = (client.try_clone()?, server.try_clone()?);
    let (up, down) = (shared.clone(), shared.clone());
    thread::Builder::new()
        .name("proxy-up".into())
        .spawn(move || pipe(client_in, server, &up, false))?;
    thread::Builder::new()
        .name("proxy-down".into())
        .spawn(move || pipe(server_in, client, &down, true))?;
    Ok(())
}

/// Copies `from` to `to` until either ends, then shuts both down (a connection is forwarded
/// whole or not at all: no half-open leftovers). While the proxy is stalled, what was read is
/// held back (and nothing more is read, so the sender's buffers fill up).
fn pipe(mut from: TcpStream, mut to: TcpStream, shared: &Shared, answers: bool) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(_)
                if answers
                    && shared
                        .to_lose
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok() =>
            {
                break;
            }
            Ok(n) => {
                while shared.stalled.load(Ordering::SeqCst)
                    && !shared.cut.load(Ordering::SeqCst)
                    && !shared.closing.load(Ordering::SeqCst)
                {
                    thread::sleep(STALL_POLL);
                }
                if to.write_all(&buffer[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
