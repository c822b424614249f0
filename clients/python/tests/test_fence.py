"""Fence: the highest term seen, thread-safely; lower terms refused."""

from __future__ import annotations

import threading

import pytest

from pilot_election_client import Fence, StaleTerm


def test_check_accepts_equal_and_higher_terms_and_refuses_lower_ones() -> None:
    f = Fence()
    assert f.check(3) == 3
    assert f.check(3) == 3
    assert f.check(5) == 5
    with pytest.raises(StaleTerm) as e:
        f.check(4)
    assert e.value.term == 4 and e.value.highest == 5
    assert "4" in str(e.value) and "5" in str(e.value)
    assert f.highest == 5


def test_observe_and_is_current_do_not_raise() -> None:
    f = Fence(2)
    assert not f.is_current(1)
    assert f.observe(1) is False
    assert f.observe(7) is True
    assert f.highest == 7 and f.is_current(7) and not f.is_current(6)


def test_compare_and_set() -> None:
    f = Fence(4)
    assert not f.compare_and_set(3, 9)  # moved since it was read
    assert not f.compare_and_set(4, 2)  # lower than expected
    assert f.compare_and_set(4, 6)
    assert f.highest == 6


def test_negative_initial_is_refused() -> None:
    with pytest.raises(ValueError):
        Fence(-1)


def test_concurrent_checks_keep_the_highest_and_refuse_only_lower_terms() -> None:
    f = Fence()
    refused = []
    accepted = []
    lock = threading.Lock()

    def writer(terms: range) -> None:
        for t in terms:
            try:
                f.check(t)
                with lock:
                    accepted.append(t)
            except StaleTerm as e:
                assert e.highest > t
                with lock:
                    refused.append(t)

    threads = [threading.Thread(target=writer, args=(range(i, 2000, 4),)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert f.highest == 1999
    assert len(accepted) + len(refused) == 2000
    # under the lock, the accepted terms, in the order accepted, never go down
    with f.lock:
        f.check(1999)
