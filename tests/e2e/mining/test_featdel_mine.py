"""`composer-prime mine-features` on a real repository: real git, real pytest subprocesses."""

from __future__ import annotations

import asyncio
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from verifiers.v1.utils.loaders import load_taskset, resolve_env_config

from composer_prime.cli import main
from composer_prime.mining.config import MineConfig
from composer_prime.mining.miner import Miner, MiningError
from composer_prime.mining.record import load_rows
from composer_prime.process.reaper import new_token
from tests.support.featdel_repo import FILES, LEAKY_COPIES, build_shop_repo, git, mined_shop

pytestmark = pytest.mark.slow

ALL_TESTS = {
    f"{path}::{line[4:].split('(')[0]}"
    for path, text in FILES.items()
    if path.startswith("tests/")
    for line in text.splitlines()
    if line.startswith("def test_")
}


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    return mined_shop(tmp_path_factory)


def test_mines_several_tasks_of_every_kind(mined):
    _, out, lines = mined
    tasks, errors = load_rows(out)
    assert errors == []
    by_id = {task.task_id: task for task in tasks}
    assert len(tasks) >= 6
    assert {task.feature.kind for task in tasks} == {"function", "method", "class", "module"}
    for task in tasks:
        assert task.fail_to_pass and task.pass_to_pass
        assert set(task.fail_to_pass).isdisjoint(task.pass_to_pass)
        assert set(task.fail_to_pass) | set(task.pass_to_pass) == ALL_TESTS
    total = by_id["shop-repo:shop/cart.py::Cart.total"]
    assert total.fail_to_pass == [
        "tests/test_cart.py::test_empty_cart_total",
        "tests/test_cart.py::test_total_with_discount",
    ]
    assert total.held_out == ["tests/test_cart.py"]
    # the calls the covering tests made into the feature, recorded on the gold code and replayed alone, are kept
    for task in tasks:
        assert task.behaviour and task.behaviour_skipped == 0, task.task_id
    discount = by_id["shop-repo:shop/pricing.py::apply_discount"]
    answers = {(c.target, json.dumps(c.args)): (c.result, c.raised) for c in discount.behaviour}
    assert answers[("shop.pricing:apply_discount", '[["float", "200.0"], ["int", "25"]]')] == (["float", "150.0"], None)
    raised = [c.raised for c in discount.behaviour if c.raised]
    assert raised and raised[0][:2] == ["exc", "builtins:ValueError"]
    assert {c.target for c in total.behaviour} == {"shop.cart:Cart.total"}
    assert all(c.args[0][:2] == ["obj", "shop.cart:Cart"] for c in total.behaviour)
    textutil = by_id["shop-repo:shop/textutil.py"]
    assert textutil.feature.kind == "module" and "diff --git a/shop/textutil.py" in textutil.gold_patch
    assert "new file mode" in textutil.gold_patch
    # modules imported by other modules are refused, with the reason kept for resume
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    assert "imported by other source files" in skipped["shop/pricing.py"]
    # progress was shown per candidate
    assert lines[0].startswith("baseline:") and any("kept (FAIL_TO_PASS 2, PASS_TO_PASS 8)" in line for line in lines)
    assert lines[-1].startswith("done: 9 new task(s)")


async def set_up_in_box(task, keep: Path) -> Path:
    """Run the taskset's setup in a subprocess box and keep a copy of the box's tree."""
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import make_runtime

    runtime = make_runtime(vf.SubprocessConfig(), name=f"featdel-setup-{new_token()}-{keep.name}"[:60])
    await runtime.start()
    try:
        await task.setup(runtime)
        shutil.copytree(runtime.workdir, keep)
    finally:
        await runtime.stop()
    return keep


def test_snapshots_are_scrubbed(mined, tmp_path):
    _, out, _ = mined
    tasks, _ = load_rows(out)
    deleted_lines = {
        "shop/pricing.py::apply_discount": "reduced = amount * (100 - percent) / 100",
        "shop/cart.py::Cart.total": "subtotal = sum(price * quantity for _, price, quantity in self.lines)",
        "shop/textutil.py": 'words = "".join(ch if ch.isalnum() else " " for ch in text.lower()).split()',
    }
    config = resolve_env_config({"taskset": {"id": "feature-deletion", "tasks": str(out)}})
    envs = {task.data.name: task for task in load_taskset(config.taskset)}
    assert out.with_name(tasks[0].base).is_file() and {task.base for task in tasks} == {tasks[0].base}
    for task in tasks:
        root = asyncio.run(
            set_up_in_box(envs[task.task_id], tmp_path / task.task_id.replace("/", "_").replace(":", "_"))
        )
        assert git(root, "rev-list", "--all", "--count").strip() == "1"
        assert git(root, "status", "--porcelain") == ""
        names = {p.relative_to(root).as_posix() for p in root.rglob("*")}
        for bad in ("__pycache__", ".pyc", ".mypy_cache", ".pytest_cache", "build/", "egg-info"):
            assert not [n for n in names if bad in n and not n.startswith(".git/")], (task.task_id, bad)
        assert not (set(LEAKY_COPIES) & names)
        for held in task.held_out:
            assert held not in names
        line = deleted_lines.get(task.task_id.split(":", 1)[1])
        if line is not None:
            work_tree = [p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]
            assert not [p for p in work_tree if line in p.read_text(errors="replace")]
            objects = subprocess.run(
                ["git", "cat-file", "--batch-all-objects", "--batch"],
                cwd=root,
                capture_output=True,
                timeout=60,
                check=True,
            ).stdout
            assert line.encode() not in objects
            assert line not in task.prompt


def test_rerun_with_max_tasks_met_skips_the_baseline(mined, tmp_path):
    repo, out, _ = mined
    copy = tmp_path / "tasks.jsonl"
    copy.write_bytes(out.read_bytes())
    lines: list[str] = []
    tasks = Miner(MineConfig(repo=repo, out=copy, max_tasks=3, min_body_lines=0), log=lines.append).run()
    assert len(tasks) == 9 and copy.read_bytes() == out.read_bytes()
    assert lines[-1] == f"done: {copy} already holds 9 task(s), --max-tasks 3"
    assert not any(line.startswith("baseline:") for line in lines)


