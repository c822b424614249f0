//! What the server knows about one connection: whether a request is in progress, and if not,
//! since when it has been waiting and for what. That gives the header and idle deadlines, and
//! tells the admission which connection to close first when the cap is reached.
//!
//! hyper has a header-read timeout, but it runs from the end of the previous response, so on a
//! keep-alive connection it is also the idle timeout; here they are separate, as in most
//! servers: a kept-alive connection may stay silent for the idle timeout, and once the first
//! byte of a head arrives the rest must follow within the header timeout. A new connection must
//! deliver its first head within the header timeout of the accept.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::metrics::Phase;

/// Why a connection's deadline passed: it was reading a head, or idle between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Header,
    Idle,
}

impl Wait {
    /// The phase its timeout is counted under.
    pub fn phase(self) -> Phase {
        match self {
            Wait::Header => Phase::Header,
            Wait::Idle => Phase::Idle,
        }
    }
}

#[derive(Debug)]
struct State {
    /// Requests whose response has not finished (more than one only with pipelining).
    in_flight: u32,
    /// Requests answered so far on this connection.
    served: u64,
    /// What the connection waits for while no request is in flight, and until when.
    waiting: Wait,
    deadline: Instant,
    /// Since when it has been waiting (the admission closes the longest waiting first).
    since: Instant,
    evicted: bool,
}

/// One accepted connection, shared by its task, its IO, its requests and the admission.
#[derive(Debug)]
pub struct Conn {
    pub id: u64,
    state: Mutex<State>,
    /// Set while idle between requests: the next byte read starts a head.
    idle: AtomicBool,
    /// Wakes the connection's task when it is evicted. A moving deadline needs no wake: it
    /// moves only inside the task's own poll (a read, the end of a response), and the task
    /// reads it after every poll ([`Alarm`]).
    pub changed: Notify,
    header_timeout: Duration,
    idle_timeout: Duration,
}

