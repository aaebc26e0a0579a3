//! One keep-alive HTTP/1.1 connection of the bench's load: the request's head built once, each
//! POST only its body.
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

impl Conn {
    /// Connects to the head of `url` (`http://HOST:PORT/path`), whose requests go to `url`'s
    /// path with `token`.
    pub(super) async fn open(url: &str, token: &str) -> anyhow::Result<Conn> {
        let uri: Uri = url.parse().with_context(|| format!("bench URL {url}"))?;
        if uri.scheme_str() != Some("http") {
            bail!("bench URL {url}: the bench's head serves plain HTTP");
        }
        let authority = uri.authority().ok_or_else(|| anyhow!("bench URL {url}: no host"))?;
        let stream = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .with_context(|| format!("connecting to {authority}"))?;
        stream.set_nodelay(true)?;
        let (send, connection) = http1::handshake(TokioIo::new(stream)).await?;
        // The connection's I/O runs on its own task until either side closes it.
        tokio::spawn(connection);
        let host = HeaderValue::from_str(authority.as_str())?;
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