def test_rerun_resumes_without_redoing_tasks(mined, tmp_path):
    repo, out, _ = mined
    copy = tmp_path / "tasks.jsonl"
    # a run killed in the middle of appending a row leaves an unfinished last line
    copy.write_bytes(out.read_bytes() + b'{"task_id": "shop-repo:shop/unfin')
    copy.with_name("tasks.jsonl.skipped.json").write_bytes(out.with_name("tasks.jsonl.skipped.json").read_bytes())
    lines: list[str] = []
    config = MineConfig(repo=repo, out=copy, test_timeout_s=120, min_body_lines=0, deletion="whole")  # as mined
    Miner(config, log=lines.append).run()
    assert copy.read_bytes() == out.read_bytes()
    assert lines.pop(0) == f"resuming: dropped an unfinished last row of {copy} (33 bytes)"
    assert lines[0] == f"resuming: 9 task(s) already in {copy}, 2 candidate(s) skipped"
    assert not any(" kept " in line or "skipped:" in line.split(")")[-1] for line in lines[1:-1])
    assert lines[-1].startswith("done: 0 new task(s), 9 in")
    # a changed repository is not silently mixed into the old file
    (repo / "shop" / "extra.py").write_text("X = 1\n")
    try:
        with pytest.raises(MiningError, match="different state of the repository"):
            Miner(MineConfig(repo=repo, out=copy, min_body_lines=0), log=lines.append).run()
    finally:
        (repo / "shop" / "extra.py").unlink()


def test_failing_baseline_tests_are_excluded_and_recorded(tmp_path, capsys):
    """toolz 1.2.0's sdist has one test that needs a git checkout: mining goes on without it."""
    repo = build_shop_repo(tmp_path)
    (repo / "tests" / "test_textutil.py").write_text(FILES["tests/test_textutil.py"].replace('== "AL"', '== "XX"'))
    out = tmp_path / "t.jsonl"
    code = main(["mine-features", "--repo", str(repo), "--out", str(out), "--max-tasks", "1", "--min-body-lines", "0"])
    err = capsys.readouterr().err
    assert code == 0
    assert "1 test(s) fail at baseline and are excluded from every task: tests/test_textutil.py::test_initials" in err
    assert "limit per run 60s" in err  # sized from the untraced run: 4x a second is under the 60 s floor
    record = json.loads(out.with_name("t.jsonl.skipped.json").read_text())
    assert record["baseline_excluded"] == {"tests/test_textutil.py::test_initials": "FAILED"}
    (task,), _ = load_rows(out)
    assert "tests/test_textutil.py::test_initials" not in task.fail_to_pass + task.pass_to_pass
    assert "tests/test_textutil.py::test_slugify_words" in task.pass_to_pass and task.test_timeout_s == 60


def test_bad_repo_and_hanging_command_are_clear_errors(tmp_path, capsys):
    assert main(["mine-features", "--repo", str(tmp_path / "nope"), "--out", str(tmp_path / "t.jsonl")]) == 2
    assert "--repo " + str(tmp_path / "nope") + ": no such directory" in capsys.readouterr().err
    repo = build_shop_repo(tmp_path)
    not_pytest = f"{sys.executable} -c 'import time; time.sleep(60)'"
    argv = ["mine-features", "--repo", str(repo), "--out", str(tmp_path / "t.jsonl")]
    assert main([*argv, "--test-cmd", not_pytest]) == 2
    assert "is not `<python> -m pytest`" in capsys.readouterr().err
    (repo / "tests" / "test_slow.py").write_text("import time\n\n\ndef test_slow():\n    time.sleep(60)\n")
    assert main([*argv, "--baseline-timeout-s", "2"]) == 1
    assert "did not finish within 2s" in capsys.readouterr().err
    assert main(["mine-features", "--repo", str(repo), "--out", "x", "--min-tests", "0"]) == 2
    assert "--min-tests\n  Input should be greater than or equal to 1 (got '0')" in capsys.readouterr().err


