"""The README opens with the two fresh-machine commands: CI runs the second verbatim (its install and lint, then its
pytest), and the first fetches PRIME-RL
at the pinned commit and runs the smoke on it with the torch index the smoke's venvs need."""

from __future__ import annotations

import re
from pathlib import Path

from composer_prime.local.tree import FETCH, PINNED_COMMIT
from composer_prime.local.venvs import TORCH_CPU_INDEX

REPO = Path(__file__).resolve().parents[2]


def opening_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert block is not None and block.start() < 400, "the README must open with its commands"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_smoke_then_tests_and_ci_runs_the_tests_command():
    smoke, tests = opening_commands()
    assert smoke.startswith(FETCH) and f"checkout {PINNED_COMMIT}" in smoke
    assert smoke.endswith(f"&& .venv/bin/composer-prime smoke --prime-rl ../prime-rl --torch-index {TORCH_CPU_INDEX}")
    install, _, run = tests.rpartition(" && ")
    assert run == ".venv/bin/python -m pytest"
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    # CI runs it as two lines, the image job started between them (in the background, beside the suite)
    assert install in ci and run in ci[ci.index(install) + 1 :]
