"""The test suite touches no Redis database but its own: ``MEMORY_TEST_REDIS_URL``'s, or its private server's.

Tests once derived other database numbers from ``MEMORY_TEST_REDIS_URL`` (its URL cut at the last ``/``, plus
another number) and flushed them: a developer's data in database 3 of the same server went while the suite
ran. A test that needs a Redis apart takes a database of the session's private redis-server
(``private_redis.database_url()``).
"""

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# A Redis URL with its database cut off and another number put in its place.
DERIVED_DATABASE = re.compile(
    r"""(?:rsplit\(\s*(['"])/\1\s*,\s*1\s*\)\s*\[\s*0\s*\]|rpartition\(\s*(['"])/\2\s*\)\s*\[\s*0\s*\])"""
    r"""\s*\+\s*[rbf]?(['"])/\d+\3"""
    r"""|\.replace\(\s*(['"])/\d+\4\s*,"""
)


def _derivations(text: str) -> list[str]:
    return [match.group(0) for match in DERIVED_DATABASE.finditer(text)]


def test_no_test_derives_another_database_of_the_servers_test_url():
    this = Path(__file__).resolve()
    found = [
        f"{path.relative_to(TESTS.parent)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.resolve() != this
        for text in [path.read_text()]
        for match in DERIVED_DATABASE.finditer(text)
    ]
    assert not found, (
        "tests derive Redis databases other than MEMORY_TEST_REDIS_URL's (a developer's data may live there); "
        "take one of the private server's instead, private_redis.database_url():\n" + "\n".join(found)
    )


def test_the_check_sees_each_way_of_swapping_the_database_number():
    plain = 'rsplit("/", 1)[0] + ' + '"/3"'  # in two pieces: a grep of the tests for it finds real uses only
    assert _derivations(f"url = REDIS_URL.{plain}") == [plain]
    assert _derivations("url = redis_url.rsplit( '/' , 1 )[0]+'/14'") == ["rsplit( '/' , 1 )[0]+'/14'"]
    assert _derivations('url = settings.redis.url.rpartition("/")[0] + f"/9"') == ['rpartition("/")[0] + f"/9"']
    assert _derivations('url = REDIS_URL.replace("/15", "/8")') == ['.replace("/15",']
    # Not a database: a JSON-schema reference, a vhost, a server of the test's own.
    assert _derivations('name = schema["$ref"].rsplit("/", 1)[-1]') == []
    assert _derivations('vhost = url.rsplit("/", 1)[1]') == []
    assert _derivations('url = f"redis://127.0.0.1:{port}/0"') == []
