//! The agent's side of the `Logs` stream: serving the head's log requests from the files the
//! [`Runner`] names ([`Runner::log_file`]). The protocol is described in `proto/agent.proto`.
//!
//! Each request is served by its own task, which reads the file in chunks of at most
//! [`MAX_CHUNK`] bytes (on the blocking pool: plain file reads) and sends each once it holds a
//! credit: a request starts with [`LOG_WINDOW`] and gets one back per chunk the head
//! acknowledges, so a slow reader at the head never makes the agent read ahead. A following
//! request looks at its file again every [`FOLLOW_POLL`]. Dropping `serve` (the stream ended
//! with its session) aborts every request task.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_api::agent::{LogChunk, LogRequest, LogStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use tokio_stream::{Stream, StreamExt};
use tonic::Status;
use tracing::debug;

use crate::runner::{invalid_work_id, Runner};

/// The most bytes of one chunk.
pub const MAX_CHUNK: usize = 64 * 1024;
/// Chunks of one request sent before the head acknowledges them.
pub const LOG_WINDOW: u32 = 16;
/// How often a following request looks at its file.
pub const FOLLOW_POLL: Duration = Duration::from_millis(150);
/// The most requests served at once.
pub const MAX_REQUESTS: usize = 256;
/// The answer to a request when the runner keeps no logs.
pub const NO_LOGS: &str = "this node keeps no logs";

/// A request being served.
struct Serving {
    abort: AbortHandle,
    credit: Arc<Semaphore>,
}

/// Serves the requests of `inbound`, answering through `outbound`, until `inbound` ends
/// (`Ok`) or fails (its status). Request tasks end with it.
pub(crate) async fn serve<S>(
    runner: Arc<dyn Runner>,
    mut inbound: S,
    outbound: mpsc::Sender<LogChunk>,
) -> Result<(), Status>
where
    S: Stream<Item = Result<LogRequest, Status>> + Unpin,
{
    let mut tasks = JoinSet::new();
    let mut serving: HashMap<u64, Serving> = HashMap::new();
    let mut by_task: HashMap<tokio::task::Id, u64> = HashMap::new();
    loop {
        let request = tokio::select! {
            message = inbound.next() => match message {
                Some(Ok(request)) => request,
                Some(Err(status)) => return Err(status),
                None => return Ok(()),
            },
            Some(done) = tasks.join_next_with_id() => {
                let id = match done {
                    Ok((id, ())) => id,
                    Err(err) => err.id(),
                };
                if let Some(request_id) = by_task.remove(&id) {
                    serving.remove(&request_id);
                }
                continue;
            }
        };
        let id = request.request_id;
        if request.cancel {
            if let Some(cancelled) = serving.remove(&id) {
                debug!(request_id = id, "log request cancelled");
                cancelled.abort.abort();
            }
            continue;
        }
        if request.credit > 0 {
            if let Some(s) = serving.get(&id) {
                // Never more than a window outstanding, whatever the head says.
                let room = (LOG_WINDOW as usize).saturating_sub(s.credit.available_permits());
                s.credit.add_permits((request.credit as usize).min(room));
            }
            continue;
        }
        let checked = if serving.contains_key(&id) {
            Err(format!("request {id} is being served already"))
        } else if serving.len() >= MAX_REQUESTS {
            Err(format!("this node serves {MAX_REQUESTS} log requests already"))
        } else {
            check(runner.as_ref(), &request)
        };
        let path = match checked {
            Ok(path) => path,
            Err(error) => {
                debug!(request_id = id, work_id = %request.work_id, %error, "log request refused");
                let answer = LogChunk { request_id: id, error, ..LogChunk::default() };
                if outbound.send(answer).await.is_err() {
                    return Ok(());
                }
                continue;
            }
        };
        debug!(request_id = id, work_id = %request.work_id, follow = request.follow, "log request");
        let credit = Arc::new(Semaphore::new(LOG_WINDOW as usize));
        let abort = tasks.spawn(send_log(path, request, credit.clone(), outbound.clone()));
        by_task.insert(abort.id(), id);
        serving.insert(id, Serving { abort, credit });
    }
}

/// The file a request asks for, or why it cannot be served.
fn check(runner: &dyn Runner, request: &LogRequest) -> Result<PathBuf, String> {
    if let Some(why) = invalid_work_id(&request.work_id) {
        return Err(why);
    }
    let stream = match LogStream::try_from(request.stream) {
        Ok(stream @ (LogStream::Out | LogStream::Err)) => stream,
        _ => return Err(format!("stream {} is neither OUT (1) nor ERR (2)", request.stream)),
    };
    runner.log_file(&request.work_id, stream).ok_or_else(|| NO_LOGS.to_string())
}

