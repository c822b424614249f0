//! The pilot transport's way to the broker without a process per message: the local Pilot
//! daemon's socket, spoken directly, one long-lived overlay connection per purpose.
//!
//! pilotctl 1.18.0 has no command that publishes more than one event per process
//! (docs/pilot.md, "Publishing without a process per message"), so a node that publishes every
//! tick through it pays a process start for each message. The daemon's IPC is small and fixed:
//! length-prefixed frames, one command byte each. Through it a node dials the broker's event
//! stream (Pilot port 1002) once and writes every later event on that connection, which the
//! broker routes by the topic in each event's own header. We implement the protocol from its
//! observed frames (docs/pilot.md lists them and how they were found); no Pilot code is used.
//!
//! One unix connection carries exactly one overlay connection. The daemon's replies carry no
//! request id, so a connection has at most one request outstanding, which one purpose per
//! connection gives for free; and when this side drops the socket, the daemon closes the
//! overlay connection with it.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::UnixStream;

use crate::pilotctl::{ErrorCode, NodeInfo, PilotctlError};

/// The command bytes of the daemon's IPC, as pilotctl 1.18.0 sends and reads them (found by
/// logging its frames; docs/pilot.md). pilot-devnet serves the same ones.
pub mod command {
    pub const CMD_DIAL: u8 = 0x03;
    pub const CMD_DIAL_OK: u8 = 0x04;
    pub const CMD_SEND: u8 = 0x06;
    /// Daemon to client: bytes that arrived on a connection.
    pub const CMD_RECV: u8 = 0x07;
    pub const CMD_CLOSE: u8 = 0x08;
    /// Daemon to client: a connection is closed, by the far end or as the answer to a close;
    /// only this makes a running `pilotctl subscribe` exit with `recv: EOF`.
    pub const CMD_CLOSED: u8 = 0x09;
    pub const CMD_ERROR: u8 = 0x0A;
    pub const CMD_INFO: u8 = 0x0D;
    pub const CMD_INFO_OK: u8 = 0x0E;
    pub const CMD_TRUST: u8 = 0x0F;
    pub const CMD_TRUST_OK: u8 = 0x10;
    pub const CMD_RESOLVE: u8 = 0x11;
    pub const CMD_RESOLVE_OK: u8 = 0x12;
    /// The trust request's "is this node trusted (waiting up to N ms)?" operation: the node id
    /// (u32 BE) and the wait in ms (u32 BE) follow. pilotctl asks it, waiting 0 ms, before it
    /// dials.
    pub const TRUST_CHECK: u8 = 7;
}

use command::*;
/// The event-stream service's Pilot port.
const BROKER_PORT: u16 = 1002;
/// The daemon refuses frames over 1 MiB; one from it that is larger means a broken stream.
const MAX_FRAME: usize = 1024 * 1024;
/// An event a node keeps: the subscriber's own bound (a wire message is far smaller, and the
/// transport drops anything over 16 KiB anyway). A larger one is skipped without being
/// buffered, as a `pilotctl subscribe` line over 256 KiB is.
pub const MAX_EVENT: usize = crate::pilotctl::DEFAULT_MAX_LINE;
/// How long opening a connection (resolve, trust check, dial) may take. A dial across a real
/// overlay may need a tunnel first; past this the attempt counts as a retryable timeout.
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the start-up probe waits for the daemon's `info` answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One IPC frame: a u32 big-endian length (of the command byte and the payload), the command
/// byte, the payload.
pub fn ipc_frame(cmd: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len() + 1).unwrap_or(u32::MAX);
    let mut frame = Vec::with_capacity(payload.len() + 5);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.push(cmd);
    frame.extend_from_slice(payload);
    frame
}

