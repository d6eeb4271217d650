from __future__ import annotations

from memory_core.core.keys import Keys


def test_every_tenant_key_starts_with_prefix_and_namespace():
    keys = Keys("mc")
    built = [
        keys.set_definition("acme", "u1", "notes"),
        keys.reply("acme", "task-1"),
        keys.dead_letters("acme"),
    ]
    assert all(k.startswith("mc:acme:") for k in built)


def test_operator_keys_cannot_collide_with_a_namespace():
    keys = Keys("mc")
    # "!" is not a namespace character, so no tenant's keys can live under "mc:!ops:".
    assert keys.dead_letter_namespaces().startswith("mc:!ops:")
    assert keys.unroutable_dead_letters().startswith("mc:!ops:")
    assert keys.operator_usage().startswith("mc:!ops:")
