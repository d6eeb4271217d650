"""ops/eval runs on any folder of the LoCoMo-dev schema, through the product's client, queue and worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI
from memory_core.testing.fake_rerank import VALID_KEY as RERANK_KEY
from memory_core.testing.fake_rerank import FakeRerankEndpoint
from tests.local_models import FASTEMBED_MINILM, lay_out_minilm

from .processes import ROOT, PrivateRedis

EVAL = [sys.executable, str(ROOT / "ops" / "eval.py")]
DEV_DATA = ROOT.parent / "shared" / "data" / "longmemeval-dev"
QUICK = ["--conversations", "5"]  # of the dev set's 239 (one question each, ~22 turns): seconds, not minutes
needs_dev_data = pytest.mark.skipif(
    not (DEV_DATA / "queries.jsonl").is_file(), reason=f"{DEV_DATA} is not on this machine"
)


def _eval_env(private_redis: PrivateRedis, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of an eval run: a Redis database of its own (the eval keeps its store in ops/.run)."""
    # Celery queue names are not under the key prefix, so the session's in-thread worker (same DB, another
    # prefix) would take the eval's tasks.
    own_db = private_redis.database_url()
    return {**os.environ, "MEMORY_REDIS__URL": own_db, "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"), **extra}


def _run_eval(data: Path, tmp_path: Path, env: dict[str, str], *options: str) -> tuple[dict[str, Any], str]:
    """Runs ops/eval; returns its JSON results (with ``embedder``) and what it printed."""
    out = tmp_path / "results.json"
    done = subprocess.run(
        [*EVAL, str(data), "--json", str(out), *options],
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text()), done.stdout


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
    private_redis: PrivateRedis, tmp_path: Path, longmemeval: bool
):
    data = tmp_path / "data"
    data.mkdir()
    _write(data, longmemeval=longmemeval)
    output, stdout = _run_eval(data, tmp_path, _eval_env(private_redis, tmp_path))
    assert "| hybrid (default) |" in stdout
    assert output["embedder"].startswith("minilm:all-MiniLM-L6-v2@")
    results = output["results"]
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


@pytest.mark.slow
@pytest.mark.timeout(240)
@needs_dev_data
def test_eval_runs_with_the_hashing_embedder_and_names_its_fingerprint(private_redis: PrivateRedis, tmp_path: Path):
    output, stdout = _run_eval(DEV_DATA, tmp_path, _eval_env(private_redis, tmp_path), *QUICK, "--embedder", "hashing")
    assert output["embedder"] == "hashing:hashing-384 (384 d, none pooling, normalized)"
    assert f"embedder: {output['embedder']}" in stdout
    results = output["results"]
    assert "dense (MiniLM)" not in results
    assert results["dense (hashing)"]["headline"]["n"] > 0
    assert results["hybrid (default)"]["headline"]["n"] == results["dense (hashing)"]["headline"]["n"]


@pytest.mark.slow
@pytest.mark.timeout(240)
@needs_dev_data
def test_eval_with_fastembed_on_a_local_minilm_directory_scores_as_the_shipped_minilm(
    private_redis: PrivateRedis, tmp_path: Path
):
    pytest.importorskip("fastembed", reason="the [fastembed] extra is not installed")
    model_dir = lay_out_minilm(tmp_path / "all-MiniLM-L6-v2")
    (tmp_path / "shipped").mkdir()
    (tmp_path / "local").mkdir()
    shipped, _ = _run_eval(DEV_DATA, tmp_path / "shipped", _eval_env(private_redis, tmp_path / "shipped"), *QUICK)
    spec = f"fastembed:{FASTEMBED_MINILM}"
    local, _ = _run_eval(
        DEV_DATA,
        tmp_path / "local",
        _eval_env(private_redis, tmp_path / "local"),
        *QUICK,
        *("--embedder", spec, "--embedder-path", str(model_dir)),
    )
    assert local["embedder"].startswith(f"{spec}@")
    assert shipped["embedder"].startswith("minilm:all-MiniLM-L6-v2@")
    # The same weights through another runtime (vectors equal to cosine 0.9999): the same dense rankings. The
    # fused rows are not compared: BM25 near-ties may order differently from one load to the next.
    dense = local["results"][f"dense ({spec})"]
    assert dense["headline"] == pytest.approx(shipped["results"]["dense (MiniLM)"]["headline"], abs=1e-9)
    assert dense["headline"]["n"] > 0


@pytest.mark.slow
@pytest.mark.timeout(240)
@needs_dev_data
def test_eval_runs_against_an_openai_compatible_endpoint(private_redis: PrivateRedis, tmp_path: Path):
    with FakeOpenAI(dimension=32) as endpoint:
        env = _eval_env(private_redis, tmp_path, MEMORY_EMBEDDER__API_KEY=VALID_KEY)
        options = ("--embedder", "openai:text-embedding-3-small", "--embedder-base-url", endpoint.url)
        output, stdout = _run_eval(DEV_DATA, tmp_path, env, *QUICK, *options)
    assert output["embedder"] == "openai:text-embedding-3-small@localhost (32 d, remote pooling, normalized)"
    assert output["results"]["dense (openai:text-embedding-3-small)"]["headline"]["n"] > 0
    assert endpoint.requests
    assert set(endpoint.keys) == {VALID_KEY}
    assert VALID_KEY not in stdout


def test_eval_refuses_an_embedder_it_does_not_know_in_one_line(tmp_path: Path):
    _write(tmp_path)
    done = subprocess.run(
        [*EVAL, str(tmp_path), "--embedder", "word2vec"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "MEMORY_EMBEDDER__MODEL" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_eval_refuses_a_folder_without_the_files(tmp_path: Path):
    done = subprocess.run([*EVAL, str(tmp_path)], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "items.jsonl" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_eval_with_a_reranker_adds_the_reranked_row_and_keeps_the_others_fused(
    private_redis: PrivateRedis, tmp_path: Path
):
    data = tmp_path / "data"
    data.mkdir()
    _write(data)
    with FakeRerankEndpoint() as endpoint:
        env = _eval_env(private_redis, tmp_path, MEMORY_RERANK__API_KEY=RERANK_KEY)
        output, stdout = _run_eval(data, tmp_path, env, "--rerank", f"http:{endpoint.url}")
    results = output["results"]
    assert "| hybrid (default), reranked |" in stdout
    assert results["hybrid (default), reranked"]["headline"]["n"] == results["hybrid (default)"]["headline"]["n"]
    # One request per question of the reranked row (and the worker's start-up check): no other row reranks.
    questions = {"What is the name of Ana's cat?", "Where did Bo's sister move?", "Does Ana own a dog?"}
    assert sorted(body["query"] for body in endpoint.requests[1:]) == sorted(questions)
    assert set(endpoint.keys) == {RERANK_KEY}
    assert RERANK_KEY not in stdout
