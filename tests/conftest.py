"""Suite-wide pytest setup: every test under tests/e2e is `slow`; `gpu` tests skip without CUDA. Nothing here kills
or patches processes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

E2E = Path(__file__).parent / "e2e"


@pytest.fixture(scope="session", autouse=True)
def scripted_model_key():
    """The key agents send to the scripted model server, set for the session and restored after it."""
    from tests.support.scripted_server import API_KEY_VAR

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(API_KEY_VAR, "scripted")
        yield


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if E2E in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slow)  # real subprocesses, servers and rollouts: `-m "not slow"` skips them
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device; run on a GPU machine with `pytest -m gpu`")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
