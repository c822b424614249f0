//! Protocol timings, the inequality that makes leases safe (rule 7), and the arithmetic of
//! promises between nodes whose timings differ (rules 5 and 6).

use std::time::Duration;

use super::message::{ceil_ms, Announced, MAX_ANNOUNCED_MS, MAX_DRIFT_PPM};

/// The durations the protocol runs on. All are measured on each node's monotonic clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timings {
    /// `h`: how often a leader heartbeats and every other node announces itself.
    pub heartbeat: Duration,
    /// `L`: how long a quorum acknowledgement keeps a leader in office.
    pub lease: Duration,
    /// `T`: how long a follower waits in silence before it campaigns, and how long any node
    /// refuses to vote after hearing a leader.
    pub election_timeout: Duration,
    /// `W`, the rank stagger: the delay per better-ranked live member before a node campaigns
    /// (rule 11).
    pub stagger: Duration,
    /// How long a better-ranked eligible member must be live before the leader hands over to it.
    /// Zero disables preemption.
    pub preempt_after: Duration,
    /// `r`: the largest clock-rate error between any two nodes' clocks and true time, as a
    /// fraction (0.05 = 5 %).
    pub max_drift: f64,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            heartbeat: Duration::from_millis(500),
            lease: Duration::from_secs(2),
            election_timeout: Duration::from_secs(3),
            stagger: Duration::from_millis(250),
            preempt_after: Duration::from_secs(5),
            max_drift: 0.05,
        }
    }
}

/// Why a set of timings was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimingsError {
    /// A duration that every timer needs is zero: nothing could be renewed or timed out.
    #[error("{name} must be greater than zero")]
    Zero {
        /// Which one, as the operator's option calls it.
        name: &'static str,
    },
    /// `r` (the value given) outside `[0, 0.5)`: rule 7 divides by `1 - r`.
    #[error("max clock drift must be in [0, 0.5), got {0}")]
    Drift(f64),
    /// A duration longer than a day (which one, as the operator's option calls it): surely a
    /// mistake, and other nodes refuse to honour announced timings that long.
    #[error("{name} must be at most 24h")]
    TooLong {
        /// Which one, as the operator's option calls it.
        name: &'static str,
    },
    /// A duration (which one, as the operator's option calls it, and its value) with a part
    /// below a millisecond: messages announce timings in whole milliseconds, and the others
    /// must read the values this node runs on, not a rounding of them.
    #[error(
        "{name} ({value:?}) must be a whole number of milliseconds: timings are announced to the other nodes in milliseconds"
    )]
    NotWholeMilliseconds {
        /// Which one, as the operator's option calls it.
        name: &'static str,
        /// The value given.
        value: Duration,
    },
    /// `h >= L`: a lease would run out before the next heartbeat could renew it (rule 6).
    #[error("heartbeat interval ({heartbeat:?}) must be shorter than the lease ({lease:?})")]
    HeartbeatNotBelowLease {
        /// The configured `h`.
        heartbeat: Duration,
        /// The configured `L`, which `h` must be below.
        lease: Duration,
    },
    /// `T < L(1+r)/(1-r) + h`: an old lease could outlive the guard that keeps a new leader
    /// out, so two nodes could lead at once (rule 7).
    #[error(
        "unsafe timings: election timeout T={election_timeout:?} must be at least \
         L*(1+r)/(1-r) + h = {required:?} (lease L={lease:?}, heartbeat h={heartbeat:?}, max clock drift r={drift}); \
         raise --election-timeout or lower --lease"
    )]
    Unsafe {
        /// The configured `T`, below `required`.
        election_timeout: Duration,
        /// The configured `L`.
        lease: Duration,
        /// The configured `h`.
        heartbeat: Duration,
        /// The configured `r`, as a fraction (0.05 = 5 %).
        drift: f64,
        /// The smallest safe `T` for these `L`, `h` and `r`.
        required: Duration,
    },
}

