"""Feature Deletion: mining cost per candidate against a bare suite run, and grading time against bare pytest.

Builds a synthetic package (`--modules` modules of `--functions` functions, two tests each) in a temporary folder
and, for each `--sdist NAME==VERSION`, fetches that release's sdist with `pip download --no-deps --no-binary :all:`
(nothing is kept). Each repository is mined with the miner's defaults (up to `--max-tasks` tasks): the figures are
the bare suite time (`python -m pytest -q`), the time per candidate tried and its ratio to the bare suite, the
mean row size and the first task names. Then for `--grade-tasks` tasks the gold patch is applied in a subprocess box
and validated under the grader's default isolation, and the grading (`FeatureDeletionTask.grade`: reap, clean,
scan, canaries, trusted launcher, network namespace) is timed against bare pytest over the same tree, `--repeats`
times each, with pytest's plugin autoload off in both (grading turns it off; the bare run with it on, the figure
this bench reported before, is the table's last timing column). The bare run gets the whole suite: the box's tree (gold code applied) copied once, with the test files the
task holds back from the agent written back (grading writes them into its private copy only, so the box's own
folder lacks them).

`--image IMAGE` grades each task a second time in image mode: a podman container from IMAGE (a local image with
python3 and pytest, as `.ci/image` builds; set CONTAINERS_CONF as docs/image-mode.md says), against a bare
`podman run --rm` of the image over the same tree (a container started, the suite run, the container removed).

`--pytest NAME=SPEC` runs NAME's tests (mining, grading and the bare run) with `pytest SPEC` from a fresh venv
holding nothing else (boltons' `conftest.py` needs `pytest<9`); `--no-near-copy NAME` mines NAME with the near-copy
check off, for a host whose own packages vendor a copy of it (setuptools vendors more_itertools): such tasks are
fine for timing the grader, not for training on the subprocess runtime. The run ends with the grading table.

    python bench/feature_deletion.py [--modules 6] [--functions 4] [--sdist toolz==1.2.0 ...] [--max-tasks 20] \
        [--pytest 'boltons=<9'] [--no-near-copy more-itertools]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
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


TABLE: list[str] = []
"""Rows of the grading table printed at the end."""
CALLS: list[int] = [0]
"""Runtime calls made so far: on a podman box each is a `podman exec` (or another `podman` command), on the
subprocess runtime one `run`, `read` or `write`."""


def count_runtime_calls() -> None:
    """Count every runtime call in `CALLS` (once): each `podman` command a container runtime starts, each `run`,
    `read` and `write` of the subprocess runtime."""
    from verifiers.v1.runtimes import container
    from verifiers.v1.runtimes import subprocess as local

    if getattr(container.ContainerRuntime, "_bench_counted", False):
        return

    def counted(method):  # type: ignore[no-untyped-def]
        async def call(*args, **kwargs):  # type: ignore[no-untyped-def]
            CALLS[0] += 1
            return await method(*args, **kwargs)

        return call

    for cls, names in (
        (container.ContainerRuntime, ("_run_host", "_communicate_host")),
        (local.SubprocessRuntime, ("run", "read", "write")),
    ):
        for name in names:
            setattr(cls, name, counted(getattr(cls, name)))
    container.ContainerRuntime._bench_counted = True


BARE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
"""The bare run's environment: pytest's plugin autoload off, as grading runs it (the fair comparison); `autoload=True`
times the bare run with every installed plugin loaded, the figure this bench reported before."""


def bare_pytest(folder: Path, python: str = sys.executable, autoload: bool = False) -> float:
    started = time.monotonic()
    env = {**os.environ, **BARE_ENV}
    if autoload:
        env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        capture_output=True,
        timeout=600,
        check=False,
        env=env,
    )
    return time.monotonic() - started


def bare_podman_run(image: str, folder: Path, python: str) -> float:
    """The bare suite as a fresh `podman run --rm` of the image over `folder` (mounted): a container started, the
    tests run, the container removed, which is what a grading in image mode is compared with."""
    started = time.monotonic()
    env = [arg for key, value in BARE_ENV.items() for arg in ("--env", f"{key}={value}")]
    subprocess.run(
        ["podman", "run", "--rm", *env, "-v", f"{folder}:/bench", "-w", "/bench", image, python, "-m", "pytest", "-q"]
        + ["-p", "no:cacheprovider"],
        capture_output=True,
        timeout=600,
        check=False,
    )
    return time.monotonic() - started


async def grade_vs_bare(
    task, repeats: int, image: str = ""
) -> tuple[float, float, float | None, bool, str, int] | None:
    """Median grading and bare-suite seconds, alternating, and on the subprocess runtime the bare suite with plugin
    autoload on; the bare run uses the grading interpreter. With `image`, the box is a podman container from it (image
    mode) and the bare suite a fresh `podman run --rm` of the image over the box's tree."""
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import make_runtime

    config = vf.PodmanConfig(image=image, workdir=task.data.workdir) if image else vf.SubprocessConfig()
    runtime = make_runtime(config, name=f"bench-featdel-{os.getpid()}")  # two benches at once do not collide
    await runtime.start()
    try:
        await task.setup(runtime)
        if not await task.validate(runtime):
            return None  # the taskset logged why
        with tempfile.TemporaryDirectory(prefix="bench-bare-") as scratch:
            whole = Path(scratch) / "tree"  # the suite as the repository ships it: held-out test files included
            if image:  # the box's tree, copied out of its container
                workdir = (await runtime.run(["pwd", "-P"], {})).stdout.strip()
                container = runtime._container  # verifiers' PodmanRuntime names its container there
                subprocess.run(["podman", "cp", f"{container}:{workdir}", str(whole)], check=True, timeout=300)
            else:
                shutil.copytree(runtime.workdir, whole, symlinks=True)
            for path, data in task.baseline().owned.items():
                (whole / path).parent.mkdir(parents=True, exist_ok=True)
                (whole / path).write_bytes(data)
            graded, bare, loaded, isolated, isolation, calls = [], [], [], False, "", 0
            for _ in range(repeats):
                before = CALLS[0]
                grade = await task.grade(runtime)
                calls = CALLS[0] - before
                graded.append(grade.seconds)
                isolated = grade.network_isolated
                isolation = ("image: " if image else "") + grade.isolation
                isolation += " + grader box" if grade.grader_box else " + private copy" if grade.private_copy else ""
                if image:
                    bare.append(await asyncio.to_thread(bare_podman_run, image, whole, task.python))
                else:
                    bare.append(await asyncio.to_thread(bare_pytest, whole, task.python))
                    loaded.append(await asyncio.to_thread(bare_pytest, whole, task.python, True))
        autoloaded = statistics.median(loaded) if loaded else None
        return statistics.median(graded), statistics.median(bare), autoloaded, isolated, isolation, calls
    finally:
        await runtime.stop()


