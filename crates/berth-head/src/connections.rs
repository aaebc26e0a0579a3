//! Serving connections: REST, the dashboard and the agent protocol on one port, plain or TLS,
//! with what each connection may hold of the head bounded.
//!
//! Rules:
//! - **A cap** ([`Settings::max`]): at most that many connections are served at once. At the
//!   cap, a new connection takes the place of the one idle longest (no request in flight),
//!   preferring one that never carried a request: a client's keep-alive connection goes only
//!   when no connection is doing nothing, and the client then reconnects (an idempotent
//!   request sent as it closes is retried by the HTTP clients the SDKs use). When every
//!   connection has a request in flight, the new one is closed at once, before anything is
//!   read from it. So idle and
//!   slow clients can never keep others out, however many they open.
//! - **Header timeout** ([`Settings::header_timeout`]): an HTTP/1 request's headers must
//!   arrive within it (a client sending a byte every few seconds is cut off).
//! - **Idle timeout** ([`Settings::idle_timeout`]): a connection with no request in flight for
//!   that long is closed. A request in flight (an agent's heartbeat stream, a watch, a
//!   group's wait) keeps its connection, however quiet.
//! - **File descriptors**: [`raise_open_files`] lifts the process's soft limit to what the cap
//!   needs at start; when the hard limit is lower, the cap is lowered to fit and a warning
//!   says so, so that accepting never fails for want of a descriptor.
//!
//! Shutdown: every connection is asked to finish gracefully (requests in flight are answered);
//! [`serve`] returns when all have ended.
//!
//! HTTP/2 connections (the agents' gRPC: heartbeats, assignments, reports) are served on a
//! [`Lane`], a runtime on a thread of its own, apart from the HTTP/1 connections of REST, the
//! dashboard and the SDKs: a burst of REST requests keeps the main runtime's workers busy, but
//! the operating system still gives the lane's thread its turn, so the heartbeats that keep
//! nodes alive are read and recorded while it lasts. Without TLS an HTTP/2 connection is known
//! by its preface (REST clients speak HTTP/1.1); with TLS, by the ALPN its client hello offers
//! (the rest of the handshake is done on the lane), so a browser or client that negotiates
//! HTTP/2 over TLS shares the lane. Its socket moves to the lane's own reactor: left on the main
//! runtime's, it would be read only once a main worker polls that, however free the lane, and
//! heartbeats would wait unread in the sockets while the main workers are busy or blocked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::Router;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, watch, Notify, Semaphore};
use tokio_rustls::rustls::server::Acceptor;
use tokio_rustls::server::StartHandshake;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::metrics::Metrics;

/// How connections are bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// The most connections served at once.
    pub(crate) max: usize,
    /// How long an HTTP/1 request's headers may take to arrive.
    pub(crate) header_timeout: Duration,
    /// How long a connection may stay with no request in flight.
    pub(crate) idle_timeout: Duration,
    /// The silence after which an HTTP/2 peer is pinged (and given as long again to answer):
    /// at least [`KEEPALIVE`], and at least the heartbeat timeout, so that an agent too busy to
    /// answer for a while (a saturated machine) keeps its connection until the heartbeat clock
    /// would call it dead anyway.
    pub(crate) keepalive: Duration,
}

/// The least HTTP/2 keepalive: a ping after this much silence, the connection closed if it is
/// not answered within as long again.
pub(crate) const KEEPALIVE: Duration = Duration::from_secs(20);

/// The preface every HTTP/2 connection without TLS opens with (RFC 9113, section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A runtime on a thread of its own (`berth-agents`) for the HTTP/2 connections. It ends, and
/// every connection on it with it, when this is dropped (with the server that holds it).
pub(crate) struct Lane {
    handle: tokio::runtime::Handle,
    _stop: oneshot::Sender<()>,
}