/// `d` rounded up to the whole milliseconds that messages carry, which [`Timings::validate`]
/// asks of `h`, `L` and `T`.
pub fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(ceil_ms(d))
}

impl Timings {
    /// The smallest election timeout that keeps an old lease from overlapping a new leader:
    /// `L*(1+r)/(1-r) + h`, rounded up to the whole millisecond that a node can announce.
    pub fn min_election_timeout(&self) -> Duration {
        let r = self.max_drift;
        whole_ms(self.lease.mul_f64((1.0 + r) / (1.0 - r)) + self.heartbeat)
    }

    /// Refuses timings under which two leaders could hold a lease at the same true time.
    pub fn validate(&self) -> Result<(), TimingsError> {
        for (name, d) in [
            ("heartbeat interval", self.heartbeat),
            ("lease", self.lease),
            ("election timeout", self.election_timeout),
        ] {
            if d.is_zero() {
                return Err(TimingsError::Zero { name });
            }
            if d > Duration::from_millis(MAX_ANNOUNCED_MS) {
                return Err(TimingsError::TooLong { name });
            }
        }
        // What the other nodes read, by the rounding the messages use: they refuse `h >= L` and
        // a drift of 50 % or more as announced, so validation judges the announced values.
        let announced = Announced::of(self);
        for (name, d, ms) in [
            ("heartbeat interval", self.heartbeat, announced.heartbeat_ms),
            ("lease", self.lease, announced.lease_ms),
            (
                "election timeout",
                self.election_timeout,
                announced.election_timeout_ms,
            ),
        ] {
            if Duration::from_millis(ms) != d {
                return Err(TimingsError::NotWholeMilliseconds { name, value: d });
            }
        }
        // A NaN is in no range, so it is refused here too.
        if !(0.0..0.5).contains(&self.max_drift) || announced.max_drift_ppm >= MAX_DRIFT_PPM {
            return Err(TimingsError::Drift(self.max_drift));
        }
        if announced.heartbeat_ms >= announced.lease_ms {
            return Err(TimingsError::HeartbeatNotBelowLease {
                heartbeat: self.heartbeat,
                lease: self.lease,
            });
        }
        let required = self.min_election_timeout();
        if self.election_timeout < required {
            return Err(TimingsError::Unsafe {
                election_timeout: self.election_timeout,
                lease: self.lease,
                heartbeat: self.heartbeat,
                drift: self.max_drift,
                required,
            });
        }
        Ok(())
    }
}

impl Timings {
    /// `T·(1−r)/(1+r) − L`: on this node's clock, how long after its lease ends no other node
    /// can be elected yet, when its voters keep the promise it announces (rule 7). The `--exec`
    /// supervisor kills the child inside this gap.
    pub fn after_lease(&self) -> Duration {
        let r = self.max_drift;
        self.election_timeout
            .mul_f64((1.0 - r) / (1.0 + r))
            .saturating_sub(self.lease)
    }

    /// The promise of rule 5 this node makes when it acks a heartbeat of, or votes for, a node
    /// that announced `theirs`: how long, on this node's clock, it then refuses to vote for
    /// anyone else. It covers the sender's own `T` scaled so that the sender's reasoning holds
    /// with the larger of the two drifts (`max(T_self, T·(1−r_c)(1+r)/((1+r_c)(1−r)))`), so a
    /// lease of the sender's `L` ends, on any clock, at least the sender's [`after_lease`]
    /// before this node votes again, whatever this node's own timings are.
    ///
    /// A version-2 sender announces no timings: it runs on ours, except for the lease its
    /// heartbeat names (`lease_ms`), which the promise covers as rule 7 would.
    ///
    /// [`after_lease`]: Timings::after_lease
    pub fn promise_to(&self, theirs: Option<&Announced>, lease: Option<Duration>) -> Duration {
        let own = self.election_timeout;
        match theirs {
            Some(a) => {
                let (rc, r) = (a.max_drift(), self.max_drift.max(a.max_drift()));
                let k = (1.0 - rc) * (1.0 + r) / ((1.0 + rc) * (1.0 - r));
                own.max(a.election_timeout().mul_f64(k))
            }
            None => {
                let r = self.max_drift;
                let covers = lease.map(|l| l.mul_f64((1.0 + r) / (1.0 - r)) + self.heartbeat);
                own.max(covers.unwrap_or(Duration::ZERO))
            }
        }
    }

