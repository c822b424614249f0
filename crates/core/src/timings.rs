//! Protocol timings and the inequality that makes leases safe.

use std::time::Duration;

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
    /// `S`: the delay per better-ranked live member before a node campaigns.
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

impl Timings {
    /// The smallest election timeout that keeps an old lease from overlapping a new leader:
    /// `L*(1+r)/(1-r) + h`.
    pub fn min_election_timeout(&self) -> Duration {
        let r = self.max_drift;
        self.lease.mul_f64((1.0 + r) / (1.0 - r)) + self.heartbeat
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
        }
        if !(0.0..0.5).contains(&self.max_drift) || self.max_drift.is_nan() {
            return Err(TimingsError::Drift(self.max_drift));
        }
        if self.heartbeat >= self.lease {
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
        t.validate().unwrap();
        t.election_timeout -= Duration::from_nanos(1);
        assert!(t.validate().is_err());
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
        let hb = Timings {
            heartbeat: Duration::from_secs(2),
            ..Timings::default()
        };
        assert!(matches!(
            hb.validate(),
            Err(TimingsError::HeartbeatNotBelowLease { .. })
        ));
    }
}
