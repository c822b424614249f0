//! Body wrappers the server puts around every exchange: a deadline on the request body (hyper
//! bounds nothing once the head is in, so a client could drip a body for ever) and a guard on
//! the response body that tells the connection when the exchange is really over (for a stream
//! such as `/events` that is long after the handler returned).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::conn::Exchange;
use crate::api::BodyTimedOut;
use crate::metrics::{Metrics, Phase};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A request body that fails once its deadline has passed, whatever arrived before. The
/// deadline is counted from the end of the head, for the whole body (not between chunks: one
/// byte every few seconds must not keep a request open).
pub struct Deadline {
    inner: Body,
    deadline: Instant,
    /// Armed at the first read: most requests (every GET) never read a body.
    sleep: Option<Pin<Box<Sleep>>>,
    timeout: Duration,
    metrics: Arc<Metrics>,
    fired: bool,
    read: ReadToEnd,
}

impl Deadline {
    pub fn new(inner: Body, timeout: Duration, metrics: Arc<Metrics>) -> (Deadline, ReadToEnd) {
        let read = ReadToEnd::default();
        let body = Deadline {
            inner,
            deadline: Instant::now() + timeout,
            sleep: None,
            timeout,
            metrics,
            fired: false,
            read: read.clone(),
        };
        (body, read)
    }
}

/// Whether a request body was read to its end. hyper closes a connection after a response
/// given before the body was read (it cannot tell where the next request starts) but does not
/// say so in the response; a client that reuses the connection then fails on its next
/// request (over TLS, "EOF in violation of protocol"). The server says `connection: close`
/// instead.
#[derive(Debug, Clone, Default)]
pub struct ReadToEnd(Arc<AtomicBool>);

impl ReadToEnd {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        // The deadline first: a client that always has the next byte ready must not outlive it.
        if !this.fired {
            let deadline = this.deadline;
            let sleep = this
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if sleep.as_mut().poll(cx).is_ready() {
                this.fired = true;
                this.metrics.timed_out(Phase::Body);
            }
        }
        if this.fired {
            return Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into())));
        }
        let frame = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(frame, Poll::Ready(None)) || this.inner.is_end_stream() {
            this.read.set();
        }
        frame.map(|frame| frame.map(|f| f.map_err(Into::into)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that holds its exchange open until it is finished or dropped.
pub struct Tracked {
    inner: Body,
    _exchange: Exchange,
}

impl Tracked {
    pub fn new(inner: Body, exchange: Exchange) -> Tracked {
        Tracked {
            inner,
            _exchange: exchange,
        }
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
