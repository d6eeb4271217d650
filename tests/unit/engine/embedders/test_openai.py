"""The OpenAI-compatible provider, through the real ``openai`` SDK, against a fake ``/v1/embeddings`` on loopback."""

import json
import logging
from collections.abc import Iterator

import numpy as np
import pytest

from memory_core.core.errors import ConfigurationError, EmbedderError, TransientEmbedderError
from memory_core.core.settings import EmbedderSettings
from memory_core.engine.embedders import openai as provider
from memory_core.engine.embedders.openai import EmbeddingsAnswer, OpenAIEmbedder, endpoint_host, same_model
from memory_core.testing.fake_openai import VALID_KEY, FakeOpenAI, vector
from memory_core.workers.base import MemoryTask, retry_countdown


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(dimension=8) as server:
        yield server


@pytest.fixture
def server(fake: FakeOpenAI) -> FakeOpenAI:
    fake.behave("ok")
    return fake


def _embedder(fake: FakeOpenAI, *, key: str = VALID_KEY, **settings: object) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        EmbedderSettings(base_url=fake.url, api_key=key, **settings),
        model="text-embedding-3-small",
    )


def test_vectors_are_the_endpoints_in_order_and_unit_length(server):
    texts = ["alpha", "beta", "gamma"]
    vectors = _embedder(server).embed(texts)
    for text, got in zip(texts, vectors, strict=True):
        expected = np.asarray(vector(text, 8))
        assert np.allclose(got, expected / np.linalg.norm(expected))
    assert server.requests[0]["model"] == "text-embedding-3-small"
    assert server.requests[0]["input"] == texts
    assert server.keys == [VALID_KEY]


def test_texts_go_in_batches_of_batch_size_and_come_back_in_order(server):
    texts = [f"text number {i}" for i in range(10)]
    vectors = _embedder(server, batch_size=4).embed(texts)
    assert [len(r["input"]) for r in server.requests] == [4, 4, 2]
    assert [r["input"] for r in server.requests] == [texts[0:4], texts[4:8], texts[8:10]]
    for text, got in zip(texts, vectors, strict=True):
        assert np.allclose(got, np.asarray(vector(text, 8)) / np.linalg.norm(vector(text, 8)))


def test_a_request_stays_within_the_token_budget(server, monkeypatch):
    monkeypatch.setattr(provider, "REQUEST_TOKEN_BUDGET", 30)
    texts = ["word " * 10] * 7  # about 10 tokens each
    _embedder(server, batch_size=100).embed(texts)
    assert len(server.requests) >= 3
    assert sum(len(r["input"]) for r in server.requests) == 7
    assert all(len(r["input"]) <= 3 for r in server.requests)


def test_a_text_over_the_input_limit_is_cut_to_fit(server, monkeypatch):
    monkeypatch.setattr(provider, "MAX_INPUT_TOKENS", 50)
    _embedder(server).embed(["many words " * 200, ""])
    sent = server.requests[0]["input"]
    assert 0 < len(sent[0]) < len("many words " * 200)
    assert sent[1] == " "  # an empty text goes as one space: OpenAI refuses ""


def test_dimensions_are_asked_for_and_fix_the_fingerprint(server):
    embedder = _embedder(server, dimensions=5)
    assert len(embedder.embed(["x"])[0]) == 5
    assert server.requests[0]["dimensions"] == 5
    fingerprint = embedder.fingerprint
    assert (fingerprint.provider, fingerprint.model, fingerprint.dimension) == ("openai", "text-embedding-3-small", 5)
    assert (fingerprint.pooling, fingerprint.normalized, fingerprint.revision) == ("remote", True, "localhost")


def test_without_dimensions_the_first_answer_sets_the_dimension(server):
    embedder = _embedder(server)
    assert embedder.dimension == 8
    assert "dimensions" not in server.requests[0]
    assert embedder.model_name == "openai:text-embedding-3-small"


def test_the_fingerprint_tells_endpoints_apart_by_host_only():
    assert endpoint_host(None) == "api.openai.com"
    assert endpoint_host("http://127.0.0.1:11434/v1") == endpoint_host("http://localhost:8080/v1/") == "localhost"
    assert endpoint_host("https://acme.openai.azure.com/openai/deployments/x") == "acme.openai.azure.com"