/// One event frame of the broker's stream: a u16 big-endian topic length, the topic, a u32
/// big-endian payload length, the payload.
pub fn event_frame(topic: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(topic.len() + payload.len() + 6);
    out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    out.extend_from_slice(topic.as_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Where the daemon listens: `--pilot-socket`, else `PILOT_SOCKET`, else pilotctl's default.
pub fn socket_path(configured: Option<&Path>) -> PathBuf {
    configured
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("PILOT_SOCKET").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/tmp/pilot.sock"))
}

fn error(command: &'static str, code: ErrorCode, message: impl Into<String>) -> PilotctlError {
    PilotctlError::Daemon {
        command,
        code,
        message: message.into(),
    }
}

/// What the start-up probe found at the daemon's socket.
#[derive(Debug)]
pub enum Probe {
    /// It answered `info` as a 1.18 daemon does.
    Speaks(NodeInfo),
    /// It answered, but not as expected: the node uses pilotctl instead (the reason says why).
    Differs(String),
    /// Nothing answered (no socket, refused, no reply): the daemon is down or starting.
    Unreachable(String),
}

/// Asks the daemon for its `info`, as pilotctl does, to choose the transport's path at start.
pub async fn probe(socket: &Path) -> Probe {
    let mut stream = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) => return Probe::Unreachable(format!("{}: {e}", socket.display())),
    };
    let answer = tokio::time::timeout(PROBE_TIMEOUT, async {
        write_frame(&mut stream, CMD_INFO, &[]).await?;
        read_frame(&mut stream).await
    })
    .await;
    let (cmd, body) = match answer {
        Err(_) => return Probe::Unreachable(format!("no answer to info within {PROBE_TIMEOUT:?}")),
        Ok(Err(e)) => return Probe::Unreachable(e.to_string()),
        Ok(Ok(frame)) => frame,
    };
    if cmd != CMD_INFO_OK {
        return Probe::Differs(format!("info answered with command 0x{cmd:02X}"));
    }
    let info: NodeInfo = match serde_json::from_slice(&body) {
        Ok(info) => info,
        Err(e) => return Probe::Differs(format!("info answered with unexpected JSON: {e}")),
    };
    match info.version.as_deref() {
        Some(v) if v == "1.18" || v.starts_with("1.18.") => Probe::Speaks(info),
        Some(v) => Probe::Differs(format!("the daemon is version {v}, not 1.18.x")),
        None => Probe::Differs("the daemon's info names no version".into()),
    }
}

/// A target as pilotctl reads one: `N:HHHH.HHHH.HHHH`, a bare decimal node id (network 0),
/// or else a hostname to resolve.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    Address { network: u16, node: u32 },
    Hostname(String),
}

fn parse_target(broker: &str) -> Target {
    if let Ok(node) = broker.parse::<u32>() {
        return Target::Address { network: 0, node };
    }
    parse_address(broker).unwrap_or_else(|| Target::Hostname(broker.to_string()))
}

/// `N:NNNN.HHHH.LLLL`: the network in decimal and again in hex, the node id's high and low
/// 16 bits in hex.
fn parse_address(text: &str) -> Option<Target> {
    let (network, rest) = text.split_once(':')?;
    let network: u16 = network.parse().ok()?;
    let parts: Vec<&str> = rest.split('.').collect();
    let [net_hex, high, low] = parts.as_slice() else {
        return None;
    };
    let hex = |s: &str| (s.len() == 4).then(|| u16::from_str_radix(s, 16).ok())?;
    if hex(net_hex)? != network {
        return None;
    }
    Some(Target::Address {
        network,
        node: (u32::from(hex(high)?) << 16) | u32::from(hex(low)?),
    })
}

#[derive(Deserialize)]
struct Resolved {
    node_id: u32,
    #[serde(default)]
    address: Option<String>,
}

#[derive(Deserialize)]
struct Trust {
    trusted: bool,
}

/// One overlay connection to a broker's event stream, over a unix connection of its own.
pub struct EventStream {
    socket: UnixStream,
    conn: u32,
    /// Bytes of the event stream received and not yet parsed into events.
    pending: Vec<u8>,
    /// Bytes of an oversized event still to be skipped.
    skipping: usize,
    oversized: u64,
    garbage: u64,
    command: &'static str,
}

/// Why a connection could not be opened this way although the daemon works.
pub const NOT_TRUSTED: &str = "this node does not trust the broker";

impl EventStream {
    /// Opens a stream to `broker` and subscribes it to `topic` (its first event frame). A
    /// broker this node does not trust is refused with the code `trust_required` and
    /// [`NOT_TRUSTED`]: pilotctl would then ask the registry whether the broker is public,
    /// which the caller leaves to pilotctl.
    pub async fn open(
        socket: &Path,
        broker: &str,
        topic: &str,
        command: &'static str,
    ) -> Result<EventStream, PilotctlError> {
        match tokio::time::timeout(OPEN_TIMEOUT, Self::open_now(socket, broker, topic, command))
            .await
        {
            Ok(opened) => opened,
            Err(_) => Err(error(
                command,
                ErrorCode::Timeout,
                format!("opening a stream to {broker} took over {OPEN_TIMEOUT:?}"),
            )),
        }
    }

