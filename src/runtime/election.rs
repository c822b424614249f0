//! One election as a unit of the runtime: its core, its store, the snapshot the API reads, its
//! history, its maintenance setting and what acts for it outside the loop (release guards, the
//! `--on-change` reporter). The driver ([`super::Runtime`]) owns one per group and hands each
//! the inputs of its group; everything an election shares with the others (the wire, the keys,
//! the node's announcement, the metrics) comes in as [`Shared`], so that no election can reach
//! another's state.

use super::*;

/// What every election of this process shares: borrowed by an election for one step.
pub(super) struct Shared {
    pub(super) transport: Arc<dyn Transport>,
    /// The transport's health as of this turn of the loop: read once per turn, not once per
    /// election's snapshot (a thousand groups step in one turn).
    pub(super) health: Arc<Health>,
    /// With a cluster key: sign what leaves.
    pub(super) keys: Option<KeyRing>,
    /// Stamped on every message that leaves (see [`crate::directory`]).
    pub(super) info: Option<NodeInfo>,
    /// What the other members announced, for every election's snapshot.
    pub(super) directory: Arc<Directory>,
    pub(super) metrics: Arc<Metrics>,
}

impl Shared {
    /// `m` as it leaves this node: stamped with the wall clock, signed with the cluster key if
    /// there is one, serialised.
    pub(super) fn seal(&self, mut m: Message) -> Arc<[u8]> {
        m.stamp(unix_ms_now());
        if let Some(keys) = &self.keys {
            keys.sign(&mut m);
        }
        m.to_json().into_bytes().into()
    }

    /// Records what member `m.from` announced to clients, if `m` says something newer: copies
    /// the directory only then, as every snapshot shares it.
    pub(super) fn record_info(&mut self, m: &Message) {
        if self.directory.would_change(&m.from, m.seq, m.info.as_ref()) {
            Arc::make_mut(&mut self.directory).record(&m.from, m.seq, m.info.as_ref());
        }
    }

    /// Reads the transport's health for this turn, keeping the last reading when it is the same
    /// (so that snapshots share one allocation).
    pub(super) fn refresh_health(&mut self) {
        let health = self.transport.health();
        if *self.health != health {
            self.health = Arc::new(health);
        }
    }
}

/// One election's state in the shell. Its fields are its own: two groups share none of them.
pub(super) struct Election {
    /// Its group, as its messages name it.
    group: Arc<str>,
    pub(super) node: Node,
    pub(super) store: Store,
    /// Where its term, vote and promise are kept: its own files (the default group) or the
    /// book of every other group.
    keeps: Keeps,
    /// The turn of the outbox its last step added to, while that turn is not flushed: its
    /// next input waits for the flush (see [`Outbox`]).
    unflushed: Option<u64>,
    /// When it next needs a tick, as of its last step: the driver reads a thousand of these
    /// every turn, so they are kept rather than worked out again.
    pub(super) deadline: Option<Instant>,
    snapshot: watch::Sender<Arc<Snapshot>>,
    history: Arc<VecDeque<HistoryEntry>>,
    /// The latest history for its writer task (see [`file_writer`]).
    history_out: watch::Sender<Vec<HistoryEntry>>,
    leaderless_since: Option<Instant>,
    role: Role,
    /// Every one is awaited (all at once) before a resign of this election leaves.
    release_guards: Vec<ReleaseGuard>,
    /// Changes of leader and role for `--on-change`, if anyone asked for them.
    changes: Option<Reporter>,
    /// The newest maintenance write seen, sent on every message (rule 16).
    pub(super) maintenance: Option<Maintenance>,
    /// What the core was last told of it.
    pub(super) maintenance_in_core: bool,
    /// The maintenance write each member's latest message carried, as (version, member it was
    /// made on): who holds ours, since a member sends a write only once it is on its disk.
    pub(super) carried: BTreeMap<String, (u64, String)>,
    /// Its scheduled firings' records (rule 19): the newest, sent on every message once kept,
    /// and what each member acknowledged.
    pub(super) firings: FiringBook,
    /// The observers heard on this group's topic (their announcements never reach the core).
    pub(super) observers: Observers,
    /// Its member set, as every snapshot shows it (the core's own never changes while it runs).
    member_set: Arc<MemberSet>,
    /// When its snapshot was last published.
    published_at: Instant,
    /// Set while the published snapshot holds back a renewal (see
    /// [`Election::publish_if_changed`]): a little before the first instant it shows ends.
    republish_at: Option<Instant>,
}

