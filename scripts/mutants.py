#!/usr/bin/env python3
"""Mutation check of the election core: does the test suite catch single-rule bugs?

Each mutant below breaks exactly one rule of docs/protocol.md by a textual edit of the core
(the text to find must occur exactly as given, so a refactoring that moves it makes this script
fail loudly instead of testing nothing). For each mutant the tree is copied, the edit applied,
and the core's tests run (the same binaries CI runs: unit tests, the named protocol cases, the
harness self-tests and the seeded simulation at its default seed count). A mutant is *caught*
when any of them fails; the first failing test is reported.

    scripts/mutants.py              # every mutant; exit 1 if a rule-breaking one survives
    scripts/mutants.py NAME...      # only these
    scripts/mutants.py --sim-only   # only the simulator's targets (election_cases, the harness
                                    # self-tests, the seeded simulation): which mutants the
                                    # simulator alone catches; informational, exits 0
    scripts/mutants.py --list       # the table
    scripts/mutants.py --check-sites
                                    # only whether every edit site is still found, as often
                                    # as expected (no build; seconds): run it after moving
                                    # code of the core

A mutant of the shell (src/) names the test of the service that catches it; it runs after the
core's targets, and --sim-only leaves it out (the simulator models the shell, it does not run it).

Every mutant is expected to be caught; the table in docs/protocol.md ("The mutation check")
lists which test catches which.
"""

import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_DIR = "crates/core/src/node"
NODE_MOD = NODE_DIR + "/mod.rs"
NODE_TIMERS = NODE_DIR + "/timers.rs"
NODE_CAMPAIGN = NODE_DIR + "/campaign.rs"
NODE_LEAD = NODE_DIR + "/lead.rs"
NODE_FOLLOW = NODE_DIR + "/follow.rs"
NODE_VOTE = NODE_DIR + "/vote.rs"
NODE_RECEIVE = NODE_DIR + "/receive.rs"
NODE_SEND = NODE_DIR + "/send.rs"
PEERS = "crates/core/src/peers.rs"
TIMINGS = "crates/core/src/timings.rs"
STOP = "crates/core/src/stop.rs"
RUNTIME_ELECTION = "src/runtime/election.rs"