    async fn open_now(
        path: &Path,
        broker: &str,
        topic: &str,
        command: &'static str,
    ) -> Result<EventStream, PilotctlError> {
        let mut socket = UnixStream::connect(path).await.map_err(|e| {
            error(
                command,
                ErrorCode::NotRunning,
                format!("daemon not running ({}: {e})", path.display()),
            )
        })?;
        let failed = |e: io::Error| {
            error(
                command,
                ErrorCode::ConnectionFailed,
                format!("daemon socket: {e}"),
            )
        };
        let (network, node) = match parse_target(broker) {
            Target::Address { network, node } => (network, node),
            Target::Hostname(name) => {
                let (cmd, body) = request(&mut socket, CMD_RESOLVE, name.as_bytes())
                    .await
                    .map_err(failed)?;
                if cmd == CMD_ERROR {
                    return Err(error(
                        command,
                        ErrorCode::NotFound,
                        format!("resolve {name}: {}", error_text(&body)),
                    ));
                }
                let found: Resolved = expect_json(command, cmd, CMD_RESOLVE_OK, &body)?;
                let network = match found.address.as_deref().and_then(parse_address) {
                    Some(Target::Address { network, .. }) => network,
                    _ => 0,
                };
                (network, found.node_id)
            }
        };
        let mut check = vec![TRUST_CHECK];
        check.extend_from_slice(&node.to_be_bytes());
        check.extend_from_slice(&0u32.to_be_bytes());
        let (cmd, body) = request(&mut socket, CMD_TRUST, &check)
            .await
            .map_err(failed)?;
        let trust: Trust = expect_json(command, cmd, CMD_TRUST_OK, &body)?;
        if !trust.trusted {
            return Err(error(
                command,
                ErrorCode::Other("trust_required".into()),
                NOT_TRUSTED,
            ));
        }
        let mut dial = network.to_be_bytes().to_vec();
        dial.extend_from_slice(&node.to_be_bytes());
        dial.extend_from_slice(&BROKER_PORT.to_be_bytes());
        let (cmd, body) = request(&mut socket, CMD_DIAL, &dial)
            .await
            .map_err(failed)?;
        if cmd == CMD_ERROR {
            return Err(error(
                command,
                ErrorCode::ConnectionFailed,
                format!("dial {broker}: {}", error_text(&body)),
            ));
        }
        let conn = match (cmd, body.as_slice()) {
            (CMD_DIAL_OK, [a, b, c, d, ..]) => u32::from_be_bytes([*a, *b, *c, *d]),
            _ => return Err(unexpected(command, cmd)),
        };
        let mut stream = EventStream {
            socket,
            conn,
            pending: Vec::new(),
            skipping: 0,
            oversized: 0,
            garbage: 0,
            command,
        };
        stream.send(topic, &[]).await?;
        Ok(stream)
    }

    /// Writes one event; the broker routes it by `topic`. Nothing comes back: like pilotctl's
    /// "ok", success only means the daemon has the bytes.
    pub async fn send(&mut self, topic: &str, payload: &[u8]) -> Result<(), PilotctlError> {
        let mut body = self.conn.to_be_bytes().to_vec();
        body.extend(event_frame(topic, payload));
        write_frame(&mut self.socket, CMD_SEND, &body)
            .await
            .map_err(|e| {
                error(
                    self.command,
                    ErrorCode::ConnectionFailed,
                    format!("send: {e}"),
                )
            })
    }

    /// The next event's payload, as text; `None` never (the stream ends with an error, as
    /// `pilotctl subscribe` does): `connection_failed` with `recv: EOF` when the broker closed
    /// it, or the daemon went away.
    pub async fn next(&mut self) -> Result<String, PilotctlError> {
        loop {
            if let Some(event) = self.take_event() {
                match String::from_utf8(event) {
                    Ok(text) => return Ok(text),
                    Err(_) => {
                        self.garbage += 1;
                        continue;
                    }
                }
            }
            let (cmd, body) = read_frame(&mut self.socket).await.map_err(|e| {
                error(
                    self.command,
                    ErrorCode::ConnectionFailed,
                    format!("recv: daemon socket: {e}"),
                )
            })?;
            let ours = body.get(..4) == Some(&self.conn.to_be_bytes()[..]);
            match cmd {
                CMD_RECV if ours => self.pending.extend_from_slice(&body[4..]),
                CMD_CLOSED if ours => {
                    return Err(error(
                        self.command,
                        ErrorCode::ConnectionFailed,
                        "recv: EOF",
                    ))
                }
                CMD_ERROR => {
                    return Err(error(
                        self.command,
                        ErrorCode::ConnectionFailed,
                        format!("recv: {}", error_text(&body)),
                    ))
                }
                // Pushes about other connections or ports (none are opened here): not ours.
                _ => {}
            }
        }
    }