impl Election {
    /// The election and the receiver of its snapshots.
    pub(super) fn new(
        parts: ElectionParts,
        shared: &Shared,
        now: Instant,
    ) -> (Election, watch::Receiver<Arc<Snapshot>>) {
        let ElectionParts {
            group,
            node,
            store,
            keeps,
            history,
            observers,
            firing,
            scheduled: _,
        } = parts;
        let history: Arc<VecDeque<_>> = Arc::new(history.into_iter().collect());
        let maintenance = store.maintenance();
        let held_by = holders(&node, &maintenance, &BTreeMap::new());
        let member_set = Arc::new(node.members().clone());
        let firings = FiringBook::from_disk(firing);
        let first = snapshot_of(
            (&node, node.view(now)),
            shared,
            (history.clone(), member_set.clone()),
            &maintenance,
            held_by,
            (firings.record().cloned(), Vec::new()),
            now,
        );
        let (tx, rx) = watch::channel(first);
        let election = Election {
            group: group.as_str().into(),
            role: node.role(),
            deadline: node.poll_timeout(),
            node,
            store,
            keeps,
            unflushed: None,
            snapshot: tx,
            history,
            history_out: watch::Sender::new(Vec::new()),
            leaderless_since: Some(now),
            release_guards: Vec::new(),
            changes: None,
            maintenance,
            maintenance_in_core: false,
            carried: BTreeMap::new(),
            firings,
            observers,
            member_set,
            published_at: now,
            republish_at: None,
        };
        (election, rx)
    }

    /// Every resign of this election waits for `guard` first (see [`ReleaseGuard`]), and for
    /// every guard given before it, all at once.
    pub(super) fn guard_releases(&mut self, guard: ReleaseGuard) {
        self.release_guards.push(guard);
    }

    /// Reports every change of this election's leader or of this node's role in it from now
    /// on, starting with a `start` change of the current view (see [`Change`]).
    pub(super) fn report_changes(&mut self) -> watch::Receiver<Change> {
        let (reporter, rx) = Reporter::new(&self.node.view(clock::now()));
        self.changes = Some(reporter);
        rx
    }

    /// The task that keeps this election's history on disk, one write at a time.
    pub(super) fn history_writer(&self, flush_now: &CancellationToken) -> JoinHandle<()> {
        tokio::spawn(file_writer(
            "history",
            self.store.clone(),
            self.history_out.subscribe(),
            Duration::ZERO,
            flush_now.clone(),
            |store: &Store, list: &Vec<HistoryEntry>| store.save_history(list),
        ))
    }

    /// Hands the history writer the final list and closes its channel, so that it ends once
    /// that list is on disk.
    pub(super) fn close_history(&mut self) {
        let list: Vec<_> = self.history.iter().cloned().collect();
        self.history_out.send_replace(list);
        drop(std::mem::replace(
            &mut self.history_out,
            watch::Sender::new(Vec::new()),
        ));
    }

    /// One input through the core: the new view is published before any of its actions runs
    /// (rule 9), then the actions run in order (into the outbox), then the view is published
    /// again if they added to the history.
    pub(super) async fn step(
        &mut self,
        shared: &Shared,
        out: &mut Outbox,
        input: Input,
    ) -> Result<Result<Outcome, CommandError>, RuntimeError> {
        // The core takes it that the previous step's actions have run (a round it started is
        // on disk): if they still wait in the outbox, they are carried out first.
        if self.unflushed == Some(out.turn()) {
            out.flush(shared.transport.as_ref(), &shared.metrics, Pacing::Paced)
                .await?;
        }
        let now = clock::now();
        let result = self.node.handle(now, input);
        // One view for the step: the actions below change nothing the view shows.
        let view = self.node.view(now);
        self.on_role(shared, &view);
        let reported = self.changes.is_some().then(|| view.clone());
        self.publish_if_changed(shared, now, view);
        let history = self.history.clone();
        self.execute(shared, out).await?;
        if let (Some(changes), Some(view)) = (&self.changes, &reported) {
            changes.role(view);
        }
        // Again only when the actions changed what the snapshot shows (a transition): with a
        // thousand groups, every publication wakes whoever watches each of them.
        if !Arc::ptr_eq(&history, &self.history) {
            self.publish_snapshot(shared, clock::now());
        }
        self.deadline = match (self.node.poll_timeout(), self.republish_at) {
            (Some(d), Some(r)) => Some(d.min(r)),
            (d, r) => d.or(r),
        };
        Ok(result)
    }

