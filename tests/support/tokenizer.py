"""A tiny byte-level BPE tokenizer on disk (the smoke's builder), for tests that decode token streams: any text
encodes to ids and decodes back exactly."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path


@functools.cache
def tiny_tokenizer() -> str:
    """The dir of the tokenizer, built once per process."""
    from composer_prime.local.policy import build_tokenizer

    path = Path(tempfile.mkdtemp(prefix="tiny-tokenizer-"))
    build_tokenizer(
        ["def f(a, b):\n    return a + b\n", "Write the function.", "0123456789 abc XYZ"], 300
    ).save_pretrained(path)
    return str(path)


def encode(text: str) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer()).encode(text, add_special_tokens=False)
