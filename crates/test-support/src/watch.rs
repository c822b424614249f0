//! The leadership watcher every test uses (processes, in-process nodes, containers): polls
//! `GET /role/leader` on every listed node every 20 ms (or as asked), all nodes at once, in a
//! background task, and records per poll round which nodes answered 200 and with which term, and
//! which leader each node names (the body of `/role/leader` carries the term and the leader the
//! node knows now, judged as `GET /leader` judges it). At the end it reports the most nodes that
//! claimed leadership in one round (safety: at most one), two nodes ever claiming the same term, a
//! claim of an older term made after a newer term's leader had answered, every leaderless gap and
//! the total leaderless time. [`crate::faults`] judges the rounds' names as well.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::agree::{describe, Named};

/// How often every node is asked.
pub const POLL_EVERY: Duration = Duration::from_millis(20);
/// A node that has not answered within this counts as not leading in that round.
const ANSWER_WITHIN: Duration = Duration::from_millis(500);

/// One node answering 200 on `/role/leader`: it claimed leadership at some instant between
/// `sent` and `answered` (both since the watcher started).
#[derive(Clone, Debug)]
pub struct Claim {
    pub node: String,
    pub term: Option<u64>,
    pub sent: Duration,
    pub answered: Duration,
}

/// One poll of every listed node.
#[derive(Clone, Debug)]
pub struct Round {
    /// When the round started, since the watcher started.
    pub at: Duration,
    /// When its last answer came (or its last request gave up).
    pub done: Duration,
    pub polled: usize,
    /// Nodes that answered at all (200 or 503).
    pub answered: usize,
    pub leaders: Vec<Claim>,
    /// The leader and term each node named in its answer (absent: it named none, or did not
    /// answer).
    pub names: BTreeMap<String, (String, u64)>,
}

impl Round {
    /// Whether `node` answered 200 in this round, in `term`.
    pub fn leads(&self, node: &str, term: u64) -> bool {
        self.leaders
            .iter()
            .any(|c| c.node == node && c.term == Some(term))
    }

    /// The nodes that answered 200, as `id@term`.
    pub fn leading(&self) -> Vec<String> {
        self.leaders
            .iter()
            .map(|c| match c.term {
                Some(t) => format!("{}@{t}", c.node),
                None => c.node.clone(),
            })
            .collect()
    }

    /// What every node of `ids` named, and who answered 200: `n1->n2@3 n2->- leading [n2@3]`.
    pub fn describe(&self, ids: &[String]) -> String {
        let named: Vec<Named> = ids.iter().map(|id| self.names.get(id).cloned()).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        format!(
            "{} leading [{}]",
            describe(&ids, &named),
            self.leading().join(" ")
        )
    }
}

/// A stretch of rounds in which no node answered 200.
#[derive(Clone, Debug)]
pub struct Gap {
    /// The first leaderless round, since the watcher started.
    pub from: Duration,
    /// From the first leaderless round to the first round with a leader again (or to the end of
    /// the watch when `open`): exact to one poll interval.
    pub len: Duration,
    /// The watch ended before a leader came back.
    pub open: bool,
    /// The leader before and after the gap, with its term.
    pub before: Option<(String, Option<u64>)>,
    pub after: Option<(String, Option<u64>)>,
    /// The latest mark set before the gap began (what the test was doing).
    pub mark: Option<String>,
}

#[derive(Default)]
struct Shared {
    /// `(id, base URL)` of the nodes polled from the next round on.
    nodes: Vec<(String, String)>,
    rounds: Vec<Round>,
    marks: Vec<(Duration, String)>,
}

/// The background poller. Stop it with [`Watcher::stop`] to get its [`Report`].
pub struct Watcher {
    shared: Arc<Mutex<Shared>>,
    start: Instant,
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts polling `nodes` (`(id, base URL)`) at once, every [`POLL_EVERY`].
    pub fn start(nodes: Vec<(String, String)>) -> Watcher {
        Watcher::start_every(nodes, POLL_EVERY)
    }

