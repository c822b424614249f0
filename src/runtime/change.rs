//! What this node reports to whatever acts on changes of leadership outside the process (the
//! `--on-change` hook): one [`Change`] per change of the known leader or of this node's role,
//! numbered, on a `watch` channel. A `watch` keeps only the newest value, which is exactly the
//! "latest state wins" a slow consumer needs; the numbers tell it how many it never saw, and tell
//! the release guard which change must be acted on before a resign leaves (rule 9).

use tokio::sync::watch;

use crate::election::{Role, Transition, View};

/// This node's role as a change reports it. A pre-vote changes nothing (rule 4), so a
/// pre-candidate is still a follower here; only a real vote round in a new term is a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeRole {
    Leader,
    Follower,
    Candidate,
    /// `run --observe`: it follows the election and never takes part.
    Observer,
}

impl ChangeRole {
    pub fn of(role: Role) -> ChangeRole {
        match role {
            Role::Leader => ChangeRole::Leader,
            Role::Candidate => ChangeRole::Candidate,
            Role::Follower | Role::PreCandidate => ChangeRole::Follower,
        }
    }

    /// The value of `PILOT_ELECTION_ROLE` and of `/status`.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeRole::Leader => "leader",
            ChangeRole::Follower => "follower",
            ChangeRole::Candidate => "candidate",
            ChangeRole::Observer => "observer",
        }
    }
}

/// Why a change without a change of leader was reported (a leader change carries the
/// transition's own reason, `Reason::as_str`).
pub mod reason {
    /// The first report of a run: whatever a previous run of this node left outside (a VIP after
    /// a `kill -9`) can be put right.
    pub const START: &str = "start";
    /// This node began a vote round in a new term (it knows no leader).
    pub const CAMPAIGN: &str = "campaign";
    /// Its round ended without a leader known (it lost, timed out, or saw a higher term).
    pub const CAMPAIGN_LOST: &str = "campaign_lost";
}

/// One change, as of the step that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// 1 for the first report, one more for each after it.
    pub seq: u64,
    pub role: ChangeRole,
    /// The leader this node knows now.
    pub leader: Option<String>,
    pub term: u64,
    /// The leader it knew before this change (the same as `leader` when only the role changed).
    pub previous: Option<String>,
    /// The transition's reason (`elected`, `step_down`, ...) or one of [`reason`].
    pub reason: &'static str,
}

impl Change {
    /// Whether this change reports that this node stopped leading.
    pub fn lost_leadership(&self, node_id: &str) -> bool {
        self.role != ChangeRole::Leader && self.previous.as_deref() == Some(node_id)
    }
}

/// The reporting side: what it last reported, and the channel.
pub struct Reporter {
    tx: watch::Sender<Change>,
    /// An observer's role, whatever its view says.
    fixed: Option<ChangeRole>,
}

impl Reporter {
    /// Starts with the `start` report of `view`.
    pub(super) fn new(view: &View) -> (Reporter, watch::Receiver<Change>) {
        Reporter::with_role(view, None)
    }

    /// An observer's reporter (`run --observe`): every change says role `observer`.
    pub fn observer(view: &View) -> (Reporter, watch::Receiver<Change>) {
        Reporter::with_role(view, Some(ChangeRole::Observer))
    }

    fn with_role(view: &View, fixed: Option<ChangeRole>) -> (Reporter, watch::Receiver<Change>) {
        let first = Change {
            seq: 1,
            role: fixed.unwrap_or(ChangeRole::of(view.role)),
            leader: view.leader.clone(),
            term: view.term,
            previous: None,
            reason: reason::START,
        };
        let (tx, rx) = watch::channel(first);
        (Reporter { tx, fixed }, rx)
    }

    fn last_role(&self) -> ChangeRole {
        self.tx.borrow().role
    }

    fn send(&self, make: impl FnOnce(u64) -> Change) {
        self.tx.send_modify(|c| *c = make(c.seq + 1));
    }

    /// A change of the known leader; `view` is the node's view after the step that made it.
    pub fn transition(&self, t: &Transition, view: &View) {
        let role = match (self.fixed, t.leader.as_deref()) {
            (Some(fixed), _) => fixed,
            (None, Some(l)) if l == view.node_id => ChangeRole::Leader,
            (None, _) => ChangeRole::of(view.role),
        };
        self.send(|seq| Change {
            seq,
            role,
            leader: t.leader.clone(),
            term: t.term,
            previous: t.previous.clone(),
            reason: t.reason.as_str(),
        });
    }

    /// After a step's actions: a change of role that came without a change of leader (a vote
    /// round began or ended while no leader was known).
    pub(super) fn role(&self, view: &View) {
        let role = ChangeRole::of(view.role);
        let last = self.last_role();
        if role == last {
            return;
        }
        let reason = match role {
            ChangeRole::Candidate => reason::CAMPAIGN,
            _ if last == ChangeRole::Candidate => reason::CAMPAIGN_LOST,
            // A leader's changes always come with a transition; nothing else is left.
            _ => return,
        };
        self.send(|seq| Change {
            seq,
            role,
            leader: view.leader.clone(),
            term: view.term,
            previous: view.leader.clone(),
            reason,
        });
    }
}
