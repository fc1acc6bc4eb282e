"""Contract tests run PRIME-RL's own code against ours.

They need a PRIME-RL source checkout at the pinned commit, named by PRIME_RL_SRC; PRIME-RL itself cannot be
installed on CPU machines (Python 3.12 + CUDA), but its sources import under Python 3.11 once their PyPI
dependencies are present (beartype, wandb, loguru). Without PRIME_RL_SRC every test here skips with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PINNED_COMMIT = "559b447"
SKIP_REASON = (
    "PRIME_RL_SRC is not set: point it at a PRIME-RL checkout at commit 559b447 "
    "(git clone https://github.com/PrimeIntellect-ai/prime-rl && git -C prime-rl checkout 559b447) "
    "and `pip install beartype wandb loguru` to run the contract tests"
)


def prime_rl_src() -> Path | None:
    value = os.environ.get("PRIME_RL_SRC")
    return Path(value).resolve() if value else None


def pytest_configure(config: pytest.Config) -> None:
    src = prime_rl_src()
    if src is None:
        return
    if not (src / "src" / "prime_rl").is_dir():
        raise pytest.UsageError(f"PRIME_RL_SRC={src} is not a PRIME-RL checkout (no src/prime_rl); fix the path")
    for path in (src / "src", src / "packages" / "prime-rl-configs" / "src"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if prime_rl_src() is not None:
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def prime_rl_commit() -> str | None:
    """The checkout's HEAD, or None when PRIME_RL_SRC is a plain source tree without git metadata."""
    src = prime_rl_src()
    assert src is not None
    if not (src / ".git").exists():
        return None
    result = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True
    )
    return result.stdout.strip()