    /// Carries out the core's actions in order: state and messages go to the outbox, which
    /// keeps the state before the messages leave (see [`Outbox`]).
    async fn execute(&mut self, shared: &Shared, out: &mut Outbox) -> Result<(), RuntimeError> {
        while let Some(action) = self.node.poll_action() {
            match action {
                Action::Persist(p) => {
                    self.unflushed = Some(out.turn());
                    match self.keeps {
                        Keeps::OwnFiles => out.persist_own(&self.store, p),
                        Keeps::Book => out.persist_in_book(&self.group, &p),
                    }
                }
                // What acts on the leadership outside the core stops before the resign leaves.
                Action::Release { term } => {
                    let all = self.release_guards.iter().map(|guard| guard(term));
                    futures_util::future::join_all(all).await;
                }
                Action::Publish(mut msg) => {
                    msg.info.clone_from(&shared.info);
                    msg.maintenance.clone_from(&self.maintenance);
                    msg.firing = self.firings.sent().cloned();
                    msg.batches = true;
                    self.unflushed = Some(out.turn());
                    out.send(shared.seal(msg));
                }
                Action::Transition(t) => self.on_transition(shared, t),
            }
        }
        Ok(())
    }

    fn on_transition(&mut self, shared: &Shared, t: Transition) {
        let now = clock::now();
        if let Some(changes) = &self.changes {
            changes.transition(&t, &self.node.view(now));
        }
        let leaderless_ms = match (&t.leader, self.leaderless_since) {
            (Some(_), Some(since)) => Some((now - since).as_millis() as u64),
            _ => None,
        };
        match &t.leader {
            Some(_) => {
                if let Some(ms) = leaderless_ms {
                    shared.metrics.leaderless_seconds.inc_by(ms as f64 / 1000.0);
                }
                self.leaderless_since = None;
            }
            None => self.leaderless_since = Some(now),
        }
        shared.metrics.transition(t.reason.into());
        let reason = t.reason.as_str();
        tracing::info!(
            term = t.term,
            leader = t.leader.as_deref().unwrap_or(""),
            previous = t.previous.as_deref().unwrap_or(""),
            reason,
            leaderless_ms,
            "leader transition"
        );
        let entry = HistoryEntry {
            term: t.term,
            leader: t.leader,
            previous: t.previous,
            reason: reason.to_string(),
            at: rfc3339(unix_ms_now()),
            leaderless_ms,
        };
        let history = Arc::make_mut(&mut self.history);
        history.push_back(entry);
        while history.len() > HISTORY_LIMIT {
            history.pop_front();
        }
        self.history_out
            .send_replace(history.iter().cloned().collect());
    }

    /// Metrics and a log line when the role changed in the last step.
    fn on_role(&mut self, shared: &Shared, view: &View) {
        // The term gauge is set from the snapshot at each scrape, for the group scraped.
        let metrics = &shared.metrics;
        match (self.role, view.role) {
            (Role::Follower, Role::PreCandidate | Role::Candidate) => {
                metrics.election(ElectionResult::Started)
            }
            (Role::PreCandidate | Role::Candidate, Role::Leader) => {
                metrics.election(ElectionResult::Won)
            }
            (Role::PreCandidate | Role::Candidate, Role::Follower) => {
                metrics.election(ElectionResult::Lost)
            }
            _ => {}
        }
        if self.role != view.role {
            tracing::info!(term = view.term, role = ?view.role, "role changed");
        }
        self.role = view.role;
    }