impl Lane {
    /// Starts the thread and its runtime.
    pub(crate) async fn start() -> std::io::Result<Lane> {
        let (ready, built) = oneshot::channel::<std::io::Result<tokio::runtime::Handle>>();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new().name("berth-agents".into()).spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = ready.send(Err(err));
                    return;
                }
            };
            let _ = ready.send(Ok(runtime.handle().clone()));
            // Ends when the lane is dropped; the runtime is dropped here, on its own thread.
            runtime.block_on(async {
                let _ = stopped.await;
            });
        })?;
        let handle =
            built.await.map_err(|_| std::io::Error::other("the lane's thread ended"))??;
        Ok(Lane { handle, _stop: stop })
    }
}

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The rest of a TLS handshake whose client hello was read: it is finished where the
/// connection is served, within the deadline of the whole handshake.
struct Handshake {
    accepted: tokio_rustls::rustls::server::Accepted,
    config: Arc<tokio_rustls::rustls::ServerConfig>,
    deadline: tokio::time::Instant,
}
/// After a failed accept (out of descriptors despite the cap: another part of the process
/// holds them), a pause rather than a spin on the error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Connections past the cap that may wait at once for an idle one to make room: each holds a
/// descriptor while it waits.
const ADMITTING: usize = 64;
/// How long such a connection waits for the room.
const ADMIT_WAIT: Duration = Duration::from_secs(1);
/// At most one warning about refused connections per this long.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Descriptors the head needs besides its connections: the store, logs, the listener, its
/// data files, the agents' log streams it relays.
const OTHER_DESCRIPTORS: u64 = 256;

/// Raises the soft open-file limit to what `max` connections need (at most the hard limit);
/// returns the cap that fits, `max` or less, warning when it is less.
pub(crate) fn raise_open_files(max: usize) -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let wanted = max as u64 + OTHER_DESCRIPTORS;
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return max };
    let target = wanted.min(hard);
    let soft = if soft < target {
        match setrlimit(Resource::RLIMIT_NOFILE, target, hard) {
            Ok(()) => target,
            Err(err) => {
                tracing::warn!(error = %err, soft, "cannot raise the open-file limit");
                soft
            }
        }
    } else {
        soft
    };
    let fits = soft.saturating_sub(OTHER_DESCRIPTORS).max(16) as usize;
    if fits < max {
        tracing::warn!(
            max_connections = max,
            serving_at_most = fits,
            open_file_limit = soft,
            hard_limit = hard,
            "the open-file limit is too low for --max-connections; raise the hard limit \
             (ulimit -Hn, LimitNOFILE= in a systemd unit) to serve more at once"
        );
        return fits;
    }
    max
}

/// One connection's requests: how many are in flight, and since when none has been.
#[derive(Debug)]
struct Activity {
    in_flight: AtomicUsize,
    /// Requests it has carried: a connection that never carried one (a client that opened it
    /// and sent nothing, or half a header) is the first to go at the cap.
    requests: AtomicU64,
    /// Milliseconds since `epoch` when the last request ended (or the connection opened).
    quiet_since: AtomicU64,
    epoch: Instant,
    /// Told to close (another connection needs the room, or the head stops).
    close: Notify,
}

impl Activity {
    fn new(epoch: Instant) -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            quiet_since: AtomicU64::new(epoch.elapsed().as_millis() as u64),
            epoch,
            close: Notify::new(),
        }
    }

    /// How long it has been idle; `None` while a request is in flight.
    fn idle_for(&self) -> Option<Duration> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.quiet_since.load(Ordering::Acquire));
        Some(self.epoch.elapsed().saturating_sub(since))
    }

    fn started(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }
}

