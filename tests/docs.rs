//! The documentation is tested, so that a renamed flag or a moved section breaks a test rather
//! than a reader:
//!
//! 1. In README.md and every `.md` under `docs/`, every relative link `](path)` or
//!    `](path#anchor)` (and every reference definition `[label]: path`) names a file or directory
//!    that exists, and an anchor names a heading of the linked Markdown file under GitHub's rules
//!    (lowercase; letters, digits, `-` and `_` kept, spaces turned into `-`, everything else
//!    dropped; `-1`, `-2`, ... for repeated headings). External `http(s):` and `mailto:` links
//!    are not checked.
//! 2. In the ```sh, ```bash, ```shell and ```console blocks of README.md and `docs/guide/*.md`,
//!    every command line that runs `pilot-election` (by that name or a path ending in it, after
//!    `cargo run --release --`, or inside `docker-compose exec`, `docker exec` or `kubectl exec`)
//!    parses with the binary's own clap schema, `pilot_election::cli::Cli`.
//! 3. `docs/README.md`, the guide's index, links every `.md` under `docs/`.
//!
//! Nothing here starts a process or opens a socket: the files are read and the arguments parsed.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use clap::error::ErrorKind;
use clap::Parser;
use pilot_election::cli::Cli;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every `.md` under `docs/`, relative to the repository, sorted.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let entry = entry.expect("a directory entry");
            let (path, name) = (entry.path(), entry.file_name());
            if path.is_dir() {
                walk(&path, &rel.join(&name), out);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(rel.join(&name));
            }
        }
    }
    let mut files = vec![PathBuf::from("README.md")];
    walk(&root().join("docs"), Path::new("docs"), &mut files);
    files.sort();
    files
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

// ---------------------------------------------------------------------------------------------
// Markdown: fenced code blocks apart from the prose.

/// A fenced code block: its info string's first word and its lines with their 1-based numbers.
struct Block {
    lang: String,
    lines: Vec<(usize, String)>,
}

/// The prose of a Markdown text (every line of a fenced block blanked, so that line numbers
/// stay) and its fenced code blocks. Fences may be indented (inside a list item); a block's
/// lines lose up to that indentation.
fn split_markdown(text: &str) -> (Vec<String>, Vec<Block>) {
    let mut prose = Vec::new();
    let mut blocks = Vec::new();
    // (fence character, fence length, indentation, block)
    let mut open: Option<(char, usize, usize, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            Some((ch, len, ind, mut block)) => {
                let run = trimmed.chars().take_while(|&c| c == ch).count();
                if run >= len && trimmed[run..].trim().is_empty() {
                    blocks.push(block);
                } else {
                    let strip = line.len() - line.trim_start_matches(' ').len();
                    block
                        .lines
                        .push((i + 1, line[strip.min(ind)..].to_string()));
                    open = Some((ch, len, ind, block));
                }
                prose.push(String::new());
            }
            None => {
                let ch = trimmed.chars().next().unwrap_or(' ');
                let run = trimmed.chars().take_while(|&c| c == ch).count();
                if (ch == '`' || ch == '~') && run >= 3 {
                    let lang = trimmed[run..].split_whitespace().next().unwrap_or("");
                    let block = Block {
                        lang: lang.to_ascii_lowercase(),
                        lines: Vec::new(),
                    };
                    open = Some((ch, run, indent, block));
                    prose.push(String::new());
                } else {
                    prose.push(line.to_string());
                }
            }
        }
    }
    if let Some((_, _, _, block)) = open {
        blocks.push(block);
    }
    (prose, blocks)
}

