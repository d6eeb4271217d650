from memory_core.core.dispatch import celery_message


def test_messages_follow_celery_protocol_2_and_hide_memory_text():
    body, headers = celery_message("memory.add", "id-1", {"request": {"items": ["secret"]}}, '{"items": 1}')
    args, kwargs, embed = body
    assert args == []
    assert kwargs == {"request": {"items": ["secret"]}}
    assert set(embed) == {"callbacks", "errbacks", "chain", "chord"}
    assert headers["task"] == "memory.add"
    assert headers["id"] == headers["root_id"] == "id-1"
    assert "secret" not in headers["kwargsrepr"] + headers["argsrepr"]
