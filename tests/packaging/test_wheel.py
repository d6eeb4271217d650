"""The wheel, as pip installs it for a user: built from this tree, installed into a clean venv, then run.

A file or dependency missing from the package (the tokenizer once came from a second, ``--no-deps``
install) fails here, not on a user's machine. The venv gets the exact versions of ops/constraints.txt,
which pip serves from its cache after ops/install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.integration.processes import PrivateRedis, celery_process

ROOT = Path(__file__).resolve().parents[2]

WORKER_ONLY = [
    "celery",
    "qdrant_edge",
    "qdrant_client",
    "onnxruntime",
    "tokenizers",
    "numpy",
    "anthropic",
    "flower",
    "mcp",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = dist.glob("memory_core-*.whl")
    return built


def _venv(requirement: str, where: Path) -> Path:
    """A venv holding ``requirement`` and nothing of this checkout (the tests run outside it)."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    pip = [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-c", str(ROOT / "ops" / "constraints.txt"), requirement], check=True, timeout=600)
    return where


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(f"{wheel}[worker]", tmp_path_factory.mktemp("venv"))


@pytest.fixture(scope="module")
def client_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _venv(str(wheel), tmp_path_factory.mktemp("client-venv"))


@pytest.fixture
def own_url(private_redis: PrivateRedis) -> str:
    """A Redis database of the test's own: the installed worker and client meet there."""
    return private_redis.database_url()


