//! Which pilotctl versions the pilot transport is tested with, and what happens with others.
//!
//! The node depends on details of pilotctl's behaviour that no contract pins down: the exact
//! `--json` envelopes, `subscribe` printing one bare event per line, the error codes it retries
//! on and the messages the broker diagnosis reads. They were checked against 1.18.0 only, so:
//! - 1.18.x (same minor, any patch): tested;
//! - a newer 1.x: started with a warning (Pilot keeps its CLI compatible within a major
//!   version as far as we know, but nobody here has checked that one);
//! - older than 1.18.0, another major version, or output that is not a version at all:
//!   refused at start (exit 69), because the node would fail later in ways that are much
//!   harder to read than this.

use super::{Pilotctl, PilotctlError};

/// The tested range, as docs/guide/pilot-network.md ("pilotctl versions") states it.
pub const TESTED_RANGE: &str = "1.18.x";
const TESTED: (u64, u64) = (1, 18);

/// A `major.minor.patch` version, with whatever suffix it carried kept for display.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    pub text: String,
}

impl Version {
    /// Finds the first `major.minor.patch` in pilotctl's output (`1.18.0`, `v1.19.2-rc1`,
    /// `pilotctl version 1.18.0 (abc123)`).
    pub fn find(output: &str) -> Option<Version> {
        output.split_whitespace().find_map(|word| {
            let word = word.trim_start_matches('v');
            let mut parts = word.splitn(3, '.');
            let major = parts.next()?.parse().ok()?;
            let minor = parts.next()?.parse().ok()?;
            let rest = parts.next()?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let patch = digits.parse().ok()?;
            Some(Version {
                major,
                minor,
                patch,
                text: word.to_string(),
            })
        })
    }
}

/// What start-up does with the pilotctl it found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Tested(Version),
    /// Newer than tested within the same major version: run, but say so.
    Untested(Version),
}

impl Verdict {
    /// One log line naming the binary and its version; a warning when it is untested.
    pub fn log(&self, ctl: &Pilotctl) {
        let path = ctl.path().display();
        match self {
            Verdict::Tested(v) => {
                tracing::info!(pilotctl = %path, version = %v.text, tested = TESTED_RANGE, "pilotctl {} (tested)", v.text)
            }
            Verdict::Untested(v) => tracing::warn!(
                pilotctl = %path,
                version = %v.text,
                tested = TESTED_RANGE,
                "pilotctl {} is newer than the tested {TESTED_RANGE}: it probably works, but if the node misbehaves, try pilotctl {TESTED_RANGE} (scripts/fetch-pilotctl.sh pins 1.18.0)",
                v.text
            ),
        }
    }
}

/// Judges what `pilotctl version` printed; `Err` is the one-line reason to refuse.
pub fn judge(output: &str) -> Result<Verdict, String> {
    let Some(v) = Version::find(output) else {
        let shown: String = output.chars().take(80).collect();
        return Err(format!(
            "`pilotctl version` printed {shown:?}, not a version: is --pilotctl really pilotctl?"
        ));
    };
    let (major, minor) = TESTED;
    if v.major != major {
        return Err(format!(
            "pilotctl {} is a different major version than the tested {TESTED_RANGE}: its --json output may differ; install pilotctl {TESTED_RANGE} (scripts/fetch-pilotctl.sh pins 1.18.0)",
            v.text
        ));
    }
    if v.minor < minor {
        return Err(format!(
            "pilotctl {} is older than the tested {TESTED_RANGE}: upgrade it (scripts/fetch-pilotctl.sh pins 1.18.0)",
            v.text
        ));
    }
    Ok(if v.minor == minor {
        Verdict::Tested(v)
    } else {
        Verdict::Untested(v)
    })
}

/// Runs `pilotctl version` and judges it; `Err` is the reason to refuse, naming the binary.
pub async fn check(ctl: &Pilotctl) -> Result<Verdict, String> {
    let path = ctl.path().display().to_string();
    let output = ctl.version().await.map_err(|e: PilotctlError| {
        format!("cannot read the version of pilotctl at {path} (`pilotctl version`): {e}")
    })?;
    judge(&output).map_err(|reason| format!("{reason} (pilotctl at {path})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_found_in_what_pilotctl_prints() {
        let v = Version::find("1.18.0\n").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (1, 18, 0));
        let v = Version::find("pilotctl version v1.19.2-rc1 (abc123)").unwrap();
        assert_eq!(
            (v.major, v.minor, v.patch, v.text.as_str()),
            (1, 19, 2, "1.19.2-rc1")
        );
        assert!(Version::find("dev").is_none());
        assert!(Version::find("1.18").is_none());
        assert!(Version::find("").is_none());
    }

    #[test]
    fn the_tested_minor_runs_newer_warns_older_and_other_majors_are_refused() {
        assert!(matches!(judge("1.18.0"), Ok(Verdict::Tested(_))));
        assert!(matches!(judge("1.18.7"), Ok(Verdict::Tested(_))));
        assert!(matches!(judge("1.19.0"), Ok(Verdict::Untested(_))));
        assert!(matches!(judge("1.30.1"), Ok(Verdict::Untested(_))));
        let old = judge("1.17.3").unwrap_err();
        assert!(old.contains("older than the tested 1.18.x"), "{old}");
        let major = judge("2.0.0").unwrap_err();
        assert!(major.contains("different major version"), "{major}");
        assert!(judge("0.18.0").is_err());
        let garbage = judge("Usage: something else").unwrap_err();
        assert!(garbage.contains("not a version"), "{garbage}");
    }
}