def test_a_429_is_transient_and_carries_retry_after(server):
    server.behave("http_429", retry_after="7")
    with pytest.raises(TransientEmbedderError, match=r"HTTP 429.*after 7s") as caught:
        _embedder(server).embed(["x"])
    assert caught.value.retry_after == 7.0
    assert len(server.requests) == 1  # the SDK's own retries are off: the task layer retries


def test_a_429_with_an_http_date_retry_after_is_read_as_seconds(server):
    server.behave("http_429", retry_after="Wed, 21 Oct 2015 07:28:00 GMT")  # in the past: retry now
    with pytest.raises(TransientEmbedderError) as caught:
        _embedder(server).embed(["x"])
    assert caught.value.retry_after == 0.0


def test_a_500_is_transient_without_retry_after(server):
    server.behave("http_500")
    with pytest.raises(TransientEmbedderError, match="HTTP 500") as caught:
        _embedder(server).embed(["x"])
    assert caught.value.retry_after is None
    assert len(server.requests) == 1


def test_a_stalled_endpoint_times_out_as_a_transient_error(server):
    server.behave("stall", stall_seconds=3)
    with pytest.raises(TransientEmbedderError, match=r"did not answer within 0\.5s.*MEMORY_EMBEDDER__TIMEOUT"):
        _embedder(server, timeout=0.5).embed(["x"])


def test_vectors_of_another_length_than_the_first_are_refused(server):
    embedder = _embedder(server)
    embedder.embed(["x"])
    server.behave("wrong_dimension")
    with pytest.raises(EmbedderError, match=r"\[9\] dimensions, expected 8.*reindex") as caught:
        embedder.embed(["y"])
    assert not isinstance(caught.value, TransientEmbedderError)


def test_vectors_of_another_length_than_dimensions_are_refused(server):
    server.behave("wrong_dimension")
    with pytest.raises(EmbedderError, match=r"\[6\] dimensions, expected 5"):
        _embedder(server, dimensions=5).embed(["x"])