def test_unusable_input_is_refused_before_any_work_and_a_failed_run_leaves_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "empty").mkdir()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "README.md").write_text("# notes\n")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "core.py").write_text("def f():\n    return 1\n")
    (tmp_path / "a-file").write_text("")
    repo = build_shop_repo(tmp_path)
    cases = [
        (tmp_path / "empty", out / "t.jsonl", [], "the folder is empty"),
        (tmp_path / "docs", out / "t.jsonl", [], "none of its 1 file(s) is Python (*.py)"),
        (
            tmp_path / "lib",
            out / "t.jsonl",
            [],
            "no test files (test_*.py, *_test.py, tests.py, test*.py, *tests.py, tests/) among its 1 Python",
        ),
        (repo, tmp_path / "a-file" / "t.jsonl", [], "a-file is a file, not a folder"),
        (repo, tmp_path / "docs", [], "docs: a folder; --out is the tasks file to write"),  # was a traceback after 12 s
        (repo, out / "t.jsonl", ["--test-cmd", "venv/bin/python -m pytest"], "'venv/bin/python' is neither a file"),
        (repo, out / "t.jsonl", ["--test-cmd", "no-such-python -m pytest"], "'no-such-python' is not on PATH"),
        (repo, out / "t.jsonl", ["--test-cmd", "poetry run pytest"], "'poetry run pytest' is not `<python> -m pytest`"),
        (repo, out / "t.jsonl", ["--test-cmd", "python -m pytest -x"], "'python -m pytest -x' is not `<python> -m"),
    ]
    for folder, tasks, extra, message in cases:
        assert main(["mine-features", "--repo", str(folder), "--out", str(tasks), *extra]) == 2, message
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.splitlines()) <= 5, err
        assert list(out.iterdir()) == [], (message, list(out.iterdir()))
    # the same through `python -m composer_prime.cli`, whose `__main__` module is a second copy of the CLI's classes
    argv = ["mine-features", "--repo", str(repo), "--out", str(out / "t.jsonl"), "--test-cmd", "poetry run pytest"]
    done = subprocess.run(
        [sys.executable, "-m", "composer_prime.cli", *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr and "poetry run pytest" in done.stderr, done.stderr
    # a run that fails after it started (every test fails at baseline) removes what it wrote
    (repo / "tests" / "conftest.py").write_text(
        "import pytest\n\n\n@pytest.fixture(autouse=True)\ndef broken():\n    raise RuntimeError\n"
    )
    assert main(["mine-features", "--repo", str(repo), "--out", str(out / "t.jsonl")]) == 1
    assert "found no passing tests" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    # a run that keeps no task (no candidate has 1000 covering tests) removes its snapshot, keeps the skip record
    (repo / "tests" / "conftest.py").unlink()
    assert main(["mine-features", "--repo", str(repo), "--out", str(out / "t.jsonl"), "--min-tests", "1000"]) == 1
    assert "no task kept: why each candidate was skipped is in" in capsys.readouterr().err
    assert [path.name for path in out.iterdir()] == ["t.jsonl.skipped.json"]


def test_every_example_in_help_runs(tmp_path):
    """Issue 30, line 5: each `e.g. '...'` the `--help` of mine-features gives for a flag is accepted and mines a task
    (the help once offered `--test-cmd 'poetry run pytest'`, then `'python -m pytest -p no:cacheprovider'`, both
    refused after the repository was copied)."""
    env = {**os.environ, "COLUMNS": "2000"}  # no wrapping inside a line: an example is split only where its text is
    done = subprocess.run(
        [sys.executable, "-m", "composer_prime.cli", "mine-features", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    help_of: dict[str, str] = {}  # flag -> its help text, lines joined
    flag = ""
    for line in done.stdout.splitlines():
        if found := re.match(r"\W*(--[a-z-]+) ", line):
            flag = found.group(1)
        if flag:
            help_of[flag] = help_of.get(flag, "") + " " + line.strip(" │")
    examples = [(flag, example) for flag, text in help_of.items() for example in re.findall(r"e\.g\. '([^']+)'", text)]
    assert examples, done.stdout
    repo = build_shop_repo(tmp_path)
    for index, (flag, example) in enumerate(examples):
        out = tmp_path / f"t{index}.jsonl"
        argv = ["mine-features", "--repo", str(repo), "--out", str(out), "--max-tasks", "1", flag, example]
        assert main(argv) == 0, (flag, example)
        assert len(load_rows(out)[0]) == 1


def test_help_answers_without_loading_the_miner():
    code = (
        "import sys\nfrom composer_prime.cli import main\ntry:\n    main(['mine-features', '--help'])\n"
        "except SystemExit:\n    pass\nheavy = sorted(m for m in ('verifiers', 'composer_prime.grading', 'torch') if m in sys.modules)\n"
        "print('HEAVY', heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--test-cmd" in done.stdout and "HEAVY []" in done.stdout, done.stdout[-500:]


LOOP = '''\
def step(n):
    """The successor of `n`."""
    return n + 1


def walk(limit):
    """The numbers from 1 up to `limit`, counted with `step`, retrying when a step is unavailable."""
    n, seen = 0, []
    while n < limit:
        try:
            n = step(n)
        except NameError:
            continue
        seen.append(n)
    return seen


def double(x):
    """Twice `x`."""
    return 2 * x
'''

LOOP_TESTS = """\
from loop import core


def test_step():
    assert core.step(1) == 2


def test_walk():
    assert core.walk(3) == [1, 2, 3]


def test_double():
    assert core.double(4) == 8
"""


def one_module_repo(tmp_path: Path, package: str, core: str, tests: str) -> Path:
    """`<package>-repo/`: the package with one module, `core.py`, and its tests in `tests/test_core.py`."""
    repo = tmp_path / f"{package}-repo"
    (repo / package).mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / package / "__init__.py").write_text("")
    (repo / package / "core.py").write_text(core)
    (repo / "tests" / "test_core.py").write_text(tests)
    return repo


def test_a_hanging_candidate_is_skipped_and_the_batch_goes_on(tmp_path):
    repo = one_module_repo(tmp_path, "loop", LOOP, LOOP_TESTS)
    lines: list[str] = []
    out = tmp_path / "tasks.jsonl"
    tasks = Miner(MineConfig(repo=repo, out=out, test_timeout_s=8, min_body_lines=0), log=lines.append).run()
    # deleting `step` makes `walk` spin forever: that run is killed, reported, and the other candidates still run
    assert [line for line in lines if "step (function): skipped: timed out:" in line]
    assert [task.feature.qualname for task in tasks] == ["walk", "double"]
    assert load_rows(Path(out))[0] == tasks


REGISTRY = '''\
_handlers = {}


def register(name, handler):
    """Register `handler` under `name` (module state: returns nothing, changes no argument)."""
    key = name.strip().lower()
    _handlers[key] = handler


def handler_for(name):
    """The handler registered under `name`, or None."""
    key = name.strip().lower()
    return _handlers.get(key)


def answer(seed=0):
    """Always the same value."""
    value = 6 * 7
    return value


def normalise(name):
    """`name` as a registry key."""
    key = name.strip()
    return key.lower()
'''

REGISTRY_TESTS = """\
from reg import core


def test_register_then_find():
    core.register(" Add ", "plus")
    assert core.handler_for("add") == "plus"


def test_unknown_is_none():
    assert core.handler_for("nothing") is None


def test_answer():
    assert core.answer() == 42


def test_answer_ignores_its_input():
    assert core.answer(1) == core.answer(2) == 42


def test_normalise():
    assert core.normalise(" Add ") == "add"
    assert core.normalise("x") == "x"
"""


def test_replay_blind_features_are_refused_and_counted(tmp_path):
    """A feature whose every replayable call answers alike with its arguments untouched (`register`: None, its effect
    is the module's dict; `handler_for`: only its None answer replays in a fresh process, the other depends on the
    registry; `answer`: a constant) would let a stub that ignores its input pass the replay."""
    repo = one_module_repo(tmp_path, "reg", REGISTRY, REGISTRY_TESTS)
    lines: list[str] = []
    out = tmp_path / "tasks.jsonl"
    tasks = Miner(MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0), log=lines.append).run()
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    assert skipped["reg/core.py::register"].startswith("replay blind: each of its 1 replayable call(s) returns None")
    assert skipped["reg/core.py::answer"].startswith("replay blind: each of its 3 replayable call(s) returns the same")
    assert skipped["reg/core.py::handler_for"].startswith("replay blind: each of its 1 replayable call(s) returns None")
    assert [task.feature.qualname for task in tasks] == ["normalise"]
    assert any("skipped: 3 replay blind" in line for line in lines if line.startswith("done:"))
    # with replay not required (tests-only grading, the user's choice) they are kept
    again = Miner(
        MineConfig(repo=repo, out=tmp_path / "t0.jsonl", test_timeout_s=60, min_body_lines=0, min_replayed_calls=0),
        log=lambda line: None,
    ).run()
    assert {t.feature.qualname for t in again} == {"register", "handler_for", "answer", "normalise"}


def test_near_copy_of_the_deleted_code_refuses_the_task(tmp_path):
    """A vendored copy with a line changed (boltons' `urlutils.OrderedMultiDict` case) is found by shingle overlap."""
    repo = build_shop_repo(tmp_path)
    legacy = FILES["shop/pricing.py"].replace(
        "reduced = amount * (100 - percent) / 100", "reduced = amount * (1 - percent / 100)"
    )
    (repo / "shop" / "_legacy_pricing.py").write_text(legacy)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "vendor an old copy")
    out = tmp_path / "out" / "tasks.jsonl"
    tasks = Miner(MineConfig(repo=repo, out=out, test_timeout_s=120, min_body_lines=0), log=lambda line: None).run()
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    assert skipped["shop/pricing.py::apply_discount"].startswith("near copy: the deleted code mostly reappears in ")
    assert "shop/_legacy_pricing.py (" in skipped["shop/pricing.py::apply_discount"]
    assert "shop-repo:shop/cart.py::Cart.total" in {task.task_id for task in tasks}


def _only_inserts(before: str, after: str, name: str) -> bool:
    """`after` is `before` with `name` (and its commas, quotes, spaces) inserted, nothing else changed."""
    ops = difflib.SequenceMatcher(a=before, b=after, autojunk=False).get_opcodes()
    inserted = "".join(after[j1:j2] for tag, _, _, j1, j2 in ops if tag == "insert")
    return all(tag in ("equal", "insert") for tag, *_ in ops) and inserted.strip(" ,\"'") == name


def test_gold_patch_touches_only_the_deleted_feature(mined):
    """Every line a gold patch adds is the deleted definition, or an import / `__all__` line that differs from the
    stripped one only by the feature's name."""
    from composer_prime.mining.features import discover

    _, out, _ = mined
    tasks, _ = load_rows(out)
    assert len(tasks) == 9
    for task in tasks:
        feature = task.feature
        added: dict[str, list[str]] = {}
        removed: dict[str, list[str]] = {}
        current = ""
        for line in task.gold_patch.splitlines():
            if line.startswith(("+++ ", "--- ")):
                current = line[6:] if line.startswith("+++ ") else current
            elif line.startswith("+"):
                added.setdefault(current, []).append(line[1:])
            elif line.startswith("-"):
                removed.setdefault(current, []).append(line[1:])
        if feature.kind == "module":
            assert added == {feature.path: FILES[feature.path].splitlines()} and removed == {}, task.task_id
            continue
        (found,) = [f for f in discover(feature.path, FILES[feature.path]) if f.qualname == feature.qualname]
        definition = FILES[feature.path].splitlines()[found.start - 1 : found.end]
        own = added.pop(feature.path)
        assert [line for line in own if line.strip()] == [line for line in definition if line.strip()], task.task_id
        assert feature.path not in removed, task.task_id
        for path, lines in added.items():
            lines = list(lines)
            for old in removed.pop(path, []):
                match = next(new for new in lines if _only_inserts(old, new, found.name))
                lines.remove(match)
            assert all(re.search(rf"\b{found.name}\b", line) for line in lines), (task.task_id, path, lines)
        assert removed == {}, task.task_id


def test_installed_vendored_copy_refuses_the_task(tmp_path, monkeypatch):
    """setuptools vendors more_itertools: a task whose code an agent could copy from a reachable venv is refused."""
    repo = build_shop_repo(tmp_path)
    vendored = tmp_path / "venv" / "site-packages" / "setuptools" / "_vendor" / "shop"
    vendored.mkdir(parents=True)
    (vendored / "pricing.py").write_text(FILES["shop/pricing.py"].replace("Money helpers.", "Vendored helpers."))
    monkeypatch.setattr(sys, "path", [*sys.path, str(vendored.parent.parent.parent)])
    out = tmp_path / "out" / "tasks.jsonl"
    lines: list[str] = []
    Miner(MineConfig(repo=repo, out=out, test_timeout_s=120, min_body_lines=0), log=lines.append).run()
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    assert f"{vendored / 'pricing.py'} (" in skipped["shop/pricing.py::apply_discount"]
    assert "copies: 1 installed file(s) named like this repository's packages are checked" in lines


def test_without_host_copies_an_installed_copy_costs_no_candidate(tmp_path, monkeypatch):
    """mine-corpus mines for an image, not this machine: a copy only the host has must not refuse a task there."""
    repo = build_shop_repo(tmp_path)
    vendored = tmp_path / "venv" / "site-packages" / "setuptools" / "_vendor" / "shop"
    vendored.mkdir(parents=True)
    (vendored / "pricing.py").write_text(FILES["shop/pricing.py"])
    monkeypatch.setattr(sys, "path", [*sys.path, str(vendored.parent.parent.parent)])
    out = tmp_path / "out" / "tasks.jsonl"
    lines: list[str] = []
    config = MineConfig(repo=repo, out=out, test_timeout_s=120, min_body_lines=0, host_copies=False)
    tasks = Miner(config, log=lines.append).run()
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    assert not [reason for reason in skipped.values() if reason.startswith("near copy")], skipped
    assert "shop-repo:shop/pricing.py::apply_discount" in {task.task_id for task in tasks}
    assert not [line for line in lines if line.startswith("copies: ")]


HOOKS = '''\
import sys


def reset_hooks(flag):
    """Undo pytest's capture if pytest is running; return `flag` unchanged."""
    if "pytest" in sys.modules:
        sys.modules["pytest"].__dict__.get("capture")
    return flag


def double(x):
    """Twice `x`."""
    return 2 * x
'''

HOOKS_TESTS = """\
from hooks import core


def test_reset_hooks():
    assert core.reset_hooks(3) == 3


def test_double():
    assert core.double(4) == 8
"""


def test_a_task_whose_gold_code_the_scan_voids_is_dropped(tmp_path):
    """boltons' `debugutils.py` case: grading's scan voids the gold code itself, so the task could never be solved."""
    repo = one_module_repo(tmp_path, "hooks", HOOKS, HOOKS_TESTS)
    lines: list[str] = []
    out = tmp_path / "tasks.jsonl"
    tasks = Miner(MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0), log=lines.append).run()
    assert [task.feature.qualname for task in tasks] == ["double"]
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    assert skipped["hooks/core.py::reset_hooks"] == (
        "gold voided: grading's scan voids the gold code itself: "
        'hooks/core.py: sys.modules games: \'sys.modules["pytest"].__dict__.get("capture")\''
    )
    assert [line for line in lines if "reset_hooks (function): skipped: gold voided: " in line]
    assert lines[-1].endswith("skipped: 1 gold voided")


DEPTH_OF = '''def depth_of(text):
    """How deeply the brackets of `text` nest."""
    deepest = level = 0
    for char in text:
        level += {"(": 1, ")": -1}.get(char, 0)
        deepest = max(deepest, level)
    return deepest
'''

STACK = (
    '''\
class Stack:
    """A last-in, first-out stack."""

    def __init__(self, items=()):
        self._items = list(items)

    def push(self, item):
        """Put `item` on top."""
        self._items.append(item)
        return len(self._items)

    def pop(self):
        """Take the top item off; IndexError when empty."""
        if not self._items:
            raise IndexError("pop from an empty stack")
        return self._items.pop()

    def peek(self):
        """The top item, left in place; None when empty."""
        return self._items[-1] if self._items else None

    def size(self):
        """How many items it holds."""
        return len(self._items)
'''
    + "\n\n"
    + DEPTH_OF
)

STACK_TESTS = """\
import pytest

from pile.core import Stack


def test_push_then_pop():
    s = Stack()
    assert s.push(1) == 1
    assert s.push(2) == 2
    assert s.pop() == 2
    assert s.size() == 1


def test_peek():
    s = Stack([3, 4])
    assert s.peek() == 4
    assert s.size() == 2


def test_pop_empty():
    with pytest.raises(IndexError):
        Stack().pop()
    assert Stack().peek() is None
"""

HONEST_STACK = (
    '''\
import collections


class Stack:
    """A stack kept in a deque, under a name of its own."""

    def __init__(self, items=()):
        self._data = collections.deque(items)
        self.__depth = len(self._data)

    def push(self, item):
        self._data.append(item)
        self.__depth += 1
        return self.__depth

    def pop(self):
        if not self.__depth:
            raise IndexError("empty")
        self.__depth -= 1
        return self._data.pop()

    def peek(self):
        return self._data[-1] if self._data else None

    def size(self):
        return self.__depth
'''
    + "\n\n"
    + DEPTH_OF
)


def test_a_class_replays_on_the_candidates_own_instances_so_other_private_names_pass(tmp_path):
    """Issue 28, line 7: the replay of a deleted class makes each instance's calls in order on the candidate's own
    object, so an honest re-implementation keeping its state elsewhere (a deque and a name-mangled counter, where the
    gold has `self._items`) answers as recorded, and a wrong one still does not."""
    from composer_prime.grading.behaviour import compare
    from composer_prime.mining.testrun import replay_calls

    repo = one_module_repo(tmp_path, "pile", STACK, STACK_TESTS)
    (repo / "tests" / "test_depth.py").write_text(
        'from pile.core import depth_of\n\n\ndef test_depth():\n    assert depth_of("(a(b))") == 2\n'
    )
    out = tmp_path / "tasks.jsonl"
    lines: list[str] = []
    tasks = Miner(MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0), log=lines.append).run()
    task = next((t for t in tasks if t.feature.kind == "class"), None)
    assert task is not None, "\n".join(lines)
    calls = task.behaviour
    assert {c.target.rpartition(".")[2] for c in calls} == {"__init__", "push", "pop", "peek", "size"}
    assert all(c.instance for c in calls) and len({c.instance for c in calls}) == 4  # four stacks, each a chain
    assert "_items" not in json.dumps([c.result for c in calls] + [c.args_after for c in calls])

    def replayed(source: str) -> tuple[float, list[str]]:
        work = tmp_path / f"work-{len(list(tmp_path.glob('work-*')))}"
        shutil.copytree(repo, work)
        (work / "pile" / "core.py").write_text(source)
        return compare(calls, replay_calls([sys.executable, "-m", "pytest"], work, calls, 60))

    assert replayed(STACK) == (1.0, [])
    assert replayed(HONEST_STACK) == (1.0, [])
    share, wrong = replayed(HONEST_STACK.replace("return self._data.pop()", "return self._data.popleft()"))
    assert share < 1.0 and any("pop" in line for line in wrong), wrong
    share, wrong = replayed(HONEST_STACK.replace("return self.__depth\n", "return len(self._data) + 1\n"))
    assert share < 1.0 and any("size" in line for line in wrong), wrong