/// One request in flight, until its answer's body is sent or dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = self.0.epoch.elapsed().as_millis() as u64;
        self.0.quiet_since.store(now, Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connections being served, to find the one idle longest.
#[derive(Debug, Default)]
struct Registry {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Activity>>>,
}

impl Registry {
    fn add(&self, activity: Arc<Activity>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.open.lock().unwrap_or_else(|e| e.into_inner()).insert(id, activity);
        id
    }

    fn remove(&self, id: u64) {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    }

    /// Tells the connection idle longest to close (one that never carried a request first: a
    /// client's pooled connection is kept over one that does nothing), and forgets it so
    /// that the next room is made by another; false when every one has a request in flight.
    fn evict_idlest(&self) -> bool {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let idlest = open
            .iter()
            .filter_map(|(id, a)| {
                let unused = a.requests.load(Ordering::Relaxed) == 0;
                // Among equals, the oldest.
                Some(((unused, a.idle_for()?, std::cmp::Reverse(*id)), *id))
            })
            .max_by_key(|(rank, _)| *rank)
            .map(|(_, id)| id);
        match idlest.and_then(|id| open.remove(&id)) {
            Some(activity) => {
                activity.close.notify_one();
                true
            }
            None => false,
        }
    }

    fn close_all(&self) {
        for activity in self.open.lock().unwrap_or_else(|e| e.into_inner()).values() {
            activity.close.notify_one();
        }
    }
}

/// Serves `router` on `listener` (over TLS with `tls`) by `settings` until `shutdown` turns
/// true, HTTP/2 connections on `lane` when there is one; returns once every connection has
/// ended.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsAcceptor>,
    settings: Settings,
    (metrics, lane): (Option<Arc<Metrics>>, Option<Lane>),
    mut shutdown: watch::Receiver<bool>,
) {
    let lane_handle = lane.as_ref().map(|lane| lane.handle.clone());
    let mut builder = Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(settings.header_timeout);
    // Pings find a peer that vanished (its machine lost) on an HTTP/2 connection (agents).
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(settings.keepalive.max(KEEPALIVE)))
        .keep_alive_timeout(settings.keepalive.max(KEEPALIVE));
    let served = Arc::new(Semaphore::new(settings.max));
    let admitting = Arc::new(Semaphore::new(ADMITTING));
    let registry = Arc::new(Registry::default());
    let epoch = Instant::now();
    let (mut refused, mut warned) = (0u64, None::<Instant>);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = stopped(&mut shutdown) => break,
        };
        let permit = match served.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => match admitting.clone().try_acquire_owned() {
                // At the cap: an idle connection makes room, if there is one.
                Ok(waiting) if registry.evict_idlest() => {
                    if let Some(m) = &metrics {
                        m.connection_evicted();
                    }
                    let (served, registry, router, builder, metrics, lane) = (
                        served.clone(),
                        registry.clone(),
                        router.clone(),
                        builder.clone(),
                        metrics.clone(),
                        lane_handle.clone(),
                    );
                    let (tls, shutdown) = (tls.clone(), shutdown.clone());
                    tokio::spawn(async move {
                        let permit = tokio::time::timeout(ADMIT_WAIT, served.acquire_owned()).await;
                        drop(waiting);
                        match permit {
                            Ok(Ok(permit)) => {
                                let connection = Connection {
                                    settings,
                                    registry,
                                    router,
                                    builder,
                                    metrics,
                                    lane,
                                };
                                connection.run(tcp, tls, epoch, shutdown, permit).await;
                            }
                            // The room went to another: refused after all.
                            _ => {
                                if let Some(m) = &metrics {
                                    m.connection_refused();
                                }
                            }
                        }
                    });
                    continue;
                }
                _ => None,
            },
        };
        let Some(permit) = permit else {
            // Every connection busy: closed before anything is read.
            drop(tcp);
            refused += 1;
            if let Some(m) = &metrics {
                m.connection_refused();
            }
            if warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                tracing::warn!(%peer, refused, max_connections = settings.max, "connections refused: every one served has a request in flight (--max-connections)");
                warned = Some(Instant::now());
                refused = 0;
            }
            continue;
        };
        let connection = Connection {
            settings,
            registry: registry.clone(),
            router: router.clone(),
            builder: builder.clone(),
            metrics: metrics.clone(),
            lane: lane_handle.clone(),
        };
        let (tls, shutdown) = (tls.clone(), shutdown.clone());
        tokio::spawn(connection.run(tcp, tls, epoch, shutdown, permit));
    }
    registry.close_all();
    // Every connection returns its permit when it ends.
    let _ = served.acquire_many(settings.max as u32).await;
    drop(lane);
}