    /// Cuts the next whole event out of what was received, skipping oversized ones unbuffered.
    fn take_event(&mut self) -> Option<Vec<u8>> {
        loop {
            if self.skipping > 0 {
                let n = self.skipping.min(self.pending.len());
                self.pending.drain(..n);
                self.skipping -= n;
                if self.skipping > 0 {
                    return None;
                }
            }
            let p = &self.pending;
            let topic_len = usize::from(u16::from_be_bytes([*p.first()?, *p.get(1)?]));
            let at = 2 + topic_len;
            let len = p.get(at..at + 4)?;
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            let start = at + 4;
            if len > MAX_EVENT {
                self.oversized += 1;
                self.pending.drain(..start);
                self.skipping = len;
                continue;
            }
            if p.len() < start + len {
                return None;
            }
            let event = p[start..start + len].to_vec();
            self.pending.drain(..start + len);
            return Some(event);
        }
    }

    /// Events skipped because they were not UTF-8 text.
    pub fn garbage_events(&self) -> u64 {
        self.garbage
    }

    /// Events skipped because they were larger than [`MAX_EVENT`].
    pub fn oversized_events(&self) -> u64 {
        self.oversized
    }
}

fn unexpected(command: &'static str, cmd: u8) -> PilotctlError {
    error(
        command,
        ErrorCode::Internal,
        format!("the daemon answered with command 0x{cmd:02X}"),
    )
}

fn expect_json<T: for<'de> Deserialize<'de>>(
    command: &'static str,
    cmd: u8,
    want: u8,
    body: &[u8],
) -> Result<T, PilotctlError> {
    if cmd == CMD_ERROR {
        return Err(error(command, ErrorCode::Internal, error_text(body)));
    }
    if cmd != want {
        return Err(unexpected(command, cmd));
    }
    serde_json::from_slice(body).map_err(|e| {
        error(
            command,
            ErrorCode::Internal,
            format!("the daemon's answer is not the JSON expected: {e}"),
        )
    })
}

/// An error frame's text (after its u16 code, which the daemon always sets to 1).
fn error_text(body: &[u8]) -> String {
    String::from_utf8_lossy(body.get(2..).unwrap_or_default()).into_owned()
}

async fn request(socket: &mut UnixStream, cmd: u8, payload: &[u8]) -> io::Result<(u8, Vec<u8>)> {
    write_frame(socket, cmd, payload).await?;
    read_frame(socket).await
}

async fn write_frame(socket: &mut UnixStream, cmd: u8, payload: &[u8]) -> io::Result<()> {
    socket.write_all(&ipc_frame(cmd, payload)).await
}

async fn read_frame(socket: &mut UnixStream) -> io::Result<(u8, Vec<u8>)> {
    let mut len = [0u8; 4];
    socket.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes"),
        ));
    }
    let mut body = vec![0u8; len];
    socket.read_exact(&mut body).await?;
    let cmd = body.remove(0);
    Ok((cmd, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_read_as_pilotctl_reads_them() {
        assert_eq!(
            parse_target("0:0000.0001.002A"),
            Target::Address {
                network: 0,
                node: 0x1_002A
            }
        );
        assert_eq!(
            parse_target("7"),
            Target::Address {
                network: 0,
                node: 7
            }
        );
        assert_eq!(
            parse_target("5:0005.0000.0003"),
            Target::Address {
                network: 5,
                node: 3
            }
        );
        // The two spellings of the network disagree, or a part is not four hex digits: a name.
        for name in [
            "5:0006.0000.0003",
            "0:0000.00001.0003",
            "hub",
            "0:zzzz.0000.0001",
        ] {
            assert_eq!(parse_target(name), Target::Hostname(name.into()), "{name}");
        }
    }

    fn stream_with(pending: Vec<u8>) -> EventStream {
        let (socket, _) = UnixStream::pair().unwrap();
        EventStream {
            socket,
            conn: 1,
            pending,
            skipping: 0,
            oversized: 0,
            garbage: 0,
            command: "subscribe",
        }
    }

    #[tokio::test]
    async fn events_split_anywhere_are_reassembled_and_oversized_ones_skipped() {
        let mut bytes = event_frame("election:g", b"one");
        bytes.extend(event_frame("election:g", &vec![b'x'; MAX_EVENT + 1]));
        bytes.extend(event_frame("election:g", b"two"));
        let mut s = stream_with(Vec::new());
        let mut got = Vec::new();
        // Fed one byte at a time: chunk boundaries are the daemon's, not the events'.
        for b in bytes {
            s.pending.push(b);
            while let Some(e) = s.take_event() {
                got.push(e);
            }
        }
        assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(s.oversized_events(), 1);
        assert!(s.pending.is_empty());
    }
}
