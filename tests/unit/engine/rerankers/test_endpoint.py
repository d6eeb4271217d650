"""The rerank endpoint provider against a fake ``/rerank`` API on loopback: both request shapes, and every
failure typed (transient or not), with the key never in a message."""

from collections.abc import Iterator

import pytest

from memory_core.core.errors import RerankerError, TransientRerankerError
from memory_core.core.settings import RerankSettings
from memory_core.engine.rerankers import rerank_timed
from memory_core.engine.rerankers.endpoint import EndpointReranker, _ranking, public_url
from memory_core.testing.fake_rerank import VALID_KEY, FakeRerankEndpoint

FACTS = ["Bob likes coffee", "Alice drinks green tea", "the launch moved to Friday"]


def _settings(**values: object) -> RerankSettings:
    return RerankSettings(**{"api_key": VALID_KEY, "timeout": 1.0, **values})


@pytest.fixture
def cohere() -> Iterator[FakeRerankEndpoint]:
    with FakeRerankEndpoint() as fake:
        yield fake


@pytest.fixture
def reranker(cohere: FakeRerankEndpoint) -> Iterator[EndpointReranker]:
    reranker = EndpointReranker(_settings(remote_model="rerank-v3.5"), url=cohere.url)
    cohere.behave("ok")  # forget the start-up probe
    yield reranker
    reranker.close()


def test_documents_come_back_best_first_with_the_endpoints_scores(reranker, cohere):
    ranking = reranker.rerank("what does Alice drink? green tea?", FACTS, 2)
    assert ranking == [(1, 0.5), (0, 0.0)]  # top_n kept; the fake scores the share of the query's words
    (sent,) = cohere.requests
    assert sent == {
        "query": "what does Alice drink? green tea?",
        "documents": FACTS,
        "top_n": 3,  # every document's score, so the answer is checked in full; the best 2 are kept here
        "model": "rerank-v3.5",
    }
    assert cohere.keys == [VALID_KEY]


def test_a_tei_endpoint_is_recognised_at_start_and_asked_in_its_own_shape():
    with FakeRerankEndpoint(shape="tei", api_key=None) as tei:
        reranker = EndpointReranker(RerankSettings(), url=tei.url)
        tei.behave("ok")
        ranking = reranker.rerank("Alice tea", FACTS, 1)
        reranker.close()
    assert ranking == [(1, 1.0)]
    assert tei.requests == [{"query": "Alice tea", "texts": FACTS, "truncate": True, "raw_scores": False}]


def test_no_documents_ask_nothing(reranker, cohere):
    assert reranker.rerank("anything", [], 5) == []
    assert cohere.requests == []


@pytest.mark.parametrize(("mode", "said"), [("http_500", r"failing \(HTTP 500\)"), ("http_429", "rate-limiting")])
def test_a_failing_or_busy_endpoint_is_transient(reranker, cohere, mode, said):
    cohere.behave(mode)
    with pytest.raises(TransientRerankerError, match=rf"{said}.*rerank=False"):
        reranker.rerank("q", FACTS, 2)


def test_an_endpoint_that_does_not_answer_in_time_is_transient_and_never_a_hang(reranker, cohere):
    cohere.behave("stall", stall_seconds=3)
    with pytest.raises(TransientRerankerError, match=r"did not answer within 1s.*MEMORY_RERANK__TIMEOUT"):
        reranker.rerank("q", FACTS, 2)


def test_a_refused_key_is_not_transient_and_not_repeated(reranker, cohere):
    cohere.api_key = "another-key"
    with pytest.raises(RerankerError, match=r"refused the API key \(HTTP 401\).*MEMORY_RERANK__API_KEY") as caught:
        reranker.rerank("q", FACTS, 2)
    assert not isinstance(caught.value, TransientRerankerError)
    assert VALID_KEY not in str(caught.value)


def test_a_refused_key_stops_the_reranker_at_start(cohere):
    with pytest.raises(RerankerError, match=r"HTTP 401") as caught:
        EndpointReranker(_settings(api_key="sk-wrong-secret"), url=cohere.url)
    assert "sk-wrong-secret" not in str(caught.value)


def test_an_unreachable_endpoint_stops_the_reranker_at_start(cohere):
    url = cohere.url
    cohere.__exit__()
    with pytest.raises(TransientRerankerError, match=r"cannot be reached .*MEMORY_RERANK__MODEL"):
        EndpointReranker(_settings(), url=url)