def test_a_refused_key_says_so_and_never_shows_the_key(server, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "sk-wrong-secret-1234567890"
    with pytest.raises(EmbedderError, match=r"refused the API key \(HTTP 401\).*MEMORY_EMBEDDER__API_KEY") as caught:
        _embedder(server, key=secret).embed(["x"])
    assert not isinstance(caught.value, TransientEmbedderError)
    assert secret not in str(caught.value)
    assert secret not in caplog.text
    assert "sk-f***" not in str(caught.value)  # the endpoint's message, which may quote the key, is not repeated


def test_an_answer_that_is_not_an_embeddings_response_is_an_embedder_error(server):
    server.behave("garbage")
    with pytest.raises(EmbedderError, match="not an embeddings response|not lists of numbers|0 embeddings"):
        _embedder(server).embed(["x"])


def test_an_unreachable_endpoint_is_transient():
    settings = EmbedderSettings(base_url="http://127.0.0.1:9/v1", api_key=VALID_KEY, timeout=2)
    with pytest.raises(TransientEmbedderError, match="cannot be reached"):
        OpenAIEmbedder(settings, model="m").embed(["x"])


def test_openais_endpoint_without_a_key_is_a_configuration_error(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")  # never read: settings are the one source
    with pytest.raises(ConfigurationError, match="MEMORY_EMBEDDER__API_KEY"):
        OpenAIEmbedder(EmbedderSettings(), model="text-embedding-3-small")


def test_tokens_used_reach_the_usage_hook(server):
    used: list[tuple[str, int, int]] = []
    embedder = _embedder(server)
    embedder.on_usage = lambda model, tokens, texts: used.append((model, tokens, texts))
    embedder.embed(["a" * 40, "b" * 80])
    assert used == [("openai:text-embedding-3-small", 30, 2)]  # the fake reports len/4 per text


def test_a_retry_after_delays_the_task_retry_up_to_the_longest_backoff():
    busy = TransientEmbedderError("busy", retry_after=7)
    assert retry_countdown(busy, 1, longest=60) == 7
    assert retry_countdown(busy, 20, longest=60) == 20  # the backoff is already longer
    assert retry_countdown(TransientEmbedderError("busy", retry_after=3600), 1, longest=60) == 60
    assert retry_countdown(TransientEmbedderError("failing"), 4, longest=60) == 4
    assert TransientEmbedderError in MemoryTask.autoretry_for


# What an endpoint answers is checked in full: the parsed answer alone (no HTTP), then through the SDK.


def _answer(indices: list[int], vectors: list[list[float]] | None = None, **fields: object) -> EmbeddingsAnswer:
    rows = vectors or [[float(i + 1), 1.0] for i in range(len(indices))]
    body = {"data": [{"index": i, "embedding": v} for i, v in zip(indices, rows, strict=True)], **fields}
    return EmbeddingsAnswer.parse(json.dumps(body).encode(), "the endpoint")


def test_rows_answered_in_another_order_come_back_in_the_order_of_the_texts():
    matrix = _answer([2, 0, 1], [[3.0, 0.0], [1.0, 0.0], [2.0, 0.0]]).vectors(3, "the endpoint")
    assert matrix[:, 0].tolist() == [1.0, 2.0, 3.0]


def test_repeated_indices_are_refused_naming_the_indices_and_what_was_expected():
    with pytest.raises(EmbedderError) as refused:
        _answer([0, 1, 0, 1]).vectors(4, "the endpoint")
    message = str(refused.value)
    assert "the endpoint answered indices [0, 1, 0, 1] for 4 texts; expected each of 0..3 once" in message
    assert "repeated: [0, 1]; missing: [2, 3]" in message
    assert "nothing was stored" in message


def test_an_index_out_of_range_is_refused():
    with pytest.raises(EmbedderError, match=r"indices \[1, 2\] for 2 texts; .*missing: \[0\]; out of range: \[2\]"):
        _answer([1, 2]).vectors(2, "the endpoint")
    with pytest.raises(EmbedderError, match=r"indices \[-1\] for 1 text; expected index 0"):
        _answer([-1]).vectors(1, "the endpoint")


def test_an_answer_with_another_count_of_rows_than_texts_is_refused():
    with pytest.raises(EmbedderError, match="answered 2 embeddings for 3 texts; expected one per text"):
        _answer([0, 1]).vectors(3, "the endpoint")
    with pytest.raises(EmbedderError, match="answered 4 embeddings for 3 texts"):
        _answer([0, 1, 2, 3]).vectors(3, "the endpoint")


def test_a_long_list_of_indices_is_cut_short_in_the_message():
    with pytest.raises(EmbedderError, match=r"indices \[0, 0, 0, .*, \.\.\.\] \(100 in all\)"):
        _answer([0] * 100).vectors(100, "the endpoint")


def test_vectors_of_several_lengths_or_of_no_store_s_length_are_refused():
    with pytest.raises(EmbedderError, match=r"vectors of \[1, 2\] dimensions in one answer"):
        _answer([0, 1], [[1.0], [1.0, 2.0]]).vectors(2, "the endpoint")
    with pytest.raises(EmbedderError, match="vectors of 0 dimensions, which no store holds"):
        _answer([0], [[]]).vectors(1, "the endpoint")
    with pytest.raises(EmbedderError, match=r"vectors of 65,537 dimensions, .*MEMORY_EMBEDDER__DIMENSIONS"):
        _answer([0], [[1.0] * 65_537]).vectors(1, "the endpoint")


def test_a_non_finite_or_all_zero_vector_is_refused_naming_the_text():
    nan = json.dumps({"data": [{"index": 0, "embedding": [1.0]}, {"index": 1, "embedding": [float("nan")]}]})
    with pytest.raises(EmbedderError, match="non-finite value .* for text 1 of 2 texts"):
        EmbeddingsAnswer.parse(nan.encode(), "the endpoint").vectors(2, "the endpoint")
    with pytest.raises(EmbedderError, match="non-finite"):
        EmbeddingsAnswer.parse(b'{"data": [{"index": 0, "embedding": [1e999]}]}', "e").vectors(1, "e")
    with pytest.raises(EmbedderError, match="all-zero .* for text 0 of 1 text"):
        _answer([0], [[0.0, 0.0]]).vectors(1, "the endpoint")


def test_an_answer_of_another_shape_is_refused_naming_the_field():
    with pytest.raises(EmbedderError, match=r"not an embeddings response \(data\.0\.index: "):
        EmbeddingsAnswer.parse(b'{"data": [{"index": "0", "embedding": [1.0]}]}', "the endpoint")
    with pytest.raises(EmbedderError, match=r"not an embeddings response \(data\.0\.embedding\.1: "):
        EmbeddingsAnswer.parse(b'{"data": [{"index": 0, "embedding": [1.0, "2"]}]}', "the endpoint")
    with pytest.raises(EmbedderError, match=r"not an embeddings response \(data: Field required"):
        EmbeddingsAnswer.parse(b'{"object": "list"}', "the endpoint")


def test_an_odd_usage_report_does_not_refuse_the_vectors():
    assert _answer([0], usage={"prompt_tokens": "many"}).usage is None
    usage = _answer([0], usage={"prompt_tokens": 7, "total_tokens": 9}).usage
    assert usage is not None
    assert usage.tokens == 7


@pytest.mark.parametrize(
    ("answered", "configured", "same"),
    [
        ("text-embedding-3-small", "text-embedding-3-small", True),
        ("BAAI/bge-small-en", "bge-small-en", True),  # an org the setting leaves out
        ("bge-small-en", "BAAI/bge-small-en", True),
        ("/models/BAAI/bge-small-en-v1.5", "BAAI/bge-small-en-v1.5", True),  # a server's model directory
        ("nomic-embed-text:latest", "nomic-embed-text", True),
        ("Nomic-Embed-Text", "nomic-embed-text", True),
        ("intfloat/bge-small-en", "BAAI/bge-small-en", False),  # another org's model of the same name
        ("nomic-embed-text:v1.5", "nomic-embed-text", False),  # another tag is another model
        ("text-embedding-3-large", "text-embedding-3-small", False),
        ("bge-small-en-v1.5", "bge-small-en", False),
        ("", "bge-small-en", False),
    ],
)
def test_an_answer_names_the_configured_model_only_in_its_harmless_forms(answered, configured, same):
    assert same_model(answered, configured) is same


@pytest.mark.parametrize(
    ("mode", "problem"),
    [
        ("duplicate_indices", r"answered indices \[0, 1, 0, 1\] for 4 texts; expected each of 0\.\.3 once"),
        ("out_of_range", r"answered indices \[1, 2, 3, 4\] for 4 texts"),
        ("non_finite", "non-finite value .* for text 3 of 4 texts"),
        ("zero_dimension", "vectors of 0 dimensions"),
        ("huge_dimension", "vectors of 65,537 dimensions"),
        ("other_model", "answered as model 'other-model', but this store's vectors are of 'text-embedding-3-small'"),
    ],
)
def test_a_wrong_answer_through_the_sdk_is_an_embedder_error_and_never_retried(server, mode, problem):
    server.behave(mode)
    embedder = _embedder(server)
    with pytest.raises(EmbedderError, match=problem) as refused:
        embedder.embed(["one", "two", "three", "four"])
    assert not isinstance(refused.value, TransientEmbedderError)
    assert "\n" not in str(refused.value)


def test_a_model_named_with_an_org_and_a_tag_is_taken_and_then_held(server):
    server.behave("org_model")
    embedder = _embedder(server)
    embedder.embed(["x"])
    embedder.embed(["y"])
    server.behave("other_model")
    with pytest.raises(EmbedderError, match=r"'other-model', but its earlier answers.* of 'acme/text-embedding"):
        embedder.embed(["z"])


def test_an_endpoint_that_starts_answering_as_another_model_is_refused(server):
    embedder = _embedder(server)
    embedder.embed(["x"])
    server.behave("other_model")
    with pytest.raises(EmbedderError, match=r"answered as model 'other-model', but its earlier answers") as refused:
        embedder.embed(["y"])
    assert "memory-core reindex --to openai:other-model" in str(refused.value)
    assert embedder.dimension == 8  # the same dimension: the model's name is what told them apart


def test_azure_names_its_deployments_so_the_first_answers_model_is_taken(server, monkeypatch):
    embedder = _embedder(server)
    monkeypatch.setattr(embedder, "_named_by_owner", True)  # what a host under .azure.com sets
    server.behave("other_model")
    embedder.embed(["x"])
    server.behave("ok")
    with pytest.raises(EmbedderError, match="earlier answers"):
        embedder.embed(["y"])


def test_an_endpoint_that_ignores_dimensions_is_refused_naming_the_setting_and_both_lengths(server):
    server.behave("ignore_dimensions")
    with pytest.raises(EmbedderError) as refused:
        _embedder(server, dimensions=5).embed(["x"])
    message = str(refused.value)
    assert "ignores MEMORY_EMBEDDER__DIMENSIONS=5" in message
    assert "[8] dimensions" in message
    assert "set it to 8" in message