/// What serving one connection needs.
struct Connection {
    settings: Settings,
    registry: Arc<Registry>,
    router: Router,
    builder: Builder<TokioExecutor>,
    metrics: Option<Arc<Metrics>>,
    /// Where HTTP/2 connections are served, if apart.
    lane: Option<tokio::runtime::Handle>,
}

impl Connection {
    async fn run(
        self,
        tcp: TcpStream,
        tls: Option<TlsAcceptor>,
        epoch: Instant,
        shutdown: watch::Receiver<bool>,
        permit: tokio::sync::OwnedSemaphorePermit,
    ) {
        let _permit = permit;
        // Small writes (an agent's assignment, a REST answer) must not wait for the peer's
        // delayed ACK: ~40 ms each without TCP_NODELAY.
        let _ = tcp.set_nodelay(true);
        let activity = Arc::new(Activity::new(epoch));
        let id = self.registry.add(activity.clone());
        if let Some(m) = &self.metrics {
            m.connection_opened();
        }
        match tls {
            None => {
                let h2 = match &self.lane {
                    None => Some(false),
                    Some(_) => {
                        let wait = self.settings.header_timeout;
                        speaks_h2(&tcp, wait, &activity, shutdown.clone()).await
                    }
                };
                // None: told to make room while it had sent nothing; it carried no request.
                if let Some(h2) = h2 {
                    self.http_on(h2, tcp, None, activity, shutdown).await
                }
            }
            Some(acceptor) => {
                // The client's hello first, to know from its ALPN offer where to serve it (the
                // head prefers h2: `tls::acceptor`); the rest of the handshake there.
                let deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
                let hello = tokio_rustls::LazyConfigAcceptor::new(Acceptor::default(), tcp);
                match tokio::time::timeout_at(deadline, hello).await {
                    Ok(Ok(start)) => {
                        let hello = start.client_hello();
                        let h2 =
                            hello.alpn().is_some_and(|mut offered| offered.any(|p| p == b"h2"));
                        let StartHandshake { accepted, io: tcp, .. } = start;
                        let config = acceptor.config().clone();
                        let handshake = Handshake { accepted, config, deadline };
                        self.http_on(h2, tcp, Some(handshake), activity, shutdown).await
                    }
                    Ok(Err(err)) => tracing::debug!(error = %err, "TLS handshake failed"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                }
            }
        }
        self.registry.remove(id);
        if let Some(m) = &self.metrics {
            m.connection_closed();
        }
    }

    /// [`Connection::http`] on `tcp` (after `tls`, the rest of a TLS handshake), on the lane
    /// when the connection speaks HTTP/2 (`h2`) and there is one. The socket then moves to the
    /// lane's own reactor: left on the main runtime's, it would be read only once a main worker
    /// polls that, however free the lane.
    async fn http_on(
        &self,
        h2: bool,
        tcp: TcpStream,
        tls: Option<Handshake>,
        activity: Arc<Activity>,
        shutdown: watch::Receiver<bool>,
    ) {
        match &self.lane {
            Some(lane) if h2 => {
                let tcp = match tcp.into_std() {
                    Ok(tcp) => tcp,
                    Err(err) => {
                        return tracing::debug!(error = %err, "cannot move a connection to the lane")
                    }
                };
                let connection = Connection {
                    settings: self.settings,
                    registry: self.registry.clone(),
                    router: self.router.clone(),
                    builder: self.builder.clone(),
                    metrics: self.metrics.clone(),
                    lane: None,
                };
                // The lane gone (the head stopping) ends the connection.
                let _ = lane
                    .spawn(async move {
                        match TcpStream::from_std(tcp) {
                            Ok(tcp) => connection.serve_on(tcp, tls, activity, shutdown).await,
                            Err(err) => {
                                tracing::debug!(error = %err, "cannot serve a connection on the lane")
                            }
                        }
                    })
                    .await;
            }
            _ => self.serve_on(tcp, tls, activity, shutdown).await,
        }
    }

    /// [`Connection::http`] on `tcp`, after the rest of its TLS handshake if it has one.
    async fn serve_on(
        &self,
        tcp: TcpStream,
        tls: Option<Handshake>,
        activity: Arc<Activity>,
        shutdown: watch::Receiver<bool>,
    ) {
        let Some(handshake) = tls else { return self.http(tcp, activity, shutdown).await };
        let Handshake { accepted, config, deadline } = handshake;
        let rest = StartHandshake::from_parts(accepted, tcp).into_stream(config);
        match tokio::time::timeout_at(deadline, rest).await {
            Ok(Ok(stream)) => self.http(stream, activity, shutdown).await,
            Ok(Err(err)) => tracing::debug!(error = %err, "TLS handshake failed"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    }

    /// Serves HTTP on `io` until the peer closes, the connection idles out, room is needed
    /// for another, or the head stops.
    async fn http<I>(&self, io: I, activity: Arc<Activity>, mut shutdown: watch::Receiver<bool>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let router = self.router.clone();
        let counted = activity.clone();
        let service = tower::service_fn(move |request: hyper::Request<Incoming>| {
            let in_flight = counted.started();
            let router = router.clone();
            async move {
                let response = router.oneshot(request).await?;
                // The request stays in flight while its answer's body streams.
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _ = &in_flight;
                        frame
                    }))
                }))
            }
        });
        let connection = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service));
        tokio::pin!(connection);
        let stopping = tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(error = %err, "connection ended with an error");
                }
                return;
            }
            () = activity.close.notified() => false,
            () = idled(&activity, self.settings.idle_timeout) => false,
            () = stopped(&mut shutdown) => true,
        };
        if !stopping && activity.requests.load(Ordering::Relaxed) == 0 {
            // Never carried a request: nothing to answer, and its room is wanted now (a
            // graceful shutdown would wait out IDLE_GRACE for the first bytes that never come,
            // and a burst of such connections would keep clients waiting for room).
            return;
        }
        connection.as_mut().graceful_shutdown();
        if stopping {
            // Requests in flight are answered before the head stops.
            let _ = connection.await;
        } else {
            // Idle: nothing to answer. A client in the middle of its headers is cut off.
            let _ = tokio::time::timeout(IDLE_GRACE, connection).await;
        }
    }
}