/// Serves one request: the file from its offset, to its end as of now or (following) forever.
async fn send_log(
    path: PathBuf,
    request: LogRequest,
    credit: Arc<Semaphore>,
    outbound: mpsc::Sender<LogChunk>,
) {
    let id = request.request_id;
    let mut position = request.offset;
    // Without follow, the end is where the file ends at the first read.
    let mut end: Option<u64> = None;
    let mut first = true;
    loop {
        let limit = match end {
            Some(end) => end.saturating_sub(position).min(MAX_CHUNK as u64) as usize,
            None => MAX_CHUNK,
        };
        let read = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || read_at(&path, position, limit)).await
        };
        let (data, length) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(err)) => {
                let error = format!("cannot read {}: {err}", path.display());
                let _ =
                    outbound.send(LogChunk { request_id: id, error, ..LogChunk::default() }).await;
                return;
            }
            // The runtime is shutting down.
            Err(_) => return,
        };
        if !request.follow && end.is_none() {
            end = Some(length.max(position));
            if data.len() < limit {
                end = Some(position + data.len() as u64);
            }
        }
        position += data.len() as u64;
        let eof = end.is_some_and(|end| position >= end);
        // Following and nothing new: look again later (the first answer goes out at once).
        if data.is_empty() && !eof && !first {
            tokio::time::sleep(FOLLOW_POLL).await;
            continue;
        }
        let more = data.len() == MAX_CHUNK;
        match credit.acquire().await {
            Ok(permit) => permit.forget(),
            Err(_) => return,
        }
        let chunk = LogChunk { request_id: id, data, eof, error: String::new() };
        if outbound.send(chunk).await.is_err() || eof {
            return;
        }
        first = false;
        if !more && request.follow {
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    }
}

