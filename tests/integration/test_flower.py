"""ops/flower: basic auth unless --dev, credentials never on the command line, refuses to run open by mistake."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from .processes import free_port, stop

FLOWER = [str(Path(sys.executable).parent / "memory-core"), "flower"]


@contextlib.contextmanager
def flower(redis_url: str, log: Path, *args: str, **env: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    inherited = {k: v for k, v in os.environ.items() if k != "MEMORY_FLOWER__BASIC_AUTH"}
    variables = {**inherited, "MEMORY_REDIS__URL": redis_url, "MEMORY_FLOWER__PORT": str(port), **env}
    with log.open("w") as out:
        process = subprocess.Popen([*FLOWER, *args], env=variables, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/healthcheck", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        yield process, url
    finally:
        stop(process)


@pytest.mark.slow
def test_flower_requires_basic_auth_and_keeps_it_off_the_command_line(redis_url: str, tmp_path: Path):
    with flower(redis_url, tmp_path / "flower.log", MEMORY_FLOWER__BASIC_AUTH="operator:pa55-word") as (process, url):
        assert httpx.get(f"{url}/workers", timeout=5).status_code == 401
        assert httpx.get(f"{url}/workers", auth=("operator", "wrong"), timeout=5).status_code == 401
        assert httpx.get(f"{url}/workers", auth=("operator", "pa55-word"), timeout=5).status_code == 200
        command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert b"--address=127.0.0.1" in command_line
        assert b"pa55-word" not in command_line
    assert "pa55-word" not in (tmp_path / "flower.log").read_text()


@pytest.mark.slow
def test_flower_without_credentials_refuses_to_start(redis_url: str):
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_FLOWER__BASIC_AUTH"}
    done = subprocess.run(
        FLOWER, env={**env, "MEMORY_REDIS__URL": redis_url}, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "MEMORY_FLOWER__BASIC_AUTH" in done.stderr
    assert "--dev" in done.stderr


@pytest.mark.slow
def test_dev_mode_is_open_but_only_on_loopback(redis_url: str, tmp_path: Path):
    env = {"MEMORY_FLOWER__ADDRESS": "0.0.0.0"}  # dev mode overrides it
    with flower(redis_url, tmp_path / "flower.log", "--dev", **env) as (process, url):
        assert httpx.get(f"{url}/workers", timeout=5).status_code == 200
        assert b"--address=127.0.0.1" in Path(f"/proc/{process.pid}/cmdline").read_bytes()


def test_a_malformed_credential_is_refused_without_echoing_it(redis_url: str):
    env = {**os.environ, "MEMORY_REDIS__URL": redis_url, "MEMORY_FLOWER__BASIC_AUTH": "no-colon-secret"}
    done = subprocess.run(FLOWER, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "MEMORY_FLOWER__BASIC_AUTH" in done.stderr
    assert "no-colon-secret" not in done.stderr


@pytest.mark.slow
def test_the_broker_tab_counts_queued_tasks_under_the_deployment_prefix(redis_url: str, tmp_path: Path):
    raw = redis.Redis.from_url(redis_url)
    queue = "mcflower/memory.write"  # where kombu keeps this deployment's queue (its global key prefix)
    raw.lpush(queue, "{}", "{}")
    try:
        env = {"MEMORY_REDIS__KEY_PREFIX": "mcflower", "MEMORY_FLOWER__BASIC_AUTH": "operator:pa55-word"}
        with flower(redis_url, tmp_path / "flower.log", **env) as (_, url):
            answer = httpx.get(f"{url}/api/queues/length", auth=("operator", "pa55-word"), timeout=10)
            lengths = answer.json()["active_queues"]
        assert {"name": "memory.write", "messages": 2} in lengths
    finally:
        raw.delete(queue)
        raw.close()
