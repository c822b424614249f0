//! Election group names. A name travels in every message (`group`), names the Pilot topic
//! (`election:<group>`), and is about to name a URL path segment (`/groups/{group}`), a
//! directory of the data directory and a metric label value; one rule keeps it safe in all of
//! them, so that no name can escape a directory, need escaping in a URL or reach the broker's
//! topic limit.

use std::fmt;

/// The group of a node started without `--group`: today's single election.
pub const DEFAULT_GROUP: &str = "default";

/// The most groups a node takes part in unless `--max-groups` says otherwise.
pub const DEFAULT_MAX_GROUPS: usize = 1024;

/// Longest group name, in bytes.
pub const MAX_GROUP_BYTES: usize = 128;

/// Why a group name was refused; the text says the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupNameError {
    #[error("a group name may not be empty")]
    Empty,
    #[error("the group name is {0} bytes long; at most {MAX_GROUP_BYTES} are allowed")]
    TooLong(usize),
    #[error(
        "the group name {name:?} has {found:?} at byte {at}: a group name is ASCII letters, \
         digits, '-', '_' and '.', and starts with a letter or a digit"
    )]
    Character {
        name: String,
        found: char,
        at: usize,
    },
}

/// A checked group name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupName(String);

impl GroupName {
    /// Checks `name` against the rule of this module.
    pub fn new(name: &str) -> Result<GroupName, GroupNameError> {
        if name.is_empty() {
            return Err(GroupNameError::Empty);
        }
        if name.len() > MAX_GROUP_BYTES {
            return Err(GroupNameError::TooLong(name.len()));
        }
        for (at, c) in name.char_indices() {
            let allowed = c.is_ascii_alphanumeric() || (at > 0 && matches!(c, '-' | '_' | '.'));
            if !allowed {
                return Err(GroupNameError::Character {
                    name: name.to_string(),
                    found: c,
                    at,
                });
            }
        }
        Ok(GroupName(name.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for GroupName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for GroupName {
    type Err = GroupNameError;

    fn from_str(s: &str) -> Result<GroupName, GroupNameError> {
        GroupName::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_in_use_today_are_accepted() {
        for name in [
            DEFAULT_GROUP,
            "task-coordinator",
            "it",
            "shard_07",
            "queue.eu-west.1",
            "0",
        ] {
            assert_eq!(GroupName::new(name).unwrap().as_str(), name);
        }
        let longest = "a".repeat(MAX_GROUP_BYTES);
        assert!(GroupName::new(&longest).is_ok());
    }

    #[test]
    fn every_bad_name_is_refused_with_the_rule() {
        assert_eq!(GroupName::new(""), Err(GroupNameError::Empty));
        let long = "a".repeat(MAX_GROUP_BYTES + 1);
        assert_eq!(
            GroupName::new(&long),
            Err(GroupNameError::TooLong(MAX_GROUP_BYTES + 1))
        );
        for (name, found, at) in [
            ("..", '.', 0),
            ("-x", '-', 0),
            ("_x", '_', 0),
            ("a/b", '/', 1),
            ("a b", ' ', 1),
            ("a:b", ':', 1),
            ("a%2F", '%', 1),
            ("grüppe", 'ü', 2),
            ("a\nb", '\n', 1),
        ] {
            let err = GroupName::new(name).unwrap_err();
            assert_eq!(
                err,
                GroupNameError::Character {
                    name: name.to_string(),
                    found,
                    at
                },
                "{name:?}"
            );
            let text = err.to_string();
            assert!(text.contains("ASCII letters, digits"), "{text}");
        }
    }
}

/// Which groups a companion of the election (`--exec`, `--on-change`) acts for: the default
/// group (what a node of one election did), every group the node takes part in (those added
/// while it runs too), or the groups named.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum GroupSelection {
    #[default]
    Default,
    All,
    Named(std::collections::BTreeSet<String>),
}

impl GroupSelection {
    /// Reads `all`, `default`, or a comma-separated list of group names, each of which must be
    /// one of `groups` (the node's `--group`s; the first is the default one). The error is one
    /// line for the CLI.
    pub fn parse(flag: &str, value: &str, groups: &[String]) -> Result<GroupSelection, String> {
        match value.trim() {
            "all" => return Ok(GroupSelection::All),
            "default" => return Ok(GroupSelection::Default),
            _ => {}
        }
        let mut named = std::collections::BTreeSet::new();
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let name = GroupName::new(name).map_err(|e| format!("{flag}: {e}"))?;
            if !groups.iter().any(|g| g == name.as_str()) {
                return Err(format!(
                    "{flag}: {name} is not one of this node's --group(s); name them, or say `all` \
                     for every group (those added while the node runs too)"
                ));
            }
            named.insert(name.to_string());
        }
        if named.is_empty() {
            return Err(format!("{flag}: give `all`, `default` or group names"));
        }
        Ok(GroupSelection::Named(named))
    }

    /// Whether it takes in `group` (`default`: whether that is the node's default group).
    pub fn includes(&self, group: &str, default: bool) -> bool {
        match self {
            GroupSelection::Default => default,
            GroupSelection::All => true,
            GroupSelection::Named(names) => names.contains(group),
        }
    }
}

/// The groups a `--groups-file` lists: one name a line; blank lines and lines starting with
/// `#` are skipped. Every name is checked (the error names the line).
pub fn read_groups_file(path: &std::path::Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--groups-file {}: {e}", path.display()))?;
    let mut groups = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = GroupName::new(line)
            .map_err(|e| format!("--groups-file {} line {}: {e}", path.display(), n + 1))?;
        groups.push(name.to_string());
    }
    Ok(groups)
}

#[cfg(test)]
mod selection_tests {
    use super::*;

    #[test]
    fn a_selection_takes_all_the_default_or_named_groups_of_the_node_and_nothing_else() {
        let groups: Vec<String> = ["main", "a", "b"].iter().map(|s| s.to_string()).collect();
        let all = GroupSelection::parse("--exec-groups", "all", &groups).unwrap();
        assert!(all.includes("zzz", false), "groups added later too");
        let d = GroupSelection::parse("--exec-groups", "default", &groups).unwrap();
        assert!(d.includes("main", true) && !d.includes("a", false));
        let named = GroupSelection::parse("--exec-groups", "a, b", &groups).unwrap();
        assert!(named.includes("a", false) && named.includes("b", false));
        assert!(!named.includes("main", true));
        let e = GroupSelection::parse("--exec-groups", "a,c", &groups).unwrap_err();
        assert!(e.contains("c is not one of"), "{e}");
        let e = GroupSelection::parse("--exec-groups", "a/b", &groups).unwrap_err();
        assert!(e.starts_with("--exec-groups: "), "{e}");
        assert!(GroupSelection::parse("--exec-groups", " , ", &groups).is_err());
    }

    #[test]
    fn a_groups_file_lists_one_checked_name_a_line() {
        let dir = std::env::temp_dir().join(format!("groups-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("groups");
        std::fs::write(&file, "# shards\nshard-1\n\n  shard-2  \n").unwrap();
        assert_eq!(read_groups_file(&file).unwrap(), ["shard-1", "shard-2"]);
        std::fs::write(&file, "shard-1\nbad name\n").unwrap();
        let e = read_groups_file(&file).unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        let e = read_groups_file(&dir.join("missing")).unwrap_err();
        assert!(e.contains("missing"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