/// At most `limit` bytes of the file at `path` from `offset`, and the file's length. A file
/// that does not exist is empty.
fn read_at(path: &Path, offset: u64, limit: usize) -> io::Result<(Vec<u8>, u64)> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(err) => return Err(err),
    };
    let length = file.metadata()?.len();
    if offset >= length || limit == 0 {
        return Ok((Vec::new(), length));
    }
    file.seek(SeekFrom::Start(offset))?;
    let want = (length - offset).min(limit as u64) as usize;
    let mut data = Vec::with_capacity(want);
    file.take(want as u64).read_to_end(&mut data)?;
    Ok((data, length))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::{AckRunner, Events};
    use berth_api::agent::{RunningWork, Start, Stop};
    use std::io::Write;
    use tokio_stream::wrappers::UnboundedReceiverStream;

    /// A runner whose logs are files in a directory.
    struct Files(PathBuf);

    impl Runner for Files {
        fn start(&self, _: Start, _: Events) {}
        fn stop(&self, _: Stop, _: Events) {}
        fn running(&self) -> Vec<RunningWork> {
            Vec::new()
        }
        fn log_file(&self, work_id: &str, stream: LogStream) -> Option<PathBuf> {
            let ext = if stream == LogStream::Err { "err" } else { "out" };
            Some(self.0.join(format!("{work_id}.{ext}")))
        }
    }

    struct Head {
        requests: mpsc::UnboundedSender<Result<LogRequest, Status>>,
        chunks: mpsc::Receiver<LogChunk>,
        served: tokio::task::JoinHandle<Result<(), Status>>,
    }

    fn start(runner: Arc<dyn Runner>) -> Head {
        let (requests, rx) = mpsc::unbounded_channel();
        let (tx, chunks) = mpsc::channel(8);
        let served = tokio::spawn(serve(runner, UnboundedReceiverStream::new(rx), tx));
        Head { requests, chunks, served }
    }

    impl Head {
        fn ask(&self, request: LogRequest) {
            self.requests.send(Ok(request)).unwrap();
        }

        async fn chunk(&mut self) -> LogChunk {
            tokio::time::timeout(Duration::from_secs(10), self.chunks.recv())
                .await
                .expect("a chunk within 10 s")
                .expect("the stream is open")
        }
    }

    fn request(id: u64, work_id: &str, stream: LogStream, offset: u64, follow: bool) -> LogRequest {
        LogRequest {
            request_id: id,
            work_id: work_id.into(),
            stream: stream as i32,
            offset,
            follow,
            ..LogRequest::default()
        }
    }

    fn append(path: &Path, text: &[u8]) {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
        file.write_all(text).unwrap();
    }

    #[tokio::test]
    async fn a_log_is_sent_from_its_offset_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        append(&dir.path().join("actor-1.out"), b"hello world\n");
        append(&dir.path().join("actor-1.err"), b"oops\n");
        let mut head = start(Arc::new(Files(dir.path().into())));
        head.ask(request(1, "actor-1", LogStream::Out, 6, false));
        let chunk = head.chunk().await;
        assert_eq!(
            (chunk.request_id, chunk.data.as_slice(), chunk.eof),
            (1, &b"world\n"[..], true)
        );
        head.ask(request(2, "actor-1", LogStream::Err, 0, false));
        assert_eq!(head.chunk().await.data, b"oops\n");
        // Beyond the end, or no file at all: empty, at once.
        head.ask(request(3, "actor-1", LogStream::Out, 1000, false));
        let chunk = head.chunk().await;
        assert!(chunk.eof && chunk.data.is_empty() && chunk.error.is_empty(), "{chunk:?}");
        head.ask(request(4, "task-9", LogStream::Out, 0, false));
        let chunk = head.chunk().await;
        assert!(chunk.eof && chunk.data.is_empty() && chunk.error.is_empty(), "{chunk:?}");
        drop(head.requests);
        head.served.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn big_logs_go_in_chunks_within_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let size = MAX_CHUNK * (LOG_WINDOW as usize + 4) + 10;
        let log: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        append(&dir.path().join("task-1.out"), &log);
        let mut head = start(Arc::new(Files(dir.path().into())));
        head.ask(request(5, "task-1", LogStream::Out, 0, false));
        let mut got = Vec::new();
        for _ in 0..LOG_WINDOW {
            let chunk = head.chunk().await;
            assert_eq!(chunk.data.len(), MAX_CHUNK);
            got.extend(chunk.data);
        }
        // The window is used up: nothing more until the head acknowledges.
        let waited = tokio::time::timeout(Duration::from_millis(300), head.chunks.recv()).await;
        assert!(waited.is_err(), "a chunk beyond the window: {waited:?}");
        let mut eof = false;
        while !eof {
            head.ask(LogRequest { request_id: 5, credit: 1, ..LogRequest::default() });
            let chunk = head.chunk().await;
            eof = chunk.eof;
            got.extend(chunk.data);
        }
        assert_eq!(got, log);
    }

    #[tokio::test]
    async fn following_sends_what_is_appended_until_cancelled() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("actor-2.out");
        let mut head = start(Arc::new(Files(dir.path().into())));
        // No file yet: an empty first answer at once, then what appears.
        head.ask(request(7, "actor-2", LogStream::Out, 0, true));
        let first = head.chunk().await;
        assert!(first.data.is_empty() && !first.eof && first.error.is_empty(), "{first:?}");
        let mut got = Vec::new();
        for line in [&b"one\n"[..], b"two\n", b"three\n"] {
            append(&path, line);
            let want = got.len() + line.len();
            while got.len() < want {
                let chunk = head.chunk().await;
                assert!(!chunk.eof);
                got.extend(chunk.data);
                head.ask(LogRequest { request_id: 7, credit: 1, ..LogRequest::default() });
            }
        }
        assert_eq!(got, b"one\ntwo\nthree\n");
        head.ask(LogRequest { request_id: 7, cancel: true, ..LogRequest::default() });
        append(&path, b"four\n");
        // A request after the cancel is answered; nothing of request 7 comes any more.
        head.ask(request(8, "actor-2", LogStream::Out, 0, false));
        let chunk = head.chunk().await;
        assert_eq!((chunk.request_id, chunk.data.as_slice()), (8, &b"one\ntwo\nthree\nfour\n"[..]));
        let waited = tokio::time::timeout(FOLLOW_POLL * 3, head.chunks.recv()).await;
        assert!(waited.is_err(), "a chunk after the cancel: {waited:?}");
    }

    #[tokio::test]
    async fn bad_requests_and_runners_without_logs_are_answered_with_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), b"no").unwrap();
        let mut head = start(Arc::new(Files(dir.path().join("logs"))));
        for (id, work_id) in [(1, "../secret"), (2, ".."), (3, "a/b"), (4, "")] {
            head.ask(request(id, work_id, LogStream::Out, 0, false));
            let chunk = head.chunk().await;
            assert_eq!(chunk.request_id, id);
            assert!(
                chunk.error.contains("cannot name a file") && chunk.data.is_empty(),
                "{chunk:?}"
            );
        }
        head.ask(request(5, "actor-1", LogStream::Unspecified, 0, false));
        assert!(head.chunk().await.error.contains("neither OUT"));
        let mut ack = start(Arc::new(AckRunner::new()));
        ack.ask(request(6, "actor-1", LogStream::Out, 0, true));
        assert_eq!(ack.chunk().await.error, NO_LOGS);
    }
}