    /// Publishes the view as of `now` unless the published one still tells the same: the same
    /// view, transport health, announcements, history and holders of the pause, younger than
    /// a heartbeat interval, or younger than two when the only difference is a renewal (see
    /// [`renewed_only`]). Most steps of a node in many groups change only what it knows of
    /// another member (an ack to someone else's heartbeat) or push an end further out (every
    /// heartbeat renews a lease and a promise); building and dropping a snapshot for each was
    /// the largest part of a node's time at a thousand groups.
    ///
    /// What the published snapshot says stays true: the view that revokes leadership always
    /// differs from the one that granted it (rule 9 is untouched); a renewal held back only
    /// moves an end further out, so the published one comes first and nothing it vouches for
    /// outlives the truth; and the election wakes a quarter of a heartbeat interval before the
    /// first end it shows ([`Election::deadline`]), publishing then, so that a reader never sees
    /// an end pass that the node has renewed. What is left out (the members' last-heard times)
    /// is at most `2h` old.
    fn publish_if_changed(&mut self, shared: &Shared, now: Instant, view: View) {
        let h = self.node.timings().heartbeat;
        let age = now.saturating_duration_since(self.published_at);
        let due = self.republish_at.is_some_and(|r| now >= r);
        if age < 2 * h && !due {
            let (same, renewed) = {
                let s = self.snapshot.borrow();
                let others = Arc::ptr_eq(&s.transport, &shared.health)
                    && Arc::ptr_eq(&s.directory, &shared.directory)
                    && Arc::ptr_eq(&s.history, &self.history)
                    && s.maintenance == self.maintenance
                    && s.maintenance_held_by
                        == holders(&self.node, &self.maintenance, &self.carried)
                    && s.firing.as_ref() == self.firings.record()
                    && (s.firing.is_none() || s.firing_held_by == self.firing_holders(view.term));
                let same = others && age < h && s.view == view;
                let renewed = others && !same && renewed_only(&s.view, &view);
                (same, renewed.then(|| first_end(&s.view)).flatten())
            };
            if same {
                return;
            }
            // Held back only while the first end it shows is more than a quarter of `h` away.
            if let Some(end) = renewed
                .and_then(|e| e.checked_sub(h / 4))
                .filter(|r| *r > now)
            {
                self.republish_at = Some(self.republish_at.map_or(end, |r| r.min(end)));
                return;
            }
        }
        self.publish_view(shared, now, view);
    }

    /// Publishes the view as of `now`: one `Arc`, so a reader takes it out of the channel in
    /// one reference count and serialises it without holding the channel's lock.
    pub(super) fn publish_snapshot(&mut self, shared: &Shared, now: Instant) {
        self.publish_view(shared, now, self.node.view(now));
    }

    /// As [`Election::publish_snapshot`], with the view of `now` already in hand.
    fn publish_view(&mut self, shared: &Shared, now: Instant, view: View) {
        self.published_at = now;
        self.republish_at = None;
        let held_by = holders(&self.node, &self.maintenance, &self.carried);
        let firing = (
            self.firings.record().cloned(),
            self.firing_holders(view.term),
        );
        let snap = snapshot_of(
            (&self.node, view),
            shared,
            (self.history.clone(), self.member_set.clone()),
            &self.maintenance,
            held_by,
            firing,
            now,
        );
        self.snapshot.send_replace(snap);
    }
}

/// Where an election's term, vote and promise are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeps {
    /// The data directory's `state.json` and `promise.json`, as a node of one election keeps
    /// them (the default group).
    OwnFiles,
    /// The book of every other group (`groups/state.json`), one write for all of them.
    Book,
}

/// What an election is built from.
pub struct ElectionParts {
    /// Its group: the messages it takes and sends name it.
    pub group: String,
    /// Its core, with what the store held.
    pub node: Node,
    /// Its directory (history, maintenance).
    pub store: Store,
    /// Where its term, vote and promise are kept.
    pub keeps: Keeps,
    /// Its history as the store held it.
    pub history: Vec<HistoryEntry>,
    /// Where the announcements of its observers are recorded, for `/status`.
    pub observers: Observers,
    /// The newest scheduled firing record its store kept (rule 19).
    pub firing: Option<Firing>,
    /// Whether it runs a schedule (`run --schedule`): its handle then has the channel the
    /// schedule writes its firings through.
    pub scheduled: bool,
}

fn snapshot_of(
    (node, view): (&Node, View),
    shared: &Shared,
    (history, member_set): (Arc<VecDeque<HistoryEntry>>, Arc<MemberSet>),
    maintenance: &Option<Maintenance>,
    maintenance_held_by: Vec<String>,
    (firing, firing_held_by): (Option<Firing>, Vec<String>),
    now: Instant,
) -> Arc<Snapshot> {
    Arc::new(Snapshot {
        view,
        members: node.peers(now),
        member_set,
        transport: shared.health.clone(),
        history,
        timings: *node.timings(),
        info: shared.info.clone(),
        directory: shared.directory.clone(),
        maintenance: maintenance.clone(),
        maintenance_held_by,
        firing,
        firing_held_by,
    })
}

