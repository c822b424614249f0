//! One observed election as a unit of the runtime (`run --observe`): the core's observer role
//! ([`Observed`]), the snapshot the API reads, its history and its `--on-change` reporter.
//! The driver ([`super::Runtime`]) hands it its group's messages as it hands an [`Election`]
//! its own, over the same transport seam, and wakes it at its deadline; over http, where the
//! observer follows a member's `/events` instead of the election's messages, the driver hands
//! it that member's reports ([`Report`]). It votes for nobody and sends nothing a member would
//! act on: over pilot, only the announcement that tells the members it is there.

use super::*;

use crate::election::observed::Observed;
use crate::transport::events::{following, Report};

/// How often an observer over pilot announces itself to the members.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(10);
/// An observation takes a turn at least this often, so that its transport's state (the member
/// it follows over http, a lost stream) shows within it even while nothing else happens.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// How the observer is doing, for its `/status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observing {
    /// `pilot` or `http`.
    pub transport: &'static str,
    /// Over http: the member whose `/events` it follows now (its URL); `None` while it
    /// reconnects. Over pilot: `None`.
    pub following: Option<String>,
    /// Messages are checked with the cluster key (pilot); false without one.
    pub verified: bool,
    /// Messages dropped as forged, replayed or malformed (pilot).
    pub rejected: u64,
}

/// What an observed election is built from.
pub struct ObservationParts {
    /// The observer's own id: in its announcements and its view.
    pub node_id: String,
    /// The group it follows.
    pub group: String,
    /// The voting members (the observer is not one).
    pub members: MemberSet,
    /// How long a leader counts unheard when it announced no timings of its own (over http:
    /// how long the member followed may be silent).
    pub silence: Duration,
    /// What its snapshot shows as the election's timings, and announces over pilot.
    pub timings: Timings,
    /// Whether it announces itself on the election topic every [`ANNOUNCE_EVERY`] (pilot).
    pub announces: bool,
}

/// How the API and the `--on-change` hook reach an observed election.
pub struct ObservationHandle {
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    pub observing: watch::Receiver<Observing>,
    /// Every change of the leader it knows (role `observer`).
    pub changes: watch::Receiver<Change>,
}

/// One observed election's state in the shell.
pub(super) struct Observation {
    observed: Observed,
    group: String,
    members: Arc<MemberSet>,
    timings: Timings,
    /// When it next announces itself (`None`: it never does).
    announce_at: Option<Instant>,
    /// Its next turn at the latest (see [`LOOK_EVERY`]).
    look_at: Instant,
    /// The sequence of its announcements: the wall clock's seconds at start, shifted, so that a
    /// restarted observer numbers above everything it sent before.
    seq: u64,
    snapshot: watch::Sender<Arc<Snapshot>>,
    observing: watch::Sender<Observing>,
    reporter: Reporter,
    history: Arc<VecDeque<HistoryEntry>>,
}

impl Observation {
    pub(super) fn new(
        parts: ObservationParts,
        shared: &Shared,
        now: Instant,
    ) -> (Observation, ObservationHandle) {
        let observed = Observed::new(
            &parts.node_id,
            &parts.group,
            parts.members.clone(),
            parts.silence,
        );
        let view = observed.view();
        let (reporter, changes) = Reporter::observer(&view);
        let members = Arc::new(parts.members);
        let first = Snapshot {
            view,
            members: observed.members(now),
            member_set: members.clone(),
            transport: shared.health.clone(),
            history: Arc::new(VecDeque::new()),
            timings: parts.timings,
            info: None,
            directory: shared.directory.clone(),
            maintenance: None,
            maintenance_held_by: Vec::new(),
            firing: None,
            firing_held_by: Vec::new(),
        };
        let (snapshot_tx, snapshot) = watch::channel(Arc::new(first));
        let (observing_tx, observing) = watch::channel(Observing {
            transport: shared.health.kind,
            following: None,
            verified: shared.keys.is_some(),
            rejected: 0,
        });
        let observation = Observation {
            observed,
            group: parts.group,
            members,
            timings: parts.timings,
            announce_at: parts.announces.then_some(now),
            look_at: now + LOOK_EVERY,
            seq: (unix_ms_now() / 1000) << 32,
            snapshot: snapshot_tx,
            observing: observing_tx,
            reporter,
            history: Arc::new(VecDeque::new()),
        };
        let handle = ObservationHandle {
            snapshot,
            observing,
            changes,
        };
        (observation, handle)
    }