def _run(venv: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "PYTHON"))}
    return subprocess.run(
        args, cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.timeout(900)
def test_the_wheel_holds_the_worker_the_tokenizer_and_the_type_marker_and_nothing_outside_memory_core(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "memory_core/engine/embedders/data/all-MiniLM-L6-v2.tokenizer.json",
        "memory_core/engine/embedders/data/NOTICE",
        "memory_core/py.typed",
        "memory_core/workers/app.py",
        "memory_core/workers/beat_schedule.py",
        "memory_core/engine/formation/prompts/facts-v1.txt",  # the worker forms with it: no prompt, no formation
        "memory_core/servers/console/templates/base.html",
        "memory_core/servers/console/static/htmx.min.js",
        "memory_core/servers/console/static/console.css",
    ):
        assert needed in names, needed
    # Nothing beside memory_core at the top of site-packages: generic names (workers, beat_schedule) would clash
    # with an application's own modules.
    top_level = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == {"memory_core"}


@pytest.mark.timeout(900)
def test_the_plain_install_is_the_client_alone_and_says_what_a_worker_needs(
    client_venv: Path, own_url: str, tmp_path: Path
):
    script = textwrap.dedent(
        f"""
        import importlib.util, json
        from memory_core import MemoryClient, NoWorkerAvailable, Settings

        settings = Settings(_env_file=None, redis={{"url": {own_url!r}, "key_prefix": "mcwheel"}})
        with MemoryClient(settings) as client:
            try:
                client.long_term("acme", "alice").get_or_create_memory_set("notes")
            except NoWorkerAvailable as exc:
                print(type(exc).__name__)
        print(json.dumps([m for m in {WORKER_ONLY!r} if importlib.util.find_spec(m) is not None]))
        """
    )
    done = _run(client_venv, tmp_path, str(client_venv / "bin" / "python"), "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["NoWorkerAvailable", "[]"]  # the client works; nothing heavy installed
    worker = _run(client_venv, tmp_path, str(client_venv / "bin" / "memory-core"), "worker")
    assert worker.returncode == 2
    assert worker.stderr.strip().endswith("pip install 'memory-core[worker]'"), worker.stderr
    mcp = _run(client_venv, tmp_path, str(client_venv / "bin" / "memory-core"), "mcp")
    assert mcp.returncode == 2
    assert mcp.stderr.strip().endswith("pip install 'memory-core[mcp]'"), mcp.stderr


@pytest.mark.timeout(900)
def test_the_worker_extra_gives_the_cli_and_a_worker_that_embeds(venv: Path, own_url: str, tmp_path: Path):
    version = _run(venv, tmp_path, str(venv / "bin" / "memory-core"), "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"memory-core {metadata.version('memory-core')}"
    assert _worker_finds_a_fact(venv, own_url, tmp_path) == "Alice is allergic to peanuts."


@pytest.mark.timeout(900)
def test_a_worker_runs_at_the_floor_of_every_worker_range(wheel: Path, own_url: str, tmp_path: Path):
    # The worker extra's own floors (Celery, the Qdrant engines, onnxruntime, the SDK...), with the base
    # dependencies at whatever those floors resolve to: the oldest worker a deployment may build must embed.
    where = tmp_path / "worker-floor-venv"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    pip = [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"{wheel}[worker]", *_floors("worker")], check=True, timeout=900)
    assert _worker_finds_a_fact(where, own_url, tmp_path) == "Alice is allergic to peanuts."


def _worker_finds_a_fact(venv: Path, redis_url: str, tmp_path: Path) -> str:
    """Runs ``celery -A memory_core.workers.app worker`` from ``venv`` on ``redis_url``; a client from the same venv
    adds two facts and searches; returns what the search found first."""
    env = {
        "MEMORY_REDIS__URL": redis_url,
        "MEMORY_QDRANT__PATH": str(tmp_path / "store"),
        "MEMORY_METRICS__ENABLED": "false",
        "MEMORY_CELERY__POOL": "threads",
    }
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORY_", "PYTHON"))}
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        [str(venv / "bin" / "celery"), "-A", "memory_core.workers.app", "worker", "--loglevel=INFO"],
        cwd=tmp_path,
        env={**clean, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        script = textwrap.dedent(
            """
            from memory_core import MemoryClient, load_settings
            import memory_core, sys
            assert "/site-packages/" in memory_core.__file__, memory_core.__file__
            with MemoryClient(load_settings()) as client:
                facts = client.long_term("acme", "alice").get_or_create_memory_set("facts")
                facts.add(["Alice is allergic to peanuts.", "Alice likes hiking in the Alps."])
                print(facts.search("what food must Alice avoid?", limit=1)[0].value)
            """
        )
        deadline = time.monotonic() + 90
        while True:  # the worker takes a few seconds to load its model; the client says when none is up yet
            done = _run(venv, tmp_path, str(venv / "bin" / "python"), "-c", script, env=env)
            if done.returncode == 0 or "NoWorkerAvailable" not in done.stderr or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert done.returncode == 0, done.stderr + (tmp_path / "worker.log").read_text()[-3000:]
        return done.stdout.strip()
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        log.close()


def _floors(extra: str | None = None) -> list[str]:
    """Each base dependency (or each of ``extra``'s) pinned at the lowest version its range in pyproject.toml allows."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = []
    for line in project["optional-dependencies"][extra] if extra else project["dependencies"]:
        requirement = Requirement(line)
        (floor,) = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        pins.append(f"{requirement.name}{extras}=={floor}")
    return pins


@pytest.mark.timeout(900)
def test_the_client_works_at_the_floor_of_every_range(wheel: Path, own_url: str, tmp_path: Path):
    # Ranges are a promise to the apps that install memory-core next to their own pins: the oldest
    # versions they allow must work too. The worker runs from this checkout's environment.
    where = tmp_path / "floor-venv"
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    pip = [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel), *_floors()], check=True, timeout=600)
    env = {"MEMORY_REDIS__URL": own_url, "MEMORY_QDRANT__PATH": str(tmp_path / "store")}
    script = textwrap.dedent(
        """
        from memory_core import MemoryClient, load_settings

        with MemoryClient(load_settings()) as client:
            facts = client.long_term("acme", "alice").get_or_create_memory_set("facts")
            facts.add(["Alice is allergic to peanuts.", "Alice likes hiking in the Alps."])
            print(facts.search("what food must Alice avoid?", limit=1)[0].value)
            with client.short_term("acme", "run-1") as stm:
                stm.set("plan.step", 2)
            print(client.short_term("acme", "run-1").get("plan").get_fields())
            print(client.session("acme", "chat-1").token_buffer(2000).load({}))
        """
    )
    with celery_process("worker", {**env, "MEMORY_METRICS__ENABLED": "false"}, tmp_path / "worker.log"):
        done = _run(where, tmp_path, str(where / "bin" / "python"), "-c", script, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Alice is allergic to peanuts.", "{'step': 2}", "{'history': ''}"]