def fetch_sdist(spec: str, into: Path) -> Path:
    """Download and unpack one sdist; returns the project's folder."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", spec, "-d", str(into)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (archive,) = into.glob("*.tar.gz")
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(into)], check=True, timeout=120)
    archive.unlink()
    (folder,) = [p for p in into.iterdir() if p.is_dir()]
    return folder


def pytest_venv(spec: str, into: Path) -> str:
    """A venv holding only `pytest<spec>`; its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", str(into)], check=True, timeout=300)
    subprocess.run([into / "bin" / "pip", "install", "-q", f"pytest{spec}"], check=True, timeout=600)
    return str(into / "bin" / "python")


def bench_repo(name: str, repo: Path, scratch: Path, args: argparse.Namespace, python: str = sys.executable) -> None:
    from composer_prime.mining.config import MineConfig
    from composer_prime.mining.copies import NEAR_COPY
    from composer_prime.mining.miner import Miner

    bare = statistics.median(bare_pytest(repo, python) for _ in range(2))
    out = scratch / f"{name}.jsonl"
    # The synthetic functions share one template, so every one is a near copy of the others: that check is off there.
    near_copy = 1.01 if name == "synthetic" or name.split("==")[0] in args.no_near_copy else NEAR_COPY
    config = MineConfig(
        repo=repo, out=out, max_tasks=args.max_tasks, near_copy=near_copy, test_cmd=[python, "-m", "pytest"]
    )
    miner = Miner(config, log=lambda line: None)
    started = time.monotonic()
    tasks = miner.run()
    mining = time.monotonic() - started
    stats = miner.stats
    per_candidate = stats["candidate_seconds"] / max(stats["tried"], 1)
    rows = out.read_bytes().splitlines() if out.exists() else []
    print(f"== {name}" + ("" if python == sys.executable else f"  (tests run by {python})"))
    print(f"  bare suite run (s)                    {bare:8.2f}")
    print(
        f"  baseline untraced / traced (s)        {stats['baseline_untraced_s']:8.2f} / {stats['baseline_traced_s']:.2f}"
    )
    print(f"  candidates: listed / tried / kept     {stats['candidates']:8.0f} / {stats['tried']:.0f} / {len(tasks)}")
    print(f"  time per candidate (s), x bare        {per_candidate:8.2f}  x{per_candidate / bare:.2f}")
    print(f"  mining wall time (s)                  {mining:8.2f}")
    print(f"  row size, mean (kB)                   {statistics.mean(map(len, rows)) / 1000 if rows else 0:8.1f}")
    for task in tasks[:5]:
        print(f"  task: {task.task_id}  [{task.why}]")
    if tasks:
        grade_tasks(name, out, args)