    /// When it next needs a turn: its leader's time running out, its next announcement, or
    /// its next look at the transport.
    pub(super) fn deadline(&self) -> Instant {
        [self.observed.deadline(), self.announce_at]
            .into_iter()
            .flatten()
            .fold(self.look_at, Instant::min)
    }

    /// A turn at `now`: the leader's time running out, and the announcement if it is due.
    pub(super) fn on_time(&mut self, shared: &Shared, out: &mut Outbox, now: Instant) {
        let changes = self.observed.on_time(now).into_iter().collect();
        self.apply(shared, now, changes);
        self.look_at = now + LOOK_EVERY;
        if self.announce_at.is_some_and(|at| at <= now) {
            self.seq += 1;
            let announcement = self.observed.announcement(self.seq, &self.timings);
            out.send(shared.seal(announcement));
            self.announce_at = Some(now + ANNOUNCE_EVERY);
        }
    }

    /// A message of its group (or any other: the core keeps to its own group and members).
    pub(super) fn on_message(&mut self, shared: &mut Shared, now: Instant, m: &Message) {
        if m.group == self.group && self.members.contains(&m.from) {
            shared.record_info(m);
        }
        let changes = self.observed.on_message(now, m);
        self.apply(shared, now, changes);
    }

    /// What the member it follows over http says now.
    pub(super) fn on_report(&mut self, shared: &mut Shared, now: Instant, r: &Report) {
        if let (Some(leader), Some(url)) = (&r.leader, &r.leader_url) {
            let info = NodeInfo {
                url: url.clone(),
                meta: Default::default(),
            };
            Arc::make_mut(&mut shared.directory).record(leader, u64::MAX, Some(&info));
        }
        let changes = (self.observed).on_report(now, &r.node, r.leader.as_deref(), r.term);
        self.apply(shared, now, changes);
    }

    /// A message dropped before it could be read (forged, replayed, malformed).
    pub(super) fn rejected(&self) {
        self.observing.send_modify(|o| o.rejected += 1);
    }

    fn apply(&mut self, shared: &Shared, now: Instant, changes: Vec<Transition>) {
        for t in changes {
            self.on_transition(shared, &t);
        }
        self.publish(shared, now);
    }

    fn on_transition(&mut self, shared: &Shared, t: &Transition) {
        let view = self.observed.view();
        self.reporter.transition(t, &view);
        shared.metrics.transition(t.reason.into());
        let reason = t.reason.as_str();
        tracing::info!(
            group = %self.group,
            term = t.term,
            leader = t.leader.as_deref().unwrap_or(""),
            previous = t.previous.as_deref().unwrap_or(""),
            reason,
            "leader transition observed"
        );
        let history = Arc::make_mut(&mut self.history);
        history.push_back(HistoryEntry {
            term: t.term,
            leader: t.leader.clone(),
            previous: t.previous.clone(),
            reason: reason.to_string(),
            at: rfc3339(unix_ms_now()),
            leaderless_ms: None,
        });
        while history.len() > HISTORY_LIMIT {
            history.pop_front();
        }
    }

