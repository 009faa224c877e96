"""Token counting with the model's own tokenizer, for servers that send no ``usage``.

Used only when the user names a tokenizer (``--tokenizer``): a ``tokenizer.json`` file or the model
folder holding one, read with the Hugging Face ``tokenizers`` library.  Characters are never
counted as tokens.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from sparkrack.errors import Problem, SparkrackError

TOKENIZERS_PIN = "tokenizers==0.23.3"


class FileTokenizer:
    """A :class:`sparkrack.bench.client.TokenCounter` backed by a ``tokenizer.json`` file."""

    def __init__(self, path: Path) -> None:
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise SparkrackError(
                Problem(
                    str(path),
                    "--tokenizer",
                    "no tokenizer.json here",
                    "give the model folder or its tokenizer.json file",
                    "bench-tokenizer",
                )
            )
        try:
            module: Any = importlib.import_module("tokenizers")
        except ImportError:
            raise SparkrackError(
                Problem(
                    str(file),
                    "--tokenizer",
                    "the 'tokenizers' package is not installed",
                    f"pip install {TOKENIZERS_PIN}",
                    "bench-tokenizer",
                )
            ) from None
        try:
            self._tok = module.Tokenizer.from_file(str(file))
        except Exception as exc:  # noqa: BLE001 - the library raises bare Exceptions on bad files
            raise SparkrackError(
                Problem(
                    str(file),
                    "--tokenizer",
                    f"not a tokenizer.json the tokenizers library can read ({exc})",
                    "give the model's tokenizer.json",
                    "bench-tokenizer",
                )
            ) from None
        self.name = file.parent.name + "/" + file.name

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)