/// `text` with the content of every inline code span (and its backticks) replaced by spaces;
/// newlines stay, so byte offsets and line numbers stay too. A backtick run with no closing run
/// of the same length is literal.
fn blank_code_spans(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|&&b| b == b'`').count();
        let mut j = i + run;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let r = bytes[j..].iter().take_while(|&&b| b == b'`').count();
                if r == run {
                    close = Some(j + r);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(end) => {
                for b in &mut out[i..end] {
                    if *b != b'\n' {
                        *b = b' ';
                    }
                }
                i = end;
            }
            None => i += run,
        }
    }
    // Only ASCII bytes were replaced, by ASCII spaces, so the text is still UTF-8... unless a
    // span held a multi-byte character, whose bytes all became spaces: still valid.
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

// ---------------------------------------------------------------------------------------------
// Anchors.

/// The anchor GitHub gives a heading: the rendered text (link targets and inline markup gone),
/// lowercased; letters, digits, `-` and `_` kept, each space turned into `-`, the rest dropped.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut chars = heading.trim().chars().peekable();
    while let Some(c) = chars.next() {
        // `[text](target)`: the target is not part of the rendered text.
        if c == ']' && chars.peek() == Some(&'(') {
            let mut depth = 0;
            for d in chars.by_ref() {
                match d {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
            }
            continue;
        }
        text.push(c);
    }
    text.to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor of a Markdown text: its ATX headings outside code blocks, repeated ones
/// numbered as GitHub numbers them.
fn anchors(text: &str) -> HashSet<String> {
    let (prose, _) = split_markdown(text);
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    for line in &prose {
        let Some(heading) = atx_heading(line) else {
            continue;
        };
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// The text of an ATX heading (`# Title`, up to three spaces of indentation, closing `#`s
/// dropped), or None.
fn atx_heading(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.chars().take_while(|&c| c == '#').count();
    if level == 0 || level > 6 {
        return None;
    }
    let after = &rest[level..];
    if !(after.is_empty() || after.starts_with(' ') || after.starts_with('\t')) {
        return None;
    }
    let text = after.trim();
    let closed = text.trim_end_matches('#');
    Some(if closed.is_empty() || closed.ends_with(' ') {
        closed.trim_end()
    } else {
        text
    })
}

// ---------------------------------------------------------------------------------------------
// Links.

/// Files the checks read: the repository on disk, or (in the self-tests) texts given in memory.
#[derive(Default)]
struct Tree {
    in_memory: HashMap<PathBuf, String>,
}

impl Tree {
    fn exists(&self, rel: &Path) -> bool {
        self.in_memory.contains_key(rel) || root().join(rel).exists()
    }

    fn is_file(&self, rel: &Path) -> bool {
        self.in_memory.contains_key(rel) || root().join(rel).is_file()
    }

    fn text(&self, rel: &Path) -> String {
        match self.in_memory.get(rel) {
            Some(t) => t.clone(),
            None => read(rel),
        }
    }
}

/// Every link destination in the prose of `text`, with its line: inline links and images
/// `](dest)` (also `](<dest>)` and `](dest "title")`) and reference definitions `[label]: dest`.
fn links(text: &str) -> Vec<(usize, String)> {
    let (prose, _) = split_markdown(text);
    let prose = blank_code_spans(&prose.join("\n"));
    let line_of = |offset: usize| prose[..offset].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = prose[from..].find("](") {
        let start = from + at + 2;
        let rest = &prose[start..];
        let dest = if let Some(angled) = rest.strip_prefix('<') {
            angled.split('>').next().unwrap_or("").to_string()
        } else {
            let mut depth = 0usize;
            let mut end = rest.len();
            for (i, c) in rest.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = i;
                        break;
                    }
                    ')' => depth -= 1,
                    c if c.is_whitespace() => {
                        end = i;
                        break;
                    }
                    _ => {}
                }
            }
            rest[..end].to_string()
        };
        out.push((line_of(start), dest));
        from = start;
    }
    for (i, line) in prose.lines().enumerate() {
        let t = line.trim_start();
        if line.len() - t.len() > 3 || !t.starts_with('[') {
            continue;
        }
        if let Some(close) = t.find("]:") {
            if let Some(dest) = t[close + 2..].split_whitespace().next() {
                out.push((i + 1, dest.trim_matches(['<', '>']).to_string()));
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).expect("ASCII");
            out.push(u8::from_str_radix(hex, 16).expect("two hex digits"));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `base` joined with `link`, `.` and `..` resolved; None when it leaves the repository.
fn resolve(base: &Path, link: &str) -> Option<PathBuf> {
    let joined = match link.strip_prefix('/') {
        Some(from_root) => PathBuf::from(from_root),
        None => base.join(link),
    };
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// What is wrong with the relative links of `file` (relative to the repository), one line each.
fn check_links(tree: &Tree, file: &Path) -> Vec<String> {
    let text = tree.text(file);
    let dir = file.parent().unwrap_or(Path::new(""));
    let mut errors = Vec::new();
    for (line, dest) in links(&text) {
        let at = format!("{}:{line}: link `{dest}`", file.display());
        let lower = dest.to_ascii_lowercase();
        if lower.starts_with("http://")
            || lower.starts_with("https://")
            || lower.starts_with("mailto:")
        {
            continue;
        }
        if dest.is_empty() {
            errors.push(format!("{at}: empty destination"));
            continue;
        }
        if dest.contains("://") {
            errors.push(format!("{at}: a scheme this check does not know"));
            continue;
        }
        let (path, anchor) = match dest.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (dest.as_str(), None),
        };
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            match resolve(dir, &percent_decode(path)) {
                Some(t) => t,
                None => {
                    errors.push(format!("{at}: leads out of the repository"));
                    continue;
                }
            }
        };
        if !tree.exists(&target) {
            errors.push(format!("{at}: {} does not exist", target.display()));
            continue;
        }
        let Some(anchor) = anchor else {
            continue;
        };
        if !tree.is_file(&target) || target.extension().is_none_or(|x| x != "md") {
            errors.push(format!(
                "{at}: an anchor into {}, which is not a Markdown file",
                target.display()
            ));
            continue;
        }
        let anchor = percent_decode(anchor);
        if !anchors(&tree.text(&target)).contains(&anchor) {
            errors.push(format!(
                "{at}: {} has no heading whose anchor is #{anchor}",
                target.display()
            ));
        }
    }
    errors
}

// ---------------------------------------------------------------------------------------------
// Shell command lines: just enough of the shell to find the arguments a command gets.

/// One command line taken apart: its words, separated into simple commands at `|`, `||`, `&&`,
/// `;`, `&`, `(` and `)`; the bodies of its command substitutions, checked as command lines of
/// their own; and the delimiters of its here-documents, whose lines are skipped.
#[derive(Debug, Default)]
struct Lexed {
    commands: Vec<Vec<String>>,
    substitutions: Vec<String>,
    heredocs: Vec<String>,
}

/// What a parameter expansion stands for here. The documentation's variables are never set when
/// the test runs, so each becomes a value that fits where it is used: a number for terms, ports
/// and pids, a URL for URLs, a duration for timeouts and intervals, and `x` otherwise (an id, a
/// path, a name). The body of a command substitution `$(...)` becomes `x` too.
fn placeholder(name: &str) -> &'static str {
    let n = name.to_ascii_uppercase();
    if n.contains("URL") {
        "http://127.0.0.1:7070"
    } else if ["TIMEOUT", "INTERVAL", "DURATION"]
        .iter()
        .any(|k| n.contains(k))
    {
        "1s"
    } else if n.is_empty()
        || n.chars().all(|c| c.is_ascii_digit())
        || ["TERM", "PRIORITY", "PORT", "PID", "COUNT"]
            .iter()
            .any(|k| n.contains(k))
    {
        "1"
    } else {
        "x"
    }
}

const OPERATORS: &[char] = &['|', '&', ';', '(', ')', '<', '>'];

/// Reads from `c[*i]` (just past an opening `(`) to the matching `)`, which it consumes, minding
/// quotes and escapes; returns what lies between.
fn balanced(c: &[char], i: &mut usize) -> String {
    let mut depth = 1;
    let mut body = String::new();
    let (mut single, mut double) = (false, false);
    while *i < c.len() {
        let ch = c[*i];
        *i += 1;
        match ch {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '\\' if !single && *i < c.len() => {
                body.push(ch);
                body.push(c[*i]);
                *i += 1;
                continue;
            }
            '(' if !single && !double => depth += 1,
            ')' if !single && !double => {
                depth -= 1;
                if depth == 0 {
                    return body;
                }
            }
            _ => {}
        }
        body.push(ch);
    }
    body
}

/// A `$` expansion at `c[*i]`: appends its placeholder to `word`, and a command substitution's
/// body to `subs`.
fn expand(c: &[char], i: &mut usize, word: &mut String, subs: &mut Vec<String>) {
    *i += 1; // the `$`
    match c.get(*i) {
        Some('(') if c.get(*i + 1) == Some(&'(') => {
            *i += 2;
            balanced(c, i);
            if c.get(*i) == Some(&')') {
                *i += 1;
            }
            word.push('1');
        }
        Some('(') => {
            *i += 1;
            subs.push(balanced(c, i));
            word.push_str(placeholder("substitution"));
        }
        Some('{') => {
            *i += 1;
            let mut name = String::new();
            while *i < c.len() && c[*i] != '}' {
                name.push(c[*i]);
                *i += 1;
            }
            *i += 1;
            let name: String = name
                .chars()
                .skip_while(|&ch| ch == '#' || ch == '!')
                .take_while(|ch| ch.is_ascii_alphanumeric() || *ch == '_')
                .collect();
            word.push_str(placeholder(&name));
        }
        Some(ch) if ch.is_ascii_alphabetic() || *ch == '_' => {
            let mut name = String::new();
            while *i < c.len() && (c[*i].is_ascii_alphanumeric() || c[*i] == '_') {
                name.push(c[*i]);
                *i += 1;
            }
            word.push_str(placeholder(&name));
        }
        Some(ch) if ch.is_ascii_digit() || "!?$#@*-".contains(*ch) => {
            *i += 1;
            word.push_str(placeholder(""));
        }
        _ => word.push('$'),
    }
}

/// Reads one word at `c[*i]` (quotes, escapes and expansions resolved); stops before whitespace
/// and operators. `None` when there is no word there.
fn read_word(c: &[char], i: &mut usize, subs: &mut Vec<String>) -> Option<String> {
    let mut word = String::new();
    let start = *i;
    while *i < c.len() {
        let ch = c[*i];
        if ch.is_whitespace() || OPERATORS.contains(&ch) {
            break;
        }
        match ch {
            '\\' => {
                if let Some(&next) = c.get(*i + 1) {
                    word.push(next);
                }
                *i += 2;
            }
            '\'' => {
                *i += 1;
                while *i < c.len() && c[*i] != '\'' {
                    word.push(c[*i]);
                    *i += 1;
                }
                *i += 1;
            }
            '"' => {
                *i += 1;
                while *i < c.len() && c[*i] != '"' {
                    match c[*i] {
                        '\\' if matches!(c.get(*i + 1), Some('"' | '\\' | '$' | '`')) => {
                            word.push(c[*i + 1]);
                            *i += 2;
                        }
                        '$' => expand(c, i, &mut word, subs),
                        '`' => {
                            *i += 1;
                            subs.push(backticks(c, i));
                            word.push_str(placeholder("substitution"));
                        }
                        other => {
                            word.push(other);
                            *i += 1;
                        }
                    }
                }
                *i += 1;
            }
            '$' => expand(c, i, &mut word, subs),
            '`' => {
                *i += 1;
                subs.push(backticks(c, i));
                word.push_str(placeholder("substitution"));
            }
            other => {
                word.push(other);
                *i += 1;
            }
        }
    }
    (*i > start).then_some(word)
}

/// The body of a `` `...` `` substitution, from just past its opening backtick.
fn backticks(c: &[char], i: &mut usize) -> String {
    let mut body = String::new();
    while *i < c.len() && c[*i] != '`' {
        body.push(c[*i]);
        *i += 1;
    }
    *i += 1;
    body
}

fn skip_blanks(c: &[char], i: &mut usize) {
    while *i < c.len() && c[*i].is_whitespace() {
        *i += 1;
    }
}

/// Takes one (joined) command line apart. Comments end it; redirections (`>file`, `2>&1`,
/// `<<EOF`, `<(...)`) are dropped with their targets.
fn lex(line: &str) -> Lexed {
    let c: Vec<char> = line.chars().collect();
    let mut out = Lexed::default();
    let mut current: Vec<String> = Vec::new();
    let mut i = 0;
    loop {
        skip_blanks(&c, &mut i);
        let Some(&ch) = c.get(i) else {
            break;
        };
        if ch == '#' {
            break;
        }
        if ch == '<' || ch == '>' || (ch == '&' && c.get(i + 1) == Some(&'>')) {
            if ch == '<' && c.get(i + 1) == Some(&'(') {
                i += 2;
                out.substitutions.push(balanced(&c, &mut i));
                current.push(placeholder("substitution").to_string());
                continue;
            }
            let mut op = String::new();
            while i < c.len() && (c[i] == '<' || c[i] == '>' || (op.is_empty() && c[i] == '&')) {
                op.push(c[i]);
                i += 1;
            }
            if op.starts_with("<<") && c.get(i) == Some(&'-') {
                i += 1;
            }
            if c.get(i) == Some(&'&') {
                // `>&2`, `2>&1`, `>&-`: a descriptor, not a file.
                i += 1;
                while i < c.len() && (c[i].is_ascii_digit() || c[i] == '-') {
                    i += 1;
                }
                continue;
            }
            skip_blanks(&c, &mut i);
            let target = read_word(&c, &mut i, &mut out.substitutions).unwrap_or_default();
            if op.starts_with("<<") && op != "<<<" {
                out.heredocs.push(target);
            }
            continue;
        }
        if OPERATORS.contains(&ch) {
            i += 1;
            if !current.is_empty() {
                out.commands.push(std::mem::take(&mut current));
            }
            continue;
        }
        let Some(word) = read_word(&c, &mut i, &mut out.substitutions) else {
            i += 1;
            continue;
        };
        // `2>file`: a descriptor number right before a redirection is part of it.
        if matches!(c.get(i), Some('<' | '>'))
            && !word.is_empty()
            && word.chars().all(|d| d.is_ascii_digit())
        {
            continue;
        }
        current.push(word);
    }
    if !current.is_empty() {
        out.commands.push(current);
    }
    out
}

fn is_pilot_election(word: &str) -> bool {
    word == "pilot-election" || word.ends_with("/pilot-election")
}

/// The arguments `pilot-election` gets from one simple command, if it runs it: directly (after
/// variable assignments and words such as `exec` or `sudo`), through `cargo run` of this
/// package, or inside `docker-compose exec`, `docker exec` or `kubectl exec`.
fn invocation(words: &[String]) -> Option<Vec<String>> {
    const PREFIXES: &[&str] = &[
        "if", "then", "else", "elif", "do", "while", "until", "!", "{", "time", "exec", "sudo",
        "nohup", "setsid",
    ];
    let is_assignment = |w: &str| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let start = words
        .iter()
        .position(|w| !is_assignment(w) && !PREFIXES.contains(&w.as_str()))?;
    let words = &words[start..];
    let command = words[0].as_str();
    if is_pilot_election(command) {
        return Some(words[1..].to_vec());
    }
    match command {
        "cargo" if words.get(1).map(String::as_str) == Some("run") => {
            let dash = words.iter().position(|w| w == "--")?;
            let options = &words[2..dash];
            let other_target = options.iter().enumerate().any(|(k, w)| {
                matches!(
                    w.as_str(),
                    "-p" | "--package" | "--example" | "--manifest-path"
                ) || w.starts_with("--package=")
                    || w.starts_with("--example=")
                    || (w == "--bin"
                        && options.get(k + 1).map(String::as_str) != Some("pilot-election"))
                    || (w.starts_with("--bin=") && w != "--bin=pilot-election")
            });
            (!other_target).then(|| words[dash + 1..].to_vec())
        }
        "docker-compose" | "docker" | "podman" | "kubectl" => {
            let exec = words.iter().position(|w| w == "exec")?;
            let at = words[exec + 1..]
                .iter()
                .position(|w| is_pilot_election(w))?;
            Some(words[exec + 1 + at + 1..].to_vec())
        }
        _ => None,
    }
}

/// Every `pilot-election` invocation in one command line, its substitutions included. A word
/// `...` is the documentation's "and the other flags" (`run --node-id a ... --exec CMD`): it is
/// dropped before parsing.
fn invocations(line: &str) -> (Vec<Vec<String>>, Vec<String>) {
    let lexed = lex(line);
    let mut found: Vec<Vec<String>> = lexed
        .commands
        .iter()
        .filter_map(|w| invocation(w))
        .map(|argv| argv.into_iter().filter(|w| w != "...").collect())
        .collect();
    for body in &lexed.substitutions {
        found.extend(invocations(body).0);
    }
    (found, lexed.heredocs)
}

/// The command lines of a shell block, each with the number of its first line: continuation
/// lines joined, prompts (`$ `, `host$ `) dropped, here-document bodies skipped; in a
/// ```console block only the lines after a prompt are commands (the rest is output).
fn command_lines(block: &Block) -> Vec<(usize, String, Vec<String>)> {
    let console = block.lang == "console";
    let prompt = |line: &str| -> Option<usize> {
        let t = line.trim_start();
        let lead = t.find("$ ")?;
        let host = &t[..lead];
        host.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.@:~/-".contains(c))
            .then_some(line.len() - t.len() + lead + 2)
    };
    let mut out = Vec::new();
    let mut k = 0;
    while k < block.lines.len() {
        let (number, first) = &block.lines[k];
        k += 1;
        let mut text = match prompt(first) {
            Some(at) => first[at..].to_string(),
            None if console => continue,
            None => first.clone(),
        };
        while (text.len() - text.trim_end_matches('\\').len()) % 2 == 1 {
            text.pop();
            match block.lines.get(k) {
                Some((_, next)) => {
                    text.push(' ');
                    text.push_str(next);
                    k += 1;
                }
                None => break,
            }
        }
        let (found, heredocs) = invocations(&text);
        for delimiter in heredocs {
            while let Some((_, line)) = block.lines.get(k) {
                k += 1;
                if line.trim() == delimiter {
                    break;
                }
            }
        }
        for argv in found {
            out.push((*number, text.trim().to_string(), argv));
        }
    }
    out
}

/// Which of clap's errors mean "the documentation is wrong". `--help` and `--version` stop a
/// parse with an "error" that is what they were asked for. A missing required argument is not
/// counted either: clap reports it also when the value is meant to come from the environment the
/// command runs in (a `PILOT_ELECTION_*` prefix, a compose or systemd environment file), which
/// this test does not reproduce; no flag of the CLI is required today, so this hides nothing.
/// Everything else — an unknown flag or subcommand, a bad value, a conflict, a missing value —
/// is a parse error. Checks made after parsing (an admin token that must be readable, a peer
/// list that must be consistent, files that must exist) are never run: the commands are parsed,
/// not executed.
fn is_parse_error(kind: ErrorKind) -> bool {
    !matches!(
        kind,
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion | ErrorKind::MissingRequiredArgument
    )
}

/// Parses every `pilot-election` command line in the shell blocks of `text`; returns how many
/// were parsed and one message per failure, with the file, the line and clap's error.
fn check_commands(file: &Path, text: &str) -> (usize, Vec<String>) {
    let (_, blocks) = split_markdown(text);
    let mut checked = 0;
    let mut errors = Vec::new();
    for block in blocks
        .iter()
        .filter(|b| matches!(b.lang.as_str(), "sh" | "bash" | "shell" | "console"))
    {
        for (line, text, argv) in command_lines(block) {
            checked += 1;
            let args = std::iter::once("pilot-election".to_string()).chain(argv.iter().cloned());
            if let Err(e) = Cli::try_parse_from(args) {
                if is_parse_error(e.kind()) {
                    let clap = e.render().to_string();
                    let clap = clap.trim().replace('\n', "\n    ");
                    errors.push(format!(
                        "{}:{line}: `{text}` does not parse (argv {argv:?}):\n    {clap}",
                        file.display()
                    ));
                }
            }
        }
    }
    (checked, errors)
}

// ---------------------------------------------------------------------------------------------
// The checks over the repository.

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let tree = Tree::default();
    let files = markdown_files();
    assert!(
        files.iter().any(|f| f == Path::new("docs/README.md")),
        "docs/README.md, the guide's index, is missing"
    );
    let errors: Vec<String> = files.iter().flat_map(|f| check_links(&tree, f)).collect();
    assert!(
        errors.is_empty(),
        "{} broken link(s):\n{}",
        errors.len(),
        errors.join("\n")
    );
}

