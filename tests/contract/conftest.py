"""Contract tests run PRIME-RL's own code against ours.

They need a PRIME-RL source checkout at the pinned commit, named by PRIME_RL_SRC; PRIME-RL itself cannot be
installed on CPU machines (Python 3.12 + CUDA), but its sources import under Python 3.11 once their PyPI
dependencies are present (beartype, wandb, loguru; msgspec and renderers for the orchestrator side). Without
PRIME_RL_SRC every test here skips with that reason.

PRIME-RL's orchestrator reads verifiers attributes that only its pinned snapshot (deps/verifiers, a60a606) has, so
the orchestrator-side tests need that snapshot installed in place of PyPI's 0.4.0 (README, contract section); the
`verifiers_snapshot` fixture fails with that fix when it is not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PINNED_COMMIT = "559b447"
SKIP_REASON = (
    "PRIME_RL_SRC is not set: point it at a PRIME-RL checkout at commit 559b447 with its verifiers submodule installed "
    "and `pip install beartype wandb loguru msgspec renderers` (README, contract section) to run the contract tests"
)


def prime_rl_src() -> Path | None:
    value = os.environ.get("PRIME_RL_SRC")
    return Path(value).resolve() if value else None


def contract_paths(src: Path) -> list[Path]:
    return [src / "src", src / "packages" / "prime-rl-configs" / "src"]


def contract_pythonpath(src: Path) -> str:
    """PYTHONPATH for a fresh interpreter that imports PRIME-RL from the checkout."""
    return os.pathsep.join(str(p) for p in contract_paths(src))


def pytest_configure(config: pytest.Config) -> None:
    src = prime_rl_src()
    if src is None:
        return
    if not (src / "src" / "prime_rl").is_dir():
        raise pytest.UsageError(f"PRIME_RL_SRC={src} is not a PRIME-RL checkout (no src/prime_rl); fix the path")
    for path in contract_paths(src):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


@pytest.fixture(scope="session")
def verifiers_snapshot() -> None:
    import verifiers.v1 as vf

    if not hasattr(vf.Branch, "multi_modal_data"):
        pytest.fail(
            "PRIME-RL's orchestrator at 559b447 needs its pinned verifiers snapshot (a60a606); this environment has "
            "verifiers from PyPI. Install the snapshot: git -C $PRIME_RL_SRC -c url.https://github.com/.insteadOf=git@github.com: submodule update --init deps/verifiers "
            "&& pip install $PRIME_RL_SRC/deps/verifiers"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if prime_rl_src() is not None:
        return
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def prime_rl_commit() -> str | None:
    """The checkout's HEAD; for a source tree without git metadata (a tarball), the commit PRIME_RL_COMMIT names
    (.ci/contract sets it from the tarball's file name), else None."""
    src = prime_rl_src()
    assert src is not None
    if not (src / ".git").exists():
        return os.environ.get("PRIME_RL_COMMIT") or None
    result = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30, check=True
    )
    return result.stdout.strip()


def run_with_prime_rl(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python <args>` in a fresh interpreter of this environment that imports PRIME-RL from PRIME_RL_SRC (and
    composer_prime only through the installed .pth, as a PRIME-RL process does)."""
    src = prime_rl_src()
    assert src is not None
    env = {**os.environ, "PYTHONPATH": contract_pythonpath(src)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=cwd, check=False, timeout=timeout
    )
