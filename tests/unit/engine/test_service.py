"""MemoryService with the in-memory store and the hashing embedder: the worker's logic without a worker."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_core.core.errors import InvalidRequestError, MemorySetNotFound, SetDefinitionConflict
from memory_core.core.models import MemorySet
from memory_core.core.settings import LimitsSettings
from memory_core.engine.embedders.hashing import HashingEmbedder
from memory_core.engine.service import MemoryService
from memory_core.engine.stores.memory import InMemoryVectorStore


@pytest.fixture
def service() -> MemoryService:
    return MemoryService(store=InMemoryVectorStore(), embedder=HashingEmbedder(), limits=LimitsSettings())


def _scope(**extra):
    return {"v": 1, "namespace": "ns", "key": "k", **extra}


def _add(items):
    now = datetime.now(UTC).isoformat()
    return _scope(
        set_name="notes",
        items=[{"id": i, "value": v, "created_time": now, "seq": n} for n, (i, v) in enumerate(items)],
    )


def _create(service: MemoryService, **definition):
    service.create_set(_scope(definition=MemorySet(name="notes", **definition).model_dump(mode="json")))


def test_create_is_get_or_create_and_conflicts_on_a_different_definition(service: MemoryService):
    _create(service, capacity=5)
    _create(service, capacity=5)
    with pytest.raises(SetDefinitionConflict):
        _create(service, capacity=6)


def test_a_definition_conflict_names_each_differing_field_and_the_ways_out(service: MemoryService):
    _create(service, capacity=5, compaction_config={"model": "claude-a", "limit": 3})
    with pytest.raises(SetDefinitionConflict) as raised:
        _create(service, capacity=6, compaction_config={"model": "claude-b", "limit": 3})
    message = str(raised.value)
    assert message == (
        "memory set 'notes' of namespace 'ns', key 'k' already exists with another definition: "
        "capacity is 5 there, 6 asked; compaction_config.model is 'claude-a' there, 'claude-b' asked. "
        "Use the existing definition (get_memory_set('notes'), or get_or_create_memory_set with its values), "
        "delete the set and create it anew (its items go with it), or choose another set name"
    )
    assert "dedup_threshold" not in message  # fields that agree are not printed


def test_a_definition_conflict_cuts_long_values_short(service: MemoryService):
    _create(service, compaction_config={"prompt": "a" * 500})
    with pytest.raises(SetDefinitionConflict, match="compaction_config.prompt is 'aaa") as raised:
        _create(service, compaction_config={"prompt": "b" * 500})
    assert len(str(raised.value)) < 500


def test_add_requires_the_set(service: MemoryService):
    with pytest.raises(MemorySetNotFound, match="notes"):
        service.add(_add([("a", "x")]))


def test_add_then_get_and_search(service: MemoryService):
    _create(service)
    service.add(_add([("a", "green tea"), ("b", "tokyo flight")]))
    assert [i.id for i in service.get(_scope(set_name="notes")).items] == ["a", "b"]
    hits = service.search(_scope(set_name="notes", query="green tea", limit=1)).items
    assert [h.id for h in hits] == ["a"]


def test_a_repeated_id_in_one_add_keeps_the_last_value(service: MemoryService):
    _create(service)
    service.add(_add([("a", "first"), ("a", "second")]))
    assert [i.value for i in service.get(_scope(set_name="notes")).items] == ["second"]


def test_the_worker_rechecks_types_and_limits_of_raw_messages(service: MemoryService):
    _create(service)
    with pytest.raises(InvalidRequestError, match="holds str"):
        service.add(_add([("a", {"role": "user", "content": "x"})]))
    with pytest.raises(InvalidRequestError, match="v"):
        service.add({**_add([("a", "x")]), "v": 2})
    with pytest.raises(InvalidRequestError, match="namespace"):
        service.add({**_add([("a", "x")]), "namespace": "a:b"})
    with pytest.raises(InvalidRequestError, match="limit 500"):
        service.search(_scope(set_name="notes", query="x", limit=500))


def test_delete_counts_what_existed(service: MemoryService):
    _create(service)
    service.add(_add([("a", "x"), ("b", "y")]))
    assert service.delete(_scope(set_name="notes", ids=["a", "zzz"])).count == 1
    assert service.delete(_scope(set_name="notes")).count == 1
    assert service.size(_scope(set_name="notes")).count == 0


def test_delete_set_reports_whether_it_existed(service: MemoryService):
    _create(service)
    assert service.delete_set(_scope(set_name="notes")).count == 1
    assert service.delete_set(_scope(set_name="notes")).count == 0


def test_a_redactor_cleans_values_and_metadata_before_they_are_embedded_or_stored():
    from memory_core.core.models import ChatMessage
    from memory_core.engine.redaction import Redactor

    embedded: list[str] = []

    class RecordingEmbedder(HashingEmbedder):
        def embed(self, texts):
            embedded.extend(texts)
            return super().embed(texts)

    store = InMemoryVectorStore()
    service = MemoryService(store=store, embedder=RecordingEmbedder(), limits=LimitsSettings(), redactor=Redactor())
    _create(service)
    request = _add([("a", "mail alice@example.com or call 555 123 4567")])
    request["items"][0]["metadata"] = {"contact": "bob@example.org"}
    service.add(request)
    (item,) = service.get(_scope(set_name="notes")).items
    assert item.value == "mail [EMAIL] or call [PHONE]"
    assert item.additional_metadata == {"contact": "[EMAIL]"}
    assert embedded == ["mail [EMAIL] or call [PHONE]"]
    service.create_set(_scope(definition=MemorySet(name="chat", item_type=ChatMessage).model_dump(mode="json")))
    chat = _add([("m", {"role": "user", "content": "I am at carol@example.net"})])
    chat["set_name"] = "chat"
    service.add(chat)
    (message,) = service.get(_scope(set_name="chat")).items
    assert message.value == ChatMessage(content="I am at [EMAIL]")


class _Reversing:
    """A reranker that ranks the candidates in reverse of the order it got them, and records each call."""

    model_name = "stub"

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], int]] = []

    def rerank(self, query: str, documents, top_n: int):
        self.calls.append((query, list(documents), top_n))
        return [(i, float(i)) for i in reversed(range(len(documents)))][:top_n]

    def close(self) -> None:
        pass


def _reranking(candidates: int) -> tuple[MemoryService, _Reversing]:
    reranker = _Reversing()
    service = MemoryService(
        store=InMemoryVectorStore(),
        embedder=HashingEmbedder(),
        limits=LimitsSettings(),
        reranker=reranker,
        rerank_candidates=candidates,
    )
    _create(service)
    service.add(_add([(f"i{n}", f"green tea note {n}") for n in range(6)]))
    return service, reranker


def _search(service: MemoryService, **extra) -> list[tuple[str, float | None]]:
    hits = service.search(_scope(set_name="notes", query="green tea", limit=2, mode="dense", **extra)).items
    return [(hit.id, hit.score) for hit in hits]


def test_a_reranked_search_scores_the_candidates_in_one_call_and_keeps_the_best_limit():
    service, reranker = _reranking(candidates=4)
    fused = [item_id for item_id, _ in _search(service, rerank=False)]
    assert reranker.calls == []  # turned off for that search: the reranker is not asked
    wider = service.search(_scope(set_name="notes", query="green tea", limit=4, mode="dense", rerank=False)).items
    reranker.calls.clear()
    reranked = _search(service)
    ((query, documents, top_n),) = reranker.calls
    assert (query, top_n) == ("green tea", 2)
    assert documents == [str(item.value) for item in wider]  # the best 4 fused hits, in their order
    # The reranker's order and scores: the 4th and 3rd fused hits first.
    assert reranked == [(wider[3].id, 3.0), (wider[2].id, 2.0)]
    assert [item_id for item_id, _ in reranked] != fused


def test_a_reranked_search_takes_at_least_its_limit_as_candidates():
    service, reranker = _reranking(candidates=1)
    _search(service, rerank=True)
    assert len(reranker.calls[0][1]) == 2


def test_asking_for_reranking_where_there_is_no_reranker_is_refused(service: MemoryService):
    _create(service)
    with pytest.raises(InvalidRequestError, match=r"rerank=True.*MEMORY_RERANK__MODEL"):
        service.search(_scope(set_name="notes", query="q", limit=1, rerank=True))
    assert service.search(_scope(set_name="notes", query="q", limit=1, rerank=False)).items == []