def grade_tasks(name: str, tasks_file: Path, args: argparse.Namespace) -> None:
    from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

    def tasks(image: str) -> list:
        settings = {"id": "feature-deletion", "tasks": str(tasks_file)} | (
            {"task": {"python": "python"}} if image else {}
        )
        return list(load_taskset(resolve_env_config({"taskset": settings}).taskset))[: args.grade_tasks]

    loaded = {image: tasks(image) for image in ["", *args.image]}
    for index in range(len(loaded[""])):  # each task on every runtime in turn, so load drifts alike over them
        for image, those in loaded.items():
            grade_one(name, those[index], image, args.repeats)


def grade_one(name: str, task, image: str, repeats: int) -> None:
    measured = asyncio.run(grade_vs_bare(task, repeats, image))
    feature = task.data.name.split(":", 1)[1]
    if measured is None:
        print(f"  gold patch of {feature} does not validate{' in ' + image if image else ''}: not timed")
        return
    graded, bare_box, autoloaded, isolated, isolation, calls_made = measured
    calls = len(task.data.mined.behaviour)
    old = f"{autoloaded:.2f} s ({graded / autoloaded:.2f}x)" if autoloaded is not None else "-"
    print(
        f"  gold 1.0: {feature:<44} grade {graded:6.2f}s  bare {bare_box:6.2f}s  "
        f"x{graded / bare_box:.2f}  autoload on {old}  no-net {isolated}  {isolation}  replayed calls {calls}  "
        f"runtime calls {calls_made}"
    )
    print(flush=True, end="")
    load = os.getloadavg()[0]  # the host is often shared: a ratio means little without it
    TABLE.append(
        f"| {name} `{feature}` | {calls} | {graded:.2f} s | {bare_box:.2f} s | {graded / bare_box:.2f}x | {old} | "
        f"{calls_made} | {load:.1f} | {isolation} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", type=int, default=6)
    parser.add_argument("--functions", type=int, default=4)
    parser.add_argument("--sdist", action="append", default=[], help="NAME==VERSION of a PyPI sdist to mine too")
    parser.add_argument("--max-tasks", type=int, default=20)
    parser.add_argument("--grade-tasks", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pytest", action="append", default=[], help="NAME=SPEC: run NAME's tests with pytest SPEC")
    parser.add_argument("--no-near-copy", action="append", default=[], help="NAME: mine NAME without the copy check")
    parser.add_argument("--tasks", action="append", default=[], type=Path, help="a mined tasks file to grade only")
    parser.add_argument(
        "--image",
        action="append",
        default=[],
        help="also grade each task in a podman container "
        "from this local image (image mode; .ci/image builds one), the bare suite in it too",
    )
    args = parser.parse_args()
    pins = dict(item.split("=", 1) for item in args.pytest)
    os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    count_runtime_calls()

    with tempfile.TemporaryDirectory(prefix="bench-featdel-") as scratch:
        root = Path(scratch)
        if args.modules:
            bench_repo("synthetic", build_repo(root, args.modules, args.functions), root, args)
        for tasks_file in args.tasks:
            print(f"== {tasks_file.name} (mined before)")
            grade_tasks(tasks_file.stem, tasks_file, args)
        for spec in args.sdist:
            into = root / spec.replace("==", "-")
            into.mkdir()
            project = spec.split("==")[0]
            python = pytest_venv(pins[project], root / f"venv-{project}") if project in pins else sys.executable
            bench_repo(spec, fetch_sdist(spec, into), root, args, python)
    print(
        "\n| task | recorded calls | grade | bare suite | ratio | bare, autoload on (old figure) | runtime calls | "
        "load (1 min) | processes |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(TABLE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
