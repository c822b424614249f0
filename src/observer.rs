//! `run --observe`: a node that follows the election without a vote, for the swarms of agents
//! that need to know who coordinates while only a few of them should vote
//! (docs/guide/observers.md).
//!
//! It never campaigns, never counts towards a quorum and never sends a message a member would
//! act on. Over pilot it subscribes to the election topic (the broker does the fan-out, so the
//! members pay nothing per observer) and announces itself every
//! [`crate::runtime::ANNOUNCE_EVERY`] with a presence marked `observer`, which members record
//! for `/status` and never hand to their core.
//! Over http it follows one member's `/events` (the client library's `observe`), starting at a
//! member picked by its id so that many observers spread over the members, and moves to the
//! next member when the stream breaks or stays silent: each member serves the observers that
//! follow it, one stream each, not every observer.
//!
//! What it knows is [`crate::election::observed::Observed`] (in the core, where the simulator
//! runs it too): the last leader it heard of, in which term, and when. The same election loop
//! as a member's drives it ([`crate::runtime::Runtime::add_observation`]), over a transport
//! started through the same seam ([`TransportConfig::start`]): pilot's, or over http the
//! events transport ([`crate::transport::events`]).
//! It publishes that as the same snapshot a member does (a follower that votes for nobody),
//! so `/leader`, `/events`, `/history`, `/role/*` and `/metrics` answer from it unchanged. It
//! cannot vouch for any lease: a leader counts until its own election timeout has passed
//! unheard (over http: until the member it follows has been silent for [`HTTP_SILENCE`]), and
//! `/role/leader` never answers 200.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::election::{MemberSet, Timings};
use crate::metrics::Metrics;
use crate::runtime::{Change, LastTurn, ObservationParts, Observing, Runtime, Snapshot, Wiring};
use crate::signing::KeyRing;
use crate::transport::events::HTTP_SILENCE;
use crate::transport::{Start, StartError, TransportConfig, INBOUND_CAPACITY};

/// What `run --observe` asks for, already validated.
#[derive(Debug, Clone)]
pub struct ObserverConfig {
    /// Its own name: in its announcements, its `/events` requests' header, its API's answers.
    pub node_id: String,
    /// The group it follows (`--observe-group`; the members' default group unless told
    /// otherwise): the messages of any other group are not its business.
    pub follows: String,
    /// The voting members (the observer is not one).
    pub members: MemberSet,
    /// Where it learns about the election: over pilot, the election topic (of the members'
    /// default group, which every group's messages travel on); over http, the members'
    /// `/events` ([`TransportConfig::Events`]).
    pub transport: TransportConfig,
    /// With a cluster key: verify what arrives over pilot, and sign the announcements.
    pub cluster_keys: Option<KeyRing>,
    /// How long a leader that announced no timings counts unheard: `--election-timeout`.
    pub timings: Timings,
}

impl ObserverConfig {
    /// `pilot` or `http`.
    pub fn transport_kind(&self) -> &'static str {
        match self.transport {
            TransportConfig::Pilot(_) => "pilot",
            _ => "http",
        }
    }
}

/// The observer's loop and the handles its API reads.
pub struct Observer {
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    pub observing: watch::Receiver<Observing>,
    pub clock: LastTurn,
    /// Every change of the leader it knows, for `--on-change` (role `observer`).
    pub changes: watch::Receiver<Change>,
    task: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
}

impl Observer {
    /// Starts following; `metrics` is the observer's own registry.
    pub fn start(config: ObserverConfig, metrics: Arc<Metrics>) -> Result<Observer, StartError> {
        let (inbound_tx, inbound) = mpsc::channel(INBOUND_CAPACITY);
        let transport_stop = CancellationToken::new();
        let started = config.transport.start(Start {
            inbound: inbound_tx,
            metrics: metrics.clone(),
            stop: transport_stop.clone(),
            quorum: config.members.quorum(),
            tls: None,
        })?;
        let pilot = matches!(config.transport, TransportConfig::Pilot(_));
        // Nothing is added or removed while an observer runs: the sender goes at once.
        let (_, group_changes) = mpsc::channel(1);
        let (mut runtime, clock) = Runtime::new(Wiring {
            transport: started.transport,
            keys: config.cluster_keys.clone(),
            inbound,
            metrics,
            info: None,
            store: None,
            book: None,
            node_id: config.node_id.clone(),
            group_changes,
            reports: started.reports,
        });
        let handle = runtime.add_observation(ObservationParts {
            node_id: config.node_id,
            group: config.follows,
            members: config.members,
            silence: match pilot {
                true => config.timings.election_timeout,
                false => HTTP_SILENCE,
            },
            timings: config.timings,
            announces: pilot,
        });
        let stop = CancellationToken::new();
        let loop_stop = stop.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = runtime.run(loop_stop).await {
                tracing::error!(error = %e, "the observer's loop stopped");
            }
            // After the loop, as a member's: its last turn's messages have left.
            transport_stop.cancel();
        });
        Ok(Observer {
            snapshot: handle.snapshot,
            observing: handle.observing,
            clock,
            changes: handle.changes,
            task,
            stop,
        })
    }

    /// Stops following (the subscription or the stream ends with the loop).
    pub async fn finish(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