    /// The lease a leader with these timings may count on from one voter's promise `guard`
    /// (rule 6), the voter's clock drifting by up to `their_drift`: at most `L`, and short
    /// enough that it ends [`after_lease`] before the promise does on any clock. A promise of
    /// at least our own `T` (which every voter of this build makes) supports the whole `L`.
    ///
    /// [`after_lease`]: Timings::after_lease
    pub fn lease_on(&self, guard: Duration, their_drift: f64) -> Duration {
        let r = self.max_drift.max(their_drift);
        let ends = guard.mul_f64((1.0 - r) / (1.0 + r));
        ends.saturating_sub(self.after_lease()).min(self.lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_safe() {
        Timings::default().validate().unwrap();
    }

    #[test]
    fn unsafe_timeout_is_refused_with_the_values() {
        let t = Timings {
            election_timeout: Duration::from_millis(2500),
            ..Timings::default()
        };
        let err = t.validate().unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, TimingsError::Unsafe { .. }), "{text}");
        assert!(text.contains("T=2.5s"), "{text}");
        assert!(text.contains("L=2s"), "{text}");
        assert!(text.contains("h=500ms"), "{text}");
    }

    #[test]
    fn boundary_is_accepted() {
        let mut t = Timings::default();
        t.election_timeout = t.min_election_timeout();
        assert_eq!(
            t.election_timeout,
            Duration::from_millis(2711),
            "2.7105 s rounded up"
        );
        t.validate().unwrap();
        t.election_timeout -= Duration::from_millis(1);
        assert!(matches!(t.validate(), Err(TimingsError::Unsafe { .. })));
    }

    /// Messages announce `h`, `L` and `T` in whole milliseconds and receivers refuse `h >= L`
    /// as announced: `h` = 999.5 ms beside `L` = 1 s would be announced as 1 s and 1 s, and
    /// every message of that node dropped. A part of a millisecond is refused at start, and a
    /// drift that the announcement rounds up to 50 % too.
    #[test]
    fn a_timing_the_messages_cannot_carry_exactly_is_refused() {
        let t = Timings {
            heartbeat: Duration::from_micros(999_500),
            lease: Duration::from_secs(1),
            election_timeout: Duration::from_secs(3),
            ..Timings::default()
        };
        let err = t.validate().unwrap_err();
        assert_eq!(
            err,
            TimingsError::NotWholeMilliseconds {
                name: "heartbeat interval",
                value: Duration::from_micros(999_500)
            }
        );
        assert!(err.to_string().contains("999.5ms"), "{err}");
        let lease = Timings {
            lease: Duration::from_micros(2_000_001),
            election_timeout: Duration::from_secs(4),
            ..Timings::default()
        };
        assert!(matches!(
            lease.validate(),
            Err(TimingsError::NotWholeMilliseconds { name: "lease", .. })
        ));
        let timeout = Timings {
            election_timeout: Duration::from_nanos(3_000_000_001),
            ..Timings::default()
        };
        assert!(matches!(
            timeout.validate(),
            Err(TimingsError::NotWholeMilliseconds {
                name: "election timeout",
                ..
            })
        ));
        let drift = Timings {
            max_drift: 0.499_999_9,
            election_timeout: Duration::from_secs(60),
            ..Timings::default()
        };
        assert_eq!(Announced::of(&drift).max_drift_ppm, MAX_DRIFT_PPM);
        assert_eq!(drift.validate(), Err(TimingsError::Drift(0.499_999_9)));
        let below = Timings {
            max_drift: 0.499_999,
            ..drift
        };
        below.validate().unwrap();
    }

