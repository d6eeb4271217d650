from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from memory_core.core.errors import ConfigurationError, InvalidRequestError
from memory_core.core.settings import Settings, load_settings, redact_url

ROOT = Path(__file__).parents[3]


def _env_names(model: type[BaseModel], prefix: str = "MEMORY_") -> set[str]:
    names = set()
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names |= _env_names(annotation, f"{prefix}{name.upper()}__")
        else:
            names.add(f"{prefix}{name.upper()}")
    return names


def test_every_name_in_env_example_maps_to_a_setting():
    known = _env_names(Settings)
    written = set()
    for line in (ROOT / ".env.example").read_text().splitlines():
        line = line.lstrip("# ").strip()
        if line.startswith("MEMORY_") and "=" in line:
            written.add(line.split("=", 1)[0])
    assert written - known == set()
    assert known - written == set(), "document every setting in .env.example"


def test_nested_variables_are_read_with_the_prefix(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_REDIS__URL", "redis://cache:6380/2")
    monkeypatch.setenv("MEMORY_CELERY__CONCURRENCY", "8")
    settings = load_settings(_env_file=None)
    assert settings.redis.url == "redis://cache:6380/2"
    assert settings.celery.concurrency == 8
    assert settings.broker_url == "redis://cache:6380/2"


def test_a_wrong_value_names_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_CELERY__CONCURRENCY", "many")
    with pytest.raises(ConfigurationError, match="MEMORY_CELERY__CONCURRENCY"):
        load_settings(_env_file=None)


def test_a_bad_redis_url_is_refused_without_showing_its_password(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_REDIS__URL", "http://user:hunter2@host/0")
    with pytest.raises(ConfigurationError, match="MEMORY_REDIS__URL") as info:
        load_settings(_env_file=None)
    assert "hunter2" not in str(info.value)


def test_secrets_never_show_in_repr(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_ANTHROPIC__API_KEY", "sk-ant-secret")
    monkeypatch.setenv("MEMORY_AUTH__TOKENS", '{"tok-secret": "acme"}')
    monkeypatch.setenv("MEMORY_CLIENT__TOKEN", "tok-secret")
    settings = load_settings(_env_file=None)
    assert "sk-ant-secret" not in repr(settings)
    assert "tok-secret" not in repr(settings)
    assert settings.anthropic.api_key is not None
    assert settings.anthropic.api_key.get_secret_value() == "sk-ant-secret"


def test_redact_url_hides_only_the_password():
    assert redact_url("redis://:pw@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("rediss://user:pw@host/0") == "rediss://user:***@host/0"
    assert redact_url("redis://host/0") == "redis://host/0"


def test_a_visibility_timeout_within_the_retry_backoff_is_refused(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_CELERY__VISIBILITY_TIMEOUT", "30")
    with pytest.raises(ConfigurationError, match=r"visibility_timeout \(30s\) must exceed retry_backoff_max \(60s\)"):
        load_settings(_env_file=None)
    monkeypatch.setenv("MEMORY_CELERY__RETRY_BACKOFF_MAX", "20")
    assert load_settings(_env_file=None).celery.visibility_timeout == 30


@pytest.mark.parametrize(
    ("variable", "value"),
    [("MEMORY_FLOWER__BASIC_AUTH", "only-a-user-secret"), ("MEMORY_AUTH__TOKENS", "not json secret")],
)
def test_a_malformed_secret_is_refused_without_showing_it(monkeypatch: pytest.MonkeyPatch, variable: str, value: str):
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=variable) as info:
        load_settings(_env_file=None)
    assert "secret" not in str(info.value)


@pytest.mark.parametrize("blank", ["", "   "])
def test_an_empty_secret_is_no_secret(monkeypatch: pytest.MonkeyPatch, blank: str):
    # docker-compose.yml passes MEMORY_ANTHROPIC__API_KEY= when no key is given.
    for name in ("ANTHROPIC__API_KEY", "QDRANT__API_KEY", "AUTH__TOKENS", "CLIENT__TOKEN", "FLOWER__BASIC_AUTH"):
        monkeypatch.setenv(f"MEMORY_{name}", blank)
    settings = load_settings(_env_file=None)
    assert settings.anthropic.api_key is None
    assert settings.qdrant.api_key is None
    assert settings.auth.tokens is None
    assert settings.client.token is None
    assert settings.flower.basic_auth is None


def test_an_empty_api_key_means_the_offline_summarizer(caplog: pytest.LogCaptureFixture):
    from memory_core.engine.compaction import open_summarizer
    from memory_core.engine.compaction.extractive import ExtractiveSummarizer
    from memory_core.engine.embedders.hashing import HashingEmbedder

    settings = Settings(_env_file=None, anthropic={"api_key": ""})
    with caplog.at_level("WARNING"):
        assert isinstance(open_summarizer(settings, HashingEmbedder()), ExtractiveSummarizer)
    assert "offline extractive summarizer" in caplog.text


def test_a_misspelled_setting_is_named_with_the_closest_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    monkeypatch.setenv("MEMORY_QDRANT__PATHH", "/data")
    monkeypatch.setenv("MEMORY_REDIS_URL", "redis://elsewhere")
    monkeypatch.setenv("MEMORY_NOTHING_LIKE_IT", "1")
    monkeypatch.setenv("MEMORY_TEST_REDIS_URL", "redis://tests")  # the test suite's own
    with caplog.at_level("WARNING"):
        load_settings(_env_file=None)
    assert "MEMORY_QDRANT__PATHH is not a memory-core setting and is ignored; did you mean MEMORY_QDRANT__PATH?" in (
        caplog.text
    )
    assert (
        "MEMORY_REDIS_URL is not a memory-core setting and is ignored; did you mean MEMORY_REDIS__URL?" in caplog.text
    )
    assert "MEMORY_NOTHING_LIKE_IT is not a memory-core setting and is ignored; see .env.example" in caplog.text
    assert "MEMORY_TEST_REDIS_URL" not in caplog.text


def test_every_setting_says_what_it_means():
    # The Configuration page is generated from these descriptions (ops/docs_hooks.py): a setting without
    # one would be a row that says nothing.
    missing = [
        f"MEMORY_{group.upper()}__{name.upper()}"
        for group, field in Settings.model_fields.items()
        for name, inner in field.annotation.model_fields.items()  # type: ignore[union-attr]
        if not (inner.description or "").strip()
    ]
    assert missing == []


def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cwd: Path) -> None:
    for name in ("MEMORY_QDRANT__PATH", "MEMORY_STACK__RUN_DIR", "MEMORY_STACK__BACKUP_DIR", "XDG_DATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(cwd)


def test_data_paths_default_to_the_users_data_directory_from_any_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    seen = []
    for cwd in (tmp_path / "one", tmp_path / "two"):
        _isolated(monkeypatch, tmp_path, cwd)
        settings = load_settings(_env_file=None)
        seen.append((settings.qdrant.path, settings.stack.run_dir, settings.stack.backup_dir))
    data = tmp_path / "home" / ".local" / "share" / "memory-core"
    assert seen == [(data / "qdrant", data / "run", data / "backups")] * 2


def test_xdg_data_home_moves_the_data_directory_and_a_relative_one_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    _isolated(monkeypatch, tmp_path, tmp_path / "cwd")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert load_settings(_env_file=None).qdrant.path == tmp_path / "xdg" / "memory-core" / "qdrant"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # the XDG spec: relative paths are invalid
    assert load_settings(_env_file=None).qdrant.path == tmp_path / "home/.local/share/memory-core/qdrant"


def test_a_tilde_in_a_data_path_is_the_home_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    _isolated(monkeypatch, tmp_path, tmp_path / "cwd")
    monkeypatch.setenv("MEMORY_QDRANT__PATH", "~/vectors")
    assert load_settings(_env_file=None).qdrant.path == tmp_path / "home" / "vectors"


def test_an_earlier_versions_store_in_the_working_directory_is_kept_in_use_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    old = tmp_path / "project"
    (old / ".memory-core" / "qdrant").mkdir(parents=True)
    _isolated(monkeypatch, tmp_path, old)
    with caplog.at_level("WARNING"):
        settings = load_settings(_env_file=None)
    legacy = old / ".memory-core"
    assert (settings.qdrant.path, settings.stack.run_dir) == (legacy / "qdrant", legacy / "run")
    new = tmp_path / "home" / ".local" / "share" / "memory-core"
    assert f"using {legacy}, the data directory of earlier versions" in caplog.text
    assert f"mv {legacy} {new}" in caplog.text
    caplog.clear()
    new.mkdir(parents=True)  # moved (or started afresh): the per-user directory wins, and nothing is said
    with caplog.at_level("WARNING"):
        assert load_settings(_env_file=None).qdrant.path == new / "qdrant"
    assert "earlier versions" not in caplog.text


def test_a_data_path_set_in_the_old_place_on_purpose_is_not_warned_about(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    old = tmp_path / "project"
    (old / ".memory-core").mkdir(parents=True)
    _isolated(monkeypatch, tmp_path, old)
    for name, value in (("QDRANT__PATH", "q"), ("STACK__RUN_DIR", "r"), ("STACK__BACKUP_DIR", "b")):
        monkeypatch.setenv(f"MEMORY_{name}", f".memory-core/{value}")
    with caplog.at_level("WARNING"):
        load_settings(_env_file=None)
    assert "earlier versions" not in caplog.text


def test_reranking_is_off_by_default_and_takes_a_fastembed_or_http_spec(monkeypatch: pytest.MonkeyPatch):
    assert load_settings(_env_file=None).rerank.model == ""
    for spec in ("fastembed:Xenova/ms-marco-MiniLM-L-6-v2", "http:http://localhost:8080/rerank"):
        monkeypatch.setenv("MEMORY_RERANK__MODEL", spec)
        assert load_settings(_env_file=None).rerank.model == spec


@pytest.mark.parametrize(
    "spec", ["cohere", "fastembed:", "http:localhost:8080/rerank", "http:ftp://host/rerank", "fastembed:a b"]
)
def test_a_rerank_spec_of_no_accepted_form_names_the_value_and_the_forms(monkeypatch: pytest.MonkeyPatch, spec: str):
    monkeypatch.setenv("MEMORY_RERANK__MODEL", spec)
    with pytest.raises(ConfigurationError, match="MEMORY_RERANK__MODEL") as info:
        load_settings(_env_file=None)
    assert f"got {spec!r}" in str(info.value)
    assert "fastembed:<cross-encoder name> or http:<URL of a /rerank endpoint>" in str(info.value)


def test_a_rerank_url_is_shown_without_its_password_and_the_key_is_a_secret(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_RERANK__MODEL", "http:ftp://user:hunter2@host/rerank")
    with pytest.raises(ConfigurationError) as info:
        load_settings(_env_file=None)
    assert "hunter2" not in str(info.value)
    monkeypatch.setenv("MEMORY_RERANK__MODEL", "http:https://rerank.example/v1/rerank")
    monkeypatch.setenv("MEMORY_RERANK__API_KEY", "rk-secret")
    settings = load_settings(_env_file=None)
    assert "rk-secret" not in repr(settings)
    monkeypatch.setenv("MEMORY_RERANK__API_KEY", "")
    assert load_settings(_env_file=None).rerank.api_key is None


@pytest.mark.parametrize("candidates", ["0", "201", "many"])
def test_rerank_candidates_are_bounded(monkeypatch: pytest.MonkeyPatch, candidates: str):
    monkeypatch.setenv("MEMORY_RERANK__CANDIDATES", candidates)
    with pytest.raises(ConfigurationError, match="MEMORY_RERANK__CANDIDATES"):
        load_settings(_env_file=None)


@pytest.mark.parametrize("spec", ["minilm", "minilm:all-MiniLM-L6-v2", "all-MiniLM-L6-v2"])
def test_the_shipped_embedder_is_taken_by_the_name_status_shows_and_kept_as_one_spec(
    monkeypatch: pytest.MonkeyPatch, spec: str
):
    monkeypatch.setenv("MEMORY_EMBEDDER__MODEL", spec)
    assert load_settings(_env_file=None).embedder.model == "all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("spec", "meant"),
    [
        ("fastembd:BAAI/bge-small-en-v1.5", "fastembed:BAAI/bge-small-en-v1.5"),
        ("FastEmbed:BAAI/bge-small-en-v1.5", "fastembed:BAAI/bge-small-en-v1.5"),
        ("BAAI/bge-small-en-v1.5", "fastembed:BAAI/bge-small-en-v1.5"),
        ("openai/text-embedding-3-small", "openai:text-embedding-3-small"),
        ("text-embedding-3-small", "openai:text-embedding-3-small"),
        ("MiniLM", "minilm"),
        ("sentence-transformers/all-MiniLM-L6-v2", "minilm"),
        ("word2vec", None),
    ],
)
def test_an_embedder_spec_error_says_the_forms_in_words_and_what_a_near_miss_meant(
    monkeypatch: pytest.MonkeyPatch, spec: str, meant: str | None
):
    monkeypatch.setenv("MEMORY_EMBEDDER__MODEL", spec)
    with pytest.raises(ConfigurationError, match="MEMORY_EMBEDDER__MODEL") as info:
        load_settings(_env_file=None)
    message = str(info.value)
    assert "expected minilm (the shipped default), fastembed:<model>" in message
    assert "or openai:<model>" in message
    assert "hashing" not in message  # for tests only: never offered
    assert "\\S" not in message
    assert "pattern" not in message
    assert message.count(repr(spec)) == 1
    if meant is None:
        assert "did you mean" not in message
    else:
        assert f"did you mean {meant!r}?" in message


def test_a_reindex_target_is_checked_as_the_setting_is(monkeypatch: pytest.MonkeyPatch):
    from memory_core.core.messages import ReindexRequest
    from memory_core.core.validation import parse

    assert parse(ReindexRequest, {"action": "start", "to": "minilm"}, "reindex request").to == "all-MiniLM-L6-v2"
    with pytest.raises(InvalidRequestError) as info:
        parse(ReindexRequest, {"action": "start", "to": "fastembd:BAAI/bge-small-en-v1.5"}, "reindex request")
    assert "did you mean 'fastembed:BAAI/bge-small-en-v1.5'?" in str(info.value)
    assert "pattern" not in str(info.value)


@pytest.mark.parametrize(
    "spec",
    [
        "http://localhost:8080/rerank",
        "https://rerank.example/v1/rerank",
        "http:localhost:8080/rerank",
        "localhost:8080/rerank",
    ],
)
def test_a_rerank_url_without_its_http_provider_is_named_with_the_spec_meant_and_the_value_once(
    monkeypatch: pytest.MonkeyPatch, spec: str
):
    monkeypatch.setenv("MEMORY_RERANK__MODEL", spec)
    with pytest.raises(ConfigurationError) as info:
        load_settings(_env_file=None)
    message = str(info.value)
    url = spec.removeprefix("http:") if spec.startswith("http:") and "://" not in spec else spec
    meant = f"http:{url}" if "://" in url else f"http:http://{url}"
    assert f"did you mean {meant!r}?" in message
    assert message.count("got") == 1
    assert message.count(repr(spec)) == 1


def test_a_misspelt_rerank_provider_is_named_with_the_spec_meant(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MEMORY_RERANK__MODEL", "fastembd:Xenova/ms-marco-MiniLM-L-6-v2")
    with pytest.raises(ConfigurationError, match=r"did you mean 'fastembed:Xenova/ms-marco-MiniLM-L-6-v2'\?"):
        load_settings(_env_file=None)


@pytest.mark.parametrize("variable", ["MEMORY_EMBEDDER__BASE_URL", "MEMORY_ANTHROPIC__BASE_URL"])
def test_a_base_url_without_its_scheme_is_refused_at_load_with_the_url_meant(
    monkeypatch: pytest.MonkeyPatch, variable: str
):
    monkeypatch.setenv(variable, "localhost:8080/v1")
    with pytest.raises(ConfigurationError, match=variable) as info:
        load_settings(_env_file=None)
    assert "expected an http:// or https:// URL" in str(info.value)
    assert "did you mean 'http://localhost:8080/v1'?" in str(info.value)
    for wrong in ("ftp://host/v1", "http://host:port/v1", "http:///v1"):
        monkeypatch.setenv(variable, wrong)
        with pytest.raises(ConfigurationError, match=variable):
            load_settings(_env_file=None)
    monkeypatch.setenv(variable, "https://llm.example:8443/v1")
    assert load_settings(_env_file=None).model_dump()[variable.split("__")[0][7:].lower()]["base_url"] == (
        "https://llm.example:8443/v1"
    )
    monkeypatch.setenv(variable, "")  # docker-compose passes VAR= for an unset one
    assert load_settings(_env_file=None).model_dump()[variable.split("__")[0][7:].lower()]["base_url"] is None


def test_tombstones_must_outlive_a_write_riding_out_an_embedding_outage():
    # 300 s visibility + 5 x 60 s retries = 600 s; a write riding out a 5-minute outage comes as late as 960 s.
    with pytest.raises(ConfigurationError, match=r"MEMORY_EMBEDDER__OUTAGE_RETRY .*\(960s\)"):
        load_settings(_env_file=None, qdrant={"tombstone_ttl": 700})
    assert load_settings(_env_file=None, qdrant={"tombstone_ttl": 961}).embedder.outage_retry == 5
