"""The PRIME-RL seam is one package: the `.pth` hook, what it runs, and who may import it.

`composer_prime/seam/` holds every patch of PRIME-RL (docs/prime-rl-integration.md). The hook runs in every
interpreter of the environment and must cost nothing until PRIME-RL is imported; each of its targets names a function
of the seam; the pure core and the realtime taskset import nothing of the seam, so there is no circle between them.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

from composer_prime.seam.hook import TARGETS

ROOT = Path(__file__).resolve().parents[3]


def test_the_import_hook_is_installed_and_costs_nothing_without_prime_rl():
    # A fresh interpreter of this environment: the .pth has run, the finder waits, nothing heavy is imported.
    code = (
        "import sys; from composer_prime.seam.hook import _Finder; "
        "print(sum(isinstance(f, _Finder) for f in sys.meta_path), "
        "[m for m in ('torch', 'prime_rl', 'pydantic', 'verifiers') if m in sys.modules])"
    )
    probe = "import sys; print(sorted(m for m in sys.modules if m.startswith('composer_prime')))"
    before = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert "composer_prime.seam.hook" in before.stdout, "composer_prime_seam.pth is not installed"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.split() == ["1", "[]"]


def import_fake_prime_rl(root, module: str, source: str) -> subprocess.CompletedProcess:
    """Import `module` from a fake `prime_rl` under `root` whose module holds only `source` (the hook is installed)."""
    parts = module.split(".")
    for depth in range(1, len(parts)):
        folder = root.joinpath(*parts[:depth])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    root.joinpath(*parts[:-1], parts[-1] + ".py").write_text(source)
    return subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=False,
        timeout=60,
    )


def test_the_hook_refuses_a_moved_seam_naming_the_pinned_commit(tmp_path):
    # A `prime_rl` whose algorithm config module lacks the AlgoConfig union the hook extends.
    result = import_fake_prime_rl(
        tmp_path,
        "prime_rl.configs.algorithm",
        "from pydantic import BaseModel\nclass BaseAlgoConfig(BaseModel):\n    pass\n",
    )
    assert result.returncode != 0
    assert "SeamMoved" in result.stderr and "559b447" in result.stderr and "AlgoConfig" in result.stderr
    assert "composer_prime/seam/" in result.stderr  # where to move the patch


def test_a_moved_train_source_is_refused_by_the_seam(tmp_path):
    # The realtime source's patch checks its target as the algorithm's do.
    result = import_fake_prime_rl(tmp_path, "prime_rl.orchestrator.train_source", "class TrainSource:\n    pass\n")
    assert result.returncode != 0
    assert "SeamMoved" in result.stderr and "TrainSource.next_task" in result.stderr


def test_a_moved_train_sink_is_refused_by_the_seam(tmp_path):
    result = import_fake_prime_rl(tmp_path, "prime_rl.orchestrator.train_sink", "class TrainSink:\n    pass\n")
    assert result.returncode != 0
    assert "SeamMoved" in result.stderr and "TrainSink with _maybe_batch" in result.stderr


def test_every_hook_target_is_a_function_of_the_seam():
    assert set(TARGETS) == {
        "prime_rl.configs.algorithm",
        "prime_rl.configs.trainer",
        "prime_rl.configs.orchestrator",
        "prime_rl.configs.rl",
        "prime_rl.orchestrator.algo",
        "prime_rl.orchestrator.train_source",
        "prime_rl.orchestrator.train_sink",
    }
    for patch in TARGETS.values():
        module, function = patch.split(":")
        assert callable(getattr(importlib.import_module(f"composer_prime.seam.{module}"), function)), patch


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_nothing_outside_the_seam_imports_it():
    # The seam depends on the pure core and on the realtime taskset's TaskNotReady, never the other way round.
    outside = [
        path
        for folder in ("composer_prime", "composer_agent", "composer_teachers", "environments", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if "seam" not in path.relative_to(ROOT).parts[:2]
    ]
    assert len(outside) > 50
    offenders = {
        str(path.relative_to(ROOT)): sorted(n for n in imported_modules(path) if n.startswith("composer_prime.seam"))
        for path in outside
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_pure_core_and_the_realtime_side_load_no_seam_module():
    code = (
        "import sys\n"
        "import composer_prime.algorithm.channels, composer_prime.algorithm.credit, composer_prime.algorithm.hints\n"
        "import composer_prime.algorithm.scoring, composer_prime.realtime.ingest.readiness\n"
        "print(*sorted(m for m in sys.modules if m.startswith('composer_prime.seam')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert set(result.stdout.split()) <= {"composer_prime.seam", "composer_prime.seam.hook"}  # the .pth's own
