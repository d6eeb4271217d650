from memory_core.errors import MemorySetNotFound
from workers.base import error_info, request_namespace


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
