"""Asymmetric embedders: the presets, the settings over them, and the fingerprint they make."""

from __future__ import annotations

import hashlib
import json

import pytest
from pydantic import ValidationError

from memory_core.core.errors import ConfigurationError
from memory_core.core.settings import EmbedderSettings
from memory_core.engine.embedders import open_embedder
from memory_core.engine.embedders.base import EmbedderFingerprint
from memory_core.engine.embedders.roles import PRESETS, Roles, roles_of


def test_a_preset_gives_both_roles_and_each_setting_takes_its_part_over():
    assert roles_of(EmbedderSettings(roles="e5")) == Roles(query_prefix="query: ", document_prefix="passage: ")
    mixed = roles_of(EmbedderSettings(roles="input-type", query_prefix="q: ", document_params={"input_type": "doc"}))
    assert mixed == Roles(
        query_prefix="q: ", query_params={"input_type": "query"}, document_params={"input_type": "doc"}
    )
    assert roles_of(EmbedderSettings()) == Roles()
    assert roles_of(EmbedderSettings(), default=Roles(query_prefix="x")) == Roles(query_prefix="x")
    assert roles_of(EmbedderSettings(query_prefix=""), default=Roles(query_prefix="x")) == Roles()  # "" is none


def test_every_preset_tells_queries_from_documents():
    assert all(roles.query_prefix or roles.query_params for roles in PRESETS.values())
    assert all(not roles.symmetric for roles in PRESETS.values())


@pytest.mark.parametrize("field", ["model", "input", "dimensions", "encoding_format"])
def test_request_fields_memory_core_sets_itself_are_refused_as_params(field: str):
    with pytest.raises(ValidationError, match=field):
        EmbedderSettings(query_params={field: "x"})
    with pytest.raises(ValidationError):
        EmbedderSettings.model_validate({"document_params": {"input_type": ["not", "a", "scalar"]}})


def test_a_symmetric_fingerprint_keeps_the_id_stores_recorded_before_roles_existed():
    fingerprint = EmbedderFingerprint(provider="openai", model="m", revision="localhost", dimension=8, pooling="remote")
    before = {
        k: v for k, v in fingerprint.model_dump(mode="json").items() if k not in ("query_params", "document_params")
    }
    recorded_id = hashlib.sha256(json.dumps(before, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert fingerprint.id == recorded_id
    fields = Roles(query_params={"input_type": "query"}).fingerprint_fields()
    asymmetric = fingerprint.model_copy(update=fields)
    assert asymmetric.id != fingerprint.id
    assert "query fields" in asymmetric.describe()


def test_a_symmetric_model_refuses_role_settings():
    with pytest.raises(ConfigurationError, match="alike by design"):
        open_embedder(EmbedderSettings(model="hashing", roles="e5"))
