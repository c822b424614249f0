//! The HTTP client a node sends its peers their messages with (the http transport): its
//! timeouts and its connection pool. The http transport uses it as it is for `http://` peers;
//! the tls module adds `--peer-ca` and the node's client certificate to it for `https://` peers.
//! Its own module because both need it and the http transport also needs the tls module (a
//! client certificate's names, the current peer client).

use std::time::Duration;

/// Requests in flight to one peer, hence also the most connections to it.
pub const PEER_IN_FLIGHT: usize = 4;
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);
const REQUEST_TIMEOUT: Duration = Duration::from_millis(1000);
/// A pooled connection unused this long is closed by us, well before the peer's own idle
/// timeout (`--idle-timeout`, 60 s by default) could close it under a request.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// The peer client's settings; the tls module adds TLS to them for `https://` peers.
pub fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(PEER_IN_FLIGHT)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
}
