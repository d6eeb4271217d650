"""Per-namespace tokens, enforced by a worker that has them (a process of its own, on its own Redis DB)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis

from memory_core import AuthorizationError, MemoryClient
from memory_core.settings import Settings

from .conftest import REDIS_URL
from .processes import celery_process

TOKENS = {"token-of-acme": "acme", "token-of-globex": "globex"}


@pytest.fixture(scope="module")
def auth_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = REDIS_URL.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(url).flushdb()
    env = {
        "MEMORY_REDIS__URL": url,
        "MEMORY_QDRANT__PATH": str(tmp_path_factory.mktemp("auth-qdrant")),
        "MEMORY_AUTH__TOKENS": json.dumps(TOKENS),
    }
    with celery_process("worker", env, tmp_path_factory.mktemp("auth") / "worker.log"):
        yield url
    redis.Redis.from_url(url).flushdb()


def _client(url: str, token: str | None, *, knows_tokens: bool) -> MemoryClient:
    auth = {"tokens": json.dumps(TOKENS)} if knows_tokens else {}
    client = {"timeout": 30, "token": token}
    return MemoryClient(Settings(_env_file=None, redis={"url": url}, auth=auth, client=client))


@pytest.mark.slow
def test_a_token_reaches_its_namespace_only_and_the_worker_checks_it(auth_url: str):
    with _client(auth_url, "token-of-acme", knows_tokens=True) as acme:
        notes = acme.long_term("acme", "u").get_or_create_memory_set("notes")
        notes.add(["acme's own memory"])
        assert [i.value for i in notes.get()] == ["acme's own memory"]
        with pytest.raises(AuthorizationError, match="'globex'"):
            acme.long_term("globex", "u")  # refused in the client, which knows the map
        with pytest.raises(AuthorizationError):
            acme.forget("globex")

    # A client that does not know the map (or lies about it) is stopped by the worker.
    with _client(auth_url, "token-of-acme", knows_tokens=False) as sneaky:
        with pytest.raises(AuthorizationError, match="'globex'"):
            sneaky.long_term("globex", "u").get_or_create_memory_set("notes")
        with pytest.raises(AuthorizationError):
            sneaky.long_term("globex", "u").search("notes", "anything", limit=1)
    # The refused write was dead-lettered, but the token (a header, not an argument) is not kept with it.
    letters = redis.Redis.from_url(auth_url).lrange("mc:globex:deadletters", 0, -1)
    assert letters
    assert all(b"token-of-acme" not in letter for letter in letters)


@pytest.mark.slow
def test_a_wrong_token_is_refused_without_revealing_whether_the_namespace_exists(auth_url: str):
    with _client(auth_url, "token-of-globex", knows_tokens=True) as globex:
        globex.long_term("globex", "u").get_or_create_memory_set("notes").add(["globex data"])
    messages = []
    for token in ("made-up-token", None):
        with _client(auth_url, token, knows_tokens=False) as stranger:
            for namespace in ("globex", "does-not-exist"):
                with pytest.raises(AuthorizationError) as refused:
                    stranger.long_term(namespace, "u").get_memory_set("notes")
                messages.append(str(refused.value).replace(namespace, "<ns>"))
    assert len(set(messages)) == 1, messages  # the same answer for existing and missing namespaces
