//! Per-link fault injection for real processes, the one relay every test uses: a TCP proxy
//! inside the test process, one per directed link between two nodes, whose traffic is switched
//! at runtime between passing (optionally holding every chunk back for a while, as a slow path
//! does), refusing (accept, then close at once: a partition) and holding (accept, then never
//! answer, as a dead network does). Give a node the proxy's port as another node's peer address
//! and its messages to that node travel through it. Cutting every link to a node makes it deaf
//! (it still sends, it hears nobody); cutting every link from it makes it mute.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::app::{app, free_port, App, Cluster, TempDir, TOKEN};

/// What a proxy does with the traffic of its link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forwards both ways.
    Pass,
    /// Closes open connections and accepts new ones only to close them: the sender learns at
    /// once that its message did not arrive.
    Refuse,
    /// Stops forwarding on open connections and accepts new ones without ever reading or
    /// answering: the sender learns nothing until its own timeout.
    Hold,
}

/// One listening proxy to `127.0.0.1:<target>`; stops (and closes every connection) on drop.
pub struct Proxy {
    /// Where senders connect.
    pub port: u16,
    /// The node behind the link.
    pub target: u16,
    mode: watch::Sender<Mode>,
    /// Microseconds each chunk towards the target is held back while passing.
    delay_us: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target` (which may not listen yet).
    pub async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let port = listener.local_addr().expect("proxy addr").port();
        let (mode, watching) = watch::channel(Mode::Pass);
        let stop = CancellationToken::new();
        let delay_us = Arc::new(AtomicU64::new(0));
        tokio::spawn(accept_loop(
            listener,
            target,
            watching,
            delay_us.clone(),
            stop.clone(),
        ));
        Proxy {
            port,
            target,
            mode,
            delay_us,
            stop,
        }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// A partition of this link: open connections close, new ones are refused.
    pub fn cut(&self) {
        self.set(Mode::Refuse);
    }

    /// Passing again.
    pub fn heal(&self) {
        self.set(Mode::Pass);
    }

    pub fn is_cut(&self) -> bool {
        self.mode() != Mode::Pass
    }

    /// Holds every chunk towards the target back by `by` from now on (zero: none).
    pub fn delay(&self, by: Duration) {
        self.delay_us
            .store(by.as_micros() as u64, Ordering::Relaxed);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: u16,
    mode: watch::Receiver<Mode>,
    delay_us: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let Ok((conn, _)) = accepted else {
            // Out of descriptors, say: try again shortly rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(connection(
            conn,
            target,
            mode.clone(),
            delay_us.clone(),
            stop.clone(),
        ));
    }
}

/// Both directions of one connection; the sender's chunks are held back by the current delay.
async fn forward(inbound: TcpStream, outbound: TcpStream, delay_us: Arc<AtomicU64>) {
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (mut from_sender, mut to_sender) = inbound.into_split();
    let (mut from_target, mut to_target) = outbound.into_split();
    let ahead = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_sender.read(&mut buf).await?;
            if n == 0 {
                return to_target.shutdown().await;
            }
            let d = delay_us.load(Ordering::Relaxed);
            if d > 0 {
                tokio::time::sleep(Duration::from_micros(d)).await;
            }
            to_target.write_all(&buf[..n]).await?;
        }
    };
    let back = tokio::io::copy(&mut from_target, &mut to_sender);
    let _ = tokio::join!(ahead, back);
}

/// Carries one accepted connection while the mode lets it; a change of mode ends it (a held
/// connection is kept open, silent, until the mode changes again or the proxy stops).
async fn connection(
    inbound: TcpStream,
    target: u16,
    mut mode: watch::Receiver<Mode>,
    delay_us: Arc<AtomicU64>,
    stop: CancellationToken,
) {
    let at_accept = *mode.borrow_and_update();
    match at_accept {
        Mode::Refuse => return,
        Mode::Hold => {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = mode.changed() => {}
            }
            return;
        }
        Mode::Pass => {}
    }
    let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
        return;
    };
    let cut = tokio::select! {
        _ = stop.cancelled() => return,
        _ = forward(inbound, outbound, delay_us) => return,
        m = until_not_passing(&mut mode) => m,
    };
    if cut == Mode::Hold {
        // Both sockets stay open and nothing moves: requests in flight run into their timeout.
        tokio::select! {
            _ = stop.cancelled() => {}
            _ = mode.changed() => {}
        }
    }
}

async fn until_not_passing(mode: &mut watch::Receiver<Mode>) -> Mode {
    loop {
        if mode.changed().await.is_err() {
            // The proxy is gone: treat it as refused.
            return Mode::Refuse;
        }
        let m = *mode.borrow_and_update();
        if m != Mode::Pass {
            return m;
        }
    }
}

/// Every directed link of a cluster: `(from, to)` node index to the proxy `from` sends through.
pub struct Links {
    pub ids: Vec<String>,
    pub proxies: BTreeMap<(usize, usize), Proxy>,
}

impl Links {
    /// Sets the link `from → to`.
    pub fn set(&self, from: usize, to: usize, mode: Mode) {
        self.proxies[&(from, to)].set(mode);
    }

    /// Node `i` hears nobody (it still sends, and the others still hear it).
    pub fn deafen(&self, i: usize, mode: Mode) {
        for (&(_, to), p) in &self.proxies {
            if to == i {
                p.set(mode);
            }
        }
    }

    /// Nobody hears node `i` (it still hears the others).
    pub fn mute(&self, i: usize, mode: Mode) {
        for (&(from, _), p) in &self.proxies {
            if from == i {
                p.set(mode);
            }
        }
    }

    /// Every link passes again.
    pub fn heal(&self) {
        for p in self.proxies.values() {
            p.set(Mode::Pass);
        }
    }
}

/// A started cluster `n1..nN` (admin token [`TOKEN`]) whose nodes hear each other only through
/// [`Links`]: each node takes peer messages on its own `--peer-listen` port, and its `--peer`
/// URL for every other node names the proxy of that one link.
pub struct LinkedCluster {
    pub cluster: Cluster,
    pub links: Links,
}

impl LinkedCluster {
    pub async fn start(n: usize, extra: &[&str]) -> LinkedCluster {
        let token_file = TempDir::new("token");
        let tf = token_file.0.join("token");
        std::fs::write(&tf, format!("{TOKEN}\n")).expect("token file");
        let tf = tf.display().to_string();
        let ids: Vec<String> = (1..=n).map(|i| format!("n{i}")).collect();
        let peer_ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let mut proxies = BTreeMap::new();
        for from in 0..n {
            for (to, &port) in peer_ports.iter().enumerate() {
                if from != to {
                    proxies.insert((from, to), Proxy::start(port).await);
                }
            }
        }
        let nodes: Vec<App> = (0..n)
            .map(|i| {
                let peers: Vec<(String, u16)> = (0..n)
                    .filter(|j| *j != i)
                    .map(|j| (ids[j].clone(), proxies[&(i, j)].port))
                    .collect();
                let listen = format!("127.0.0.1:{}", peer_ports[i]);
                let mut args = vec![
                    "--admin-token-file",
                    tf.as_str(),
                    "--peer-listen",
                    listen.as_str(),
                ];
                args.extend_from_slice(extra);
                let mut node = app(&ids[i], free_port(), &peers, &args);
                node.start();
                node
            })
            .collect();
        LinkedCluster {
            cluster: Cluster {
                nodes,
                _token_file: token_file,
            },
            links: Links { ids, proxies },
        }
    }
}