impl Conn {
    pub fn new(id: u64, header_timeout: Duration, idle_timeout: Duration) -> Conn {
        let now = Instant::now();
        Conn {
            id,
            state: Mutex::new(State {
                in_flight: 0,
                served: 0,
                waiting: Wait::Header,
                deadline: now + header_timeout,
                since: now,
                evicted: false,
            }),
            idle: AtomicBool::new(false),
            changed: Notify::new(),
            header_timeout,
            idle_timeout,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes arrived: if the connection was idle, a head has started and must finish within
    /// the header timeout.
    fn on_bytes(&self) {
        if !self.idle.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut s = self.state();
        if s.in_flight == 0 && s.waiting == Wait::Idle {
            let now = Instant::now();
            s.waiting = Wait::Header;
            s.deadline = now + self.header_timeout;
            s.since = now;
        }
    }

    /// A request head is complete: no deadline of ours until its response has been sent.
    pub fn begin(self: &Arc<Self>) -> Exchange {
        self.state().in_flight += 1;
        Exchange(self.clone())
    }

    fn end(&self) {
        let mut s = self.state();
        s.in_flight = s.in_flight.saturating_sub(1);
        s.served += 1;
        if s.in_flight == 0 {
            let now = Instant::now();
            s.waiting = Wait::Idle;
            s.deadline = now + self.idle_timeout;
            s.since = now;
            self.idle.store(true, Ordering::Relaxed);
        }
    }

    /// When the connection must be closed unless something happens first; `None` while a
    /// request is in flight.
    pub fn deadline(&self) -> Option<Instant> {
        let s = self.state();
        (s.in_flight == 0).then_some(s.deadline)
    }

    /// What it was waiting for, if its deadline has passed.
    pub fn expired(&self, now: Instant) -> Option<Wait> {
        let s = self.state();
        (s.in_flight == 0 && now >= s.deadline).then_some(s.waiting)
    }

    pub fn busy(&self) -> bool {
        self.state().in_flight > 0
    }

    pub fn evicted(&self) -> bool {
        self.state().evicted
    }

    /// Which connection to close first when the cap is reached; `None` while a request is in
    /// flight (that is bounded by the body timeout, or is an event stream with its own cap).
    /// First those that have not finished a head yet (they have proved nothing: a slow or
    /// hostile client), then the idle ones; the longest waiting first in each group, so an
    /// active peer's kept-alive connection goes last.
    pub fn eviction_rank(&self) -> Option<(u8, Instant)> {
        let s = self.state();
        if s.in_flight > 0 || s.evicted {
            return None;
        }
        let proved = s.waiting == Wait::Idle && s.served > 0;
        Some((u8::from(proved), s.since))
    }

    /// Marks the connection for closing, unless a request started meanwhile.
    pub fn evict(&self) -> bool {
        let mut s = self.state();
        if s.in_flight > 0 || s.evicted {
            return false;
        }
        s.evicted = true;
        drop(s);
        self.changed.notify_one();
        true
    }
}

/// A connection's deadline as one timer in tokio's wheel, re-armed lazily. The deadline moves
/// twice a request (a head begins, a response ends), and a timer set or cancelled at each move
/// cost more than the request itself. So the timer is only ever moved earlier; when it fires
/// the connection's real deadline decides ([`Conn::expired`]), and if that has moved on, the
/// next [`Alarm::follow`] arms it again. A kept-alive connection under load re-arms about once
/// per header timeout instead of four times a request.
pub struct Alarm {
    sleep: Pin<Box<Sleep>>,
    armed: Option<Instant>,
}

impl Default for Alarm {
    fn default() -> Alarm {
        Alarm {
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }
}

impl Alarm {
    /// Arms the timer for `deadline` unless it is already armed as early or earlier.
    pub fn follow(&mut self, deadline: Option<Instant>) {
        if let Some(d) = deadline {
            if self.armed.is_none_or(|a| d < a) {
                self.sleep.as_mut().reset(d);
                self.armed = Some(d);
            }
        }
    }

    /// Ready once the armed instant has passed (then disarmed); pending while disarmed.
    pub fn poll_fired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.armed.is_none() {
            return Poll::Pending;
        }
        std::task::ready!(self.sleep.as_mut().poll(cx));
        self.armed = None;
        Poll::Ready(())
    }
}

/// One request in progress; its response body holds it until the last byte is handed over.
#[derive(Debug)]
pub struct Exchange(Arc<Conn>);

impl Drop for Exchange {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The socket, reporting reads to its [`Conn`] so that a head's first byte starts the header
/// deadline.
pub struct Watched {
    stream: TcpStream,
    conn: Arc<Conn>,
}

impl Watched {
    pub fn new(stream: TcpStream, conn: Arc<Conn>) -> Watched {
        Watched { stream, conn }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.conn.on_bytes();
        }
        r
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: Duration = Duration::from_secs(5);
    const I: Duration = Duration::from_secs(60);

    /// `f` run between two readings of the clock: what it returns lies between them.
    fn between<T>(f: impl FnOnce() -> T) -> (Instant, T, Instant) {
        let before = Instant::now();
        let v = f();
        (before, v, Instant::now())
    }

    #[tokio::test]
    async fn a_new_connection_has_the_header_timeout_and_an_answered_one_the_idle_timeout() {
        let (t0, c, t1) = between(|| Arc::new(Conn::new(1, H, I)));
        let d = c.deadline().unwrap();
        assert!(t0 + H <= d && d <= t1 + H);
        assert_eq!(
            c.eviction_rank().map(|r| r.0),
            Some(0),
            "nothing proved yet"
        );
        assert_eq!(c.expired(d - Duration::from_millis(1)), None);
        assert_eq!(c.expired(d), Some(Wait::Header));

        let ex = c.begin();
        assert_eq!(
            c.deadline(),
            None,
            "no deadline of ours while a request runs"
        );
        assert_eq!(c.expired(d + I), None);
        assert_eq!(
            c.eviction_rank(),
            None,
            "a request in flight is never evicted"
        );
        assert!(!c.evict());
        c.on_bytes();
        assert_eq!(
            c.deadline(),
            None,
            "bytes of a request in flight change nothing"
        );

        let (t0, (), t1) = between(|| drop(ex));
        let d = c.deadline().unwrap();
        assert!(t0 + I <= d && d <= t1 + I, "idle after an answer");
        assert_eq!(c.expired(d), Some(Wait::Idle));
        assert_eq!(
            c.eviction_rank().map(|r| r.0),
            Some(1),
            "answered: evicted last"
        );

        // The first byte of the next head starts the header deadline; the next ones do not
        // move it.
        let (t0, (), t1) = between(|| c.on_bytes());
        let d = c.deadline().unwrap();
        assert!(t0 + H <= d && d <= t1 + H);
        assert_eq!(c.expired(d), Some(Wait::Header));
        assert_eq!(c.eviction_rank().map(|r| r.0), Some(0));
        c.on_bytes();
        assert_eq!(c.deadline(), Some(d));

        assert!(c.evict());
        assert!(c.evicted());
        assert_eq!(c.eviction_rank(), None, "evicted once");
        assert!(!c.evict());
    }
}
