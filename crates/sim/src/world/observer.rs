//! An observer (`run --observe`) in the simulation: the core's own [`Observed`] fed every message
//! any member sends, each after a delay of its own (an observer hears the topic, not a member's
//! inbox), and held at every message it takes to the election's invariant: the leader it names
//! is the one the cluster elected in the term it names (`Checker::leader_of`). It draws its
//! delays from a stream of its own, so that a seed's members see what they saw without it.

use super::*;
use pilot_election_core::observed::Observed;

/// How the modelled observer takes what it hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObserverRule {
    /// As the observer does.
    Correct,
    /// Broken, for the directed case: once it knows a term, it takes every later message as
    /// of that term (it never raises its term), so a new leader is named in the old term.
    NeverRaisesItsTerm,
}

pub(super) struct Watcher {
    observed: Observed,
    rng: Rng,
    rule: ObserverRule,
    /// Extra delay of what a member sends, on its way to the observer.
    slow: BTreeMap<usize, Duration>,
}

impl World {
    /// From now on an observer hears every message, each within the network's delays.
    pub fn observe(&mut self, rule: ObserverRule) {
        let members = self.slots[0].config.members.clone();
        let t = self.timings.election_timeout;
        self.watcher = Some(Watcher {
            observed: Observed::new("observer", &self.group, members, t),
            rng: Rng::new(self.seq ^ 0x0B5E_57E2),
            rule,
            slow: BTreeMap::new(),
        });
    }

    /// What node `from` sends reaches the observer `d` later than it would.
    pub fn slow_to_observer(&mut self, from: usize, d: Duration) {
        if let Some(w) = &mut self.watcher {
            w.slow.insert(from, d);
        }
    }

    /// The leader and term the observer names now, if any.
    pub fn observed(&self) -> Option<(String, u64)> {
        let w = self.watcher.as_ref()?;
        let now = self.base + Duration::from_nanos(self.now);
        let leader = w.observed.leader_at(now)?;
        Some((leader.to_string(), w.observed.term()))
    }

    /// A message `from` sent, on its way to the observer.
    pub(super) fn send_to_observer(&mut self, from: usize, m: &Message) {
        let Some(w) = &mut self.watcher else {
            return;
        };
        let span = self.net.max_delay.saturating_sub(self.net.min_delay);
        let mut delay = self.net.min_delay.as_nanos() as u64 + w.rng.below(span.as_nanos() as u64);
        if let Some(slow) = w.slow.get(&from) {
            delay += slow.as_nanos() as u64;
        }
        self.push(
            self.now + delay.max(1),
            Kind::Observe {
                msg: Box::new(m.clone()),
            },
        );
    }

    /// The observer takes `m`, then its leader is checked.
    pub(super) fn observe_one(&mut self, mut m: Message) {
        let now = self.base + Duration::from_nanos(self.now);
        let Some(w) = &mut self.watcher else {
            return;
        };
        let known = w.observed.term();
        if w.rule == ObserverRule::NeverRaisesItsTerm && known > 0 && m.term > known {
            m.term = known;
        }
        w.observed.on_time(now);
        w.observed.on_message(now, &m);
        let Some(leader) = w.observed.leader_at(now).map(str::to_string) else {
            return;
        };
        let term = w.observed.term();
        self.stats.observed += 1;
        let elected = self.checker.leader_of(term).map(str::to_string);
        if elected.as_deref() != Some(leader.as_str()) {
            let what = format!(
                "an observer names {leader} leader in term {term}, in which {elected:?} was elected"
            );
            self.checker.violate(self.now, what);
        }
    }
}
