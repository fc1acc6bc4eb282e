"""The README's GPU install survives PRIME-RL's own launch scripts.

PRIME-RL's sbatch templates (single_node_rl / multi_node_rl, 559b447) run `uv sync --all-extras --all-packages` in the
PRIME-RL checkout before anything starts; `uv sync` removes every package the project does not declare, so a
composer-prime installed with `uv pip install -e` is gone when the orchestrator parses `type = "composer"`. The
README's path, `uv add --editable`, declares composer-prime and its environments in PRIME-RL's pyproject, so the sync
keeps them. Reproduced on a mock uv project shaped like PRIME-RL's root (a package plus a workspace), with uv from
PyPI resolving against PyPI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).parent / "uv"
SYNC = ["sync", "--all-extras", "--all-packages"]  # the templates' exact step

PYPROJECT = """[project]
name = "prime-rl"
version = "0.0.1"
requires-python = ">=3.11"
dependencies = ["tomli"]

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.hatch.build.targets.wheel]
packages = ["prime_rl"]

[tool.uv.workspace]
members = []
"""

PARSE = """
import sys, tomllib
from composer_prime.seam.hook import _Finder
assert any(isinstance(f, _Finder) for f in sys.meta_path), "the .pth hook did not load"
from composer_prime.algorithm.channels import refusals, source_channels
from composer_prime.algorithm.config import ComposerAlgoConfig
from feature_deletion.taskset import FeatureDeletionConfig
from swe_gym.taskset import SWEGymTasksetConfig
config = tomllib.load(open(sys.argv[1], "rb"))
orchestrator = config["orchestrator"]
ComposerAlgoConfig.model_validate(orchestrator["algo"])
kinds = {"feature-deletion": FeatureDeletionConfig, "swe-gym": SWEGymTasksetConfig}
for source in orchestrator["train"]["source"]:
    kinds[source["env"]["taskset"]["id"]].model_validate(source["env"]["taskset"])
assert refusals(orchestrator) == []
print(sorted((c.source, c.hints, c.replay) for c in source_channels(orchestrator)))
"""


def uv(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT"))}
    result = subprocess.run(
        [str(UV), *args], cwd=project, capture_output=True, text=True, timeout=900, env=env, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def mock_prime_rl(path: Path) -> Path:
    (path / "prime_rl").mkdir(parents=True)
    (path / "prime_rl" / "__init__.py").write_text("")
    (path / "pyproject.toml").write_text(PYPROJECT)
    return path


@pytest.mark.slow
def test_uv_add_editable_survives_the_sbatch_sync_and_parses_a_composer_toml(tmp_path):
    assert UV.exists(), "uv is a dev dependency: pip install -e '.[dev]'"
    project = mock_prime_rl(tmp_path / "prime-rl")
    envs = ROOT / "environments"
    uv(
        project,
        "add",
        "--python",
        sys.executable,
        "--editable",
        str(ROOT),
        str(envs / "feature_deletion"),
        f"{envs / 'swe_gym'}[hub]",
        str(envs / "realtime_sessions"),
    )
    uv(project, *SYNC)
    python = project / ".venv" / "bin" / "python"
    probe = [str(python), "-c", "import realtime_sessions, realtime_replay"]  # the realtime TOML's taskset and harness
    assert subprocess.run(probe, capture_output=True, timeout=120, cwd=tmp_path, check=False).returncode == 0
    result = subprocess.run(
        [str(python), "-c", PARSE, str(ROOT / "tomls" / "qwen3-32b-composer.toml")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # (source, hints, replay): the launch configs run all three channels
    assert result.stdout.strip() == "[('feature-deletion', True, True), ('swe-gym', True, True)]"


@pytest.mark.slow
def test_uv_pip_install_is_undone_by_the_sbatch_sync(tmp_path):
    # Why the README does not say `uv pip install -e`: the templates' sync uninstalls it.
    project = mock_prime_rl(tmp_path / "prime-rl")
    uv(project, "sync", "--python", sys.executable)
    uv(project, "pip", "install", "-e", str(ROOT))
    python = project / ".venv" / "bin" / "python"
    probe = [str(python), "-c", "import composer_prime"]
    assert subprocess.run(probe, capture_output=True, timeout=60, cwd=tmp_path, check=False).returncode == 0
    uv(project, *SYNC)
    assert subprocess.run(probe, capture_output=True, timeout=60, cwd=tmp_path, check=False).returncode != 0