    /// Starts polling `nodes` every `every` (a benchmark or a race wants a finer resolution).
    /// It needs a tokio runtime (a blocking test enters one first), as the whole watch runs on it.
    pub fn start_every(nodes: Vec<(String, String)>, every: Duration) -> Watcher {
        let shared = Arc::new(Mutex::new(Shared {
            nodes,
            ..Default::default()
        }));
        let start = pilot_election::clock::now();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(poll(shared.clone(), start, every, cancel.clone()));
        Watcher {
            shared,
            start,
            cancel,
            task: Some(task),
        }
    }

    /// Polls `id` at `url` too from the next round on (or at its new URL).
    pub fn add(&self, id: &str, url: &str) {
        let mut s = self.shared.lock().unwrap();
        s.nodes.retain(|(n, _)| n != id);
        s.nodes.push((id.to_string(), url.to_string()));
    }

    /// Stops polling `id` (a node that left the cluster).
    pub fn remove(&self, id: &str) {
        self.shared.lock().unwrap().nodes.retain(|(n, _)| n != id);
    }

    /// Labels what the test does from now on; each gap names the latest mark before it.
    pub fn mark(&self, what: impl Into<String>) {
        let at = self.elapsed();
        self.shared.lock().unwrap().marks.push((at, what.into()));
    }

    pub fn elapsed(&self) -> Duration {
        self.since_start(pilot_election::clock::now())
    }