/// Whether `new` differs from `old` in nothing but ends pushed further out: a lease, the
/// promise to the leader, the time the leader was last heard. Every field is named, so that a
/// field added to [`View`] is decided here.
fn renewed_only(old: &View, new: &View) -> bool {
    let View {
        node_id,
        role,
        term,
        leader,
        voted_for,
        lease_until,
        leader_until,
        leader_heard_at,
        leader_since,
        priority,
        eligible,
        candidacy,
        can_campaign,
        can_vote,
        config_conflicts,
        shutting_down,
        promise,
        writes_version,
        maintenance,
        healthy,
    } = new;
    let later = |o: &Option<Instant>, n: &Option<Instant>| match (o, n) {
        (Some(o), Some(n)) => n >= o,
        (None, None) => true,
        _ => false,
    };
    let promise_later = match (&old.promise, promise) {
        (Some((who_o, o)), Some((who_n, n))) => who_o == who_n && n >= o,
        (None, None) => true,
        _ => false,
    };
    later(&old.lease_until, lease_until)
        && later(&old.leader_until, leader_until)
        && later(&old.leader_heard_at, leader_heard_at)
        && promise_later
        && old.node_id == *node_id
        && old.role == *role
        && old.term == *term
        && old.leader == *leader
        && old.voted_for == *voted_for
        && old.leader_since == *leader_since
        && old.priority == *priority
        && old.eligible == *eligible
        && old.candidacy == *candidacy
        && old.can_campaign == *can_campaign
        && old.can_vote == *can_vote
        && old.config_conflicts == *config_conflicts
        && old.shutting_down == *shutting_down
        && old.writes_version == *writes_version
        && old.maintenance == *maintenance
        && old.healthy == *healthy
}

/// The first of the ends a view shows.
fn first_end(view: &View) -> Option<Instant> {
    [
        view.lease_until,
        view.leader_until,
        view.promise.as_ref().map(|p| p.1),
    ]
    .into_iter()
    .flatten()
    .min()
}

/// The members that hold `maintenance`, this node first: those whose latest message carried
/// that very write. Empty when there is none.
fn holders(
    node: &Node,
    maintenance: &Option<Maintenance>,
    carried: &BTreeMap<String, (u64, String)>,
) -> Vec<String> {
    let Some(m) = maintenance else {
        return Vec::new();
    };
    let others = carried
        .iter()
        // A node may hear its own messages (a broadcast comes back): it is counted once.
        .filter(|(id, (version, by))| {
            *version == m.version
                && *by == m.by
                && id.as_str() != node.id()
                && node.members().contains(id)
        })
        .map(|(id, _)| id.clone());
    std::iter::once(node.id().to_string())
        .chain(others)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::election::Role;

    /// Leading since `since`, renewed at `at`.
    fn leading(since: Instant, at: Instant) -> View {
        View {
            voted_for: Some("n1".into()),
            leader_heard_at: Some(at),
            leader_since: Some(since),
            priority: 7,
            promise: Some(("n1".into(), at + Duration::from_secs(3))),
            ..crate::runtime::test_view("n1", 4, Some(at + Duration::from_secs(2)))
        }
    }

    #[test]
    fn a_renewal_is_told_apart_from_every_other_change() {
        let t0 = clock::now();
        let old = leading(t0, t0);
        let later = leading(t0, t0 + Duration::from_millis(500));
        assert!(renewed_only(&old, &later));
        assert!(renewed_only(&old, &old), "nothing changed at all");
        assert!(
            !renewed_only(&later, &old),
            "an end that moved back is no renewal"
        );
        assert_eq!(first_end(&old), Some(t0 + Duration::from_secs(2)));
        let changes: [fn(&mut View); 6] = [
            |v| v.role = Role::Follower,
            |v| v.term += 1,
            |v| v.leader = Some("n2".into()),
            |v| v.lease_until = None,
            |v| v.promise.as_mut().unwrap().0 = "n2".into(),
            |v| v.healthy = false,
        ];
        for change in changes {
            let mut v = later.clone();
            change(&mut v);
            assert!(!renewed_only(&old, &v), "{v:?}");
        }
    }
}