def test_an_honest_class_defined_in_another_module_and_re_exported_replays(tmp_path):
    """The honest `Stack` lives in `pile/_impl.py` and `pile/core.py` imports it (the tests, which import
    `pile.core.Stack`, pass): its instances answer under the name the recording knows the class by."""
    from composer_prime.grading.behaviour import compare
    from composer_prime.mining.testrun import replay_calls

    repo = one_module_repo(tmp_path, "pile", STACK, STACK_TESTS)
    (repo / "tests" / "test_depth.py").write_text(
        'from pile.core import depth_of\n\n\ndef test_depth():\n    assert depth_of("(a(b))") == 2\n'
    )
    tasks = Miner(
        MineConfig(repo=repo, out=tmp_path / "t.jsonl", test_timeout_s=60, min_body_lines=0), log=lambda line: None
    ).run()
    calls = next(t for t in tasks if t.feature.kind == "class").behaviour
    work = tmp_path / "work"
    shutil.copytree(repo, work)
    (work / "pile" / "_impl.py").write_text(HONEST_STACK.removesuffix(DEPTH_OF))
    (work / "pile" / "core.py").write_text("from pile._impl import Stack\n\n\n" + DEPTH_OF)
    assert compare(calls, replay_calls([sys.executable, "-m", "pytest"], work, calls, 60)) == (1.0, [])