    /// `at` as the rounds count time: since the watcher started.
    pub fn since_start(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.start)
    }

    /// Rounds recorded so far.
    pub fn len(&self) -> usize {
        self.shared.lock().unwrap().rounds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until some round saw a leader (gaps count only after one was seen, so a test
    /// that is about to disturb the leader calls this first); false if none within `within`.
    pub async fn seen_leader(&self, within: Duration) -> bool {
        let deadline = pilot_election::clock::now() + within;
        loop {
            if self
                .shared
                .lock()
                .unwrap()
                .rounds
                .iter()
                .any(|r| !r.leaders.is_empty())
            {
                return true;
            }
            if pilot_election::clock::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Rounds recorded so far.
    pub fn rounds(&self) -> Vec<Round> {
        self.shared.lock().unwrap().rounds.clone()
    }

    /// The report so far, without stopping.
    pub fn report(&self) -> Report {
        let s = self.shared.lock().unwrap();
        Report::of(&s.rounds, &s.marks, self.elapsed())
    }

    /// Stops polling after the round under way and reports.
    pub async fn stop(self) -> Report {
        self.finish().await.0
    }

    /// Stops polling after the round under way; the report and every round.
    pub async fn finish(mut self) -> (Report, Vec<Round>) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let report = self.report();
        let rounds = std::mem::take(&mut self.shared.lock().unwrap().rounds);
        (report, rounds)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// One node's answer in one round.
struct Answer {
    answered: bool,
    claim: Option<Claim>,
    named: Option<(String, (String, u64))>,
}

async fn poll(
    shared: Arc<Mutex<Shared>>,
    start: Instant,
    every: Duration,
    cancel: CancellationToken,
) {
    let client = reqwest::Client::builder()
        .timeout(ANSWER_WITHIN)
        .connect_timeout(ANSWER_WITHIN)
        .build()
        .expect("client");
    let since = |t: Instant| t.saturating_duration_since(start);
    let mut next = pilot_election::clock::now();
    while !cancel.is_cancelled() {
        let nodes = shared.lock().unwrap().nodes.clone();
        let at = since(pilot_election::clock::now());
        let asks = nodes.iter().map(|(id, url)| {
            let client = client.clone();
            let url = format!("{url}/role/leader");
            async move {
                let sent = since(pilot_election::clock::now());
                let resp = client.get(&url).send().await;
                let (answered_at_all, leads, body) = match resp {
                    Ok(r) => {
                        let leads = r.status().as_u16() == 200;
                        let body: serde_json::Value = r.json().await.unwrap_or_default();
                        (true, leads, body)
                    }
                    Err(_) => (false, false, serde_json::Value::Null),
                };
                let answered = since(pilot_election::clock::now());
                let term = body["term"].as_u64();
                let named = body["leader"].as_str().zip(term);
                Answer {
                    answered: answered_at_all,
                    claim: leads.then(|| Claim {
                        node: id.clone(),
                        term,
                        sent,
                        answered,
                    }),
                    named: named.map(|(l, t)| (id.clone(), (l.to_string(), t))),
                }
            }
        });
        let results = join_all(asks).await;
        let done = since(pilot_election::clock::now());
        let round = Round {
            at,
            done,
            polled: nodes.len(),
            answered: results.iter().filter(|a| a.answered).count(),
            names: results.iter().filter_map(|a| a.named.clone()).collect(),
            leaders: results.into_iter().filter_map(|a| a.claim).collect(),
        };
        shared.lock().unwrap().rounds.push(round);
        next += every;
        let now = pilot_election::clock::now();
        if next < now {
            // A slow round: start the next one at once, and keep the cadence from here.
            next = now;
        }
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tokio::time::sleep(next - now) => {}
        }
    }
}

/// Every claim of an older term whose request left after some claim of a newer term had been
/// answered, each with the earliest-answered such newer claim.
fn stale_claims<'a>(claims: impl Iterator<Item = &'a Claim>) -> Vec<(Claim, Claim)> {
    let claims: Vec<&Claim> = claims.filter(|c| c.term.is_some()).collect();
    // Per term, its earliest-answered claim; then, per term, the earliest among newer terms.
    let mut first: BTreeMap<u64, &Claim> = BTreeMap::new();
    for c in &claims {
        let e = first.entry(c.term.unwrap_or_default()).or_insert(c);
        if c.answered < e.answered {
            *e = c;
        }
    }
    let mut newer: BTreeMap<u64, &Claim> = BTreeMap::new();
    let mut best: Option<&Claim> = None;
    for (t, c) in first.iter().rev() {
        if let Some(b) = best {
            newer.insert(*t, b);
        }
        if best.is_none_or(|b| c.answered < b.answered) {
            best = Some(c);
        }
    }
    claims
        .into_iter()
        .filter_map(|a| {
            let b = newer.get(&a.term.unwrap_or_default())?;
            (a.sent > b.answered).then(|| (a.clone(), (*b).clone()))
        })
        .collect()
}

/// What a watch saw.
#[derive(Clone, Debug)]
pub struct Report {
    pub watched: Duration,
    pub rounds: usize,
    /// The longest time between the starts of two consecutive rounds (the watcher's own
    /// resolution: a gap shorter than this could have been missed).
    pub slowest_round: Duration,
    /// The most nodes that answered 200 in one round (must be at most 1).
    pub max_leaders: usize,
    /// Rounds in which more than one node answered 200.
    pub overlaps: Vec<Round>,
    /// Terms claimed by more than one node, with the nodes.
    pub shared_terms: Vec<(u64, Vec<String>)>,
    /// Two leaders at once across rounds: a claim of an older term whose request left after a
    /// claim of a newer term had been answered (terms only grow, and an older leader's lease ends
    /// before a newer one is elected), with that newer claim.
    pub stale: Vec<(Claim, Claim)>,
    /// Leaderless time before the first leader was seen (not counted as a gap).
    pub before_first_leader: Option<Duration>,
    pub gaps: Vec<Gap>,
    /// Every change of the node that answers 200: `(when, node, term)`.
    pub leaders: Vec<(Duration, String, Option<u64>)>,
}

impl Report {
    fn of(rounds: &[Round], marks: &[(Duration, String)], watched: Duration) -> Report {
        let mark_before = |t: Duration| {
            marks
                .iter()
                .rev()
                .find(|(at, _)| *at <= t)
                .map(|(_, m)| m.clone())
        };
        let mut gaps = Vec::new();
        let mut leaders: Vec<(Duration, String, Option<u64>)> = Vec::new();
        let mut before_first_leader = None;
        let mut gap_from: Option<Duration> = None;
        let mut last: Option<(String, Option<u64>)> = None;
        let mut terms: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for r in rounds {
            for c in &r.leaders {
                if let Some(t) = c.term {
                    let nodes = terms.entry(t).or_default();
                    if !nodes.contains(&c.node) {
                        nodes.push(c.node.clone());
                    }
                }
            }
            match r.leaders.first() {
                None => {
                    if gap_from.is_none() {
                        gap_from = Some(r.at);
                    }
                }
                Some(c) => {
                    let now = (c.node.clone(), c.term);
                    if let Some(from) = gap_from.take() {
                        if last.is_some() {
                            gaps.push(Gap {
                                from,
                                len: r.at - from,
                                open: false,
                                before: last.clone(),
                                after: Some(now.clone()),
                                mark: mark_before(from),
                            });
                        } else {
                            before_first_leader = Some(r.at - from);
                        }
                    }
                    if last.as_ref() != Some(&now) {
                        leaders.push((r.at, now.0.clone(), now.1));
                    }
                    last = Some(now);
                }
            }
        }
        if let (Some(from), Some(_)) = (gap_from, &last) {
            let end = rounds.last().map(|r| r.done).unwrap_or(from);
            gaps.push(Gap {
                from,
                len: end.saturating_sub(from),
                open: true,
                before: last.clone(),
                after: None,
                mark: mark_before(from),
            });
        }
        let slowest_round = rounds
            .windows(2)
            .map(|w| w[1].at - w[0].at)
            .max()
            .unwrap_or_default();
        Report {
            watched,
            rounds: rounds.len(),
            slowest_round,
            max_leaders: rounds.iter().map(|r| r.leaders.len()).max().unwrap_or(0),
            overlaps: rounds
                .iter()
                .filter(|r| r.leaders.len() > 1)
                .cloned()
                .collect(),
            shared_terms: terms.into_iter().filter(|(_, n)| n.len() > 1).collect(),
            stale: stale_claims(rounds.iter().flat_map(|r| &r.leaders)),
            before_first_leader,
            gaps,
            leaders,
        }
    }

    pub fn leaderless(&self) -> Duration {
        self.gaps.iter().map(|g| g.len).sum()
    }

    pub fn max_gap(&self) -> Duration {
        self.gaps.iter().map(|g| g.len).max().unwrap_or_default()
    }

    /// The `p`-th percentile (0..=100, nearest rank) of the gap lengths; zero without gaps.
    pub fn gap_percentile(&self, p: f64) -> Duration {
        let mut lens: Vec<Duration> = self.gaps.iter().map(|g| g.len).collect();
        if lens.is_empty() {
            return Duration::ZERO;
        }
        lens.sort();
        let rank = ((p / 100.0) * lens.len() as f64).ceil() as usize;
        lens[rank.clamp(1, lens.len()) - 1]
    }

    /// Never two nodes claiming leadership in one round, never two nodes claiming one term, never
    /// an older term claimed after a newer one's leader answered.
    pub fn single_leader(&self) -> bool {
        self.max_leaders <= 1 && self.shared_terms.is_empty() && self.stale.is_empty()
    }

    /// Asserts that every leaderless gap was shorter than `bound`; `logs` goes into the failure
    /// message.
    pub fn assert_gaps_under(&self, bound: Duration, label: &str, logs: impl FnOnce() -> String) {
        assert!(
            self.gaps.iter().all(|g| g.len < bound),
            "{label}: a leaderless gap of {:?} (bound {bound:?}): {:?}\n{}",
            self.max_gap(),
            self.gaps,
            logs()
        );
    }

    /// Prints the report under `label` and asserts [`Report::single_leader`]; `logs` (the nodes'
    /// logs, say) goes into the failure message.
    pub fn assert_single_leader(&self, label: &str, logs: impl FnOnce() -> String) {
        self.print(label);
        assert!(
            self.single_leader(),
            "{label}: two leaders: max {} in one round, terms shared {:?}, stale claims {:?}, \
             rounds {:#?}\n{}",
            self.max_leaders,
            self.shared_terms,
            &self.stale[..self.stale.len().min(5)],
            self.overlaps,
            logs()
        );
    }

    /// Prints the figures and every gap (shown with `--nocapture`, and by the harness when the
    /// test fails).
    pub fn print(&self, label: &str) {
        println!(
            "[{label}] watched {:.1?}: {} rounds (slowest {:?}); max simultaneous leaders {}; \
             terms claimed by two nodes: {:?}; older terms claimed after a newer one: {}",
            self.watched,
            self.rounds,
            self.slowest_round,
            self.max_leaders,
            self.shared_terms,
            self.stale.len()
        );
        println!(
            "[{label}] {} leaderless gaps: p50 {:?}, p99 {:?}, max {:?}, total {:?}{}",
            self.gaps.len(),
            self.gap_percentile(50.0),
            self.gap_percentile(99.0),
            self.max_gap(),
            self.leaderless(),
            match self.before_first_leader {
                Some(d) => format!(" (plus {d:?} before the first leader)"),
                None => String::new(),
            }
        );
        let who = |l: &Option<(String, Option<u64>)>| match l {
            Some((n, Some(t))) => format!("{n}@{t}"),
            Some((n, None)) => n.clone(),
            None => "-".into(),
        };
        for g in &self.gaps {
            println!(
                "[{label}]   gap at {:>8.3?}: {:>9.3?}{} {} -> {} during: {}",
                g.from,
                g.len,
                if g.open { " (open at the end)" } else { "" },
                who(&g.before),
                who(&g.after),
                g.mark.as_deref().unwrap_or("-")
            );
        }
        for r in &self.overlaps {
            println!(
                "[{label}]   TWO LEADERS in the round at {:?}: {:?}",
                r.at, r.leaders
            );
        }
        let changes: Vec<String> = self
            .leaders
            .iter()
            .map(|(at, n, t)| {
                format!(
                    "{at:.1?} {n}@{}",
                    t.map(|t| t.to_string()).unwrap_or_default()
                )
            })
            .collect();
        println!("[{label}] leaders: {}", changes.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn claim(node: &str, term: u64, sent: u64, answered: u64) -> Claim {
        Claim {
            node: node.into(),
            term: Some(term),
            sent: ms(sent),
            answered: ms(answered),
        }
    }

    fn round(at: u64, leaders: Vec<Claim>) -> Round {
        Round {
            at: ms(at),
            done: ms(at),
            polled: 3,
            answered: 3,
            leaders,
            names: BTreeMap::new(),
        }
    }

    fn report(rounds: &[Round]) -> Report {
        Report::of(rounds, &[], ms(100))
    }

    #[test]
    fn the_overlap_and_gap_rules_catch_what_they_must() {
        // A clean handover: n0 leads term 1, then n1 leads term 2.
        let clean = report(&[
            round(0, vec![claim("n0", 1, 0, 2)]),
            round(30, vec![claim("n1", 2, 30, 32)]),
        ]);
        assert!(clean.single_leader(), "{clean:?}");
        // The old leader's (slow) answer came after the new leader's, but its request left
        // before: no proof of two.
        let racing = report(&[
            round(0, vec![claim("n0", 1, 0, 35)]),
            round(20, vec![claim("n1", 2, 20, 22)]),
        ]);
        assert!(racing.single_leader(), "{racing:?}");
        // The old leader still claims after the new one answered: two leaders.
        let stale = report(&[
            round(30, vec![claim("n1", 2, 30, 32)]),
            round(40, vec![claim("n0", 1, 40, 41)]),
        ]);
        assert_eq!(stale.stale.len(), 1, "{stale:?}");
        assert!(!stale.single_leader());
        // Two nodes in one term, rounds apart.
        let shared = report(&[
            round(0, vec![claim("n0", 3, 0, 1)]),
            round(50, vec![claim("n1", 3, 50, 51)]),
        ]);
        assert_eq!(
            shared.shared_terms,
            vec![(3, vec!["n0".into(), "n1".into()])]
        );
        assert!(!shared.single_leader());
        // Two in one round.
        let both = report(&[round(0, vec![claim("n0", 3, 0, 1), claim("n1", 4, 0, 1)])]);
        assert_eq!((both.max_leaders, both.overlaps.len()), (2, 1));
        assert!(!both.single_leader());
        // Leaderless stretches: from the first round nobody claimed to the next one somebody did,
        // and one still open at the end.
        let leader = || vec![claim("n0", 1, 0, 1)];
        let gaps = report(&[
            round(0, leader()),
            round(20, vec![]),
            round(40, vec![]),
            round(60, leader()),
            round(80, vec![]),
        ]);
        let lens: Vec<(Duration, bool)> = gaps.gaps.iter().map(|g| (g.len, g.open)).collect();
        assert_eq!(lens, vec![(ms(40), false), (ms(0), true)]);
    }
}
