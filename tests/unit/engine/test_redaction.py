import pytest

from memory_core.engine.redaction import Redactor


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to alice.smith+notes@example.co.uk today", "write to [EMAIL] today"),
        ("call +33 6 12 34 56 78 after 5", "call [PHONE] after 5"),
        ("call (555) 123-4567", "call [PHONE]"),
        ("card 4111 1111 1111 1111 expires soon", "card [CARD] expires soon"),
        ("card 4111-1111-1111-1112 fails Luhn", "card 4111-1111-1111-1112 fails Luhn"),
        ("met on 22.11.2026 and 2026-11-22", "met on 22.11.2026 and 2026-11-22"),
        ("order 1234 of 2026-11-22 costs 49.90", "order 1234 of 2026-11-22 costs 49.90"),
        ("Alice moved to Lyon in May", "Alice moved to Lyon in May"),
    ],
)
def test_the_default_recognizers_replace_data_with_typed_placeholders(text: str, expected: str):
    assert Redactor().text(text) == expected


def test_only_the_chosen_kinds_are_redacted():
    assert Redactor(["email"]).text("mail a@b.io or call 555 123 4567") == "mail [EMAIL] or call 555 123 4567"


def test_strings_inside_metadata_are_redacted_and_keys_kept():
    data = {"contact": "a@b.io", "n": 3, "notes": ["call 555 123 4567"], "nested": {"email": "x@y.org"}}
    assert Redactor().data(data) == {
        "contact": "[EMAIL]",
        "n": 3,
        "notes": ["call [PHONE]"],
        "nested": {"email": "[EMAIL]"},
    }
