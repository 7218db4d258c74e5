"""OAuth state rows (multi-workspace install): each is valid once and for its lifetime, expired rows are
deleted whenever a state is issued, and no number of /slack/install requests grows the table past its cap.
On both backends."""

from __future__ import annotations

from datetime import timedelta

from bot import oauth
from bot.oauth import StoreStates
from bot.store import Store, utcnow


def kept(store: Store) -> int:
    with store.connect() as db:
        return int(db.one("SELECT count(*) FROM oauth_states")[0])


def test_expired_states_are_deleted_when_the_next_one_is_issued(store: Store) -> None:
    past = utcnow() - timedelta(seconds=1)
    for n in range(5):
        store.issue_oauth_state(f"old-{n}", past - timedelta(minutes=n))
    assert kept(store) <= 5

    fresh = StoreStates(store).issue()

    assert kept(store) == 1
    assert StoreStates(store).consume(fresh)


def test_issuing_more_states_than_the_cap_keeps_at_most_the_cap(store: Store) -> None:
    states = StoreStates(store, cap=5)
    issued = [states.issue() for _ in range(12)]

    assert kept(store) == 5
    # The oldest went first: the newest five are the ones still valid.
    assert [states.consume(s) for s in issued] == [False] * 7 + [True] * 5
    assert oauth.STATE_CAP == 1_000


def test_a_consumed_or_expired_state_is_refused(store: Store) -> None:
    states = StoreStates(store)
    state = states.issue()
    assert states.consume(state)
    assert not states.consume(state)  # once only

    expired = StoreStates(store, expiration_seconds=-1).issue()
    assert not states.consume(expired)
    assert not states.consume("never-issued")
    assert not states.consume("")
    assert kept(store) == 0