def test_a_class_with_slots_records_calls_that_replay(tmp_path):
    """Issue 30, line 4: toolz's `Compose` and `EqualityHashKey` keep their state in `__slots__`, which has no strict
    form, so every recorded call was skipped and `--min-replayed-calls 1` refused them (`no behaviour`). The recorder
    dumps the class's own instances by class only and the first call's instance as an object with no state, so the
    chains replay: on the gold, on a re-implementation without slots, and a wrong one still fails. A stack first seen
    with state (a `copy.copy`, whose calls cannot be rebuilt from `__init__`) keeps none of its calls."""
    from composer_prime.grading.behaviour import compare
    from composer_prime.mining.testrun import replay_calls

    slotted = STACK.replace(
        '"""A last-in, first-out stack."""\n', '"""A last-in, first-out stack."""\n\n    __slots__ = ("_items",)\n'
    )
    tests = (
        STACK_TESTS
        + "\n\ndef test_copy():\n    import copy\n\n    s = Stack([7])\n    assert copy.copy(s).size() == 1\n"
    )
    repo = one_module_repo(tmp_path, "pile", slotted, tests)
    (repo / "tests" / "test_depth.py").write_text(
        'from pile.core import depth_of\n\n\ndef test_depth():\n    assert depth_of("(a(b))") == 2\n'
    )
    lines: list[str] = []
    tasks = Miner(
        MineConfig(repo=repo, out=tmp_path / "t.jsonl", test_timeout_s=60, min_body_lines=0), log=lines.append
    ).run()
    task = next((t for t in tasks if t.feature.kind == "class"), None)
    assert task is not None, "\n".join(lines)
    calls = task.behaviour
    assert {c.target.rpartition(".")[2] for c in calls} == {"__init__", "push", "pop", "peek", "size"}
    chains = {c.instance for c in calls}
    assert len(chains) == 5 and not any(i.startswith("tests/test_core.py::test_copy") and "#1" in i for i in chains)
    assert all(c.target.endswith("__init__") for c in [next(c for c in calls if c.instance == i) for i in chains])
    from composer_prime.mining.behaviour import record_calls

    spec = {"path": "pile/core.py", "qualname": "Stack", "kind": "class"}
    raw, skipped, _ = record_calls([sys.executable, "-m", "pytest"], repo, spec, ["tests/test_core.py"], 60)
    in_copy = [c.target.rpartition(".")[2] for c in raw if c.test.endswith("::test_copy")]
    assert in_copy == ["__init__"] and skipped == 1  # the copy's `size`: refused by the recorder, not recorded

    def replayed(source: str) -> tuple[float, list[str]]:
        work = tmp_path / f"work-{len(list(tmp_path.glob('work-*')))}"
        shutil.copytree(repo, work)
        (work / "pile" / "core.py").write_text(source)
        return compare(calls, replay_calls([sys.executable, "-m", "pytest"], work, calls, 60))

    assert replayed(slotted) == (1.0, [])
    assert replayed(HONEST_STACK) == (1.0, [])
    share, wrong = replayed(HONEST_STACK.replace("return self._data.pop()", "return self._data.popleft()"))
    assert share < 1.0 and any("pop" in line for line in wrong), wrong