    #[test]
    fn degenerate_values_are_refused() {
        let zero = Timings {
            heartbeat: Duration::ZERO,
            ..Timings::default()
        };
        assert_eq!(
            zero.validate(),
            Err(TimingsError::Zero {
                name: "heartbeat interval"
            })
        );
        let drift = Timings {
            max_drift: 0.7,
            ..Timings::default()
        };
        assert_eq!(drift.validate(), Err(TimingsError::Drift(0.7)));
        // Below zero, which the announcement would carry as 0 ppm, and NaN.
        let negative = Timings {
            max_drift: -0.1,
            ..Timings::default()
        };
        assert_eq!(negative.validate(), Err(TimingsError::Drift(-0.1)));
        let nan = Timings {
            max_drift: f64::NAN,
            ..Timings::default()
        };
        assert!(matches!(nan.validate(), Err(TimingsError::Drift(_))));
        let hb = Timings {
            heartbeat: Duration::from_secs(2),
            ..Timings::default()
        };
        assert!(matches!(
            hb.validate(),
            Err(TimingsError::HeartbeatNotBelowLease { .. })
        ));
    }

    #[test]
    fn a_day_is_the_longest_duration_accepted() {
        let day = Duration::from_millis(MAX_ANNOUNCED_MS);
        let mut t = Timings {
            heartbeat: Duration::from_secs(1),
            lease: Duration::from_secs(2),
            election_timeout: day,
            ..Timings::default()
        };
        t.validate().unwrap();
        t.election_timeout = day + Duration::from_nanos(1);
        assert_eq!(
            t.validate(),
            Err(TimingsError::TooLong {
                name: "election timeout"
            })
        );
    }

    /// Every `(h, L/h, r)` of a grid at validation's floor `T`: on the worst pair of clock rates
    /// (the leader's slow at `1 − r`, the voter's fast at `1 + r`), the lease ends (true time)
    /// before the voter's promise does, and by at least `h·(1−r)/(1+r)` on the leader's clock
    /// (rule 7 at its bound, the `--exec` gap).
    #[test]
    fn timings_at_the_floor_keep_the_lease_inside_the_promise_on_the_worst_clocks() {
        for h_ms in [1u64, 50, 500, 1000] {
            for ratio in [1.001, 1.01, 2.0, 20.0] {
                for r in [0.0, 0.01, 0.05, 0.2, 0.49] {
                    let h = Duration::from_millis(h_ms);
                    let mut t = Timings {
                        heartbeat: h,
                        lease: whole_ms(h.mul_f64(ratio)),
                        max_drift: r,
                        ..Timings::default()
                    };
                    t.election_timeout = t.min_election_timeout();
                    t.validate().unwrap();
                    let lease_end = t.lease.as_secs_f64() / (1.0 - r);
                    let promise_end = t.election_timeout.as_secs_f64() / (1.0 + r);
                    let gap = h.as_secs_f64() * (1.0 - r) / (1.0 + r);
                    assert!(
                        promise_end - lease_end >= gap / (1.0 - r) - 1e-9,
                        "{t:?}: lease ends {lease_end} s, promise {promise_end} s"
                    );
                    let below = Timings {
                        election_timeout: t.election_timeout - Duration::from_millis(1),
                        ..t
                    };
                    assert!(below.validate().is_err(), "{below:?}");
                }
            }
        }
    }

    fn announced(h: u64, l: u64, t: u64, ppm: u32) -> Announced {
        Announced {
            heartbeat_ms: h,
            lease_ms: l,
            election_timeout_ms: t,
            max_drift_ppm: ppm,
        }
    }

