"""ops/eval --formation: without a real model it says so and stops; run against the fake Messages API's rules (each
user turn becomes a fact), the formed facts' provenance names the evidence turns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .processes import ROOT, PrivateRedis

EVAL = [sys.executable, str(ROOT / "ops" / "eval.py")]
SKIPPED = "ops/eval --formation: skipped: no model to form with"


def _write(folder: Path) -> None:
    """One conversation of two sessions in LongMemEval's schema (user and assistant turns), three questions."""
    turns = [
        ("s1:0", 0, "user: I adopted a grey cat named Pixel last week"),
        ("s1:1", 0, "assistant: Congratulations! What does Pixel like to eat?"),
        ("s1:2", 0, "user: Mostly salmon pate, she is picky"),
        ("s2:0", 1, "user: My sister moved to Valparaiso for her new job"),
        ("s2:1", 1, "assistant: Valparaiso is a long way from Lisbon, with a famous funicular"),
    ]
    items = [
        {
            "conv_id": "c-1",
            "item_id": item_id,
            "text": text,
            "timestamp": "2023-05-08T13:56:00",
            "speaker": text.split(":")[0],
            "metadata": {"session_index": session, "turn_index": int(item_id[-1])},
        }
        for item_id, session, text in turns
    ]
    queries = [
        ("What is the name of my cat?", ["s1:0"], "single-session-user"),
        ("Where did my sister move for her job?", ["s2:0"], "multi-session"),
        ("What did you say Valparaiso is famous for?", ["s2:1"], "single-session-assistant"),
    ]
    (folder / "items.jsonl").write_text("\n".join(json.dumps(i) for i in items))
    (folder / "queries.jsonl").write_text(
        "\n".join(
            json.dumps({"conv_id": "c-1", "query_id": f"q{n}", "question": q, "evidence_item_ids": e, "category": c})
            for n, (q, e, c) in enumerate(queries)
        )
    )


@pytest.mark.parametrize(
    "anthropic",
    [
        {"MEMORY_ANTHROPIC__API_KEY": ""},
        {"MEMORY_ANTHROPIC__API_KEY": "sk-ant-local", "MEMORY_ANTHROPIC__BASE_URL": "http://127.0.0.1:9"},
    ],
    ids=["no-key", "key-of-a-loopback-endpoint"],
)
def test_formation_eval_without_a_real_model_says_so_in_one_line_and_exits_0(tmp_path: Path, anthropic):
    _write(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_ANTHROPIC__")}
    # A Redis that never answers (TEST-NET-1, not local to start): a run that went on would fail, touching nothing.
    env["MEMORY_REDIS__URL"] = "redis://192.0.2.1:6379/0"
    done = subprocess.run(
        [*EVAL, str(tmp_path), "--formation"],
        env={**env, **anthropic},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().startswith(SKIPPED)
    assert len(done.stdout.strip().splitlines()) == 1, done.stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_formation_eval_against_the_fake_model_finds_the_user_turns_through_the_facts_sources(
    private_redis: PrivateRedis, tmp_path: Path
):
    data = tmp_path / "data"
    data.mkdir()
    _write(data)
    out = tmp_path / "results.json"
    # A Redis database of its own: the session's in-thread worker consumes the same queue names.
    env = {**os.environ, "MEMORY_REDIS__URL": private_redis.database_url(), "MEMORY_ANTHROPIC__API_KEY": ""}
    done = subprocess.run(
        [*EVAL, str(data), "--formation", "--formation-fake", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| evidence turns named by the facts' sources (3 queries) |" in done.stdout
    results = json.loads(out.read_text())
    per_category = results["formation"]["per category"]
    # Each user turn became a fact whose sources are its item id: the two questions on user turns find theirs first.
    assert per_category["single-session-user"]["R@1"] == 1.0
    assert per_category["multi-session"]["R@1"] == 1.0
    # Assistant turns are no facts of their own (the prompt leaves them out): no fact names the third evidence.
    assert per_category["single-session-assistant"]["R@10"] == 0.0
    # Two sessions, one remember call each, over five turns; three user turns, three facts.
    cost = results["per 1000 turns"]
    assert cost["model calls"] == pytest.approx(400.0)
    assert cost["facts formed"] == pytest.approx(600.0)
    assert cost["input tokens"] > 0
    assert cost["output tokens"] > 0
