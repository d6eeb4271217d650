from importlib.metadata import version

import memory_core


def test_the_public_api_is_exactly_what_all_says():
    exported = {name for name in dir(memory_core) if not name.startswith("_")}
    modules = {name for name in exported if type(getattr(memory_core, name)).__name__ == "module"}
    assert exported - modules == set(memory_core.__all__)
    assert memory_core.__all__ == sorted(memory_core.__all__)


def test_the_version_is_the_installed_distributions():
    assert memory_core.__version__ == version("memory-core")
    assert memory_core.__version__ != "0+unknown"
