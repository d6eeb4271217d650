"""Session memory end to end: Redis history, each strategy against LangChain's documented behaviour, promotion.

Summary folds run in the worker through the real anthropic SDK against the fake Messages API.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY

from memory_core import ChatMessage, InvalidRequestError, MemoryClient, MessageRole, SetDefinitionConflict
from memory_core.core import routing
from memory_core.core.errors import SummarizerUnavailable
from memory_core.core.settings import Settings
from memory_core.testing.fake_anthropic import FakeAnthropic
from memory_core.tiers.session import combined
from memory_core.workers import services
from memory_core.workers.app import create_app
from tests.integration.conftest import make_settings
from tests.integration.in_thread import in_thread_worker
from tests.integration.waiting import wait_for


def _talk(memory, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        memory.save({"input": f"question {i} about the garden"}, {"output": f"answer {i}: water the roses"})


def test_buffer_returns_every_message_with_langchain_prefixes(client: MemoryClient, namespace: str):
    memory = client.session(namespace, "s1").buffer()
    memory.save({"input": "hi, I am Bob"}, {"output": "hello Bob"})
    memory.save({"input": "what is my name?"}, {"output": "Bob"})
    assert memory.memory_variables == ["history"]
    assert memory.load({"input": "next"}) == {
        "history": "Human: hi, I am Bob\nAI: hello Bob\nHuman: what is my name?\nAI: Bob"
    }
    messages = client.session(namespace, "s1").buffer(return_messages=True, memory_key="chat").load()["chat"]
    assert messages == [
        ChatMessage(role=MessageRole.USER, content="hi, I am Bob"),
        ChatMessage(role=MessageRole.ASSISTANT, content="hello Bob"),
        ChatMessage(role=MessageRole.USER, content="what is my name?"),
        ChatMessage(role=MessageRole.ASSISTANT, content="Bob"),
    ]
    custom = client.session(namespace, "s1").buffer(human_prefix="User", ai_prefix="Bot")
    assert custom.load()["history"].startswith("User: hi, I am Bob\nBot: hello Bob")


def test_messages_carry_ids_and_timestamps_and_the_history_is_capped(client: MemoryClient, namespace: str):
    session = client.session(namespace, "s2", max_messages=6, promote="none")
    _talk(session.buffer(), 5)
    entries = session.history.entries()
    assert len(entries) == 6  # the cap keeps the newest
    assert entries[0].content == "question 2 about the garden"
    assert len({e.id for e in entries}) == 6
    assert all(e.created_at.tzinfo is not None for e in entries)


def test_window_keeps_exactly_the_last_k_exchanges(client: MemoryClient, namespace: str):
    session = client.session(namespace, "s3")
    _talk(session.window(k=2), 5)
    loaded = session.window(k=2, return_messages=True).load()["history"]
    assert [m.content for m in loaded] == [
        "question 3 about the garden",
        "answer 3: water the roses",
        "question 4 about the garden",
        "answer 4: water the roses",
    ]
    assert session.window(k=0).load()["history"] == ""
    assert len(session.window(k=10, return_messages=True).load()["history"]) == 10


def test_token_buffer_never_exceeds_its_budget_and_keeps_the_newest(client: MemoryClient, namespace: str):
    session = client.session(namespace, "s4")
    _talk(session.buffer(), 12)
    for budget in (1, 9, 10, 25, 60, 10_000):
        memory = session.token_buffer(max_tokens=budget)
        text = memory.load()["history"]
        assert client.tokens.count(text) <= budget
        kept = session.token_buffer(max_tokens=budget, return_messages=True).load()["history"]
        everything = session.history.messages
        assert kept == everything[len(everything) - len(kept) :]  # a suffix: the newest
        if len(kept) < len(everything):  # and the longest one that fits
            one_more = memory.buffer_string(everything[len(everything) - len(kept) - 1 :])
            assert client.tokens.count(one_more) > budget
    assert session.token_buffer(max_tokens=10_000).stats().messages_loaded == 24


def test_summary_replaces_old_messages_with_a_summary_from_the_worker(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic
):
    session = client.session(namespace, "s5")
    memory = session.summary(max_tokens=40, model="session-model")
    _talk(memory, 6)
    loaded = memory.load({"input": "more"})["history"]
    first, *rest = loaded.split("\n")
    assert first.startswith("System: Summary of items")
    assert "question 0" not in loaded  # folded into the summary
    assert client.tokens.count(memory.buffer_string(session.history.messages[-len(rest) :])) <= 40
    messages = session.summary(max_tokens=40, return_messages=True).load()["history"]
    assert messages[0].role == MessageRole.SYSTEM
    stats = memory.stats()
    assert stats.summarized_messages >= 6
    assert stats.summarized_messages + len(rest) == 12
    assert stats.compression_ratio is not None
    assert stats.compression_ratio > 1
    calls = [r for r in fake_anthropic.requests if r.get("model") == "session-model"]
    assert calls, "the fold did not go through the summarizer"
    assert "Summary so far" in str(calls[-1]["messages"])  # progressive: the previous summary is folded in
    assert client.usage(namespace).tokens["session-model"].calls == len(calls)


def test_entity_memory_remembers_what_was_said_about_each_entity(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic
):
    memory = client.session(namespace, "s6").entity(k=1)
    memory.save({"input": "Deven and Sam are working on a hackathon project"}, {"output": "That sounds fun!"})
    memory.save({"input": "Sam's favourite language is Rust. It is fast."}, {"output": "Noted."})
    loaded = memory.load({"input": "What does Sam like?"})
    assert set(loaded) == {"history", "entities"}
    assert loaded["history"] == "Human: Sam's favourite language is Rust. It is fast.\nAI: Noted."
    assert set(loaded["entities"]) == {"Sam"}
    assert "hackathon" in loaded["entities"]["Sam"]
    assert "Rust" in loaded["entities"]["Sam"]
    assert "Deven" in memory.session.entities()
    assert memory.load({"input": "tell me about deven"})["entities"].keys() == {"Deven"}
    assert memory.stats().entities >= 3  # Deven, Sam, Rust
    # With an Anthropic key configured (as here) the worker asked Claude, through the SDK, with the known notes.
    asked = [r for r in fake_anthropic.requests if r.get("tool_choice", {}).get("name") == "record_entities"]
    assert len(asked) == 2
    assert '"name": "Sam"' in asked[1]["messages"][0]["content"]  # what was known of Sam went with the second


def test_an_unusable_entity_reply_changes_nothing_and_is_retried(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic
):
    memory = client.session(namespace, "s6b").entity(k=1)
    memory.save({"input": "Mira lives in Paris"}, {"output": "ok"})
    before = memory.session.entities()
    fake_anthropic.behave("http_500", failures=1)  # one failure, then the retry succeeds
    memory.save({"input": "Mira moved to Rome"}, {"output": "ok"})
    after = memory.session.entities()
    assert "Rome" in after["Mira"]
    assert "Paris" in after["Mira"]
    assert before["Mira"] != after["Mira"]


def test_vector_memory_retrieves_relevant_exchanges_from_earlier_sessions(client: MemoryClient, namespace: str):
    earlier = client.session(namespace, "monday", key="user-1").vector(k=1)
    earlier.save({"input": "my favourite sport is football"}, {"output": "good to know"})
    earlier.save({"input": "I had pasta for dinner"}, {"output": "sounds tasty"})
    later = client.session(namespace, "tuesday", key="user-1").vector(k=1)
    assert later.load({"input": "which sport do I like?"}) == {
        "history": "input: my favourite sport is football\noutput: good to know"
    }
    stranger = client.session(namespace, "tuesday", key="user-2").vector(k=1)
    assert stranger.load({"input": "which sport do I like?"}) == {"history": ""}


def test_combined_rejects_clashing_variables_and_saves_each_exchange_once(client: MemoryClient, namespace: str):
    session = client.session(namespace, "s8")
    with pytest.raises(InvalidRequestError, match="'history' is returned by both"):
        combined(session.buffer(), session.window(k=1))
    both = combined(session.window(k=1, memory_key="recent"), session.vector(k=1, memory_key="relevant"))
    assert both.memory_variables == ["recent", "relevant"]
    both.save({"input": "the door code is 4411"}, {"output": "saved"})
    both.save({"input": "call mum on Sunday"}, {"output": "ok"})
    assert len(session.history) == 4  # appended once, not once per strategy
    loaded = both.load({"input": "what is the door code?"})
    assert loaded["recent"] == "Human: call mum on Sunday\nAI: ok"
    assert "4411" in loaded["relevant"]


def test_input_and_output_keys_resolve_as_in_langchain(client: MemoryClient, namespace: str):
    memory = client.session(namespace, "s9").buffer()
    with pytest.raises(InvalidRequestError, match="one input key expected"):
        memory.save({"question": "a", "context": "b"}, {"output": "c"})
    memory.save({"question": "a", "history": "ignored", "stop": ["\n"]}, {"text": "c"})
    memory.save({"question": "a2"}, {"text": "c2", "output": "chosen"})
    keyed = client.session(namespace, "s9").buffer(input_key="context", output_key="text")
    keyed.save({"question": "a3", "context": "b3"}, {"text": "c3", "output": "x"})
    assert memory.load()["history"].split("\n") == [
        "Human: a",
        "AI: c",
        "Human: a2",
        "AI: chosen",
        "Human: b3",
        "AI: c3",
    ]
    with pytest.raises(InvalidRequestError, match="must be a str"):
        memory.save({"input": 3}, {"output": "x"})


def test_promoted_messages_outlive_the_session_keys(client: MemoryClient, namespace: str, raw_redis: redis.Redis):
    session = client.session(namespace, "short-lived", key="user-7", ttl=1)
    _talk(session.buffer(), 3)
    sessions_set = client.long_term(namespace, "user-7").get_or_create_memory_set(
        "sessions", item_type=ChatMessage, capacity=10_000
    )
    wait_for(lambda: sessions_set.size() == 6, 30)
    time.sleep(1.5)
    assert not any(raw_redis.exists(k) for k in session.keys.all)  # the Redis TTL ran out
    assert client.session(namespace, "short-lived", key="user-7").buffer().load()["history"] == ""
    promoted = sessions_set.get()
    assert [item.value.content for item in promoted][:2] == ["question 0 about the garden", "answer 0: water the roses"]  # type: ignore[union-attr]
    assert {item.additional_metadata["session_id"] for item in promoted} == {"short-lived"}
    found = sessions_set.search("roses", limit=1)
    assert found
    assert "roses" in str(found[0].value)


def test_a_changed_promotion_capacity_keeps_existing_sessions_saving(
    client: MemoryClient, settings: Settings, namespace: str
):
    _talk(client.session(namespace, "before", key="user-8").buffer(), 1)
    changed = settings.model_copy(update={"session": settings.session.model_copy(update={"promotion_capacity": 50})})
    with MemoryClient(changed) as restarted:  # an app restarted with another MEMORY_SESSION__PROMOTION_CAPACITY
        _talk(restarted.session(namespace, "after", key="user-8").buffer(), 1)
        sessions_set = restarted.long_term(namespace, "user-8").get_memory_set("sessions")
        assert sessions_set.capacity == 10_000  # the set keeps the definition it was made with
        wait_for(lambda: sessions_set.size() == 4, 30)
        # A set of another item type under the session set's name is a real conflict, and says so.
        restarted.long_term(namespace, "user-9").get_or_create_memory_set("sessions", item_type=str)
        with pytest.raises(SetDefinitionConflict, match="holds str items, not ChatMessage"):
            restarted.session(namespace, "other", key="user-9").buffer().save({"input": "hi"}, {"output": "hello"})


def test_finish_folds_the_session_into_a_promoted_summary(client: MemoryClient, namespace: str):
    session = client.session(namespace, "s10", key="user-8", promote="summary")
    _talk(session.buffer(), 3)
    ids = session.finish()
    assert ids == ["summary-s10"]
    (item,) = session.promotion_set().get()
    assert item.value.role == MessageRole.SYSTEM  # type: ignore[union-attr]
    assert item.value.content.startswith("Summary of items")  # type: ignore[union-attr]
    assert item.additional_metadata == {"session_id": "s10", "kind": "summary", "messages": 6}


def test_sessions_are_scoped_by_namespace_and_names_are_checked(client: MemoryClient, namespace: str):
    client.session(namespace, "shared").buffer().save({"input": "secret"}, {"output": "ok"})
    assert client.session(f"{namespace}-x", "shared").buffer().load()["history"] == ""
    assert client.session(namespace, "shared", key="someone-else").buffer().load()["history"] == ""
    for bad in ("a:b", "*", ".."):
        with pytest.raises(InvalidRequestError):
            client.session(bad, "s")
        with pytest.raises(InvalidRequestError):
            client.session(namespace, bad)
    with pytest.raises(InvalidRequestError, match="promote"):
        client.session(namespace, "s", promote="everything")  # type: ignore[arg-type]


def test_a_summary_fold_waits_out_a_busy_lock(settings: Settings, namespace: str, client: MemoryClient):
    session = client.session(namespace, "s11")
    _talk(session.buffer(), 2)
    raw = redis.Redis.from_url(settings.redis.url)
    raw.set(session.keys.lock, "someone", px=1500)  # another fold holds the session
    started = time.monotonic()
    report = session.fold(0)
    raw.close()
    assert report is not None
    assert report.status == "folded"
    assert time.monotonic() - started >= 1.4  # it waited for the holder instead of running alongside


def test_an_entity_failure_leaves_the_exchange_stored_once_and_is_caught_up_by_the_next_save(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic
):
    memory = client.session(namespace, "s6c").entity(k=2)
    fake_anthropic.behave("garbage")  # every entity reply is unusable: SummarizerError in the worker
    memory.save({"input": "Ines works at the observatory"}, {"output": "ok"})  # does not raise
    assert memory.stats().entity_error is not None
    assert len(memory.session.history) == 2  # the exchange, once: nothing for a retrying agent to repeat
    fake_anthropic.behave("ok")
    memory.save({"input": "Tomas plays the cello"}, {"output": "nice"})
    assert memory.stats().entity_error is None
    assert {"Ines", "Tomas"} <= set(memory.session.entities())  # the failed exchange's entities caught up
    assert len(memory.session.history) == 4


def test_a_summary_failure_leaves_the_exchange_stored_once_and_is_reported_apart(
    client: MemoryClient, namespace: str, fake_anthropic: FakeAnthropic
):
    memory = client.session(namespace, "s12").summary(max_tokens=30)
    fake_anthropic.behave("garbage")  # every summary reply is unusable: SummarizerError in the worker
    _talk(memory, 3)  # over the budget from the second save on: every fold fails, no save raises
    stats = memory.stats()
    assert stats.summary_error is not None
    assert stats.summary_error.startswith("SummarizerError: ")
    assert len(memory.session.history) == 6  # each exchange once: nothing for a retrying agent to repeat
    assert stats.summarized_messages == 0  # nothing was dropped unsummarized either
    fake_anthropic.behave("ok")
    _talk(memory, 1, start=3)
    stats = memory.stats()
    assert stats.summary_error is None
    assert stats.summarized_messages >= 4  # the next save folded, oldest first, what the failed ones could not
    assert len(memory.session.history) == 8


def test_retrying_a_save_that_failed_after_storing_its_exchange_stores_it_once(client: MemoryClient, namespace: str):
    session = client.session(namespace, "s13", promote="none")
    long_term = client.long_term(namespace, session.key)
    long_term.get_or_create_memory_set("exchanges", ChatMessage)  # the vector index's set, of another item type
    memory = session.vector(k=2)
    exchange = ({"input": "where are the spare keys?"}, {"output": "under the blue pot"})
    with pytest.raises(SetDefinitionConflict, match="pick another set_name"):
        memory.save(*exchange)  # fails in the follow-up, after the exchange was stored
    assert long_term.delete_memory_set("exchanges")  # the cause is fixed
    memory.save(*exchange)  # and the agent retries the same save
    assert [m.content for m in session.history.messages] == ["where are the spare keys?", "under the blue pot"]
    memory.save(*exchange)  # said again after a successful save: a new exchange
    assert len(session.history) == 4
    assert session.exchange_set("exchanges").size() == 2


@pytest.fixture
def refused_summarizer(redis_url: str, tmp_path: Path) -> Iterator[MemoryClient]:
    """A worker (queues of its own) whose Anthropic endpoint is a closed loopback port, with SDK retries on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends: connecting there is refused
    settings = make_settings(
        redis_url,
        tmp_path / "qdrant",
        redis={"url": redis_url, "key_prefix": "mcrefused"},
        embedder={"model": "hashing"},
        anthropic={"api_key": "sk-ant-test-not-real", "base_url": f"http://127.0.0.1:{port}", "max_retries": 3},
    )
    app = create_app(settings)
    with in_thread_worker(app, concurrency=2), MemoryClient(settings) as client:
        yield client
    services.close(app)


