"""The broker's search request: switches left at their defaults are not sent, so older workers accept it."""

import pytest
from pydantic import ValidationError

from memory_core.core.messages import SearchRequest

FIELDS = {"namespace": "ns", "key": "k", "set_name": "notes", "query": "tea?", "limit": 5}


def test_a_default_search_is_sent_without_the_superseded_switch():
    sent = SearchRequest.model_validate(FIELDS).model_dump(mode="json")
    assert "include_superseded" not in sent
    assert SearchRequest.model_validate(sent).include_superseded is False


def test_a_search_that_asks_for_superseded_facts_says_so_and_reads_back():
    sent = SearchRequest.model_validate({**FIELDS, "include_superseded": True}).model_dump(mode="json")
    assert sent["include_superseded"] is True
    assert SearchRequest.model_validate(sent).include_superseded is True


def test_the_superseded_switch_takes_a_bool_only():
    for value in (True, False):
        assert SearchRequest.model_validate({**FIELDS, "include_superseded": value}).include_superseded is value
    for wrong in ("yes", 1, None):
        with pytest.raises(ValidationError, match="include_superseded"):
            SearchRequest.model_validate({**FIELDS, "include_superseded": wrong})
