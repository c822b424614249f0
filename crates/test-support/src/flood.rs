//! Hostile clients, shared by the connection tests (`tests/it/connections.rs`) and the bench's
//! `attack` scenario: half-open connections, `/events` subscribers by the thousand, and POST
//! floods.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long one hostile client waits for the node to accept or answer before giving up.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// Raises this process's soft open-file limit to its hard limit and returns it: a flood needs
/// thousands of sockets.
pub fn raise_open_files() -> u64 {
    pilot_election::open_files::raise()
        .expect("raise the open-file limit")
        .0
}

/// The open-file limit (soft, hard) of process `pid`, from `/proc`.
pub fn open_files_of(pid: u32) -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let mut nums = line["Max open files".len()..].split_whitespace();
    Some((nums.next()?.parse().ok()?, nums.next()?.parse().ok()?))
}

/// The start of a request head; a slow client sends this and then nothing.
pub const PARTIAL_HEAD: &[u8] = b"GET /leader HTTP/1.1\r\nHost: flood\r\nX-Slow: ";

/// Opens `n` connections, `batch` at a time, that send [`PARTIAL_HEAD`] and then nothing;
/// each with the instant it was opened. Connections that could not be opened are left out.
pub async fn half_open(addr: SocketAddr, n: usize, batch: usize) -> Vec<(TcpStream, Instant)> {
    let mut out = Vec::with_capacity(n);
    for start in (0..n).step_by(batch) {
        let round = (start..n.min(start + batch)).map(|_| async move {
            let opened = pilot_election::clock::now();
            let mut s = tokio::time::timeout(PATIENCE, TcpStream::connect(addr))
                .await
                .ok()?
                .ok()?;
            // A node that already closed it is fine: it reads as closed.
            let _ = s.write_all(PARTIAL_HEAD).await;
            Some((s, opened))
        });
        out.extend(join_all(round).await.into_iter().flatten());
    }
    out
}

/// Opens a connection that sends a request head announcing a body, then one byte of it: the
/// node holds it as a request in progress until the body timeout.
pub async fn dripping_body(addr: SocketAddr, path: &str) -> Option<TcpStream> {
    let mut s = tokio::time::timeout(PATIENCE, TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.ok()?;
    Some(s)
}

/// How long after its opening each connection was closed by the node (end of stream or reset),
/// or `None` if it was still open `within` after it was opened.
pub async fn closing_times(
    conns: Vec<(TcpStream, Instant)>,
    within: Duration,
) -> Vec<Option<Duration>> {
    let waits = conns.into_iter().map(|(mut s, opened)| async move {
        let mut buf = [0u8; 512];
        loop {
            match tokio::time::timeout_at(opened + within, s.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(opened.elapsed()),
                // An answer before the close (none is expected, but it is not wrong).
                Ok(Ok(_)) => continue,
            }
        }
    });
    join_all(waits).await
}

/// What became of one `GET /events` on a fresh connection.
pub enum Attempt {
    /// 200: the stream is open (held as long as this value lives).
    Streaming(TcpStream),
    /// Any other answer, with its `Retry-After` and body; the connection is kept open.
    Answered {
        status: u16,
        retry_after: Option<String>,
        body: String,
        _conn: TcpStream,
    },
    /// Closed or silent without an answer.
    Unanswered,
}

/// Subscribes to `/events` on a fresh connection, by hand, so that thousands of them cost this
/// process only a socket each.
pub async fn subscribe(addr: SocketAddr) -> Attempt {
    tokio::time::timeout(PATIENCE, async move {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /events HTTP/1.1\r\nHost: flood\r\n\r\n")
            .await
            .ok()?;
        let answer = read_answer(&mut s).await?;
        Some(if answer.status == 200 {
            Attempt::Streaming(s)
        } else {
            Attempt::Answered {
                status: answer.status,
                retry_after: answer.header("retry-after"),
                body: answer.body,
                _conn: s,
            }
        })
    })
    .await
    .ok()
    .flatten()
    .unwrap_or(Attempt::Unanswered)
}

/// An HTTP/1.1 answer read by hand.
pub struct Answer {
    pub status: u16,
    /// The head, lower-cased.
    pub head: String,
    /// Read by `Content-Length`; empty for a 200 without one (a stream).
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    }
}

/// Reads one answer from `s`: its head, and its body (by `Content-Length`) unless it is a 200.
pub async fn read_answer(s: &mut TcpStream) -> Option<Answer> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 1024];
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 || buf.len() > 16 * 1024 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let mut answer = Answer {
        status,
        head,
        body: String::new(),
    };
    if status == 200 && answer.header("content-length").is_none() {
        return Some(answer);
    }
    let len: usize = answer.header("content-length")?.parse().ok()?;
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let mut chunk = [0u8; 1024];
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    answer.body = String::from_utf8_lossy(&body).into_owned();
    Some(answer)
}

/// One request of a POST flood.
#[derive(Debug, Clone)]
pub struct Post {
    pub path: String,
    pub body: String,
    pub bearer: Option<String>,
}

/// `workers` clients, each on its own kept-alive connection, send `posts` in turn to `base` as
/// fast as the node answers, until `until`. Returns how many answers had each status (0: no
/// answer).
pub async fn post_flood(
    base: &str,
    posts: Vec<Post>,
    workers: usize,
    until: Instant,
) -> BTreeMap<u16, u64> {
    let posts = Arc::new(posts);
    let runs = (0..workers).map(|w| {
        let (posts, base) = (posts.clone(), base.to_string());
        async move {
            let client = reqwest::Client::builder()
                .timeout(PATIENCE)
                .build()
                .expect("client");
            let mut seen = BTreeMap::new();
            let mut i = w;
            while pilot_election::clock::now() < until {
                let p = &posts[i % posts.len()];
                i += 1;
                let mut req = client
                    .post(format!("{base}{}", p.path))
                    .header("content-type", "application/json")
                    .body(p.body.clone());
                if let Some(t) = &p.bearer {
                    req = req.bearer_auth(t);
                }
                let status = match req.send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                *seen.entry(status).or_insert(0u64) += 1;
            }
            seen
        }
    });
    let mut total = BTreeMap::new();
    for seen in join_all(runs).await {
        for (status, n) in seen {
            *total.entry(status).or_insert(0) += n;
        }
    }
    total
}

/// `GET /leader` on a new connection each time (as a new dashboard or probe would), every
/// `every` until `until`: the statuses (0: no answer within [`PATIENCE`]).
pub async fn probe_leader(url: &str, every: Duration, until: Instant) -> Vec<u16> {
    let client = reqwest::Client::builder()
        .timeout(PATIENCE)
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let mut seen = Vec::new();
    while pilot_election::clock::now() < until {
        let status = match client.get(format!("{url}/leader")).send().await {
            Ok(r) => r.status().as_u16(),
            Err(_) => 0,
        };
        seen.push(status);
        tokio::time::sleep(every).await;
    }
    seen
}

/// The value of the sample `name` (with its labels, e.g. `x_total{a="b"}`) in a Prometheus
/// text, 0 when it is absent.
pub fn sample(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}
