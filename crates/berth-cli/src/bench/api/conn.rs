//! One keep-alive HTTP/1.1 connection of the bench's load: the request's head built once, each
//! POST only its body; and the watchers' event streams, read straight from their sockets.
//!
//! Why not `reqwest` here: the client shares the head's two cores, and per request `reqwest`
//! parses the URL, checks a connection out of its pool and back, and builds the headers
//! again (`perf` of phase 1: about a quarter of the process's CPU was the client's). Each of
//! the load's workers owns one connection and sends its requests one after another, as a
//! pooled client would, so the head sees the same traffic: the same requests, headers and
//! connections.

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;

/// A connection to the head, and the head of the requests it sends.
pub(super) struct Conn {
    send: SendRequest<Full<Bytes>>,
    uri: Uri,
    host: HeaderValue,
    authorization: HeaderValue,
}

/// An answer: its status and body.
pub(super) struct Answer {
    pub status: u16,
    pub body: Bytes,
}

/// A TCP connection (without Nagle's delay) to the head of `url`, a plain `http://` URL, with
/// the URL and its authority.
async fn connect(url: &str) -> anyhow::Result<(tokio::net::TcpStream, Uri, String)> {
    let uri: Uri = url.parse().with_context(|| format!("bench URL {url}"))?;
    if uri.scheme_str() != Some("http") {
        bail!("bench URL {url}: the bench's head serves plain HTTP");
    }
    let authority =
        uri.authority().ok_or_else(|| anyhow!("bench URL {url}: no host"))?.as_str().to_string();
    let stream = tokio::net::TcpStream::connect(&authority)
        .await
        .with_context(|| format!("connecting to {authority}"))?;
    stream.set_nodelay(true)?;
    Ok((stream, uri, authority))
}

impl Conn {
    /// Connects to the head of `url` (`http://HOST:PORT/path`), whose requests go to `url`'s
    /// path with `token`.
    pub(super) async fn open(url: &str, token: &str) -> anyhow::Result<Conn> {
        let (stream, uri, authority) = connect(url).await?;
        let (send, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // The connection's I/O runs on its own task until either side closes it.
        tokio::spawn(connection);
        let host = HeaderValue::from_str(&authority)?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let uri = Uri::try_from(path)?;
        let authorization = HeaderValue::from_str(&format!("Bearer {token}"))?;
        Ok(Conn { send, uri, host, authorization })
    }

    /// POSTs `body` (JSON) and reads the whole answer.
    pub(super) async fn post(&mut self, body: impl Into<Bytes>) -> anyhow::Result<Answer> {
        self.send.ready().await?;
        let mut request = Request::new(Full::new(body.into()));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        let headers = request.headers_mut();
        headers.insert(HOST, self.host.clone());
        headers.insert(AUTHORIZATION, self.authorization.clone());
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let response = self.send.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Answer { status, body })
    }
}

/// A `GET` whose answer is a stream (server-sent events), read straight from its socket in
/// the caller's task: the watch phase's thousand clients share the head's cores, and through
/// `reqwest` each chunk woke a connection task and then the reader. The answer must be a 200
/// with a chunked body (what the head sends for an endless stream).
pub(super) struct EventStream {
    stream: tokio::net::TcpStream,
    /// Bytes read and not yet decoded (a chunk's size line or data not complete yet).
    raw: Vec<u8>,
    /// True once the last chunk (of size 0) was read.
    ended: bool,
}

impl EventStream {
    /// Sends `GET url` with `token` and reads the answer's head.
    pub(super) async fn open(url: &str, token: &str) -> anyhow::Result<EventStream> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut stream, uri, authority) = connect(url).await?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let request = format!(
            "GET {path} HTTP/1.1\r\nhost: {authority}\r\nauthorization: Bearer {token}\r\n\
             accept: text/event-stream\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut raw = Vec::with_capacity(4096);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(length) = response.parse(&raw)? {
                let status = response.code.unwrap_or(0);
                if status != 200 {
                    bail!("GET {url} answered {status}");
                }
                let chunked = response.headers.iter().any(|h| {
                    h.name.eq_ignore_ascii_case("transfer-encoding")
                        && h.value.eq_ignore_ascii_case(b"chunked")
                });
                if !chunked {
                    bail!("GET {url}: the stream is not chunked");
                }
                raw.drain(..length);
                return Ok(EventStream { stream, raw, ended: false });
            }
            if stream.read_buf(&mut raw).await? == 0 {
                bail!("GET {url}: the connection closed before the answer's head");
            }
        }
    }

    /// Waits for more of the body and appends it to `body`; false once the stream has ended
    /// (its last chunk, or the connection closed).
    pub(super) async fn read(&mut self, body: &mut Vec<u8>) -> anyhow::Result<bool> {
        use tokio::io::AsyncReadExt;
        loop {
            let before = body.len();
            decode_chunks(&mut self.raw, &mut self.ended, body)?;
            if body.len() > before {
                return Ok(true);
            }
            if self.ended || self.stream.read_buf(&mut self.raw).await? == 0 {
                return Ok(false);
            }
        }
    }
}

