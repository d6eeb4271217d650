"""The read cache's search key: everything that shapes a result, the rerank switch included."""

from memory_core.client.reads import search_digest


def test_a_search_key_tells_the_rerank_switch_apart_and_keeps_the_default_searchs_key():
    keys = {switch: search_digest("tea?", 10, {}, "hybrid", switch) for switch in (None, True, False)}
    assert len(set(keys.values())) == 3
    assert keys[None] == search_digest("tea?", 10, {}, "hybrid")  # entries cached before the switch still hit


def test_a_search_key_tells_live_only_results_from_those_with_superseded_facts():
    live = search_digest("tea?", 10, {}, "hybrid", None)
    assert search_digest("tea?", 10, {}, "hybrid", None, True) != live
    assert search_digest("tea?", 10, {}, "hybrid", None, False) == live  # the default search keeps its key
