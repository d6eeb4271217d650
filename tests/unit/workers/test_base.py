from memory_core.core.errors import MemorySetNotFound
from memory_core.workers.base import error_info, outline, request_namespace


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
