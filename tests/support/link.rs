//! A one-way network link for http clusters: a TCP relay on a free 127.0.0.1 port that forwards
//! to one node. Give a node the relay's URL as another node's `--peer` and that node's messages
//! to the other travel through it; [`Link::cut`] closes the connections across it and refuses
//! new ones until [`Link::heal`], as a partition between the two would; [`Link::delay`] holds
//! every chunk the sender writes back for a while, as a slow path would. Included with `#[path]`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub struct Link {
    /// Where senders connect.
    pub port: u16,
    /// The node behind the link.
    pub target: u16,
    cut: watch::Sender<bool>,
    /// Microseconds each chunk towards the target is held back.
    delay_us: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Link {
    /// A healed link to the node listening on `target`, on a port none of `taken` (ports picked
    /// with `free_port` for nodes not started yet, which the system could hand out again).
    pub async fn to_avoiding(target: u16, taken: &[u16]) -> Link {
        loop {
            let link = Link::to(target).await;
            if !taken.contains(&link.port) {
                return link;
            }
        }
    }

    /// A healed link to the node listening on `target`.
    pub async fn to(target: u16) -> Link {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a link");
        let port = listener.local_addr().expect("link address").port();
        let (cut, cut_rx) = watch::channel(false);
        let delay_us = Arc::new(AtomicU64::new(0));
        let delay = delay_us.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    // Out of descriptors, say: try again shortly rather than spin.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                if *cut_rx.borrow() {
                    // Refused: the sender sees its connection closed at once.
                    drop(inbound);
                    continue;
                }
                let mut cut_rx = cut_rx.clone();
                let delay = delay.clone();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (mut from_sender, mut to_sender) = inbound.into_split();
                    let (mut from_target, mut to_target) = outbound.into_split();
                    let forward = async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = from_sender.read(&mut buf).await?;
                            if n == 0 {
                                return to_target.shutdown().await;
                            }
                            let d = delay.load(Ordering::Relaxed);
                            if d > 0 {
                                tokio::time::sleep(Duration::from_micros(d)).await;
                            }
                            to_target.write_all(&buf[..n]).await?;
                        }
                    };
                    let back = tokio::io::copy(&mut from_target, &mut to_sender);
                    tokio::select! {
                        _ = async { tokio::join!(forward, back) } => {}
                        _ = cut_rx.wait_for(|c| *c) => {}
                    }
                });
            }
        });
        Link {
            port,
            target,
            cut,
            delay_us,
            accept,
        }
    }

    /// Closes every connection across the link and refuses new ones.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Holds every chunk towards the target back by `by` from now on (zero: none).
    pub fn delay(&self, by: Duration) {
        self.delay_us
            .store(by.as_micros() as u64, Ordering::Relaxed);
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
    }

    pub fn is_cut(&self) -> bool {
        *self.cut.borrow()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.cut.send_replace(true);
        self.accept.abort();
    }
}