PIPE = '''\
import pickle


def apply_twice(fn, value):
    """`fn` applied to `value`, then to that result."""
    first = fn(value)
    return fn(first)


class Pipe:
    """Functions applied left to right; pickles as its tuple of functions."""

    def __init__(self, *funcs):
        self.funcs = funcs

    def __call__(self, value):
        for fn in self.funcs:
            value = fn(value)
        return value

    def __getstate__(self):
        return self.funcs

    def __setstate__(self, state):
        self.funcs = state


def roundtrip(obj):
    """`obj` pickled and loaded back."""
    return pickle.loads(pickle.dumps(obj))
'''

PIPE_TESTS = {
    "plumb/tests/test_core.py": """\
from plumb.core import apply_twice


def inc(x):
    return x + 1


def test_apply_twice_with_a_helper_of_this_file():
    assert apply_twice(inc, 1) == 3


def test_apply_twice_with_a_builtin():
    assert apply_twice(abs, -4) == 4
""",
    "plumb/tests/test_pipe.py": """\
from plumb.core import Pipe


def test_pipe():
    pipe = Pipe(abs, str)
    assert pipe(-5) == "5"
    assert pipe(12) == "12"  # two answers: a stub that returns one value does not replay it
""",
    "plumb/tests/test_roundtrip.py": """\
from plumb.core import Pipe, roundtrip


def test_pipe_pickles():
    assert roundtrip(Pipe(abs, str))(-6) == "6"


def test_roundtrip():
    assert roundtrip([1, 2]) == [1, 2]
""",
}