#[test]
fn the_guides_index_links_every_page_under_docs() {
    let index = Path::new("docs/README.md");
    let linked: HashSet<PathBuf> = links(&read(index))
        .into_iter()
        .filter_map(|(_, dest)| resolve(Path::new("docs"), dest.split('#').next()?))
        .collect();
    let missing: Vec<PathBuf> = markdown_files()
        .into_iter()
        .filter(|f| f.starts_with("docs") && f != index && !linked.contains(f))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/README.md, the guide's index, does not link {missing:?}"
    );
}

#[test]
fn every_documented_pilot_election_command_parses() {
    let mut files = vec![PathBuf::from("README.md")];
    files.extend(
        markdown_files()
            .into_iter()
            .filter(|f| f.parent() == Some(Path::new("docs/guide"))),
    );
    let mut total = 0;
    let mut errors = Vec::new();
    for file in &files {
        let (checked, mut errs) = check_commands(file, &read(file));
        assert!(
            checked > 0 || !file.starts_with("README.md"),
            "no pilot-election command found in {}: is the extraction broken?",
            file.display()
        );
        total += checked;
        errors.append(&mut errs);
    }
    let env: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("PILOT_ELECTION_"))
        .collect();
    assert!(
        errors.is_empty(),
        "{} documented command(s) do not parse with the real CLI{}:\n{}",
        errors.len(),
        if env.is_empty() {
            String::new()
        } else {
            format!(" (note: this test's environment sets {env:?}, which clap reads too)")
        },
        errors.join("\n")
    );
    // The README and the guide show dozens; far fewer means the extraction lost them.
    assert!(
        total >= 30,
        "only {total} pilot-election command lines found"
    );
}

