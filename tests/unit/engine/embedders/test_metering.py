from __future__ import annotations

import threading
from typing import Self

import pytest
import redis

from memory_core.core.keys import Keys
from memory_core.core.models import EmbeddingUsage, Usage
from memory_core.engine.embedders.metering import EmbeddingMeter, charged_to, charging, split_tokens

MODEL = "openai:text-embedding-3-small"


class _Pipeline:
    """The part of redis-py's pipeline the meter uses, recording what it would write."""

    def __init__(self, ledger: dict[str, dict[str, int]], fail: bool) -> None:
        self._ledger, self._fail = ledger, fail
        self._queued: list[tuple[str, str, int]] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def hincrby(self, key: str, name: str, amount: int) -> None:
        self._queued.append((key, name, amount))

    def execute(self) -> None:
        if self._fail:
            raise redis.ConnectionError("Redis went away")
        for key, name, amount in self._queued:
            fields = self._ledger.setdefault(key, {})
            fields[name] = fields.get(name, 0) + amount


class _Redis:
    def __init__(self, *, fail: bool = False) -> None:
        self.ledger: dict[str, dict[str, int]] = {}
        self.pipelines = 0
        self._fail = fail

    def pipeline(self, transaction: bool = True) -> _Pipeline:
        self.pipelines += 1
        return _Pipeline(self.ledger, self._fail)


@pytest.fixture
def client() -> _Redis:
    return _Redis()


@pytest.fixture
def meter(client: _Redis) -> EmbeddingMeter:
    return EmbeddingMeter(client, Keys("mc"))  # type: ignore[arg-type]  # the recording stand-in above


def test_tokens_are_split_in_proportion_to_characters_and_sum_exactly():
    assert split_tokens(100, {"acme": 300, "globex": 100}) == {"acme": 75, "globex": 25}
    shares = split_tokens(10, {"a": 1, "b": 1, "c": 1})
    assert sum(shares.values()) == 10
    assert shares == {"a": 4, "b": 3, "c": 3}  # the token left over goes to the first name: the same on every worker
    assert split_tokens(7, {"only": 12}) == {"only": 7}
    assert split_tokens(0, {"a": 5, "b": 9}) == {"a": 0, "b": 0}


@pytest.mark.parametrize("tokens", [1, 2, 3, 17, 1000, 123_457])
def test_a_split_never_loses_or_invents_a_token(tokens: int):
    weights = {"a": 13, "b": 1, "c": 200, "d": 7}
    shares = split_tokens(tokens, weights)
    assert sum(shares.values()) == tokens
    for name, weight in weights.items():  # each share is within one token of its exact share
        assert abs(shares[name] - tokens * weight / sum(weights.values())) < 1


def test_a_shared_call_is_charged_to_each_namespace_by_its_texts_characters(meter: EmbeddingMeter, client: _Redis):
    pairs = [("acme", "a" * 300), ("globex", "g" * 50), ("globex", "h" * 50)]
    with charging(pairs):
        meter.record(MODEL, 90, 2)  # the embedder cut the call into two requests
        meter.record(MODEL, 10, 1)
    assert client.pipelines == 1  # one write for the whole call
    assert client.ledger["mc:acme:usage"] == {f"embedding_tokens:{MODEL}": 75, f"embedding_texts:{MODEL}": 1}
    assert client.ledger["mc:globex:usage"] == {f"embedding_tokens:{MODEL}": 25, f"embedding_texts:{MODEL}": 2}
    acme = Usage.from_counters("acme", client.ledger["mc:acme:usage"])
    assert acme.embeddings == {MODEL: EmbeddingUsage(tokens=75, texts=1)}
    assert acme.tokens == {}  # summarizer tokens stay apart


def test_a_call_that_reported_no_usage_writes_nothing(meter: EmbeddingMeter, client: _Redis):
    with charging([("acme", "embedded by a local model")]):
        pass
    assert client.pipelines == 0


def test_tokens_of_a_call_that_failed_part_way_are_still_charged(meter: EmbeddingMeter, client: _Redis):
    def embed() -> None:
        with charging([("acme", "x" * 10)]):
            meter.record(MODEL, 4, 1)
            raise RuntimeError("the second request failed")

    with pytest.raises(RuntimeError, match="second request"):
        embed()
    assert client.ledger["mc:acme:usage"][f"embedding_tokens:{MODEL}"] == 4


def test_work_of_one_namespace_counts_the_texts_the_embedder_sent(meter: EmbeddingMeter, client: _Redis):
    with charged_to("acme"):
        meter.record(MODEL, 40, 8)
        meter.record(MODEL, 2, 1)
    assert client.ledger == {"mc:acme:usage": {f"embedding_tokens:{MODEL}": 42, f"embedding_texts:{MODEL}": 9}}


def test_usage_outside_any_tab_and_a_reindexs_usage_are_the_operators(meter: EmbeddingMeter, client: _Redis):
    meter.record(MODEL, 3, 1)  # e.g. the endpoint asked for its vector length at start
    with charging([("acme", "a tenant's text")]):
        meter.record_operator(MODEL, 5, 2)  # a reindex's target embedder, mirroring acme's write
    assert client.ledger == {"mc:!ops:usage": {f"embedding_tokens:{MODEL}": 8, f"embedding_texts:{MODEL}": 3}}


def test_tabs_are_per_thread(meter: EmbeddingMeter, client: _Redis):
    inside, release = threading.Event(), threading.Event()

    def globex() -> None:
        with charging([("globex", "g")]):
            inside.set()
            release.wait(5)
            meter.record(MODEL, 7, 1)

    thread = threading.Thread(target=globex)
    thread.start()
    inside.wait(5)
    with charging([("acme", "a")]):
        meter.record(MODEL, 5, 1)
    release.set()
    thread.join(5)
    assert client.ledger["mc:acme:usage"][f"embedding_tokens:{MODEL}"] == 5
    assert client.ledger["mc:globex:usage"][f"embedding_tokens:{MODEL}"] == 7


def test_a_ledger_that_cannot_be_written_does_not_fail_the_embedding(caplog):
    meter = EmbeddingMeter(_Redis(fail=True), Keys("mc"))  # type: ignore[arg-type]  # the recording stand-in
    with charging([("acme", "kept")]):
        meter.record(MODEL, 3, 1)
    assert "not recorded" in caplog.text