@pytest.mark.usefixtures("python_on_path")
def test_recorded_calls_need_no_test_code_and_no_pickled_layout(tmp_path):
    """Grading replays the calls before it writes the task's test files, so a call passing a test file's helper
    (`apply_twice(inc, 1)`, toolz's `compose(inc, ...)` with `inc` from `toolz/tests/test_functoolz.py`) cannot be
    replayed there, though it replays while mining: it is not kept, and the gold patch solves the task in a fresh box. A class's `__getstate__`/`__setstate__` answer in the gold's own layout: their
    chains are not kept either, so a re-implementation that pickles by default replays as recorded."""
    from composer_prime.grading.behaviour import compare
    from composer_prime.mining.testrun import replay_calls
    from tests.e2e.featdel.test_featdel_env import load_tasks, score_in_fresh_box

    repo = tmp_path / "plumb-repo"  # the tests live in the package, as toolz's do: importable while mining
    for path, text in {
        "plumb/__init__.py": "",
        "plumb/core.py": PIPE,
        "plumb/tests/__init__.py": "",
        **PIPE_TESTS,
    }.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    out = tmp_path / "t.jsonl"
    lines: list[str] = []
    tasks = Miner(MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0), log=lines.append).run()
    by_name = {t.feature.qualname: t for t in tasks}
    assert {"apply_twice", "Pipe"} <= set(by_name), "\n".join(lines)
    applied = by_name["apply_twice"].behaviour
    assert [c.args for c in applied] == [[["fn", "builtins:abs"], ["int", "-4"]]]  # not `inc` of the test file
    piped = by_name["Pipe"].behaviour
    assert {c.target.rpartition(".")[2] for c in piped} == {"__init__", "__call__"}, piped
    assert len({c.instance for c in piped}) == 1  # `test_pipe`'s; the pickled one's chain went whole
    for name in ("apply_twice", "Pipe"):
        task = load_tasks(out)[f"plumb-repo:plumb/core.py::{name}"]
        valid, trace = score_in_fresh_box(task, gold=True)
        assert valid is True, trace.info.get("grading")
    work = tmp_path / "work"
    shutil.copytree(repo, work)
    (work / "plumb" / "core.py").write_text(
        PIPE.replace(
            "    def __getstate__(self):\n        return self.funcs\n\n    def __setstate__(self, state):\n        self.funcs = state\n",
            "",
        )
    )
    assert compare(piped, replay_calls([sys.executable, "-m", "pytest"], work, piped, 60)) == (1.0, [])


TALLY = '''\
class Tally:
    """Counts words."""

    def __init__(self):
        self._counts = {}

    def add(self, word):
        """Count one more `word`."""
        key = word.strip().lower()
        self._counts[key] = self._counts.get(key, 0) + 1

    def count(self, word):
        """How often `word` was added."""
        return self._counts.get(word.strip().lower(), 0)
'''

TALLY_TESTS = """\
from tally.core import Tally


def test_add_then_count():
    t = Tally()
    t.add("Apple ")
    t.add("apple")
    t.add("Pear")
    assert t.count("apple") == 2
    assert t.count("pear") == 1


def test_count_unknown():
    assert Tally().count("x") == 0
"""


def test_a_method_whose_only_effect_is_private_state_is_refused_as_replay_blind(tmp_path):
    """`Tally.add` returns None and changes only `self._counts`, which the replay does not compare when the tally has
    a public attribute (`label`): a stub that does nothing would replay as recorded (an independent review scored the
    red team's test-frame switch 1.0 on it), so the miner judges "unchanged" as grading compares and refuses it.
    Without any public attribute the whole state is compared (by class alone any tally would pass): then `add` is
    kept, and the stub fails its replay."""
    from composer_prime.grading.behaviour import compare
    from composer_prime.mining.testrun import replay_calls

    labelled = TALLY.replace("self._counts = {}", 'self._counts = {}\n        self.label = "words"')
    repo = one_module_repo(tmp_path, "tally", labelled, TALLY_TESTS)
    out = tmp_path / "tasks.jsonl"
    Miner(MineConfig(repo=repo, out=out, test_timeout_s=60, min_body_lines=0), log=lambda line: None).run()
    skipped = json.loads(out.with_name("tasks.jsonl.skipped.json").read_text())["skipped"]
    assert skipped["tally/core.py::Tally.add"].startswith("replay blind: each of its 3 replayable call(s) returns None")

    private = one_module_repo(tmp_path / "private", "tally", TALLY, TALLY_TESTS)
    out = tmp_path / "private" / "tasks.jsonl"
    tasks = Miner(MineConfig(repo=private, out=out, test_timeout_s=60, min_body_lines=0), log=lambda line: None).run()
    [add] = [t for t in tasks if t.feature.qualname == "Tally.add"]
    stub = TALLY.replace(
        "        key = word.strip().lower()\n        self._counts[key] = self._counts.get(key, 0) + 1\n",
        "        pass\n",
    )
    (private / "tally" / "core.py").write_text(stub)
    python = [sys.executable, "-m", "pytest"]
    assert compare(add.behaviour, replay_calls(python, private, add.behaviour, 60))[0] < 1.0


