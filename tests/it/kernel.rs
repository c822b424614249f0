//! A leader that drops, in its kernel, every packet its peers send (an inbound firewall rule, a
//! broken NIC queue), while it still sends: three nodes in network namespaces of their own
//! ([`support::netns`]), the fault an nftables rule. TCP keeps delivering what the leader sends
//! on its established connections for a while, so its followers keep hearing heartbeats after
//! their acks stopped reaching it. The other two must agree on a new leader within `2T` of the
//! fault (docs/protocol.md, "What it promises"), and `/role/leader` polled every 20 ms on every
//! node never shows two leaders.

use crate::app::{serial, T};
use support::netns::{deaf_leader, Before};

/// One run of the fault after `before`: never two leaders, and a new one within `2T`.
async fn replaced_within_two_election_timeouts(label: &str, before: Before) {
    let _serial = serial().await;
    let run = deaf_leader(None, before).await;
    run.report.assert_single_leader(label, || run.logs.clone());
    let Some(took) = run.took else {
        panic!(
            "{label}: the other two did not elect within 4T\n{}",
            run.logs
        );
    };
    println!("{label}: a new leader {took:?} after the fault");
    assert!(
        took <= T * 2,
        "{label}: the others agreed on a new leader {took:?} after the fault, beyond 2T = {:?}\n{}",
        T * 2,
        run.logs
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_kernel_drops_its_peers_packets_is_replaced_within_two_election_timeouts() {
    replaced_within_two_election_timeouts("kernel-deaf leader", Before::Nothing).await;
}

/// Issue 39, item 2: the same fault after an earlier one: the first leader cut off both ways for
/// 10 s, healed, and then the leader of the healed cluster made deaf. 6.5-7.1 s before rule 12's
/// two changes (docs/protocol.md): the node that had been cut off took the others for flappers,
/// and TCP's late delivery of what was sent into the cut kept the deaf leader live for its vetoes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deaf_leader_after_an_earlier_cut_is_replaced_within_two_election_timeouts() {
    replaced_within_two_election_timeouts("kernel-deaf leader after a cut", Before::ACut).await;
}
