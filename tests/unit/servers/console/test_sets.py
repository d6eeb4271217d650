"""The set page's query: the stack of earlier pages' cursors stays bounded and its page numbers right."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from memory_core.core.errors import InvalidRequestError
from memory_core.servers.console.sets import MAX_BACK_CHARS, Filters, metadata_value


def opened(query: str) -> Filters:
    """The filters a query string opens the page with (as the view builds them)."""
    values = parse_qs(query)
    one = {name: found[0] for name, found in values.items() if name != "back"}
    return Filters(**one, back=tuple(values.get("back", ())))


def test_next_and_previous_walk_the_pages_and_keep_the_filters():
    first = Filters(contains="tea", sort="importance")
    second = opened(first.next_query("c1"))
    third = opened(second.next_query("c2"))
    assert (first.page_number, second.page_number, third.page_number) == (1, 2, 3)
    assert (third.contains, third.sort, third.cursor, third.back) == ("tea", "importance", "c2", ("c1",))
    back = opened(third.previous_query() or "")
    assert (back.cursor, back.back, back.page_number) == ("c1", (), 2)
    assert opened(back.previous_query() or "") == Filters(contains="tea", sort="importance")


def test_a_deep_stack_drops_its_oldest_cursors_and_counts_them():
    cursor = "x" * 300
    page = Filters()
    for n in range(40):
        page = opened(page.next_query(f"{n:02d}{cursor}"))
    assert page.page_number == 41
    assert sum(len(c) for c in page.back) <= MAX_BACK_CHARS
    assert page.dropped > 0
    while page.back:
        page = opened(page.previous_query() or "")
    assert page.page_number == page.dropped + 2
    assert page.previous_query() is None  # that page's cursor was dropped: only the first page is offered
    assert opened(page.first_query()).page_number == 1


def test_form_values_become_browse_arguments_or_say_what_is_wrong():
    arguments = Filters(created_to="2025-01-31", pinned="no", min_importance="0.2", field="n", value="7").arguments()
    assert arguments["created_before"].isoformat() == "2025-02-01T00:00:00+00:00"  # the whole of that day
    assert (arguments["pinned"], arguments["min_importance"]) == (False, 0.2)
    assert arguments["metadata"] == {"n": ["7", 7]}
    assert metadata_value("tea") == "tea"
    bad = [Filters(sort="size"), Filters(limit="7"), Filters(created_from="yesterday"), Filters(max_importance="2")]
    for filters in bad:
        with pytest.raises(InvalidRequestError):
            filters.arguments()
