"""The SSE parser, against the format's rules."""

from __future__ import annotations

from typing import List

import pytest

from pilot_election_client._sse import SseEvent, SseParser


def parse(*chunks: str) -> List[SseEvent]:
    p = SseParser()
    out: List[SseEvent] = []
    for c in chunks:
        out.extend(p.feed(c))
    return out


def test_event_id_and_data() -> None:
    text = 'event: leader\nid: x-1-2\ndata: {"term":5}\n\n'
    assert parse(text) == [SseEvent("leader", '{"term":5}', "x-1-2")]


def test_any_chunking_and_line_ending_gives_the_same_events() -> None:
    stream = "event: leader\r\nid: 1\r\ndata: a\r\ndata: b\r\n\r\n: keep-alive\r\rdata:c\r\r"
    whole = parse(stream)
    assert whole == [SseEvent("leader", "a\nb", "1"), SseEvent("message", "c", "1")]
    for size in (1, 2, 3, 5, 7):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert parse(*chunks) == whole, size
    assert parse(stream.replace("\r\n", "\n").replace("\r", "\n")) == whole


def test_comments_unknown_fields_and_a_space_after_the_colon() -> None:
    text = ": hello\nfoo: bar\ndata:  two spaces\ndata\nevent:x\n\n"
    # only one leading space is removed; a bare "data" adds an empty line
    assert parse(text) == [SseEvent("x", " two spaces\n", None)]


def test_an_event_without_data_is_not_dispatched_but_its_id_counts() -> None:
    p = SseParser()
    assert p.feed("event: leader\nid: 7\n\n") == []
    assert p.last_event_id == "7"
    assert p.feed("data: x\n\n") == [SseEvent("message", "x", "7")]


def test_id_with_nul_is_ignored_and_an_empty_id_resets() -> None:
    p = SseParser()
    assert p.feed("id: 1\ndata: a\n\nid: b\x00c\ndata: b\n\n")[-1].id == "1"
    assert p.feed("id\ndata: c\n\n") == [SseEvent("message", "c", "")]


def test_retry_and_bom() -> None:
    p = SseParser()
    assert p.feed("\ufeffretry: 1500\ndata: x\n\nretry: 1.5\n") == [SseEvent("message", "x", None)]
    assert p.retry_ms == 1500


def test_an_unfinished_event_is_not_dispatched() -> None:
    assert parse("data: a\n") == []
    assert parse("data: a") == []


@pytest.mark.parametrize("n", [1, 3])
def test_multi_line_data_is_joined_with_newlines(n: int) -> None:
    lines = "".join(f"data: line{i}\n" for i in range(n))
    assert parse(lines + "\n")[0].data == "\n".join(f"line{i}" for i in range(n))
