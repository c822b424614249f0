//! An incremental parser of server-sent events (the WHATWG "event stream" format), fed the
//! body's chunks as they arrive: lines end in CRLF, LF or CR (a CRLF may be split between two
//! chunks, and so may a UTF-8 character), `:` starts a comment, `field: value` loses one space
//! after the colon, a field without a colon has an empty value, several `data` lines join with
//! newlines, and an event is dispatched at a blank line (an event cut off by the end of the
//! stream is not).
//!
//! One deliberate difference from a browser's `EventSource`: an `id` is committed as the last
//! event id only when its event is complete (the blank line arrived), not as soon as its line
//! is read. A connection that drops half-way through an event therefore resumes *before* that
//! event, which is sent again, instead of after it, which would lose it.

use std::time::Duration;

/// The longest line the parser keeps (1 MiB); a longer line, and the event it belongs to, are
/// dropped rather than buffered without bound.
pub(crate) const MAX_LINE: usize = 1 << 20;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event` field; `message` when the event named none.
    pub event: String,
    /// The `data` lines, joined with `\n`.
    pub data: String,
    /// The last event id once this event is counted (its own, or an earlier one).
    pub id: Option<String>,
}

/// The parser of one connection's stream.
#[derive(Debug)]
pub(crate) struct SseParser {
    /// The line read so far.
    line: Vec<u8>,
    /// The current line is longer than [`MAX_LINE`]: it is being skipped.
    line_too_long: bool,
    /// The previous chunk ended in CR: an LF at the start of the next one belongs to it.
    after_cr: bool,
    /// The first line has been seen (only it may start with a byte-order mark).
    started: bool,
    event: String,
    data: String,
    has_data: bool,
    /// An `id` field of the event being read: `Some("")` clears the last id.
    pending_id: Option<String>,
    /// The current event had a line that was too long: it is dropped.
    broken: bool,
    last_id: Option<String>,
    retry: Option<Duration>,
}

impl SseParser {
    /// A parser whose last event id starts as `last_id` (the id of an earlier connection).
    pub(crate) fn new(last_id: Option<String>) -> SseParser {
        SseParser {
            line: Vec::new(),
            line_too_long: false,
            after_cr: false,
            started: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            pending_id: None,
            broken: false,
            last_id,
            retry: None,
        }
    }

    /// The last event id of the stream so far: what `Last-Event-ID` carries on a reconnect.
    pub(crate) fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The reconnection delay the server asked for with a `retry` field, if any.
    pub(crate) fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Whether the stream so far ends between events: no line and no field of an event not yet
    /// complete is waiting (after a keep-alive comment, say, but not half-way through an
    /// event).
    pub(crate) fn between_events(&self) -> bool {
        self.line.is_empty()
            && !self.line_too_long
            && self.event.is_empty()
            && !self.has_data
            && self.pending_id.is_none()
            && !self.broken
    }

    /// Parses `chunk`, returning the events it completed.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            if std::mem::take(&mut self.after_cr) && b == b'\n' {
                continue;
            }
            match b {
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut out);
                }
                b'\n' => self.end_line(&mut out),
                _ if self.line.len() >= MAX_LINE => self.line_too_long = true,
                _ => self.line.push(b),
            }
        }
        out
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let mut line = std::mem::take(&mut self.line);
        if std::mem::take(&mut self.line_too_long) {
            self.broken = true;
            return;
        }
        if !std::mem::replace(&mut self.started, true) && line.starts_with(b"\xEF\xBB\xBF") {
            line.drain(..3);
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        let line = String::from_utf8_lossy(&line);
        if line.starts_with(':') {
            return; // a comment (the server's keep-alive)
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (&*line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.data.len() + value.len() > MAX_LINE {
                    self.broken = true;
                } else {
                    self.data.push_str(value);
                    self.data.push('\n');
                }
                self.has_data = true;
            }
            // An id with a NUL in it is ignored, as the format says.
            "id" if !value.contains('\0') => self.pending_id = Some(value.to_string()),
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse() {
                    self.retry = Some(Duration::from_millis(ms));
                }
            }
            _ => {} // unknown fields are ignored
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if let Some(id) = self.pending_id.take() {
            self.last_id = (!id.is_empty()).then_some(id);
        }
        let event = std::mem::take(&mut self.event);
        let mut data = std::mem::take(&mut self.data);
        let has_data = std::mem::take(&mut self.has_data);
        if std::mem::take(&mut self.broken) || !has_data {
            return;
        }
        data.pop(); // the newline after the last data line
        out.push(SseEvent {
            event: if event.is_empty() {
                "message".into()
            } else {
                event
            },
            data,
            id: self.last_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
            id: id.map(String::from),
        }
    }

    fn all(input: &[u8]) -> Vec<SseEvent> {
        SseParser::new(None).feed(input)
    }

    #[test]
    fn one_event_with_id_and_name() {
        let got = all(b"event: leader\nid: 3f-1-5\ndata: {\"term\":5}\n\n");
        assert_eq!(got, vec![ev("leader", "{\"term\":5}", Some("3f-1-5"))]);
    }

    #[test]
    fn multi_line_data_joins_with_newlines_and_keeps_other_spaces() {
        let got = all(b"data: a\ndata:b\ndata:  c\ndata\n\n");
        assert_eq!(got, vec![ev("message", "a\nb\n c\n", None)]);
    }

    #[test]
    fn comments_and_unknown_fields_are_ignored() {
        let got = all(b": keep-alive\n:\nfoo: bar\nretry: x\nevent: leader\ndata: 1\n\n:x\n\n");
        assert_eq!(got, vec![ev("leader", "1", None)]);
    }

    #[test]
    fn every_line_ending_and_a_crlf_split_between_chunks() {
        let mut p = SseParser::new(None);
        let mut got = p.feed(b"data: 1\r\n\r\ndata: 2\r\rdata: 3\r");
        // The LF that completes the CR above arrives in the next chunk: one line end, not two
        // (two would dispatch an empty event, which is not an event at all, but would also
        // cut "data: 4" off from its event name).
        got.extend(p.feed(b"\nevent: e\r"));
        got.extend(p.feed(b"\ndata: 4\n\n"));
        assert_eq!(
            got,
            vec![
                ev("message", "1", None),
                ev("message", "2", None),
                ev("e", "3\n4", None)
            ]
        );
    }

    #[test]
    fn bytes_one_at_a_time_with_a_split_utf8_character_and_a_bom() {
        let input = "\u{feff}event: leader\nid: é-1\ndata: {\"leader\":\"nœud\"}\n\n".as_bytes();
        let mut p = SseParser::new(None);
        let got: Vec<SseEvent> = input.iter().flat_map(|b| p.feed(&[*b])).collect();
        assert_eq!(
            got,
            vec![ev("leader", "{\"leader\":\"nœud\"}", Some("é-1"))]
        );
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_but_its_id_counts() {
        let mut p = SseParser::new(Some("old".into()));
        assert!(p.feed(b"event: leader\nid: 7\n\n").is_empty());
        assert_eq!(p.last_id(), Some("7"));
        // The next event carries the id last set, not one of its own.
        assert_eq!(p.feed(b"data: x\n\n"), vec![ev("message", "x", Some("7"))]);
        // An empty id clears it; an id with a NUL is ignored.
        assert_eq!(
            p.feed(b"id\ndata: y\n\nid: a\0b\ndata: z\n\n"),
            vec![ev("message", "y", None), ev("message", "z", None)]
        );
    }

    #[test]
    fn the_id_of_an_event_cut_off_is_not_committed() {
        let mut p = SseParser::new(Some("1".into()));
        assert_eq!(
            p.feed(b"id: 1\nevent: leader\ndata: a\n\nid: 2\nevent: leader\ndata: b"),
            vec![ev("leader", "a", Some("1"))]
        );
        // The connection drops here: a reconnect resumes after 1, so "b" is sent again.
        assert_eq!(p.last_id(), Some("1"));
    }

    #[test]
    fn the_event_name_does_not_leak_into_the_next_event() {
        let got = all(b"event: snapshot\ndata: s\n\ndata: m\n\nevent: x\n\ndata: n\n\n");
        assert_eq!(
            got,
            vec![
                ev("snapshot", "s", None),
                ev("message", "m", None),
                ev("message", "n", None)
            ]
        );
    }

    #[test]
    fn retry_is_read_in_milliseconds() {
        let mut p = SseParser::new(None);
        p.feed(b"retry: 1500\n\n");
        assert_eq!(p.retry(), Some(Duration::from_millis(1500)));
        p.feed(b"retry: 15x\n\n");
        assert_eq!(p.retry(), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn an_over_long_line_drops_its_event_only() {
        let mut p = SseParser::new(None);
        let mut input = b"data: ".to_vec();
        input.extend(std::iter::repeat_n(b'x', MAX_LINE + 10));
        input.extend(b"\nid: 9\n\ndata: ok\n\n");
        assert_eq!(p.feed(&input), vec![ev("message", "ok", Some("9"))]);
    }

    #[test]
    fn between_events_is_after_a_blank_line_or_a_whole_comment_only() {
        let mut p = SseParser::new(None);
        assert!(p.between_events(), "at the start");
        for (chunk, between) in [
            (&b": keep-alive\n"[..], true),
            (b"\n", true),
            (b":", false),
            (b"\r", true),
            (b"\n", true),
            (b"event: leader\n", false),
            (b"id: 4\n", false),
            (b"data: x\n", false),
            (b"\n", true),
            (b"id: 5\n\n", true),
            (b"retry: 100\n", true),
            (b"data: y", false),
        ] {
            p.feed(chunk);
            assert_eq!(p.between_events(), between, "after {chunk:?}");
        }
    }

    #[test]
    fn a_colon_in_the_value_stays() {
        assert_eq!(
            all(b"data: {\"a\":1}\ndata:: x\n\n"),
            vec![ev("message", "{\"a\":1}\n: x", None)]
        );
    }
}