def test_a_deletion_that_stops_pytest_starting_is_a_skip_not_a_crash(tmp_path):
    """A conftest that imports the feature (semver 3.0.2's imports `cmd_bump`): without it pytest does not start.
    That candidate is skipped as `breaks everything`; the run goes on and keeps the others (it used to end the whole
    run, and mine-corpus's worker, with pytest's ImportError)."""
    repo = tmp_path / "repo"
    body = "    y = x {op} x\n    z = y\n    return z\n"
    files = {
        "pkg/__init__.py": "",
        "pkg/core.py": "def double(x):\n" + body.format(op="+") + "\n\ndef square(x):\n" + body.format(op="*"),
        "tests/conftest.py": "from pkg.core import square  # noqa: F401\n",
        "tests/test_double.py": "from pkg.core import double\n\n\ndef test_two():\n    assert double(2) == 4\n\n\n"
        "def test_neg():\n    assert double(-3) == -6\n",
        "tests/test_square.py": "from pkg.core import square\n\n\ndef test_three():\n    assert square(3) == 9\n",
    }
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    out = tmp_path / "out" / "tasks.jsonl"
    lines: list[str] = []
    tasks = Miner(MineConfig(repo=repo, out=out, min_body_lines=0, deletion="whole"), log=lines.append).run()
    assert [t.feature.qualname for t in tasks] == ["double"]
    [skip] = [line for line in lines if "square" in line and "skipped" in line]
    assert "breaks everything: pytest does not start without it" in skip and "ImportError" in skip
    # `auto` (the default) keeps `square` as a stub: the conftest's import still resolves (and `double` too: its
    # whole deletion stops its test module from collecting)
    tasks = Miner(MineConfig(repo=repo, out=tmp_path / "auto.jsonl", min_body_lines=0), log=lines.append).run()
    assert [(t.feature.qualname, t.feature.deletion) for t in tasks] == [("double", "stub"), ("square", "stub")]


LRU = '''\
import collections
import collections.abc


class Cache(collections.abc.MutableMapping):
    """A mapping that holds at most `maxsize` items."""

    __marker = object()

    def __init__(self, maxsize):
        self.__data = {}
        self.maxsize = maxsize

    def __getitem__(self, key):
        return self.__data[key]

    def __setitem__(self, key, value):
        while key not in self.__data and len(self.__data) >= self.maxsize:
            self.popitem()
        self.__data[key] = value

    def __delitem__(self, key):
        del self.__data[key]

    def __iter__(self):
        return iter(self.__data)

    def __len__(self):
        return len(self.__data)

    def pop(self, key, default=__marker):
        """The value of `key`, removed; `default` if it is missing, else KeyError."""
        if key in self:
            value = self[key]
            del self[key]
            return value
        if default is self.__marker:
            raise KeyError(key)
        return default


class LRU(Cache):
    """A cache that evicts the least recently used item first."""

    def __init__(self, maxsize):
        Cache.__init__(self, maxsize)
        self.__order = collections.OrderedDict()

    def __getitem__(self, key):
        value = Cache.__getitem__(self, key)
        self.__order.move_to_end(key)
        return value

    def __setitem__(self, key, value):
        Cache.__setitem__(self, key, value)
        self.__order[key] = None
        self.__order.move_to_end(key)

    def __delitem__(self, key):
        Cache.__delitem__(self, key)
        del self.__order[key]

    def popitem(self):
        """Remove and return the least recently used (key, value)."""
        try:
            key = next(iter(self.__order))
        except StopIteration:
            raise KeyError("popitem(): cache is empty") from None
        return (key, self.pop(key))
'''

LRU_TESTS = """\
import pytest

from lru.core import LRU


def test_evicts_the_least_recently_used():
    cache = LRU(2)
    cache[1] = "a"
    cache[2] = "b"
    cache[1]
    cache[3] = "c"
    assert sorted(cache) == [1, 3]


def test_popitem_order():
    cache = LRU(3)
    cache[1] = "a"
    cache[2] = "b"
    assert cache.popitem() == (1, "a")


def test_pop_missing():
    cache = LRU(2)
    with pytest.raises(KeyError):
        cache.pop(9)
    assert cache.pop(9, "d") == "d"
"""


def test_mapping_caches_and_sentinel_defaults_record_calls_that_replay(tmp_path):
    """Issue 30, line 4: cachetools 5.5.0 lost 23 of 32 candidates as `no behaviour`. Its caches subclass
    `collections.abc.MutableMapping`, whose `__slots__ = ()` made every cache "no plain state"; its LRU order is an
    `OrderedDict`, rebuilt as a plain dict (no `move_to_end`); and `Cache.pop(key, default=__marker)` carried an
    `object()` sentinel no dump has. Now: empty ABC slots are no slots, an OrderedDict or Counter keeps its type, and
    a sentinel default is left out of the recorded call, so the candidate's own default applies. A re-implementation
    that evicts the wrong end, or returns its default where the gold raised, still fails the replay."""
    from composer_prime.grading.behaviour import compare
    from composer_prime.mining.behaviour import record_behaviour
    from composer_prime.mining.testrun import replay_calls

    repo = one_module_repo(tmp_path, "lru", LRU, LRU_TESTS)
    python = [sys.executable, "-m", "pytest"]
    popitem, _ = record_behaviour(
        python, repo, {"path": "lru/core.py", "qualname": "LRU.popitem", "kind": "method"}, ["tests/test_core.py"], 60
    )
    pop, _ = record_behaviour(
        python, repo, {"path": "lru/core.py", "qualname": "Cache.pop", "kind": "method"}, ["tests/test_core.py"], 60
    )
    assert len(popitem) >= 2, popitem  # the eviction and the test's own call
    missing = [c for c in pop if c.raised is not None]
    assert missing and all(len(c.args) == 2 for c in missing), pop  # `pop(9)`: the sentinel is not in the call
    assert any(c.result == ["str", "d"] for c in pop)

    def replayed(calls, source: str) -> float:
        work = tmp_path / f"work-{len(list(tmp_path.glob('work-*')))}"
        shutil.copytree(repo, work)
        (work / "lru" / "core.py").write_text(source)
        return compare(calls, replay_calls(python, work, calls, 60))[0]

    assert replayed(popitem, LRU) == 1.0 and replayed(pop, LRU) == 1.0
    own_sentinel = LRU.replace("__marker = object()", "__missing = object()").replace("__marker", "__missing")
    assert replayed(pop, own_sentinel) == 1.0
    assert replayed(popitem, LRU.replace("next(iter(self.__order))", "next(reversed(self.__order))")) < 1.0
    assert replayed(pop, LRU.replace("if default is self.__marker:\n            raise KeyError(key)\n", "")) < 1.0