def test_a_wrong_route_names_the_setting(cohere):
    with pytest.raises(RerankerError, match=r"no such route \(HTTP 404\); MEMORY_RERANK__MODEL names the whole URL"):
        EndpointReranker(_settings(), url=cohere.origin + "/v1/embeddings")


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("garbage", "not JSON"),
        ("bad_index", r"indices \[1, 2, 10\] for 3 documents; expected each of 0 to 2 once"),
        ("short", r"answered 2 scores for the 3 documents sent"),
        ("repeated", r"indices \[\d, \d, \d\] for 3 documents; expected each of 0 to 2 once"),
        ("nan", r"not a ranking \(results\.0\.relevance_score: Input should be a finite number\)"),
    ],
)
@pytest.mark.parametrize("top_n", [1, 3])
def test_an_answer_that_is_no_ranking_is_refused(reranker, cohere, mode, said, top_n):
    cohere.behave(mode)
    with pytest.raises(RerankerError, match=said) as caught:
        reranker.rerank("q", FACTS, top_n)
    assert not isinstance(caught.value, TransientRerankerError)


@pytest.mark.parametrize("mode", ["short", "repeated", "nan", "bad_index"])
def test_a_tei_answer_is_checked_in_full_too(mode):
    with FakeRerankEndpoint(shape="tei", api_key=None) as tei:
        reranker = EndpointReranker(RerankSettings(), url=tei.url)
        tei.behave(mode)
        with pytest.raises(RerankerError, match="not a ranking|scores for the 3 documents|expected each of"):
            reranker.rerank("Alice tea", FACTS, 1)
        reranker.close()


@pytest.mark.parametrize(
    "answer",
    [
        {"results": [{"index": 0, "relevance_score": "0.9"}, {"index": 1, "relevance_score": 0.1}]},  # a string
        {"results": [{"index": True, "relevance_score": 0.9}, {"index": 1, "relevance_score": 0.1}]},  # a bool
        {"results": [{"index": 0.0, "relevance_score": 0.9}, {"index": 1, "relevance_score": 0.1}]},  # a float
        {"results": [{"index": 0, "relevance_score": float("inf")}, {"index": 1, "relevance_score": 0.1}]},
        {"results": [{"index": 0}, {"index": 1, "relevance_score": 0.1}]},  # no score
        {"results": "none"},
        {"data": []},
        [{"index": 0, "score": 0.9}],  # one of two documents
    ],
)
def test_only_a_ranking_of_every_document_with_integer_indices_and_finite_scores_is_read(answer):
    with pytest.raises(RerankerError, match="not a ranking|scores for the 2 documents"):
        _ranking(answer, 2, "the endpoint")


def test_a_ranking_in_either_shape_is_read_with_whatever_else_it_holds():
    cohere = {
        "id": "x",
        "results": [
            {"index": 1, "relevance_score": 0.2, "document": {"text": "b"}},
            {"index": 0, "relevance_score": 1},
        ],
    }
    assert _ranking(cohere, 2, "the endpoint") == [(1, 0.2), (0, 1.0)]
    assert _ranking([{"index": 0, "score": 0.5}, {"index": 1, "score": -3}], 2, "the endpoint") == [(0, 0.5), (1, -3.0)]


def test_rerank_timed_puts_the_best_first_and_refuses_a_repeated_index():
    class Repeating:
        model_name = "stub"

        def rerank(self, query, documents, top_n):
            return [(0, 0.1), (0, 0.9)]

        def close(self):
            pass

    class Unsorted(Repeating):
        def rerank(self, query, documents, top_n):
            return [(0, 0.1), (2, 0.9), (1, 0.5)]

    assert rerank_timed(Unsorted(), "q", ["a", "b", "c"], 2) == [(2, 0.9), (1, 0.5)]
    with pytest.raises(RerankerError, match="indices"):
        rerank_timed(Repeating(), "q", ["a", "b"], 2)


def test_rerank_timed_refuses_a_ranking_shorter_than_asked():
    class Short:
        model_name = "stub"

        def rerank(self, query, documents, top_n):
            return [(1, 0.9)]

        def close(self):
            pass

    with pytest.raises(RerankerError, match=r"ranked 1 of 3 documents, asked for the best 2"):
        rerank_timed(Short(), "q", ["a", "b", "c"], 2)
    assert rerank_timed(Short(), "q", ["a", "b", "c"], 1) == [(1, 0.9)]


def test_logs_and_errors_show_the_url_without_credentials_or_query():
    assert public_url("https://user:pw@rerank.example:8443/v1/rerank?key=secret#x") == (
        "https://rerank.example:8443/v1/rerank"
    )