/// Whether the client on `tcp` opens with the HTTP/2 preface, looking (not reading) for at
/// most `wait` and only until the head stops; a client that sends nothing meanwhile is taken
/// for HTTP/1 (and the idle rules deal with it). `None` when the connection is told to make
/// room for another meanwhile (`activity`): it has sent nothing, so it is dropped at once, as
/// a served connection that never carried a request is.
async fn speaks_h2(
    tcp: &TcpStream,
    wait: Duration,
    activity: &Activity,
    mut shutdown: watch::Receiver<bool>,
) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let peeked = tokio::select! {
            peeked = tokio::time::timeout_at(deadline, tcp.peek(&mut buf)) => peeked,
            () = activity.close.notified() => return None,
            () = stopped(&mut shutdown) => return Some(false),
        };
        let n = match peeked {
            Ok(Ok(n)) if n > 0 => n,
            _ => return Some(false),
        };
        if !H2_PREFACE.starts_with(&buf[..n]) {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        // Part of the preface: the rest is on its way (a peek would find the same bytes at
        // once, so it waits a moment rather than spin).
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// How long an idle connection told to close may take to do so.
const IDLE_GRACE: Duration = Duration::from_millis(500);

/// Returns once `shutdown` says stop.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Returns once `activity` has had no request in flight for `timeout`.
async fn idled(activity: &Activity, timeout: Duration) {
    loop {
        let wait = match activity.idle_for() {
            Some(idle) if idle >= timeout => return,
            Some(idle) => timeout - idle,
            None => timeout,
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A server with `/hold` (answered once `release` is notified; `held` counts those in
    /// flight) and `/` (answered at once).
    struct Server {
        address: std::net::SocketAddr,
        metrics: Arc<Metrics>,
        held: Arc<AtomicUsize>,
        release: Arc<Notify>,
        stop: watch::Sender<bool>,
    }

    async fn server(settings: Settings) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (held, release) = (Arc::new(AtomicUsize::new(0)), Arc::new(Notify::new()));
        let (h, r) = (held.clone(), release.clone());
        let router = Router::new().route("/", get(|| async { "ok" })).route(
            "/hold",
            get(move || {
                let (h, r) = (h.clone(), r.clone());
                async move {
                    let released = r.notified();
                    h.fetch_add(1, Ordering::SeqCst);
                    released.await;
                    "released"
                }
            }),
        );
        let metrics = Arc::new(Metrics::new());
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(serve(
            listener,
            router,
            None,
            settings,
            (Some(metrics.clone()), None),
            stopped,
        ));
        Server { address, metrics, held, release, stop }
    }

    fn settings(max: usize) -> Settings {
        Settings {
            max,
            header_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(60),
            keepalive: KEEPALIVE,
        }
    }

    /// Sends `GET path` on a new connection; returns the connection and what was read first
    /// (empty when the server closed it unanswered).
    async fn get_on_new(address: std::net::SocketAddr, path: &str) -> (TcpStream, String) {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: head\r\n\r\n");
        let _ = stream.write_all(request.as_bytes()).await;
        let answer = read_some(&mut stream).await;
        (stream, answer)
    }

    async fn read_some(stream: &mut TcpStream) -> String {
        let mut buffer = [0u8; 512];
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer));
        match read.await.expect("an answer or a close") {
            Ok(n) => String::from_utf8_lossy(&buffer[..n]).into_owned(),
            Err(_) => String::new(),
        }
    }

    async fn until(what: &str, done: impl Fn() -> bool) {
        tokio::time::timeout(Duration::from_secs(20), async {
            while !done() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"));
    }

    fn metric(server: &Server, name: &str) -> String {
        let text = server.metrics.render();
        let line = text.lines().find(|l| l.starts_with(&format!("{name} ")));
        line.unwrap_or_default().rsplit(' ').next().unwrap_or_default().to_string()
    }

    /// The thread a request to `/thread` was answered on.
    fn thread_router() -> Router {
        Router::new().route(
            "/thread",
            get(|| async { std::thread::current().name().unwrap_or("?").to_string() }),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn http2_connections_are_served_on_the_lane_and_http1_ones_are_not() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, stopped) = watch::channel(false);
        let lane = Lane::start().await.unwrap();
        let served = tokio::spawn(serve(
            listener,
            thread_router(),
            None,
            settings(8),
            (None, Some(lane)),
            stopped,
        ));
        // HTTP/1.1, as REST clients speak it.
        let (_, answer) = get_on_new(address, "/thread").await;
        assert!(answer.ends_with("\r\n\r\ntokio-rt-worker"), "the main runtime's: {answer}");
        // HTTP/2 without TLS (prior knowledge), as the agents' gRPC client speaks it.
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let request = hyper::Request::get(format!("http://{address}/thread"))
            .body(tonic::body::Body::empty())
            .unwrap();
        let response = tower::ServiceExt::oneshot(channel, request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"berth-agents");
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(10), served).await.unwrap().unwrap();
    }

    /// `GET /thread` on `channel` (HTTP/2), bounded: the body, or `None` after 20 s.
    async fn thread_of(channel: &tonic::transport::Channel) -> Option<String> {
        let request =
            hyper::Request::get("http://head/thread").body(tonic::body::Body::empty()).unwrap();
        let answer = async {
            let response = tower::ServiceExt::oneshot(channel.clone(), request).await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            String::from_utf8_lossy(&body).into_owned()
        };
        tokio::time::timeout(Duration::from_secs(20), answer).await.ok()
    }

    /// A TLS acceptor for `localhost` (its certificate in a temporary directory) and the CA
    /// (PEM) that signed it.
    fn tls_for_localhost(dir: &std::path::Path) -> (TlsAcceptor, String) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        crate::tls::install_crypto_provider();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let files = crate::tls::TlsFiles { cert: dir.join("cert.pem"), key: dir.join("key.pem") };
        std::fs::write(&files.cert, leaf.pem()).unwrap();
        std::fs::write(&files.key, leaf_key.serialize_pem()).unwrap();
        (crate::tls::acceptor(&files).unwrap(), ca.pem())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_http2_connection_is_read_on_the_lane_while_the_main_runtime_is_blocked() {
        read_on_the_lane_while_the_main_runtime_is_blocked(false).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn an_http2_connection_over_tls_is_read_on_the_lane_while_the_main_runtime_is_blocked() {
        read_on_the_lane_while_the_main_runtime_is_blocked(true).await;
    }

    /// An HTTP/2 client's request answered on the lane once, then again while the main
    /// runtime's only worker is blocked (a spawn on a saturated machine, a lock): nothing
    /// polls the main runtime's reactor meanwhile.
    async fn read_on_the_lane_while_the_main_runtime_is_blocked(tls: bool) {
        let dir = tempfile::tempdir().unwrap();
        let (acceptor, ca) = match tls {
            true => {
                let (acceptor, ca) = tls_for_localhost(dir.path());
                (Some(acceptor), Some(ca))
            }
            false => (None, None),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = watch::channel(false);
        let lane = Lane::start().await.unwrap();
        let served = tokio::spawn(serve(
            listener,
            thread_router(),
            acceptor,
            settings(8),
            (None, Some(lane)),
            stopped,
        ));
        // The client on a runtime of its own, as an agent in another process would be.
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (tell, mut told) = tokio::sync::mpsc::unbounded_channel::<Option<String>>();
        let client = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            runtime.unwrap().block_on(async move {
                let scheme = if ca.is_some() { "https" } else { "http" };
                let mut endpoint =
                    tonic::transport::Endpoint::from_shared(format!("{scheme}://localhost:{port}"))
                        .unwrap();
                if let Some(ca) = ca {
                    let ca = tonic::transport::Certificate::from_pem(ca);
                    let config = tonic::transport::ClientTlsConfig::new().ca_certificate(ca);
                    endpoint = endpoint.tls_config(config).unwrap();
                }
                let channel = endpoint.connect().await.unwrap();
                while asked.recv().is_ok() {
                    let _ = tell.send(thread_of(&channel).await);
                }
            })
        });
        ask.send(()).unwrap();
        let first = told.recv().await.unwrap();
        assert_eq!(first.as_deref(), Some("berth-agents"), "accepted, served on the lane");

        let (block, blocked) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        tokio::spawn(async move {
            block.send(()).unwrap();
            let _ = released.recv();
        });
        blocked.recv().unwrap();
        // Several: a read may find data the last one left without waiting for the reactor.
        let mut answers = Vec::new();
        for _ in 0..5 {
            ask.send(()).unwrap();
            answers.push(told.recv().await.unwrap());
        }
        release.send(()).unwrap();
        for answer in answers {
            assert_eq!(answer.as_deref(), Some("berth-agents"), "answered on the lane meanwhile");
        }

        drop(ask);
        client.join().unwrap();
        stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(10), served).await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_client_that_sends_part_of_the_preface_or_nothing_is_told_apart() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (_stop, stopped) = watch::channel(false);
        let mut first = TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        first.write_all(&H2_PREFACE[..10]).await.unwrap();
        let looking = tokio::spawn(async move {
            let activity = Activity::new(Instant::now());
            let h2 = speaks_h2(&accepted, Duration::from_secs(10), &activity, stopped).await;
            (h2, accepted)
        });
        first.write_all(&H2_PREFACE[10..]).await.unwrap();
        let (h2, accepted) = looking.await.unwrap();
        assert_eq!(h2, Some(true), "the whole preface, in two parts");
        // Nothing was read: the connection's server still sees the preface.
        let mut buf = [0u8; 24];
        assert_eq!(accepted.peek(&mut buf).await.unwrap(), 24);

        let (_stop, stopped) = watch::channel(false);
        let _silent = TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let activity = Activity::new(Instant::now());
        let wait = Duration::from_millis(100);
        assert_eq!(speaks_h2(&accepted, wait, &activity, stopped.clone()).await, Some(false));
        let mut http1 = TcpStream::connect(address).await.unwrap();
        http1.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        let wait = Duration::from_secs(10);
        assert_eq!(speaks_h2(&accepted, wait, &activity, stopped.clone()).await, Some(false));
        // Told to make room while it has sent nothing: dropped, not waited for.
        let _silent = TcpStream::connect(address).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        activity.close.notify_one();
        assert_eq!(speaks_h2(&accepted, wait, &activity, stopped).await, None);
    }

    #[tokio::test]
    async fn past_the_cap_a_connection_is_refused_only_when_every_one_is_busy() {
        let s = server(settings(4)).await;
        let holds: Vec<_> = (0..4)
            .map(|_| {
                let address = s.address;
                tokio::spawn(async move { get_on_new(address, "/hold").await.1 })
            })
            .collect();
        until("four requests in flight", || s.held.load(Ordering::SeqCst) == 4).await;
        let (_, answer) = get_on_new(s.address, "/").await;
        assert_eq!(answer, "", "closed unanswered, not queued");
        assert_eq!(metric(&s, "berth_connections_refused_total"), "1");
        s.release.notify_waiters();
        for hold in holds {
            assert!(hold.await.unwrap().contains("released"), "the busy ones were kept");
        }
        // Now they idle: a new connection takes the place of one of them.
        let (_, answer) = get_on_new(s.address, "/").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let _ = s.stop.send(true);
    }

    #[tokio::test]
    async fn at_the_cap_an_unused_connection_makes_room_before_a_used_one() {
        let mut patient = settings(3);
        patient.header_timeout = Duration::from_secs(60);
        let s = server(patient).await;
        // A used connection (kept alive after its answer), then two that send nothing.
        let (mut used, answer) = get_on_new(s.address, "/").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let mut silent = Vec::new();
        for _ in 0..2 {
            silent.push(TcpStream::connect(s.address).await.unwrap());
        }
        until("three connections", || metric(&s, "berth_connections") == "3").await;
        let (fourth, answer) = get_on_new(s.address, "/").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert_eq!(metric(&s, "berth_connections_evicted_total"), "1");
        // A silent one went; the used one still serves.
        until("a silent one closed", || metric(&s, "berth_connections") == "3").await;
        used.write_all(b"GET / HTTP/1.1\r\nHost: head\r\n\r\n").await.unwrap();
        assert!(read_some(&mut used).await.starts_with("HTTP/1.1 200"));
        drop((fourth, silent));
        let _ = s.stop.send(true);
    }

    #[tokio::test]
    async fn slow_headers_and_idle_connections_are_closed() {
        let mut quick = settings(16);
        quick.idle_timeout = Duration::from_millis(300);
        let s = server(quick).await;
        let mut slow = TcpStream::connect(s.address).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: he").await.unwrap();
        let (mut idle, answer) = get_on_new(s.address, "/").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert_eq!(read_some(&mut slow).await, "", "cut off in its headers");
        assert_eq!(read_some(&mut idle).await, "", "closed once idle");
        until("none open", || metric(&s, "berth_connections") == "0").await;
        // A request in flight keeps its connection past the idle timeout.
        let address = s.address;
        let hold = tokio::spawn(async move { get_on_new(address, "/hold").await.1 });
        until("one in flight", || s.held.load(Ordering::SeqCst) == 1).await;
        tokio::time::sleep(Duration::from_millis(600)).await;
        s.release.notify_waiters();
        assert!(hold.await.unwrap().contains("released"));
        let _ = s.stop.send(true);
    }
}