// ---------------------------------------------------------------------------------------------
// The checks check: a bad flag, a broken link and a missing anchor are caught.

#[test]
fn a_misspelt_flag_fails_with_the_file_the_line_and_claps_error() {
    let text = "# Title\n\n```sh\npilot-election leader --url http://a:7070\npilot-election run --node-id a \\\n  --no-such-flag 3\n```\n";
    let (checked, errors) = check_commands(Path::new("docs/guide/x.md"), text);
    assert_eq!(checked, 2);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("docs/guide/x.md:5: "),
        "{}",
        errors[0]
    );
    assert!(
        errors[0].contains("unexpected argument '--no-such-flag'"),
        "{}",
        errors[0]
    );
    // A bad value and a conflict are parse errors too.
    let text = "```console\n$ pilot-election run --transport carrier-pigeon\noutput, not a command: pilot-election --bogus\n$ pilot-election pause --for 2h --until 2026-12-02T06:00:00Z\n```\n";
    let (checked, errors) = check_commands(Path::new("x.md"), text);
    assert_eq!(checked, 2);
    assert_eq!(errors.len(), 2, "{errors:?}");
}

#[test]
fn the_shell_is_taken_apart_as_far_as_the_arguments_go() {
    let line = r#"FOO=bar pilot-election step-down --url "$(pilot-election leader --print-url)" --successor $NEXT 2>/dev/null | tee x & echo $! >p.pid # c"#;
    let (found, _) = invocations(line);
    assert_eq!(
        found,
        vec![
            vec!["step-down", "--url", "x", "--successor", "x"],
            vec!["leader", "--print-url"],
        ]
    );
    let (found, _) = invocations(
        r#"docker-compose exec "$(curl -s http://h/leader | sed 's/.*"leader":"\([^"]*\)".*/\1/')" pilot-election step-down"#,
    );
    assert_eq!(found, vec![vec!["step-down"]]);
    let (found, _) = invocations("cargo run --release -p pilot-devnet -- --dir /tmp/pdn && cargo run --release -- demo --duration 30s");
    assert_eq!(found, vec![vec!["demo", "--duration", "30s"]]);
    let (found, _) = invocations("kubectl create secret generic pilot-election --from-file=x; docker build -t pilot-election .");
    assert!(found.is_empty(), "{found:?}");
    let (found, _) = invocations("pilot-election run --node-id a ... --exec 'sh -c \"x\"'");
    assert_eq!(
        found,
        vec![vec!["run", "--node-id", "a", "--exec", "sh -c \"x\""]]
    );
    let (found, heredocs) = invocations("nsupdate -k key <<EOF");
    assert!(found.is_empty());
    assert_eq!(heredocs, vec!["EOF"]);
}

