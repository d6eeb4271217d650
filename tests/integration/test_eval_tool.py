"""ops/eval runs on any folder of the LoCoMo-dev schema, through the product's client, queue and worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from .processes import ROOT

EVAL = [sys.executable, str(ROOT / "ops" / "eval.py")]


def _write(folder: Path, *, longmemeval: bool = False) -> None:
    """Five turns and three questions, in LoCoMo's schema or LongMemEval's (string categories, sessions by
    ``session_index``, an abstention question instead of category 5)."""
    turns = [
        ("D1:1", 1, 0, "Ana: I adopted a grey cat named Pixel last week"),
        ("D1:2", 1, 1, "Bo: congratulations, what does Pixel eat?"),
        ("D1:3", 1, 2, "Ana: mostly salmon pate, she is picky"),
        ("D2:1", 2, 0, "Bo: my sister moved to Valparaiso for her new job"),
        ("D2:2", 2, 1, "Ana: that is a long way from Lisbon"),
    ]
    items = [
        {
            "conv_id": "c-1",
            "item_id": i,
            "text": t,
            "speaker": t.split(":")[0],
            "metadata": {"session_index" if longmemeval else "session": s, "turn_index": n},
        }
        for i, s, n, t in turns
    ]
    queries = [
        {
            "conv_id": "c-1",
            "query_id": "q0",
            "question": "What is the name of Ana's cat?",
            "evidence_item_ids": ["D1:1"],
            "category": 1,
        },
        {
            "conv_id": "c-1",
            "query_id": "q1",
            "question": "Where did Bo's sister move?",
            "evidence_item_ids": ["D2:1"],
            "category": 4,
        },
        {
            "conv_id": "c-1",
            "query_id": "q2",
            "question": "Does Ana own a dog?",
            "evidence_item_ids": ["D1:1"],
            "category": 5,
        },
    ]
    if longmemeval:
        for query, category in zip(
            queries, ("single-session-user", "multi-session", "single-session-user"), strict=True
        ):
            query["category"] = category
        queries[2].update(abstention=True, evidence_item_ids=[])
    (folder / "items.jsonl").write_text("\n".join(json.dumps(i) for i in items))
    (folder / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries))


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("longmemeval", [False, True], ids=["locomo-schema", "longmemeval-schema"])
def test_eval_loads_a_folder_through_the_worker_and_scores_every_mode(
    redis_url: str, tmp_path: Path, longmemeval: bool
):
    data = tmp_path / "data"
    data.mkdir()
    _write(data, longmemeval=longmemeval)
    out = tmp_path / "results.json"
    # A Redis DB of its own: Celery queue names are not under the key prefix, so the session's in-thread
    # worker (same DB, another prefix) would take the eval's tasks.
    own_db = redis_url.rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(own_db).flushdb()
    env = {**os.environ, "MEMORY_REDIS__URL": own_db, "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant")}
    done = subprocess.run(
        [*EVAL, str(data), "--json", str(out)], env=env, capture_output=True, text=True, timeout=200, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| hybrid (default) |" in done.stdout
    results = json.loads(out.read_text())["results"]
    assert set(results) >= {"hybrid (default)", "lexical (BM25 + context)", "dense (MiniLM)"}
    default = results["hybrid (default)"]
    main = default["headline"]
    assert main["n"] == 2
    assert main["R@1"] == 1.0  # both questions name their evidence's words
    assert main["MRR"] == 1.0
    categories = {"single-session-user", "multi-session"} if longmemeval else {"1", "4"}
    assert set(default["per category"]) == categories
    # Category 5 is reported apart; an abstention question has no evidence to find, so it is not scored.
    assert default["apart"]["n"] == (0 if longmemeval else 1)


def test_eval_refuses_a_folder_without_the_files(tmp_path: Path):
    done = subprocess.run([*EVAL, str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "items.jsonl" in done.stderr