    /// Publishes its snapshot (and what it follows) if anything a reader sees changed.
    pub(super) fn publish(&mut self, shared: &Shared, now: Instant) {
        let view = self.observed.view();
        let members = self.observed.members(now);
        let (history, directory) = (self.history.clone(), shared.directory.clone());
        shared.metrics.term.set(view.term as i64);
        self.snapshot.send_if_modified(|s| {
            let changed = s.view != view
                || s.members
                    .iter()
                    .map(|m| m.live)
                    .ne(members.iter().map(|m| m.live))
                || !Arc::ptr_eq(&s.history, &history)
                || !Arc::ptr_eq(&s.directory, &directory)
                || !Arc::ptr_eq(&s.transport, &shared.health);
            // A copy only while a reader still holds the last one.
            let s = Arc::make_mut(s);
            s.view = view;
            s.members = members;
            s.history = history;
            s.directory = directory;
            s.transport = shared.health.clone();
            changed
        });
        let following = following(&shared.health);
        self.observing.send_if_modified(|o| {
            let changed = o.following != following;
            o.following = following;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::{Announced, Candidacy};
    use crate::transport::memory::Bus;

    const GROUP: &str = "shard-7";

    /// An observer's loop on an in-process bus, with a member's ear on the same bus.
    struct Rig {
        inbound: mpsc::Sender<Vec<u8>>,
        reports: mpsc::Sender<Report>,
        /// What reaches the bus (the observer's announcements).
        heard: mpsc::Receiver<Vec<u8>>,
        handle: ObservationHandle,
        stop: CancellationToken,
        task: JoinHandle<Result<(), RuntimeError>>,
    }

    fn rig(announces: bool, silence: Duration) -> Rig {
        let bus = Bus::new();
        let (inbound, inbound_rx) = mpsc::channel(64);
        let (heard_tx, heard) = mpsc::channel(64);
        let transport = Arc::new(bus.attach(heard_tx));
        let (reports, reports_rx) = mpsc::channel(8);
        let (_, group_changes) = mpsc::channel(1);
        let (mut runtime, _) = Runtime::new(Wiring {
            transport,
            keys: None,
            inbound: inbound_rx,
            metrics: Arc::new(Metrics::new()),
            info: None,
            store: None,
            book: None,
            node_id: "o1".into(),
            group_changes,
            reports: Some(reports_rx),
        });
        let handle = runtime.add_observation(ObservationParts {
            node_id: "o1".into(),
            group: GROUP.into(),
            members: members(),
            silence,
            timings: Timings::default(),
            announces,
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(runtime.run(stop.clone()));
        Rig {
            inbound,
            reports,
            heard,
            handle,
            stop,
            task,
        }
    }

    impl Rig {
        async fn send(&self, m: Message) {
            self.inbound.send(m.to_json().into_bytes()).await.unwrap();
        }

        /// Waits (bounded) until the published snapshot satisfies `ok`.
        async fn until(&mut self, what: &str, ok: impl Fn(&Snapshot) -> bool) -> Arc<Snapshot> {
            let mut rx = self.handle.snapshot.clone();
            let wait = rx.wait_for(|s| ok(s));
            let found = match tokio::time::timeout(Duration::from_secs(10), wait).await {
                Ok(Ok(s)) => Some(s.clone()),
                _ => None,
            };
            let last = self.handle.snapshot.borrow().view.clone();
            found.unwrap_or_else(|| panic!("{what}: not within 10 s: {last:?}"))
        }

        async fn finish(self) {
            self.stop.cancel();
            let done = tokio::time::timeout(Duration::from_secs(10), self.task).await;
            assert!(matches!(done, Ok(Ok(Ok(())))), "the loop stops cleanly");
        }
    }

    fn members() -> MemberSet {
        MemberSet::new("n1", ["n1", "n2", "n3"].map(String::from)).unwrap()
    }

    /// `from`'s victory in `term`, as a member sends it.
    fn leader(group: &str, from: &str, term: u64) -> Message {
        let body = Body::Leader {
            leader: from.into(),
            elected_at: 0,
        };
        Message {
            term,
            seq: term,
            members: members().fingerprint().to_string(),
            timings: Some(Announced::of(&Timings::default())),
            ..Message::new(group.into(), from.into(), body)
        }
    }

    /// The same from a member of the previous protocol version, which announces no timings.
    fn leader_v2(group: &str, from: &str, term: u64) -> Message {
        Message {
            v: 2,
            speaks: None,
            timings: None,
            ..leader(group, from, term)
        }
    }

    #[tokio::test]
    async fn a_member_s_word_in_its_group_names_the_leader_and_nothing_else_does() {
        let mut rig = rig(false, Duration::from_secs(30));
        // Another group's leader, and a non-member's word in the group: neither counts.
        rig.send(leader("shard-8", "n2", 9)).await;
        rig.send(leader(GROUP, "x9", 9)).await;
        rig.send(leader(GROUP, "n1", 4)).await;
        let s = rig
            .until("n1 named", |s| s.view.leader.as_deref() == Some("n1"))
            .await;
        assert_eq!(s.view.term, 4, "the term of the group's own leader");
        assert_eq!(s.view.node_id, "o1");
        assert_eq!(s.history.len(), 1, "one transition: {:?}", s.history);
        assert_eq!(s.history[0].leader.as_deref(), Some("n1"));
        let change = rig.handle.changes.borrow().clone();
        assert_eq!(change.leader.as_deref(), Some("n1"));
        assert_eq!(change.role, ChangeRole::Observer);
        // Bytes that are no message are counted as rejected, and change nothing.
        rig.inbound.send(b"{not json".to_vec()).await.unwrap();
        let mut observing = rig.handle.observing.clone();
        let wait = observing.wait_for(|o| o.rejected == 1);
        let counted = tokio::time::timeout(Duration::from_secs(10), wait).await;
        assert!(counted.is_ok(), "the rejection is counted");
        assert_eq!(rig.handle.snapshot.borrow().view.term, 4);
        rig.finish().await;
    }

    #[tokio::test]
    async fn a_leader_counts_until_its_silence_and_then_no_longer() {
        let mut rig = rig(false, Duration::from_millis(300));
        // A leader that announced no timings counts for the observer's own bound.
        rig.send(leader_v2(GROUP, "n2", 2)).await;
        rig.until("n2 named", |s| s.view.leader.as_deref() == Some("n2"))
            .await;
        // Nothing more of it: the loop's own deadline lets it go, the term stays.
        let s = rig.until("n2 let go", |s| s.view.leader.is_none()).await;
        assert_eq!(s.view.term, 2, "the term never goes back");
        rig.finish().await;
    }

    #[tokio::test]
    async fn a_report_of_the_member_followed_names_the_leader_and_where_it_is() {
        let mut rig = rig(false, Duration::from_secs(30));
        rig.reports
            .send(Report {
                node: "n3".into(),
                leader: Some("n1".into()),
                leader_url: Some("http://127.0.0.1:9/".into()),
                term: 7,
            })
            .await
            .unwrap();
        let s = rig
            .until("n1 reported", |s| s.view.leader.as_deref() == Some("n1"))
            .await;
        assert_eq!(s.view.term, 7);
        let url = s.info_of("n1").map(|i| i.url.clone());
        assert_eq!(url.as_deref(), Some("http://127.0.0.1:9/"));
        // A member behind the others is not believed.
        rig.reports
            .send(Report {
                node: "n2".into(),
                leader: Some("n2".into()),
                leader_url: None,
                term: 6,
            })
            .await
            .unwrap();
        rig.send(leader(GROUP, "n1", 7)).await;
        rig.until("still n1", |s| s.view.leader.as_deref() == Some("n1"))
            .await;
        assert_eq!(rig.handle.snapshot.borrow().view.term, 7);
        rig.finish().await;
    }

    #[tokio::test]
    async fn over_pilot_it_announces_itself_as_an_observer_of_its_group() {
        let mut rig = rig(true, Duration::from_secs(30));
        let bytes = tokio::time::timeout(Duration::from_secs(10), rig.heard.recv())
            .await
            .expect("an announcement within 10 s")
            .expect("the bus is open");
        let m = Message::parse(&bytes).expect("one whole message");
        assert!(
            m.observer,
            "marked observer: no member hands it to its core"
        );
        assert_eq!((m.group.as_str(), m.from.as_str()), (GROUP, "o1"));
        match m.body.advert() {
            Some(a) => assert_eq!(a.candidacy, Candidacy::Withdrawn),
            None => panic!("a presence: {m:?}"),
        }
        rig.finish().await;
    }

    #[tokio::test]
    async fn without_announcing_it_sends_nothing() {
        let mut rig = rig(false, Duration::from_secs(30));
        rig.send(leader(GROUP, "n1", 1)).await;
        rig.until("n1 named", |s| s.view.leader.as_deref() == Some("n1"))
            .await;
        assert!(
            rig.heard.try_recv().is_err(),
            "an observer over http sends nothing"
        );
        rig.finish().await;
    }
}
