"""Suite-wide pytest setup: `gpu` tests skip without CUDA; nothing here kills or patches processes."""

from __future__ import annotations

import importlib.util

import pytest


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device; run on a GPU machine with `pytest -m gpu`")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
