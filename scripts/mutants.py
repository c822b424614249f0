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
NODE = "crates/core/src/node.rs"
PEERS = "crates/core/src/peers.rs"
RUNTIME = "src/runtime.rs"

# name -> (rule, what it breaks, [(file, old, new, count)][, [extra cargo test args, ...]])
MUTANTS = {
    "vote-not-persisted": (
        3,
        "a granted vote is not written to disk",
        [(NODE, "            self.voted_for = Some(candidate.to_string());\n            self.persist();\n",
          "            self.voted_for = Some(candidate.to_string());\n", 1)],
    ),
    "vote-persisted-after-send": (
        3,
        "the vote is written after it was sent",
        [(NODE, "            self.voted_for = Some(candidate.to_string());\n            self.persist();\n",
          "            self.voted_for = Some(candidate.to_string());\n", 1),
         (NODE, "        let reply = self.message(body);\n        self.publish(now, reply);\n        Outcome::Accepted\n    }\n\n    fn on_resign",
          "        let reply = self.message(body);\n        self.publish(now, reply);\n        self.persist();\n        Outcome::Accepted\n    }\n\n    fn on_resign", 1)],
    ),
    "existing-vote-ignored": (
        3,
        "a node that voted in this term votes again for another candidate",
        [(NODE, "            Some(v) => v == candidate,", "            Some(_) => true,", 1)],
    ),
    "lease-from-ack-receipt": (
        6,
        "the lease runs from when the acks arrived, not from the heartbeat's send time",
        [(NODE, "            let until = p.sent_at + lease;", "            let until = now + lease;", 1)],
    ),
    "lease-from-victory": (
        6,
        "the first lease runs from the victory, not from the election's send time",
        [(NODE, "        let lease_until = started + self.timings.lease;",
          "        let lease_until = now + self.timings.lease;", 1)],
    ),
    "restarted-node-votes-at-once": (
        8,
        "no start-up guard: a restarted node votes at once",
        [(NODE, "                until: now + t.election_timeout,\n                term: persisted.term,",
          "                until: now,\n                term: persisted.term,", 1)],
    ),
    "no-guard-from-heartbeat": (
        5,
        "acknowledging a heartbeat promises nothing",
        [(NODE, "        // Rule 5: our ack (sent by the caller) may renew its lease; no other vote for T.\n        self.guard = Some(Guard {\n            holder: from.to_string(),\n            until: now + self.timings.election_timeout,\n        });\n",
          "", 1)],
    ),
    "no-guard-after-vote": (
        5,
        "granting a vote promises nothing",
        [(NODE, "        // Rule 5: until T passes, the lease the candidate may build on our vote is protected.\n        self.guard = Some(Guard {\n            holder: candidate.to_string(),\n            until: now + self.timings.election_timeout,\n        });\n",
          "", 1)],
    ),
    "guard-0.6T": (
        5,
        "the promise lasts 0.6 T instead of T",
        [(NODE, "            until: now + self.timings.election_timeout,\n        });",
          "            until: now + self.timings.election_timeout.mul_f64(0.6),\n        });", 2)],
    ),
    "resign-before-step-down": (
        9,
        "the resign leaves while the node still leads",
        [(NODE, "    fn resign(&mut self, now: Instant, successor: Option<String>, reason: Reason) {\n        self.stop_leading(now, reason);\n",
          "    fn resign(&mut self, now: Instant, successor: Option<String>, reason: Reason) {\n        let _ = reason;\n", 1)],
    ),
    "no-check-quorum": (
        6,
        "a leader whose lease ran out stays leader",
        [(NODE, "        } else if lease_over {\n            // Rule 6, CheckQuorum: no quorum acked within the lease; we may no longer lead.\n            // Saying so (rule 10) frees the followers' guards at once.\n            self.resign(now, None, Reason::LeaseExpired);\n",
          "        } else if lease_over {\n", 1)],
    ),
    "higher-term-ignored-by-leader": (
        2,
        "a leader does not step down for a higher term",
        [(NODE, "        if m.term > self.term {\n            if matches!(m.body, Body::Election { .. })",
          "        if m.term > self.term && !matches!(self.state, State::Leader(_)) {\n            if matches!(m.body, Body::Election { .. })", 1)],
    ),
    "count-any-sender": (
        1,
        "messages from non-members count",
        [(NODE, "        if !self.members.contains(&m.from) {\n            return Outcome::NotMember;\n        }\n", "", 1)],
    ),
    "count-other-member-sets": (
        1,
        "votes and acks of members with another member set count",
        [(NODE, "        if counted && !same_members {", "        if counted && same_members && !counted {", 1)],
    ),
    "no-config-conflict-check": (
        1,
        "a node votes while a member more than one id away is heard",
        [(NODE, "        if self.booting(now) || self.config_conflict(now) || matches!(self.state, State::Leader(_))",
          "        if self.booting(now) || matches!(self.state, State::Leader(_))", 1)],
    ),
    "boot-released-by-any-resign": (
        8,
        "the start-up guard ends on a resign of an older term",
        [(NODE, "        if matches!(m.body, Body::Resign { .. }) && m.term >= b.term {",
          "        if matches!(m.body, Body::Resign { .. }) {", 1)],
    ),
    "boot-released-by-any-heartbeat": (
        8,
        "the start-up guard ends on any heartbeat, even one of an older term it does not follow",
        [(NODE, "        if matches!(m.body, Body::Resign { .. }) && m.term >= b.term {",
          "        if matches!(m.body, Body::Heartbeat { .. }) || (matches!(m.body, Body::Resign { .. }) && m.term >= b.term) {", 1)],
    ),
    "leads-before-term-on-disk": (
        3,
        "a node alone in its quorum leads before its term is on disk",
        [(NODE, "        let won =\n            matches!(&self.state, State::Candidate(r) if r.durable && r.grants.len() >= quorum);",
          "        let won = matches!(&self.state, State::Candidate(r) if r.grants.len() >= quorum);", 1),
         (NODE, "        if self.members.quorum() <= 1 {\n            // Its own vote is a quorum: it leads at the next tick, once the term is on disk\n            // (rule 3), never before.\n            return;\n        }",
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
        [(NODE, "        } else if self.booting(now) {\n            Candidacy::Booting\n", "", 1)],
    ),
    "no-flap-damping": (
        12,
        "a member that keeps crashing ranks like a steady one",
        [(PEERS, "            steady: !self.flapped(p, now),", "            steady: true,", 1)],
    ),
    "restart-not-a-flap": (
        12,
        "a member seen back from a restart is not demoted",
        [(PEERS, "        if silent || restarted {", "        if silent {", 1)],
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
        [(NODE, "        let successor = successor.filter(|s| {\n            s == &self.id\n",
          "        let successor = successor.filter(|s| {\n            true || s == &self.id\n", 1)],
    ),
    "deferred-dropped-by-heartbeat": (
        10,
        "a heartbeat discards a pre-vote deferred for the leader's guard",
        [(NODE, "        self.favored = None;\n        self.vetoes.clear();\n        self.set_leader(now, Some(from.to_string()), Reason::Elected);",
          "        self.deferred = None;\n        self.favored = None;\n        self.vetoes.clear();\n        self.set_leader(now, Some(from.to_string()), Reason::Elected);", 1)],
    ),
    "deferred-never-lapses": (
        10,
        "a deferred pre-vote is answered however old it is",
        [(NODE, "            if now < d.until\n", "            if true\n", 1)],
    ),
    "view-after-actions": (
        9,
        "the runtime publishes the view after a step's actions, not before them",
        [(RUNTIME, "        let result = self.node.handle(now, input);\n        self.publish_snapshot(now);\n        self.on_role(now);\n",
          "        let result = self.node.handle(now, input);\n        self.on_role(now);\n", 1)],
        [["-p", "pilot-election", "--test", "it", "--", "faults::a_leader_stalled"]],
    ),
    "boot-released-by-another-sets-resign": (
        8,
        "a resign from a leader with another member set ends the start-up guard",
        [(NODE, "        if same_members {\n            self.release_boot_guard(&m);\n        }\n",
          "        self.release_boot_guard(&m);\n", 1)],
    ),
    "boot-released-by-following-another-set": (
        8,
        "following a leader with another member set ends the start-up guard",
        [(NODE, "        if same_members {\n            self.boot = None;\n        }",
          "        self.boot = None;", 1)],
    ),
    "deferral-vetoed-by-its-leader": (
        10,
        "a pre-vote that overtakes the resign of a better-ranked leader is not kept for it",
        [(NODE, ".veto_ignoring(until, candidate, priority, Some(&holder))",
          ".veto_ignoring(until, candidate, priority, None)", 1)],
    ),
    "cooling-successor-refused": (
        10,
        "an operator's step-down naming a node that just resigned is refused",
        [(NODE, "            Some(Candidacy::Eligible | Candidacy::Booting | Candidacy::Cooling) => Ok(()),",
          "            Some(Candidacy::Cooling) => refuse(\"cooling down\".into()),\n            Some(Candidacy::Eligible | Candidacy::Booting) => Ok(()),", 1)],
    ),
    "unbounded-veto": (
        11,
        "a rival that cannot win vetoes lower-ranked candidates forever",
        [(NODE, "        let spent = |id: &str| self.vetoes.get(id).is_some_and(|s| now >= *s + t);",
          "        let spent = |id: &str| self.vetoes.get(id).is_some_and(|s| now >= *s + t * 1000);", 1)],
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


def main():
    args = sys.argv[1:]
    if args == ["--list"]:
        for name, entry in MUTANTS.items():
            rule, what = entry[:2]
            print(f"{name:36} rule {rule:>2}: {what}")
        return 0
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
