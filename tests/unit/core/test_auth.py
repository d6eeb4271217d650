from pydantic import SecretStr

from memory_core.core.auth import TokenMap


def test_a_token_names_the_namespace_it_grants_and_no_other():
    tokens = TokenMap.from_secret(SecretStr('{"tok-a": "acme", "tok-b": "globex"}'))
    assert tokens is not None
    assert tokens.namespace_of("tok-a") == "acme"
    assert tokens.namespace_of("tok-b") == "globex"
    assert tokens.namespace_of("tok-c") is None
    assert tokens.namespace_of("") is None
    assert tokens.grants("tok-a", "acme")
    assert not tokens.grants("tok-a", "globex")