#[test]
fn a_broken_link_and_a_missing_anchor_fail() {
    let page = PathBuf::from("docs/guide/_self_test.md");
    let text = "# Here\n\n## Run a job only on the leader (`--exec`)\n\n[ok](#here) [ok](#run-a-job-only-on-the-leader---exec) [ok](../../README.md#documentation)\n[ok](../../deploy/) ![ok](../status-page.png) [ext](https://example.com/x#y)\n`[not a link](nowhere.md)`\n\n[gone](no-such-page.md)\n[anchor](#there)\n[out](../../../etc/passwd)\n";
    let tree = Tree {
        in_memory: HashMap::from([(page.clone(), text.to_string())]),
    };
    let errors = check_links(&tree, &page);
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(errors[0].starts_with("docs/guide/_self_test.md:9: link `no-such-page.md`"));
    assert!(errors[1].contains(":10: link `#there`") && errors[1].contains("no heading"));
    assert!(errors[2].contains("leads out of the repository"));
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(
        slug("Run a job only on the leader (`--exec`)"),
        "run-a-job-only-on-the-leader---exec"
    );
    assert_eq!(
        slug("Leadership that follows the application's health"),
        "leadership-that-follows-the-applications-health"
    );
    assert_eq!(slug("What `scripts/test` does"), "what-scriptstest-does");
    assert_eq!(
        slug("Rule 7: the timing inequality"),
        "rule-7-the-timing-inequality"
    );
    assert_eq!(slug("See [the page](x.md) now"), "see-the-page-now");
    let text = "# A\n\n## A\n\n```sh\n# A\n```\n### B ###\n";
    let found = anchors(text);
    assert_eq!(
        found,
        HashSet::from(["a".to_string(), "a-1".to_string(), "b".to_string()])
    );
}