/// Moves every complete chunk of a chunked body's bytes `raw` into `body`, leaving in `raw`
/// what does not make a whole chunk yet; sets `ended` at the last chunk (of size 0).
fn decode_chunks(raw: &mut Vec<u8>, ended: &mut bool, body: &mut Vec<u8>) -> anyhow::Result<()> {
    let mut at = 0;
    while !*ended {
        let (head, size) = match httparse::parse_chunk_size(&raw[at..]) {
            Ok(httparse::Status::Complete(parsed)) => parsed,
            Ok(httparse::Status::Partial) => break,
            Err(_) => bail!("the stream's chunked body is malformed"),
        };
        let size = usize::try_from(size)?;
        let end = at + head + size;
        if raw.len() < end + 2 {
            break; // the chunk's data (and its CRLF) are not all here yet
        }
        body.extend_from_slice(&raw[at + head..end]);
        at = end + 2;
        *ended = size == 0;
    }
    raw.drain(..at);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_plain_http_urls_are_taken() {
        let Err(error) = Conn::open("https://127.0.0.1:1/api/v1/actors", "t").await else {
            panic!("an https URL was taken");
        };
        assert!(error.to_string().contains("plain HTTP"), "{error}");
        let Err(error) = Conn::open("not a url", "t").await else { panic!("taken") };
        assert!(error.to_string().contains("bench URL not a url"), "{error}");
    }

    #[tokio::test]
    async fn an_event_stream_is_read_across_split_chunks_until_its_last() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/v1/watch?kind=actor", listener.local_addr().unwrap());
        let (more_tx, mut more_rx) = tokio::sync::mpsc::channel::<&'static [u8]>(4);
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed early");
                seen.extend_from_slice(&buf[..n]);
            }
            let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                        transfer-encoding: chunked\r\n\r\n";
            socket.write_all(head.as_bytes()).await.unwrap();
            // Each piece is written when the test asks (TCP may still join pieces; every cut
            // point is checked in `chunks_are_decoded_whatever_the_reads_cut`).
            while let Some(piece) = more_rx.recv().await {
                socket.write_all(piece).await.unwrap();
            }
            String::from_utf8(seen).unwrap()
        });
        let open = tokio::spawn(async move { EventStream::open(&url, "secret").await });
        more_tx.send(b"6\r\ndata: \r\n").await.unwrap();
        let mut events = open.await.unwrap().unwrap();
        let mut body = Vec::new();
        assert!(events.read(&mut body).await.unwrap());
        assert_eq!(body, b"data: ");
        // The next chunk's size line cut in two, its data and the last chunk behind.
        more_tx.send(b"3").await.unwrap();
        more_tx.send(b"\r\n1\n\n\r\n0\r\n\r\n").await.unwrap();
        assert!(events.read(&mut body).await.unwrap());
        assert_eq!(body, b"data: 1\n\n", "the second chunk, joined across its pieces");
        assert!(!events.read(&mut body).await.unwrap(), "the last chunk ends the stream");
        drop(more_tx);
        let request = server.await.unwrap().to_ascii_lowercase();
        assert!(request.starts_with("get /api/v1/watch?kind=actor http/1.1\r\n"), "{request}");
        assert!(request.contains("authorization: bearer secret\r\n"), "{request}");
    }

    #[test]
    fn chunks_are_decoded_whatever_the_reads_cut() {
        let wire: &[u8] = b"6\r\ndata: \r\nA\r\n1\n\ndata: 2\r\n3\r\n\n\n\n\r\n0\r\n\r\n";
        let whole: &[u8] = b"data: 1\n\ndata: 2\n\n\n";
        for cut in 0..=wire.len() {
            let (mut raw, mut ended, mut body) = (wire[..cut].to_vec(), false, Vec::new());
            decode_chunks(&mut raw, &mut ended, &mut body).unwrap();
            assert!(whole.starts_with(&body), "cut {cut}: {body:?}");
            raw.extend_from_slice(&wire[cut..]);
            decode_chunks(&mut raw, &mut ended, &mut body).unwrap();
            assert_eq!((body.as_slice(), ended, raw.len()), (whole, true, 0), "cut {cut}");
        }
        let (mut raw, mut ended) = (b"zz\r\n".to_vec(), false);
        assert!(decode_chunks(&mut raw, &mut ended, &mut Vec::new()).is_err(), "not a size");
    }

    #[tokio::test]
    async fn an_event_stream_that_is_not_a_200_is_refused_with_its_status() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/v1/watch", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await.unwrap();
            let answer = "HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n";
            socket.write_all(answer.as_bytes()).await.unwrap();
        });
        let Err(error) = EventStream::open(&url, "wrong").await else { panic!("taken") };
        assert!(error.to_string().contains("answered 401"), "{error}");
    }

    #[tokio::test]
    async fn a_post_carries_the_token_and_reads_the_whole_answer() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/api/v1/actors", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            // The request's head and its 2-byte body.
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") || !seen.ends_with(b"{}") {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed early");
                seen.extend_from_slice(&buf[..n]);
            }
            let answer = "HTTP/1.1 201 Created\r\ncontent-length: 5\r\n\r\nhello";
            socket.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8(seen).unwrap()
        });
        let mut conn = Conn::open(&url, "secret").await.unwrap();
        let answer = conn.post(Bytes::from_static(b"{}")).await.unwrap();
        assert_eq!(answer.status, 201);
        assert_eq!(&answer.body[..], b"hello");
        let request = server.await.unwrap().to_ascii_lowercase();
        assert!(request.starts_with("post /api/v1/actors http/1.1\r\n"), "{request}");
        assert!(request.contains("authorization: bearer secret\r\n"), "{request}");
        assert!(request.contains("content-type: application/json\r\n"), "{request}");
    }
}
