"""The memory-core entry point as a newcomer meets it: exit codes, help texts and the lines failures print."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory_core.cli import EXIT_USAGE, main
from memory_core.cli.status import _status_rows


@pytest.fixture(autouse=True)
def _no_env_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the checkout is read


@pytest.mark.parametrize(
    ("variable", "value"),
    [("MEMORY_REDACTION__KINDS", "email,phone"), ("MEMORY_QUOTAS__NAMESPACES", "acme=100")],
)
def test_a_list_or_object_setting_that_is_not_json_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, value: str
):
    monkeypatch.setenv(variable, value)
    assert main(["status"]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"memory-core status: invalid settings: {variable} is not JSON")
    assert "takes JSON" in line


def test_an_embedder_spec_error_exits_2_with_the_spec_meant(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setenv("MEMORY_EMBEDDER__MODEL", "fastembd:BAAI/bge-small-en-v1.5")
    assert main(["status"]) == EXIT_USAGE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "did you mean 'fastembed:BAAI/bge-small-en-v1.5'?" in line


def test_worker_and_beat_help_say_that_celery_options_pass_through(capsys: pytest.CaptureFixture[str]):
    for command in ("worker", "beat"):
        with pytest.raises(SystemExit) as done:
            main([command, "--help"])
        assert done.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        assert f"is passed to `celery {command}` as it is" in text
        assert f"`celery -A memory_core.workers.app {command} --help` lists them" in text


def test_models_pull_json_answers_a_failure_with_a_json_error_object(capsys: pytest.CaptureFixture[str]):
    assert main(["models", "pull", "fastembd:BAAI/bge-small-en-v1.5", "--json"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert answer["spec"] == "fastembd:BAAI/bge-small-en-v1.5"
    assert "did you mean 'fastembed:BAAI/bge-small-en-v1.5'?" in answer["error"]
    assert err.startswith("memory-core models: ")  # the line on stderr stays


def test_models_pull_takes_the_shipped_model_by_the_name_status_shows(capsys: pytest.CaptureFixture[str]):
    assert main(["models", "pull", "minilm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"spec": "minilm", "source": "shipped"}


def _report(reindex: dict[str, object] | None, rerankers: list[str]) -> dict[str, object]:
    store = {
        "backend": "edge",
        "location": "/data",
        "host": "h",
        "bytes": None,
        "embedders": [],
        "rerankers": rerankers,
    }
    return {"redis": {"url": "redis://r", "answers": True}, "processes": {}, "stores": [store], "reindex": reindex}


def test_status_rows_name_the_workers_reranker_and_a_reindex_that_needs_seeing_to():
    reindex = {
        "state": "building",
        "source": "minilm:all-MiniLM-L6-v2",
        "target": "hashing:hashing-384",
        "target_spec": "hashing",
        "source_collection": "a",
        "collection": "b",
        "total": 10,
        "scanned": 4,
    }
    rows = _status_rows(_report(reindex, ["http:http://127.0.0.1:9/rerank"]))
    assert "reranker http:http://127.0.0.1:9/rerank" in rows
    assert "reindex building: a -> b" in rows
    assert _status_rows(_report(None, [""]))[-1] == "reranker off"
    aborted = _status_rows(_report({**reindex, "state": "aborted"}, []))
    assert not [row for row in aborted if row.startswith("reindex")]  # history, not something to see to
    failed = _status_rows(_report({"error": "ReplyTimeout: no reply"}, []))
    assert failed[-1] == "reindex  unknown: ReplyTimeout: no reply"
