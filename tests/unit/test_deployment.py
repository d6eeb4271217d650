"""docker-compose.yml ships the secure defaults the code assumes: persistence, passwords, Flower auth, restarts."""

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _services() -> dict[str, Any]:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return compose["services"]  # type: ignore[no-any-return]


def test_redis_keeps_an_append_only_file_and_needs_a_password():
    command = _services()["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "--requirepass" in command


def test_every_memory_core_service_uses_the_password_and_restarts():
    services = _services()
    for name in ("worker", "worker-compaction", "worker-formation", "beat", "flower"):
        assert services[name]["environment"]["MEMORY_REDIS__URL"].startswith("redis://:${REDIS_PASSWORD:?")
        assert services[name]["restart"] == "unless-stopped"


def test_flower_runs_through_the_cli_with_basic_auth_published_on_loopback_only():
    flower = _services()["flower"]
    assert flower["command"] == ["memory-core", "flower"]
    assert flower["environment"]["MEMORY_FLOWER__BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH:?")
    assert all(port.startswith("127.0.0.1:") for port in flower["ports"])


def test_workers_serve_metrics_on_the_compose_network_only_so_replicas_never_clash():
    services = _services()
    assert "memory.compaction" not in services["worker"]["command"][-1]
    assert "memory.formation" not in services["worker"]["command"][-1]
    assert services["worker-compaction"]["command"][-2:] == ["-Q", "memory.compaction"]
    assert services["worker-formation"]["command"][-2:] == ["-Q", "memory.formation"]
    for name in ("worker", "worker-compaction", "worker-formation"):
        assert services[name]["environment"]["MEMORY_METRICS__PORT"] == "9464"
        assert services[name]["expose"] == ["9464"]
        assert "ports" not in services[name]  # a fixed host port would clash at the second replica