# name -> (rule, what it breaks, [(file, old, new, count)][, [extra cargo test args, ...]])
MUTANTS = {
    "vote-not-persisted": (
        3,
        "a granted vote is not written to disk",
        [(NODE_VOTE, "        if !self.record_promise(now, promise) && already.is_none() {\n            self.persist();\n        }\n",
          "", 1)],
    ),
    "vote-persisted-after-send": (
        3,
        "the vote is written after it was sent",
        [(NODE_VOTE, "        if !self.record_promise(now, promise) && already.is_none() {\n            self.persist();\n        }\n",
          "", 1),
         (NODE_VOTE, "        let reply = self.message(body);\n        self.publish(now, reply);\n        Outcome::Accepted\n    }\n}\n",
          "        let reply = self.message(body);\n        self.publish(now, reply);\n        self.persist();\n        Outcome::Accepted\n    }\n}\n", 1)],
    ),
    "existing-vote-ignored": (
        3,
        "a node that voted in this term votes again for another candidate",
        [(NODE_VOTE, "            Some(v) => v == candidate,", "            Some(_) => true,", 1)],
    ),
    "vote-for-another-counted": (
        3,
        "a candidate counts a vote its rival of the same term was granted, or a refusal",
        [(NODE_RECEIVE, "                if candidate != self.id || !granted {",
          "                if candidate != self.id && !granted {", 1)],
    ),
    "lease-from-ack-receipt": (
        6,
        "the lease runs from when the acks arrived, not from the heartbeat's send time",
        [(NODE_LEAD, "            let until = p.sent_at + lease;", "            let until = now + lease;", 1)],
    ),
    "lease-from-victory": (
        6,
        "the first lease runs from the victory, not from the election's send time",
        [(NODE_LEAD, "        let lease_until = started + lease;",
          "        let lease_until = now + lease;", 1)],
    ),
    "restarted-node-votes-at-once": (
        8,
        "no start-up guard: a restarted node votes at once",
        [(NODE_MOD, "                until: now + boot_for,\n", "                until: now,\n", 1)],
    ),
    "no-guard-from-heartbeat": (
        5,
        "acknowledging a heartbeat promises nothing",
        [(NODE_FOLLOW, "        self.voter.guard = Some(Guard {\n            holder: from.to_string(),\n            until: now + promise,\n        });\n",
          "", 1)],
    ),
    "no-guard-after-vote": (
        5,
        "granting a vote promises nothing",
        [(NODE_VOTE, "        self.voter.guard = Some(Guard {\n            holder: candidate.to_string(),\n            until: now + promise,\n        });\n",
          "", 1)],
    ),
    "guard-0.6T": (
        5,
        "the promise lasts 0.6 of what it says",
        [(NODE_FOLLOW, "            until: now + promise,\n        });",
          "            until: now + promise.mul_f64(0.6),\n        });", 1),
         (NODE_VOTE, "            until: now + promise,\n        });",
          "            until: now + promise.mul_f64(0.6),\n        });", 1)],
    ),
    "resign-before-step-down": (
        9,
        "the resign leaves while the node still leads",
        [(NODE_LEAD, "    pub(super) fn resign(&mut self, now: Instant, successor: Option<String>, reason: Reason) {\n        self.stop_leading(now, reason);\n",
          "    pub(super) fn resign(&mut self, now: Instant, successor: Option<String>, reason: Reason) {\n        let _ = reason;\n", 1)],
    ),
    "no-check-quorum": (
        6,
        "a leader whose lease ran out stays leader",
        [(NODE_TIMERS, "            Timer::Lease => {\n                // Rule 6, CheckQuorum: no quorum acked within the lease; we may no longer lead.\n                // Saying so (rule 10) frees the followers' guards at once.\n                self.resign(now, None, Reason::LeaseExpired);\n",
          "            Timer::Lease => {\n", 1)],
    ),
    "higher-term-ignored-by-leader": (
        2,
        "a leader does not step down for a higher term",
        [(NODE_RECEIVE, "        if m.term > self.term {\n            if matches!(m.body, Body::Election { .. })",
          "        if m.term > self.term && !matches!(self.state, State::Leader(_)) {\n            if matches!(m.body, Body::Election { .. })", 1)],
    ),
    "count-any-sender": (
        1,
        "messages from non-members count",
        [(NODE_RECEIVE, "        if !self.members.contains(&m.from) {\n            return Outcome::NotMember;\n        }\n", "", 1)],
    ),
    "count-other-member-sets": (
        1,
        "votes and acks of members with another member set count",
        [(NODE_RECEIVE, "        if counted && !same_members {", "        if counted && same_members && !counted {", 1)],
    ),
    "one-id-away-stops-campaigns": (
        1,
        "a member set one id away (a member being added or removed) stops this node's campaigns",
        [(PEERS, "            .filter(|p| self.difference(p).len() > 1)\n            .filter_map(|p| self.live_until(p))",
          "            .filter(|p| self.difference(p).len() >= 1)\n            .filter_map(|p| self.live_until(p))", 1)],
    ),
    "no-config-conflict-check": (
        1,
        "a node votes while a member more than one id away is heard",
        [(NODE_VOTE, "        if self.booting(now) || self.config_conflict(now) || matches!(self.state, State::Leader(_))",
          "        if self.booting(now) || matches!(self.state, State::Leader(_))", 1)],
    ),
    "boot-released-by-any-resign": (
        8,
        "the start-up guard ends on a resign of an older term",
        [(NODE_RECEIVE, "        if matches!(m.body, Body::Resign { .. }) && m.term >= b.term {",
          "        if matches!(m.body, Body::Resign { .. }) {", 1)],
    ),
    "boot-released-by-any-heartbeat": (
        8,
        "the start-up guard ends on any heartbeat, even one of an older term it does not follow",
        [(NODE_RECEIVE, "        if matches!(m.body, Body::Resign { .. }) && m.term >= b.term {",
          "        if matches!(m.body, Body::Heartbeat { .. }) || (matches!(m.body, Body::Resign { .. }) && m.term >= b.term) {", 1)],
    ),
    "leads-before-term-on-disk": (
        3,
        "a node alone in its quorum leads before its term is on disk",
        [(NODE_TIMERS, "                if matches!(&self.state, State::Candidate(r) if r.durable) {",
          "                if matches!(&self.state, State::Candidate(_)) {", 1),
         (NODE_CAMPAIGN, "        if self.members.quorum() <= 1 {\n            // Its own vote is a quorum: it leads at the next tick, once the term is on disk\n            // (rule 3), never before.\n            return;\n        }",
          "        if self.members.quorum() <= 1 {\n            self.become_leader(now);\n            return;\n        }", 1)],
    ),
    "one-way-ranking": (
        11,
        "a member that does not hear the cluster still vetoes and staggers others",
        [(PEERS, "        p.hears.contains(&self.own_id)\n            && heard + 1 >= self.members.quorum()\n            && p.fingerprint",
          "        let _ = heard;\n        p.fingerprint", 1)],
    ),
    "booting-advertised-eligible": (
        11,
        "a node inside its start-up guard advertises itself eligible",
        [(NODE_CAMPAIGN, "        } else if self.booting(now) {\n            Candidacy::Booting\n", "", 1)],
    ),
    "no-flap-damping": (
        12,
        "a member that keeps crashing ranks like a steady one",
        [(PEERS, "            steady: !self.flapped(p, now),", "            steady: true,", 1)],
    ),
    "restart-not-a-flap": (
        12,
        "a member seen back from a restart is not demoted",
        [(PEERS, "        if silent || restarted || lost_health {", "        if silent || lost_health {", 1)],
    ),
    "preempt-by-rank": (
        12,
        "a flapped leader preempts to the best-ranked member, not the best standing one",
        [(NODE_LEAD, "            // By standing, as every other choice of a successor: a steady member before a\n            // flapped one that ranks higher, which it would soon have to preempt in turn.\n            .max_by(|a, b| {\n                self.peers\n                    .standing(a, now)\n                    .cmp(&self.peers.standing(b, now))\n            })",
          "            .max_by(|a, b| self.peers.rank(a).cmp(&self.peers.rank(b)))", 1)],
    ),
    "flap-word-ignored": (
        12,
        "a member that says it flapped ranks like a steady one unless seen flapping",
        [(PEERS, "        p.says_flapped || p.flaps.iter()", "        p.flaps.iter()", 1)],
    ),
    "lost-quorum-not-a-flap": (
        12,
        "a leader that lost its quorum is not demoted",
        [(PEERS, "            p.lose_eligibility(now, lost_quorum);", "            p.lose_eligibility(now, false);", 1)],
    ),
    "stale-advert-applied": (
        11,
        "an advertisement overtaken by a newer one still overwrites it",
        [(PEERS, "        let newer = p.advert_seq.is_none_or(|s| m.seq > s);", "        let newer = true;", 1)],
    ),
    "foreign-successor-favored": (
        10,
        "a resign's successor is favored even when this node does not count it",
        [(NODE_FOLLOW, "        let successor = successor.filter(|s| {\n            s == &self.id\n",
          "        let successor = successor.filter(|s| {\n            true || s == &self.id\n", 1)],
    ),
    "deferred-dropped-by-heartbeat": (
        10,
        "a heartbeat discards a pre-vote deferred for the leader's guard",
        [(NODE_FOLLOW, "        self.voter.favored = None;\n        self.voter.vetoes.clear();\n        self.set_leader(now, Some(from.to_string()), Reason::Elected);",
          "        self.voter.deferred = None;\n        self.voter.favored = None;\n        self.voter.vetoes.clear();\n        self.set_leader(now, Some(from.to_string()), Reason::Elected);", 1)],
    ),
    "deferred-never-lapses": (
        10,
        "a deferred pre-vote is answered however old it is",
        [(NODE_VOTE, "            if now < d.until\n", "            if true\n", 1)],
    ),
    "view-after-actions": (
        9,
        "the runtime publishes the view after a step's actions, not before them",
        [(RUNTIME_ELECTION, "        let result = self.node.handle(now, input);\n        self.publish_if_changed(shared, now);\n        self.on_role(shared, now);\n",
          "        let result = self.node.handle(now, input);\n        self.on_role(shared, now);\n", 1)],
        [["-p", "pilot-election", "--test", "it", "--", "faults::a_leader_stalled"]],
    ),
    "boot-released-by-another-sets-resign": (
        8,
        "a resign from a leader with another member set ends the start-up guard",
        [(NODE_RECEIVE, "        if same_members {\n            self.release_boot_guard(&m);\n        }\n",
          "        self.release_boot_guard(&m);\n", 1)],
    ),
    "boot-released-by-following-another-set": (
        8,
        "following a leader with another member set ends the start-up guard",
        [(NODE_FOLLOW, "        if same_members {\n            self.boot = None;\n        }",
          "        self.boot = None;", 1)],
    ),
    "deferral-vetoed-by-its-leader": (
        10,
        "a pre-vote that overtakes the resign of a better-ranked leader is not kept for it",
        [(NODE_VOTE, ".veto_ignoring(until, candidate, priority, Some(&holder))",
          ".veto_ignoring(until, candidate, priority, None)", 1)],
    ),
    "cooling-successor-refused": (
        10,
        "an operator's step-down naming a node that just resigned is refused",
        [(NODE_LEAD, "            Some(Candidacy::Eligible | Candidacy::Booting | Candidacy::Cooling) => Ok(()),",
          "            Some(Candidacy::Cooling) => Err(SuccessorRefused::Withdrawn),\n            Some(Candidacy::Eligible | Candidacy::Booting) => Ok(()),", 1)],
    ),
    "unbounded-veto": (
        11,
        "a rival that cannot win vetoes lower-ranked candidates forever",
        [(NODE_VOTE, "        let spent = |id: &str| self.voter.vetoes.get(id).is_some_and(|s| now >= *s + t);",
          "        let spent = |id: &str| self.voter.vetoes.get(id).is_some_and(|s| now >= *s + t * 1000);", 1)],
    ),
    # Rules without a mutant before (issue 24): 4, 7 and 13.
    "no-pre-vote": (
        4,
        "a node raises its term at once instead of asking for pre-votes first",
        [(NODE_CAMPAIGN, "        self.timer.at_once = None;\n        if self.members.quorum() <= 1 {\n            self.start_election(now);",
          "        self.timer.at_once = None;\n        if true {\n            self.start_election(now);", 1)],
    ),
    "validation-without-drift": (
        7,
        "start-up validation leaves the drift out of T >= L(1+r)/(1-r) + h",
        [(TIMINGS, "        whole_ms(self.lease.mul_f64((1.0 + r) / (1.0 - r)) + self.heartbeat)",
          "        whole_ms(self.lease.mul_f64(1.0 + 0.0 * r) + self.heartbeat)", 1)],
    ),
    "validation-without-h": (
        7,
        "start-up validation leaves h out of T >= L(1+r)/(1-r) + h (no gap for --exec)",
        [(TIMINGS, "        whole_ms(self.lease.mul_f64((1.0 + r) / (1.0 - r)) + self.heartbeat)",
          "        whole_ms(self.lease.mul_f64((1.0 + r) / (1.0 - r)))", 1)],
    ),
    "validation-on-exact-values": (
        7,
        "start-up validation judges h < L on the exact values and accepts parts of a millisecond",
        [(TIMINGS, "            if Duration::from_millis(ms) != d {", "            if Duration::from_millis(ms) != d && false {", 1),
         (TIMINGS, "        if announced.heartbeat_ms >= announced.lease_ms {", "        if self.heartbeat >= self.lease {", 1)],
    ),
    "stop-without-waiting": (
        13,
        "a stopping leader exits at once instead of waiting for its successor",
        [(STOP, "    if !hand_over {\n", "    if !hand_over || true {\n", 1)],
    ),
    # Mixed timings, rolling upgrades (issue 23): rules 5, 6, 8, 11, 12 and 15.
    "announced-timeout-ignored": (
        5,
        "a follower promises its own T whatever the leader or candidate announces",
        [(TIMINGS, "                own.max(a.election_timeout().mul_f64(k))", "                let _ = k;\n                own", 1)],
    ),
    "drift-factor-missing": (
        5,
        "a promise is not stretched for a voter whose clock may drift more than the sender's",
        [(TIMINGS, "                let k = (1.0 - rc) * (1.0 + r) / ((1.0 + rc) * (1.0 - r));",
          "                let k = 1.0 + 0.0 * (rc + r);", 1)],
    ),
    "v2-lease-not-covered": (
        5,
        "a promise to a version-2 leader ignores the lease its heartbeat names",
        [(TIMINGS, "                own.max(covers.unwrap_or(Duration::ZERO))", "                let _ = covers;\n                own", 1)],
    ),
    "leader-silence-own-t": (
        5,
        "a follower drops a leader with a longer T after its own T, between two heartbeats",
        [(NODE_FOLLOW, "            l.silence = promise;\n", "", 1)],
    ),
    "lease-beyond-promises": (
        6,
        "a leader counts its whole L whatever its voters promised",
        [(TIMINGS, "        ends.saturating_sub(self.after_lease()).min(self.lease)",
          "        let _ = ends;\n        self.lease", 1)],
    ),
    "quorum-lease-from-the-best-promise": (
        6,
        "a quorum's lease is its strongest promise, not its weakest",
        [(NODE_LEAD, "    quorum.checked_sub(1).and_then(|i| all.get(i).copied())",
          "    quorum.checked_sub(1).and_then(|_| all.first().copied())", 1)],
    ),
    "promise-not-persisted": (
        8,
        "a promise leaves before it is on disk",
        [(NODE_SEND, "        self.promised = longest;\n        self.persist();\n        true",
          "        self.promised = longest;\n        true", 1)],
    ),
    "boot-guard-ignores-the-promise": (
        8,
        "the start-up guard lasts the new run's T, not the longest promise on disk",
        [(NODE_MOD, "        let boot_for = t.election_timeout.max(promised);",
          "        let boot_for = t.election_timeout.max(promised * 0);", 1)],
    ),
    "promise-of-t-not-recorded": (
        8,
        "only promises longer than the node's own T are recorded (a restart with a shorter T forgets the rest)",
        [(NODE_SEND, "        let until = self.promises.entry(guard).or_insert(now);\n        *until = (*until).max(now + guard);\n",
          "        if guard > self.timings.election_timeout {\n            let until = self.promises.entry(guard).or_insert(now);\n            *until = (*until).max(now + guard);\n        }\n", 1)],
    ),
    "recorded-promise-never-lowered": (
        8,
        "the recorded promise never comes down once the long ones are over",
        [(NODE_SEND, "        self.promises.retain(|_, until| *until > now);\n", "", 1)],
    ),
    "live-window-own-t": (
        11,
        "a member with a longer T than ours counts as silent after our T",
        [(PEERS, "    p.announced.map_or(own, |a| own.max(a.election_timeout()))",
          "    let _ = p;\n    own", 1)],
    ),
    "flap-window-own": (
        12,
        "a slow member's flaps are forgotten after our own flap window",
        [(PEERS, "            self.flap_window.max(a.election_timeout() * FLAP_WINDOW)",
          "            let _ = a;\n            self.flap_window", 1)],
    ),
    "silence-flap-at-one-window": (
        12,
        "a member heard a little after our T counts as flapped",
        [(PEERS, "            now.saturating_duration_since(s).saturating_sub(ours) >= timeout * 2",
          "            now.saturating_duration_since(s).saturating_sub(ours) >= timeout", 1)],
    ),
    "our-silence-their-flap": (
        12,
        "a node cut off from every member takes each of them for a flapper when it hears it again",
        [(PEERS, "                to.min(now).saturating_duration_since(from.max(s))",
          "                let _ = (from, to);\n                Duration::ZERO", 1)],
    ),
    "old-news-keeps-live": (
        12,
        "a message older than one already heard, delivered late, keeps its sender live",
        [(PEERS, "        if fresh {\n            p.last_seen = Some(now);\n",
          "        p.last_seen = Some(now);\n        if fresh {\n", 1)],
    ),
    "our-unheard-silence-not-a-flap": (
        12,
        "a node whose messages a member lost ranks itself steady while that member counts it as flapped",
        [(NODE_RECEIVE, "            self.flapped_at = Some(now);\n", "", 1)],
    ),
    "unheard-member-writes-newest": (
        15,
        "a member not heard yet counts as speaking our newest version",
        [(NODE_SEND, "            .map(|p| p.speaks.map_or(ours.oldest, |v| v.newest))",
          "            .map(|p| p.speaks.map_or(ours.newest, |v| v.newest))", 1)],
    ),
    "old-version-dropped-too-early": (
        15,
        "members of the previous build are left out of the version a node writes",
        [(NODE_SEND, "            .filter(|&v| v >= ours.oldest)\n            .fold(ours.newest, u32::min)",
          "            .filter(|&v| v > ours.oldest)\n            .fold(ours.newest, u32::min)", 1)],
    ),
    "stale-speaks-applied": (
        15,
        "a late message of a member's earlier run undoes what its later run said it speaks",
        [(PEERS, "        let fresh = about_seq.is_none_or(|s| m.seq > s);",
          "        let fresh = true;", 1)],
    ),
    "repeated-resign-in-its-first-version": (
        15,
        "a repeated resign keeps the version of its first copy",
        [(NODE_TIMERS, "        again.v = self.wire_version();\n", "", 1)],
    ),
}

