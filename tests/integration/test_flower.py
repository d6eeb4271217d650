"""memory-core flower: basic auth always (--dev: a password made for the run), credentials never on the command
line, refuses to run open by mistake."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from memory_core.cli.stack import flower_launch
from memory_core.core.settings import Settings

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


def _printed_credentials(log: Path) -> tuple[str, str]:
    found = re.search(r"user (\S+), password (\S+) \(made for this run\)", log.read_text())
    assert found, log.read_text()
    return found[1], found[2]


@pytest.mark.slow
def test_dev_mode_listens_on_loopback_only_and_asks_for_the_password_it_printed(redis_url: str, tmp_path: Path):
    env = {"MEMORY_FLOWER__ADDRESS": "0.0.0.0"}  # dev mode overrides it
    log = tmp_path / "flower.log"
    with flower(redis_url, log, "--dev", **env) as (process, url):
        user, password = _printed_credentials(log)
        port = url.rsplit(":", 1)[1]
        # A page that rebinds its DNS name to 127.0.0.1 has no credentials for its own origin: refused.
        rebound = {"Host": f"rebound.example:{port}"}
        assert httpx.get(f"{url}/workers", headers=rebound, timeout=5).status_code == 401
        assert httpx.post(f"{url}/api/worker/shutdown/any", headers=rebound, timeout=5).status_code == 401
        assert httpx.get(f"{url}/workers", timeout=5).status_code == 401
        assert httpx.get(f"{url}/workers", auth=(user, "guessed"), timeout=5).status_code == 401
        assert httpx.get(f"{url}/workers", auth=(user, password), timeout=5).status_code == 200
        assert httpx.get(f"{url}/api/workers", auth=(user, password), timeout=10).status_code == 200
        command_line = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        assert b"--address=127.0.0.1" in command_line
        assert password.encode() not in command_line
    assert log.read_text().count(password) == 1  # the line printed for the terminal, nothing Flower logged


def test_each_dev_run_makes_a_password_of_its_own(settings: Settings, capsys: pytest.CaptureFixture[str]):
    passwords = set()
    for _ in range(2):
        _, env = flower_launch(settings, dev=True, extra=[])
        user, password = env["FLOWER_BASIC_AUTH"].split(":")
        assert f"user {user}, password {password} " in capsys.readouterr().err
        assert len(password) >= 20
        passwords.add(password)
    assert len(passwords) == 2


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
