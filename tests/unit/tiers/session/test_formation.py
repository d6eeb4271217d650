"""The pure parts of a session's formation feed: its options, batches, cursors and delayed sends."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from memory_core.core.errors import InvalidRequestError
from memory_core.core.formation import operation_id
from memory_core.core.keys import Keys
from memory_core.core.messages import NamespaceRequest
from memory_core.core.models import FORMATION_PROMPT_VERSION, ChatMessage, MessageRole, Scope
from memory_core.core.steps import Command, Operation, Send
from memory_core.tiers.session.formation import (
    MAX_DELAY,
    FormationFeed,
    _order,
    check_feed,
    closing_margin,
    delayed,
)
from memory_core.tiers.session.history import HistoryOperations, SessionMessage


def test_feed_options_are_checked_and_returned_as_floats():
    assert check_feed(None, 5, 60) == (None, 5.0, 60.0)
    assert check_feed("facts", 0.3, 0.3) == ("facts", 0.3, 0.3)


@pytest.mark.parametrize(
    ("form_into", "debounce", "max_wait", "named"),
    [
        ("facts", 0, 60, "debounce"),
        ("facts", -1, 60, "debounce"),
        ("facts", True, 60, "debounce"),
        ("facts", "5", 60, "debounce"),
        ("facts", math.inf, 60, "debounce"),
        ("facts", 5, math.nan, "max_wait"),
        ("facts", 5, MAX_DELAY + 1, "max_wait"),
        ("facts", 10, 5, "max_wait"),
        ("has:colon", 5, 60, "form_into"),
        (42, 5, 60, "form_into"),
    ],
)
def test_bad_feed_options_are_refused_naming_the_value(form_into: Any, debounce: Any, max_wait: Any, named: str):
    with pytest.raises(InvalidRequestError, match=named) as caught:
        check_feed(form_into, debounce, max_wait)
    assert str(caught.value).startswith(named)


def test_max_wait_below_debounce_names_both():
    with pytest.raises(InvalidRequestError, match=r"max_wait must be at least debounce \(10s\), got 5"):
        check_feed("facts", 10, 5)


def test_the_closing_margin_is_a_quarter_of_the_debounce_and_at_most_a_second():
    assert closing_margin(0.3) == pytest.approx(0.075)
    assert closing_margin(5.0) == 1.0


def test_stream_cursors_order_as_numbers_not_text():
    assert _order("999-0") < _order("1000-0")
    assert _order("1000-2") < _order("1000-10")
    assert sorted(["1000-10", "999-5", "1000-2"], key=_order) == ["999-5", "1000-2", "1000-10"]


def _message(content: str, *, role: MessageRole = MessageRole.USER, cursor: str = "1-0") -> SessionMessage:
    return SessionMessage(
        id=f"m-{cursor}",
        created_at=datetime(2025, 1, 1, tzinfo=UTC),
        message=ChatMessage(role=role, content=content),
        cursor=cursor,
    )


def _feed(max_messages: int) -> FormationFeed:
    return FormationFeed(
        cast(HistoryOperations, None),  # batches read no Redis
        keys=Keys("t"),
        scope=Scope("ns", "key", "facts"),
        session_id="s",
        debounce=0.3,
        max_wait=1.0,
        model="claude-test",
        max_messages=max_messages,
        operation_ttl=60,
        remember=lambda *args, **kwargs: cast(Any, None),
        publish=lambda *args: None,
    )


def test_a_batch_holds_at_most_max_messages_with_text_and_its_op_id_is_formations_own():
    entries = [_message(f"fact {i}", cursor=f"{i}-0") for i in range(1, 6)]
    entries.insert(2, _message("  ", role=MessageRole.ASSISTANT, cursor="2-1"))  # tool calls only: nothing to form
    batch, more = _feed(3)._batch(entries)
    assert [e.cursor for e in batch.entries] == ["1-0", "2-0", "2-1", "3-0"]
    assert more
    assert [e.id for e in batch.formable] == ["m-1-0", "m-2-0", "m-3-0"]
    scope = Scope("ns", "key", "facts")
    assert batch.op_id == operation_id(scope, ["m-1-0", "m-2-0", "m-3-0"], FORMATION_PROMPT_VERSION, "claude-test")
    whole, more = _feed(10)._batch(entries)
    assert len(whole.entries) == 6
    assert not more
    blank, _ = _feed(3)._batch([_message(" ", cursor="9-0")])
    assert blank.op_id == ""  # nothing to form: the state moves past it without an operation


class _Request(NamespaceRequest):
    pass


def test_delayed_publishes_each_send_with_the_countdown_and_passes_other_steps_through():
    published: list[tuple[Any, ...]] = []
    request = _Request(namespace="ns")

    def operation() -> Operation[str]:
        first = yield Command(lambda r: "read")
        task_id = yield Send("memory.form", request, "{}")
        return f"{first}:{task_id}"

    def publish(*args: Any) -> str:
        published.append(args)
        return "task-1"

    steps = delayed(operation(), publish, 1.5)
    read = next(steps)
    assert isinstance(read, Command)
    sending = steps.send(read.call(None))
    assert isinstance(sending, Command)
    assert published == []  # published when the driver performs the step
    with pytest.raises(StopIteration) as done:
        steps.send(sending.call(None))
    assert done.value.value == "read:task-1"
    assert published == [("memory.form", request, "{}", 1.5)]


def test_delayed_hands_a_failed_step_back_to_the_operation():
    def operation() -> Operation[str]:
        try:
            yield Send("memory.form", _Request(namespace="ns"), "{}")
        except ConnectionError as exc:
            return f"handled {exc}"
        return "not reached"

    steps = delayed(operation(), lambda *args: None, 1.0)
    next(steps)
    with pytest.raises(StopIteration) as done:
        steps.throw(ConnectionError("broker down"))
    assert done.value.value == "handled broker down"