    fn timings(h: u64, l: u64, t: u64, r: f64) -> Timings {
        Timings {
            heartbeat: Duration::from_millis(h),
            lease: Duration::from_millis(l),
            election_timeout: Duration::from_millis(t),
            max_drift: r,
            ..Timings::default()
        }
    }

    /// Rules 5 and 6 across two nodes' timings, on the worst clocks: the promise a voter makes
    /// to a sender supports the sender's whole lease, and that lease ends at least the
    /// sender's own gap before the promise, whatever the voter's own timings and drift.
    #[test]
    fn a_promise_covers_the_senders_lease_whatever_the_voters_timings() {
        let senders = [
            timings(500, 2000, 3000, 0.05),
            timings(500, 10_000, 16_000, 0.05),
            timings(50, 51, 160, 0.2),
            timings(1000, 19_000, 60_000, 0.0),
        ];
        let voters = [
            timings(500, 2000, 3000, 0.05),
            timings(50, 100, 300, 0.2),
            timings(100, 150, 200, 0.0),
            timings(1000, 15_000, 50_000, 0.1),
        ];
        for s in &senders {
            s.validate().unwrap();
            let a = Announced::of(s);
            for v in &voters {
                let g = v.promise_to(Some(&a), None);
                assert!(g >= v.election_timeout && g >= s.election_timeout, "{g:?}");
                let rv = v.max_drift;
                let lease = s.lease_on(g, rv);
                assert!(
                    lease + Duration::from_micros(1) >= s.lease,
                    "{s:?} from {v:?}: {lease:?}"
                );
                // True time on the worst clocks: the sender's slow by the larger drift, the
                // voter's fast by it.
                let r = s.max_drift.max(rv);
                let lease_end = lease.as_secs_f64() / (1.0 - r);
                let promise_end = g.as_secs_f64() / (1.0 + r);
                let gap = s.after_lease().as_secs_f64() / (1.0 - r);
                assert!(
                    promise_end - lease_end >= gap - 1e-6,
                    "{s:?} from {v:?}: lease ends {lease_end}, promise {promise_end}"
                );
            }
        }
    }

    /// The drift factor of rule 5: a voter whose clock may drift more than the sender thinks
    /// stretches its promise; equal drifts give exactly the longer `T`.
    #[test]
    fn the_promise_stretches_by_the_larger_drift_only() {
        let voter = timings(500, 2000, 3000, 0.05);
        let same = voter.promise_to(Some(&announced(500, 10_000, 16_000, 50_000)), None);
        assert_eq!(same, Duration::from_secs(16));
        let worse = timings(500, 2000, 3000, 0.2);
        let stretched = worse.promise_to(Some(&announced(500, 10_000, 16_000, 50_000)), None);
        let k = (0.95 * 1.2) / (1.05 * 0.8);
        let diff = stretched.as_secs_f64() - 16.0 * k;
        assert!(diff.abs() < 1e-6, "{stretched:?}");
        // A shorter sender T than ours: ours.
        assert_eq!(
            voter.promise_to(Some(&announced(50, 100, 300, 50_000)), None),
            Duration::from_secs(3)
        );
    }

    /// Rule 6: a promise shorter than the leader's `T` supports less than `L`, by the
    /// difference on the slower clock; one that ends before the gap supports nothing.
    #[test]
    fn a_short_promise_supports_a_shorter_lease() {
        let t = timings(500, 10_000, 16_000, 0.05);
        assert!(t.lease_on(Duration::from_secs(16), 0.05) + Duration::from_micros(1) >= t.lease);
        let less = t.lease_on(Duration::from_secs(14), 0.05);
        let expected = 10.0 - 2.0 * 0.95 / 1.05;
        assert!((less.as_secs_f64() - expected).abs() < 1e-6, "{less:?}");
        assert_eq!(t.lease_on(Duration::from_secs(3), 0.05), Duration::ZERO);
    }
}