def _retries(task: str) -> float:
    return REGISTRY.get_sample_value("memory_core_tasks_total", {"task": task, "state": "retry"}) or 0.0


def test_a_summarizer_endpoint_that_refuses_connections_fails_the_fold_at_once(
    refused_summarizer: MemoryClient, caplog: pytest.LogCaptureFixture
):
    session = refused_summarizer.session("acme", "s14", promote="none")
    memory = session.summary(max_tokens=10)
    retries = _retries(routing.SESSION_FOLD)
    caplog.set_level(logging.INFO, logger="anthropic")
    memory.save({"input": "a question long enough to need a fold"}, {"output": "an answer just as long"})
    error = memory.stats().summary_error
    assert error is not None
    assert error.startswith("SummarizerUnavailable: the Anthropic endpoint refused the connection")
    assert len(session.history) == 2  # the exchange is stored, once
    assert _retries(routing.SESSION_FOLD) == retries  # the task did not back off and retry
    # No SDK backoff either (0.5 s, 1 s, 2 s with max_retries=3): the SDK logs each retry it schedules.
    assert not [r for r in caplog.records if r.getMessage().startswith("Retrying request")]
    with pytest.raises(SummarizerUnavailable, match="refused"):
        session.fold(10)  # typed for a direct caller too
    entities = session.entity(k=1)
    entities.save({"input": "Ines works at the observatory"}, {"output": "ok"})
    assert (entities.stats().entity_error or "").startswith("SummarizerUnavailable: ")
