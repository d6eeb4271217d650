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


def test_a_countdown_becomes_the_eta_celery_runs_the_task_at():
    from datetime import UTC, datetime, timedelta

    before = datetime.now(UTC)
    _, headers = celery_message("memory.form", "id-2", {}, "{}", countdown=5.0)
    eta = datetime.fromisoformat(headers["eta"])
    assert eta.tzinfo is not None
    assert before + timedelta(seconds=5) <= eta <= datetime.now(UTC) + timedelta(seconds=5)
    assert celery_message("memory.form", "id-3", {}, "{}")[1]["eta"] is None
    assert celery_message("memory.form", "id-4", {}, "{}", countdown=0)[1]["eta"] is None
