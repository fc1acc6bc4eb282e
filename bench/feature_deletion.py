"""Feature Deletion: mining time per validated task, and grading time against a bare pytest run of the same tests.

Builds a synthetic package (`--modules` modules of `--functions` functions, two tests each) in a temporary folder,
mines it with `composer-prime`'s miner, then for `--grade-tasks` tasks applies the gold patch in a subprocess box and
times the environment's grading (`FeatureDeletionTask.grade`: restore test files, `unshare -n` where allowed,
timeout, run, parse) against `python -m pytest` run bare in the same folder, alternating, `--repeats` times each.

    python bench/feature_deletion.py [--modules 6] [--functions 4] [--grade-tasks 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run as a script, this file's folder heads sys.path and its name would shadow the `feature_deletion` taskset module.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

MODULE = '''\
"""Module {m} of a synthetic package."""

'''
FUNCTION = '''\

def f{m}_{f}(x: int, y: int = {f}) -> int:
    """Combine `x` and `y` the {f}th way."""
    total = 0
    for i in range(x):
        total += (i * {m} + y) % 7
    return total + {f}

'''
TEST = """\

def test_f{m}_{f}_small():
    assert mod{m}.f{m}_{f}(3) == {small}


def test_f{m}_{f}_zero():
    assert mod{m}.f{m}_{f}(0, 2) == {f}

"""


def _reference(m: int, f: int, x: int, y: int) -> int:
    return sum((i * m + y) % 7 for i in range(x)) + f


def build_repo(root: Path, modules: int, functions: int) -> Path:
    repo = root / "synthetic"
    (repo / "synth").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "synth" / "__init__.py").write_text('"""Synthetic package."""\n')
    for m in range(modules):
        source = MODULE.format(m=m) + "".join(FUNCTION.format(m=m, f=f) for f in range(functions))
        (repo / "synth" / f"mod{m}.py").write_text(source)
        tests = f"from synth import mod{m}\n" + "".join(
            TEST.format(m=m, f=f, small=_reference(m, f, 3, f)) for f in range(functions)
        )
        (repo / "tests" / f"test_mod{m}.py").write_text(tests)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True, timeout=60)
    return repo


def bare_pytest(folder: Path) -> float:
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder, capture_output=True, timeout=600, check=False,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    return time.monotonic() - started


async def grade_vs_bare(task, repeats: int) -> tuple[float, float, bool]:
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import make_runtime

    runtime = make_runtime(vf.SubprocessConfig(), name="bench-featdel")
    await runtime.start()
    try:
        await task.setup(runtime)
        assert await task.validate(runtime), f"gold patch does not solve {task.data.name}"
        graded, bare, isolated = [], [], False
        for _ in range(repeats):
            grade = await task.grade(runtime)
            graded.append(grade.seconds)
            isolated = grade.network_isolated
            bare.append(await asyncio.to_thread(bare_pytest, Path(runtime.workdir)))
        return statistics.median(graded), statistics.median(bare), isolated
    finally:
        await runtime.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", type=int, default=6)
    parser.add_argument("--functions", type=int, default=4)
    parser.add_argument("--grade-tasks", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])

    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    from composer_prime.mining.miner import MineConfig, Miner
    from composer_prime.mining.testrun import run_tests

    with tempfile.TemporaryDirectory(prefix="bench-featdel-") as scratch:
        repo = build_repo(Path(scratch), args.modules, args.functions)
        plain = run_tests(["python", "-m", "pytest"], repo, 600)
        traced = run_tests(["python", "-m", "pytest"], repo, 600, trace=True)
        out = Path(scratch) / "tasks.jsonl"
        started = time.monotonic()
        tasks = Miner(MineConfig(repo=repo, out=out), log=lambda line: None).run()
        mining = time.monotonic() - started
        config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(out)}})
        loaded = list(load_taskset(config.taskset))[: args.grade_tasks]
        results = [asyncio.run(grade_vs_bare(task, args.repeats)) for task in loaded]

    n_tests = len(plain.outcomes)
    print(f"synthetic repo: {args.modules} modules x {args.functions} functions, {n_tests} tests")
    print(f"{'measure':<46} {'value':>10}")
    print(f"{'suite run, plain (s)':<46} {plain.seconds:>10.2f}")
    print(
        f"{'suite run, traced baseline (s) / ratio':<46} {traced.seconds:>10.2f}  x{traced.seconds / plain.seconds:.2f}"
    )
    print(f"{'mining wall time (s)':<46} {mining:>10.2f}")
    print(f"{'validated tasks':<46} {len(tasks):>10d}")
    print(f"{'mining time per validated task (s)':<46} {mining / max(len(tasks), 1):>10.2f}")
    print()
    print(f"{'task':<40} {'grade (s)':>10} {'bare pytest (s)':>16} {'ratio':>7} {'no-net':>7}")
    for task, (graded, bare, isolated) in zip(loaded, results):
        name = task.data.name.split(":", 1)[1]
        print(f"{name:<40} {graded:>10.2f} {bare:>16.2f} {graded / bare:>7.2f} {isolated!s:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
