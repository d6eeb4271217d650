from memory_core.core.errors import MemorySetNotFound, TransientEmbedderError
from memory_core.workers.base import (
    OUTAGE_HEADER,
    Outage,
    error_info,
    kept_while_retrying,
    outage_of,
    outline,
    request_namespace,
)


def test_replies_go_only_to_valid_namespaces():
    assert request_namespace({"request": {"namespace": "acme"}}) == "acme"
    for bad in (None, {}, {"request": "x"}, {"request": {"namespace": "a:b"}}, {"request": {"namespace": "*"}}):
        assert request_namespace(bad) is None


def test_typed_errors_pass_through_and_others_reveal_only_their_type():
    assert error_info(MemorySetNotFound("set 'x' missing")).model_dump() == {
        "type": "MemorySetNotFound",
        "message": "set 'x' missing",
    }
    info = error_info(KeyError("internal detail"))
    assert info.type == "MemoryCoreError"
    assert "internal detail" not in info.message


def test_what_celery_sees_of_a_result_is_its_shape_without_text():
    result = {"items": [{"value": "my PIN is 4321", "score": 0.9}], "status": "ok", "count": 2, "done": True}
    shown = outline(result)
    assert shown == {"items": "[1]", "status": "str[2]", "count": 2, "done": True}
    assert "4321" not in repr(shown)


def test_an_outage_header_that_is_not_ours_counts_as_no_outage():
    class Request:
        pass

    request = Request()
    assert outage_of(request) is None
    for bad in (
        "x",
        {"since": "soon", "retries": 1},
        {"since": 1.0, "retries": -1},
        {"since": float("nan"), "retries": 0},
    ):
        setattr(request, OUTAGE_HEADER, bad)
        assert outage_of(request) is None
    setattr(request, OUTAGE_HEADER, {"since": 1.5, "retries": 3, "told": True})
    assert outage_of(request) == Outage(since=1.5, retries=3, told=True)


def test_a_caller_told_the_write_goes_on_is_told_until_when_and_what_then():
    said = kept_while_retrying(TransientEmbedderError("the endpoint is failing (HTTP 500)"), 3600.0, 5, "acme")
    assert said == (
        "the embedding endpoint is unavailable (the endpoint is failing (HTTP 500)); this call stops waiting, but the "
        "write is kept and goes on retrying until 1970-01-01 01:00:00 UTC (5 min after its first failure, "
        "MEMORY_EMBEDDER__OUTAGE_RETRY), then it is dead-lettered (replay with `memory-core dead-letters replay --namespace acme`)"
    )
