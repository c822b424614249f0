//! Faults the kernel makes: each node in a network namespace of its own, with
//! nftables rules that drop packets silently (no RST, no ICMP), as a firewall or a broken
//! switch does. Unlike a relay in the test process ([`crate::proxy`]), TCP then behaves as it
//! does between machines: an established connection goes on delivering what the node sends
//! while the answers never come back, until the sender's own timeouts give up.
//!
//! This needs root (`ip netns`, `nft`); every test machine of the project has it. The nodes
//! listen on their namespace's address (`10.77.K.I`), not on 127.0.0.1: a fault per node needs
//! a network stack per node. Those addresses exist only on veth pairs inside this machine,
//! with no route out; the test process reaches them from the root namespace (`10.77.K.254`).
//! Everything is named after the test process's PID and removed on drop.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::agree::{agree, agreed};
use crate::app::{free_port, App, TempDir, T};
use crate::watch::{Report, Watcher};

/// `n` namespaces, each linked to every other and to the test process.
pub struct Net {
    tag: String,
    /// The third byte of every address: one /24 per test process.
    subnet: u8,
    size: usize,
}

fn run(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Net {
    /// Namespaces `0..n`, namespace `i` with address `10.77.K.(i+1)`. There is no bridge and
    /// no forwarding (a host's firewall, Docker's among them, drops forwarded packets): every
    /// pair of namespaces, and each namespace and the test process, has a veth pair of its own,
    /// with a route per address.
    pub fn create(n: usize) -> Net {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let pid = std::process::id();
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let net = Net {
            // Unique to this process and this net (a namespace's devices go away a little after
            // the namespace); at most 15 bytes with the longest suffix, as device names must be.
            tag: format!("pe{}{}", pid % 100_000, k % 100),
            subnet: 20 + ((pid + k) % 200) as u8,
            size: n,
        };
        let host = net.host();
        let setup = || -> Result<(), String> {
            for i in 0..n {
                let ns = net.name(i);
                run(&["ip", "netns", "add", &ns])?;
                run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
                let addr = format!("{}/32", net.addr(i));
                run(&["ip", "-n", &ns, "addr", "add", &addr, "dev", "lo"])?;
            }
            // The test process and each namespace.
            for i in 0..n {
                let ns = net.name(i);
                let (outer, inner) = (format!("{}h{i}", net.tag), format!("{}h", net.tag));
                run(&[
                    "ip", "link", "add", &outer, "type", "veth", "peer", "name", &inner,
                ])?;
                run(&["ip", "link", "set", &inner, "netns", &ns])?;
                run(&["ip", "addr", "add", &format!("{host}/32"), "dev", &outer])?;
                run(&["ip", "link", "set", &outer, "up"])?;
                run(&["ip", "-n", &ns, "link", "set", &inner, "up"])?;
                let to_node = format!("{}/32", net.addr(i));
                run(&["ip", "route", "add", &to_node, "dev", &outer, "src", &host])?;
                let to_host = format!("{host}/32");
                run(&[
                    "ip",
                    "-n",
                    &ns,
                    "route",
                    "add",
                    &to_host,
                    "dev",
                    &inner,
                    "src",
                    &net.addr(i),
                ])?;
            }
            // Every pair of namespaces.
            for i in 0..n {
                for j in i + 1..n {
                    let (a, b) = (format!("{}p{j}", net.tag), format!("{}p{i}", net.tag));
                    run(&["ip", "link", "add", &a, "type", "veth", "peer", "name", &b])?;
                    run(&["ip", "link", "set", &a, "netns", &net.name(i)])?;
                    run(&["ip", "link", "set", &b, "netns", &net.name(j)])?;
                    for (k, dev, other) in [(i, &a, j), (j, &b, i)] {
                        let ns = net.name(k);
                        run(&["ip", "-n", &ns, "link", "set", dev, "up"])?;
                        let to = format!("{}/32", net.addr(other));
                        run(&[
                            "ip",
                            "-n",
                            &ns,
                            "route",
                            "add",
                            &to,
                            "dev",
                            dev,
                            "src",
                            &net.addr(k),
                        ])?;
                    }
                }
            }
            Ok(())
        };
        if let Err(e) = setup() {
            drop(net);
            panic!(
                "network namespaces need root and iproute2 (ip netns, nft; {}): {e}",
                crate::SET_UP
            );
        }
        net
    }

    /// The test process's address towards the namespaces.
    fn host(&self) -> String {
        format!("10.77.{}.254", self.subnet)
    }

    /// Namespace `i`'s name, for `ip netns exec`.
    pub fn name(&self, i: usize) -> String {
        format!("{}n{i}", self.tag)
    }

    /// Namespace `i`'s address.
    pub fn addr(&self, i: usize) -> String {
        format!("10.77.{}.{}", self.subnet, i + 1)
    }

    /// Runs `nft RULE` in namespace `i`.
    fn nft(&self, i: usize, rule: &str) {
        let ns = self.name(i);
        let mut args = vec!["ip", "netns", "exec", &ns, "nft"];
        args.extend(rule.split(' '));
        run(&args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Adds to namespace `i`'s fault table a chain on `hook` (`input` or `output`) that lets
    /// loopback and the test process through and drops the other namespaces (by source on
    /// input, by destination on output).
    fn drop_peers(&self, i: usize, hook: &str) {
        let (lo, addr) = match hook {
            "input" => ("iifname", "saddr"),
            _ => ("oifname", "daddr"),
        };
        let host = self.host();
        let subnet = format!("10.77.{}.0/24", self.subnet);
        self.nft(i, &format!(
            "add chain inet pefault {hook} {{ type filter hook {hook} priority 0 ; policy accept ; }}"
        ));
        self.nft(i, &format!("add rule inet pefault {hook} {lo} lo accept"));
        self.nft(
            i,
            &format!("add rule inet pefault {hook} ip {addr} {host} accept"),
        );
        self.nft(
            i,
            &format!("add rule inet pefault {hook} ip {addr} {subnet} drop"),
        );
    }

    /// Namespace `i` drops every packet from the other namespaces (it still sends, and the test
    /// process still reaches it): a node whose inbound firewall shut its peers out.
    pub fn deafen(&self, i: usize) {
        self.nft(i, "add table inet pefault");
        self.drop_peers(i, "input");
    }

    /// Namespace `i` drops every packet from and to the other namespaces (the test process
    /// still reaches it): a node cut off both ways.
    pub fn cut(&self, i: usize) {
        self.deafen(i);
        self.drop_peers(i, "output");
    }

    /// Takes namespace `i`'s rules away again.
    pub fn heal(&self, i: usize) {
        let ns = self.name(i);
        let _ = run(&[
            "ip", "netns", "exec", &ns, "nft", "delete", "table", "inet", "pefault",
        ]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        // Deleting a namespace deletes its ends of the veth pairs, and with them the pairs.
        for i in 0..self.size {
            let _ = run(&["ip", "link", "delete", &format!("{}h{i}", self.tag)]);
            let _ = run(&["ip", "netns", "delete", &self.name(i)]);
        }
    }
}

/// What one kernel-deaf-leader run saw.
pub struct DeafLeader {
    /// From the fault to the first moment the other two agreed on a new leader; `None` if
    /// they did not within `4T`.
    pub took: Option<Duration>,
    /// The watch of every node's `/role/leader`, every 20 ms, from before the fault.
    pub report: Report,
    /// Every node's log, for a failure message.
    pub logs: String,
}

/// What happens before the leader is made deaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// Nothing: the first leader is made deaf.
    Nothing,
    /// The first leader is cut off both ways for 10 s, then healed; once the cluster agrees
    /// again, its leader is the one made deaf (issue 39, item 2: the node that had been cut off
    /// took the others for flappers, docs/protocol.md, rule 12).
    ACut,
}

/// Three http nodes `n1..n3` (binary `binary`, or this build's), node `i` in namespace `i`,
/// `n1` ranked first; once `n1` leads (after `before`: the leader then), its namespace drops
/// every packet of the others while it still sends (docs/guide/protocol-overview.md;
/// docs/protocol.md, "What it promises").
pub async fn deaf_leader(binary: Option<PathBuf>, before: Before) -> DeafLeader {
    let net = Net::create(3);
    let port = free_port();
    let ids = ["n1", "n2", "n3"];
    let mut nodes: Vec<App> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let dir = TempDir::new(id);
            let mut args: Vec<String> = ["run", "--node-id", id, "--group", "it"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend([
                "--allow-unauthenticated".into(),
                "--listen".into(),
                format!("{}:{port}", net.addr(i)),
                "--data-dir".into(),
                dir.0.join("data").display().to_string(),
                "--priority".into(),
                (300 - 100 * i).to_string(),
            ]);
            for (j, other) in ids.iter().enumerate().filter(|(j, _)| *j != i) {
                args.push("--peer".into());
                args.push(format!("{other}=http://{}:{port}", net.addr(j)));
            }
            let mut app = App::new(id, port, dir, args);
            app.netns = Some(net.name(i));
            app.host = net.addr(i);
            app.binary = binary.clone();
            app
        })
        .collect();
    for n in &mut nodes {
        n.start();
    }
    let logs = crate::app::logs_of;
    let all: Vec<&App> = nodes.iter().collect();
    let (mut leader, mut term) = agree(
        &all,
        Duration::from_secs(20),
        |l, _| l == "n1",
        || logs(&nodes),
    )
    .await;
    if before == Before::ACut {
        net.cut(0);
        tokio::time::sleep(Duration::from_secs(10)).await;
        net.heal(0);
        (leader, term) = agree(&all, T * 4, |_, t| t > term, || logs(&nodes)).await;
    }
    let deaf = ids
        .iter()
        .position(|id| *id == leader)
        .expect("the leader is a node");
    // Steady for a few heartbeats, so that every connection is established and pooled.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let w = Watcher::start(nodes.iter().map(|n| (n.id.clone(), n.url())).collect());
    assert!(w.seen_leader(T).await, "the watch saw no leader");
    w.mark(format!("{leader} drops what its peers send"));
    let fault = pilot_election::clock::now();
    net.deafen(deaf);
    let rest: Vec<&App> = (0..nodes.len())
        .filter(|i| *i != deaf)
        .map(|i| &nodes[i])
        .collect();
    let new = agreed(&rest, T * 4, |l, t| l != leader && t > term).await;
    let took = new.map(|_| pilot_election::clock::since(fault));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = w.stop().await;
    net.heal(deaf);
    let logs = logs(&nodes);
    for n in &mut nodes {
        n.kill9();
    }
    DeafLeader { took, report, logs }
}
