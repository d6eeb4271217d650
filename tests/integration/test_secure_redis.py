"""A password-protected Redis over TLS (``rediss://``): the worker, the client and caches all work; secrets stay out of logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import trustme

from memory_core import BrokerUnavailable, MemoryClient
from memory_core.core.settings import Settings

from .processes import celery_process, free_port, start_redis, stop

PASSWORD = "s3cret-pw-of-the-test"


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A redis-server that speaks TLS only and requires a password; yields its port and CA file."""
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "server.pem", tmp_path / "server.key"
    ca.cert_pem.write_to_path(str(ca_file))
    server_cert.cert_chain_pems[0].write_to_path(str(cert_file))
    server_cert.private_key_pem.write_to_path(str(key_file))
    port = free_port()
    server = start_redis(
        port,
        tmp_path / "redis.log",
        *("--port", "0", "--tls-port", str(port), "--requirepass", PASSWORD),
        *("--tls-cert-file", str(cert_file), "--tls-key-file", str(key_file), "--tls-ca-cert-file", str(ca_file)),
        *("--tls-auth-clients", "no"),
        ssl=True,
        ssl_ca_certs=str(ca_file),
        password=PASSWORD,
    )
    try:
        yield port, ca_file
    finally:
        stop(server)


def _url(port: int, ca_file: Path, password: str) -> str:
    return f"rediss://:{quote(password)}@127.0.0.1:{port}/0?ssl_cert_reqs=required&ssl_ca_certs={quote(str(ca_file))}"


@pytest.mark.slow
def test_worker_and_client_work_over_tls_with_a_password(tls_redis: tuple[int, Path], tmp_path: Path):
    port, ca_file = tls_redis
    url = _url(port, ca_file, PASSWORD)
    env = {"MEMORY_REDIS__URL": url, "MEMORY_QDRANT__PATH": str(tmp_path / "qdrant"), "MEMORY_CELERY__CONCURRENCY": "2"}
    settings = Settings(_env_file=None, redis={"url": url}, client={"timeout": 30})
    log = tmp_path / "worker.log"
    with celery_process("worker", env, log), MemoryClient(settings) as client:
        notes = client.long_term("tls", "u").get_or_create_memory_set("notes")
        ids = notes.add(["the vault code is in the blue notebook", "lunch with Ana on Tuesday"])
        assert [item.id for item in notes.search("where is the vault code", limit=1)] == [ids[0]]
        assert [item.value for item in notes.get(ids)] == [
            "the vault code is in the blue notebook",
            "lunch with Ana on Tuesday",
        ]
        with MemoryClient(settings) as other:  # an empty L1: the search answer comes from L2, over TLS
            again = other.long_term("tls", "u").get_memory_set("notes").search("where is the vault code", limit=1)
            assert [item.id for item in again] == [ids[0]]
            assert other.stats().l2_hits >= 1
    text = log.read_text(errors="replace")
    assert "Connected to" in text
    assert PASSWORD not in text
    assert "vault code" not in text  # memory text stays out of logs above DEBUG


@pytest.mark.slow
def test_a_wrong_password_is_a_typed_error_that_does_not_show_it(tls_redis: tuple[int, Path]):
    port, ca_file = tls_redis
    settings = Settings(_env_file=None, redis={"url": _url(port, ca_file, "not-the-password")}, client={"timeout": 5})
    with MemoryClient(settings) as client, pytest.raises(BrokerUnavailable) as info:
        client.long_term("tls", "u").get_or_create_memory_set("notes")
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "not-the-password" not in str(info.value)


@pytest.mark.slow
def test_plain_redis_to_a_tls_port_fails_fast_and_typed(tls_redis: tuple[int, Path]):
    port, _ = tls_redis
    settings = Settings(_env_file=None, redis={"url": f"redis://:{PASSWORD}@127.0.0.1:{port}/0", "socket_timeout": 1})
    with MemoryClient(settings) as client, pytest.raises(BrokerUnavailable):
        client.long_term("tls", "u").get_or_create_memory_set("notes")
