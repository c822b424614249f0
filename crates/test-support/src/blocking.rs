//! Blocking helpers for tests that drive an outside engine from plain threads (the container
//! tests call the Docker CLI synchronously): one HTTP GET and a wait with a deadline. The async
//! tests use [`crate::app`]'s reqwest client and `wait_for` instead.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use serde_json::Value;

/// How often [`wait_for`] looks.
pub const POLL: Duration = Duration::from_millis(50);

/// One HTTP/1.1 GET with `Connection: close`; (status, body). Enough for the API's JSON answers,
/// and it keeps a blocking HTTP client out of the dependencies.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let timeout = Duration::from_secs(1);
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, text.to_string());
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(bad)?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    ))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub fn get_json(addr: SocketAddr, path: &str) -> Option<(u16, Value)> {
    let (status, body) = http_get(addr, path).ok()?;
    Some((status, serde_json::from_str(&body).ok()?))
}

/// Polls `probe` until it yields a value, or panics after `limit` naming `what` and the last
/// observation.
pub fn wait_for<T>(
    limit: Duration,
    what: &str,
    mut probe: impl FnMut() -> Result<T, String>,
) -> (T, Duration) {
    let start = pilot_election::clock::now();
    loop {
        match probe() {
            Ok(v) => return (v, start.elapsed()),
            Err(last) if start.elapsed() >= limit => {
                panic!("{what}: not within {limit:?}; last seen: {last}")
            }
            Err(_) => thread::sleep(POLL),
        }
    }
}