SIM_TESTS = [
    ["-p", "pilot-election-sim", "--test", "election_cases"],
    ["-p", "pilot-election-sim", "--test", "harness_catches_split_brain"],
    ["-p", "pilot-election-sim", "--test", "simulation"],
]
TESTS = [["-p", "pilot-election-core", "--lib"]] + SIM_TESTS


def tests_for(name, sim_only):
    """The targets run against a mutant, in order."""
    if sim_only:
        return SIM_TESTS
    extra = MUTANTS[name][3] if len(MUTANTS[name]) > 3 else []
    return TESTS + extra


def apply(tree, edits):
    for path, old, new, count in edits:
        full = os.path.join(tree, path)
        text = open(full).read()
        found = text.count(old)
        if found != count:
            raise SystemExit(f"{path}: expected {count} occurrence(s) of the mutation site, found {found}:\n{old}")
        open(full, "w").write(text.replace(old, new))


def run(name, target, sim_only):
    rule, what, edits = MUTANTS[name][:3]
    # One fixed place for the mutated tree, so that cargo's incremental build is reused.
    tree = os.path.join(target, "tree")
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    try:
        for entry in ["Cargo.toml", "Cargo.lock", "src", "crates", "tests", "examples", "openapi", "clippy.toml"]:
            src = os.path.join(ROOT, entry)
            dst = os.path.join(tree, entry)
            (shutil.copytree if os.path.isdir(src) else shutil.copy)(src, dst)
        # The copy keeps each file's time, so a file the previous mutant edited comes back
        # older than that mutant's build and cargo would keep the mutated build of its crate
        # (seen when a mutant of the shell followed one of the core): give those files a new time.
        state = os.path.join(target, "last-mutated")
        if os.path.exists(state):
            for path in open(state).read().split():
                if os.path.exists(os.path.join(tree, path)):
                    os.utime(os.path.join(tree, path))
        apply(tree, edits)
        with open(state, "w") as f:
            f.write("\n".join(sorted({path for path, _, _, _ in edits})))
        env = dict(os.environ, CARGO_TARGET_DIR=target, SIM_FAIL_FAST="1", RUSTFLAGS=os.environ.get("RUSTFLAGS", ""))
        build = subprocess.run(["cargo", "test", "--profile", "mutants", "--no-run", "-q",
                                "-p", "pilot-election-core", "--lib",
                                "-p", "pilot-election-sim", "--tests"], cwd=tree, env=env,
                               capture_output=True, text=True)
        if build.returncode != 0:
            return "does not compile", build.stderr[-2000:]
        for args in tests_for(name, sim_only):
            t = subprocess.run(["cargo", "test", "--profile", "mutants", "-q", *args],
                               cwd=tree, env=env, capture_output=True, text=True)
            if t.returncode != 0:
                out = t.stdout + t.stderr
                lines = [l for l in out.splitlines() if "FAILED" in l or "violat" in l.lower() or "panicked" in l]
                return f"caught by {' '.join(args)}", "\n".join(lines[:6])
        return "SURVIVED", ""
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def check_sites():
    """Every mutant's edit sites, counted in the tree as it is: the count each edit expects."""
    missing = []
    for name, entry in MUTANTS.items():
        for path, old, _, count in entry[2]:
            found = open(os.path.join(ROOT, path)).read().count(old)
            if found != count:
                missing.append(name)
                print(f"{name}: {path}: expected {count} occurrence(s) of the site, found {found}:\n{old}")
    print(f"{len(MUTANTS) - len(set(missing))} of {len(MUTANTS)} mutants find their sites")
    return 1 if missing else 0


def main():
    args = sys.argv[1:]
    if args == ["--list"]:
        for name, entry in MUTANTS.items():
            rule, what = entry[:2]
            print(f"{name:36} rule {rule:>2}: {what}")
        return 0
    if args == ["--check-sites"]:
        return check_sites()
    sim_only = "--sim-only" in args
    args = [a for a in args if a != "--sim-only"]
    names = args or list(MUTANTS)
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        raise SystemExit(f"unknown mutant(s): {unknown}; see --list")
    target = os.path.join(ROOT, "target", "mutants-build")
    survived = []
    for name in names:
        started = time.time()
        verdict, detail = run(name, target, sim_only)
        rule = MUTANTS[name][0]
        print(f"{name:36} rule {rule:>2}  {verdict}  ({time.time() - started:.0f} s)", flush=True)
        if detail:
            print("    " + detail.replace("\n", "\n    ")[:1500], flush=True)
        if verdict in ("SURVIVED", "does not compile"):
            survived.append(name)
    by = " by the simulator alone" if sim_only else ""
    print(f"\n{len(names) - len(survived)} of {len(names)} mutants caught{by}")
    if survived:
        print("not caught: " + ", ".join(survived))
        return 0 if sim_only else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
