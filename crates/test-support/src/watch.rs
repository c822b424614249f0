//! A leadership watcher: polls `GET /role/leader` on every listed node every 20 ms (or as asked) in a
//! background task and records, per poll round, which nodes answered 200 and with which term
//! (the body of `/role/leader` carries it). At the end it reports the most nodes that claimed
//! leadership in one round (safety: at most one), two nodes ever claiming the same term, every
//! leaderless gap and the total leaderless time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

    /// Starts polling `nodes` every `every` (a benchmark wants a finer resolution than a test).
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
        pilot_election::clock::now().saturating_duration_since(self.start)
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
    pub async fn stop(mut self) -> Report {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.report()
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
                let (answered_at_all, leads, term) = match resp {
                    Ok(r) => {
                        let leads = r.status().as_u16() == 200;
                        let body: serde_json::Value = r.json().await.unwrap_or_default();
                        (true, leads, body["term"].as_u64())
                    }
                    Err(_) => (false, false, None),
                };
                let answered = since(pilot_election::clock::now());
                (
                    answered_at_all,
                    leads.then(|| Claim {
                        node: id.clone(),
                        term,
                        sent,
                        answered,
                    }),
                )
            }
        });
        let results = join_all(asks).await;
        let done = since(pilot_election::clock::now());
        let round = Round {
            at,
            done,
            polled: nodes.len(),
            answered: results.iter().filter(|(a, _)| *a).count(),
            leaders: results.into_iter().filter_map(|(_, c)| c).collect(),
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

    /// Never two nodes claiming leadership in one round, never two nodes claiming one term.
    pub fn single_leader(&self) -> bool {
        self.max_leaders <= 1 && self.shared_terms.is_empty()
    }

    /// Prints the figures and every gap (shown with `--nocapture`, and by the harness when the
    /// test fails).
    pub fn print(&self, label: &str) {
        println!(
            "[{label}] watched {:.1?}: {} rounds every {POLL_EVERY:?} (slowest {:?}); max \
             simultaneous leaders {}; terms claimed by two nodes: {:?}",
            self.watched, self.rounds, self.slowest_round, self.max_leaders, self.shared_terms
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
