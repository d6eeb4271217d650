import pytest

from memory_core.embedders.minilm import _package_dir
from memory_core.errors import EmbedderError


def test_a_missing_model_package_says_how_to_install_it():
    with pytest.raises(EmbedderError, match="ops/install"):
        _package_dir("no_such_model_package_xyz")
