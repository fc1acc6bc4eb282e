"""Grade a box: clean the tree, plant canaries, run pytest through the trusted launcher, judge the outcomes.

`grade(runtime, suite, baseline)` runs these steps:

0. end the rollout's processes (its PID namespace killed whole, then the reaper: `runtime.end_rollout`) and copy the
   work tree to a fresh folder the agent never saw (`private_copy`; on a docker or podman box, in a grader box: a
   second container from the same image, `private_copy.grader_box_copy`); every later step works on that copy;
1. list the box's files, compute the agent's diff on the host against the starting tree's host-held bytes
   (`diff.tree_diff`), remove the strays (`tree.strays`: added test modules, shims, start-up hooks, `.pth` files,
   links, bytecode); write the files the task owns (held-out tests, restored test files) where they differ;
2. scan every changed `.py` file's added lines for test machinery (`tree.scan`); a hit voids the grade;
3. draw canaries for every file holding a FAIL_TO_PASS test and one drawn PASS_TO_PASS file: copies of the
   file's own tests, one unchanged and one mutant of every kind that applies (`canaries`); a forger that turns
   failures into passes passes a mutant, and the grade is then void;
4. write the launcher (`bootstrap.py`), the trusted ini and the run's spec into a fresh random folder outside the
   work tree, and run `python -I -S -B bootstrap.py spec.json` in the work tree, under `timeout` and, where the box
   allows it, in a network namespace with loopback up (`unshare -n`, or `unshare -rn` unprivileged): the canary
   modules before every other test module, those of a file with import effects and late copies in sessions of
   their own (`run_suite`), each canary file written just before its session;
5. read the recorder's per-test records from the run's stdout (`stream.read_stream`) and compare against
   FAIL_TO_PASS / PASS_TO_PASS.

Steps 0-4 that run in the box go as plans of the grading driver (`batch`, `driver.py`), two runtime calls each: one
plan removes the bytecode, replays, reaps what the replay left (where it had no PID namespace of its own) and lists
the tree with the changed files' bytes; the host decides what to remove and write (`cleaning.prepare_tree`), and the
next plan removes, writes, and runs every session in its order (with swe-gym's `before_run`, the writes are a plan
of their own before it). The order of the steps and what each runs are as listed above.

The same launcher serves mining (`composer_prime.mining.testrun`), so a task is only kept if its tests pass the
way they will be graded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import verifiers.v1 as vf
from pydantic import BaseModel, ConfigDict, Field

from composer_prime.grading import behaviour, mutants, tree
from composer_prime.grading import canaries as canary_source
from composer_prime.grading.batch import Batch, Step
from composer_prime.grading.cleaning import (
    SCAN_BYTES,
    SCAN_LIMIT,
    Baseline,
    Void,
    look_steps,
    prepare_tree,
)
from composer_prime.grading.grade import Grade, fraction
from composer_prime.grading.launch import Jail, jailed, launch_argv, marks, overflow
from composer_prime.grading.private_copy import CopyView, grader_box_copy, private_copy
from composer_prime.grading.pytest_config import trusted_ini
from composer_prime.grading.runtime import end_rollout, host_tools, run_checked
from composer_prime.grading.stream import read_stream
from composer_prime.process.pidns import CONTAINER_RUNTIMES
from composer_prime.process.reaper import BOX_VAR, ReapError, new_token, reap_argv, reaped
from composer_prime.pytest_outcomes import outcomes_from_records

logger = logging.getLogger(__name__)
BOOTSTRAP = Path(__file__).with_name("bootstrap.py")


class Suite(BaseModel):
    """What one grading runs and how it judges."""

    model_config = ConfigDict(extra="forbid")

    fail_to_pass: list[str]
    """Test ids that must pass."""
    pass_to_pass: list[str]
    """Test ids that must keep passing."""
    baseline_outcomes: dict[str, str] = Field(default_factory=dict)
    """Tests whose outcome before the agent ran was not PASSED (`XFAIL`, `SKIPPED`): that outcome counts as a pass
    for them. Every other test passes only as PASSED (an XFAIL, XPASS or SKIPPED the agent caused is not a pass)."""
    targets: list[str] = Field(min_length=1)
    """Test files (or ids) handed to pytest, relative to the work tree."""
    timeout_s: float = Field(gt=0)
    """Wall-clock limit of the pytest run."""
    isolate_network: bool = True
    """Run in a network namespace of its own (loopback up) where the box allows it."""
    python: str = "python"
    """The interpreter in the box that runs the launcher; it must have pytest."""
    pythonpath: list[str] = Field(default_factory=lambda: [".", "src"])
    """Folders of the work tree that hold the code under test."""
    settings: dict[str, str] = Field(default_factory=dict)
    hidden: list[str] = Field(default_factory=list)
    """Host paths of the task's expected side (tasks file, tarballs, oracles): covered in the jail the replay and the
    suite run in on the subprocess runtime; a run that could not be jailed voids the grade when there are any."""
    jail: bool = False
    """Run the replay and the suite in the jail (`composer_prime.process.jail`); `grade` turns it on for the subprocess
    runtime."""
    """The repository's own pytest settings, read before the agent ran (`pytest_config.repo_settings`)."""
    plugins: dict[str, str] = Field(default_factory=dict)
    """Extra trusted plugin modules (module name -> source) loaded with `-p` (the miner's call tracer)."""
    canaries: bool = True
    """Plant canary tests (off only for the miner's own traced baseline)."""
    private_copy: bool = True
    """Grade a copy of the tree in a fresh folder the agent never saw (off: grade the box's own folder)."""
    grader_box: bool = True
    """On a docker or podman box (with `private_copy`), grade the copy in a second container started from the same
    image, whose interpreter the agent never reached (`private_copy.grader_box_copy`)."""


def canary_targets(suite: Suite) -> list[str]:
    """The test files that get canaries: every file holding a FAIL_TO_PASS test, and one file holding only
    PASS_TO_PASS tests, drawn at random."""
    files = list(dict.fromkeys(t.split("::", 1)[0] for t in suite.fail_to_pass))
    others = sorted({t.split("::", 1)[0] for t in suite.pass_to_pass if ".py" in t} - set(files))
    drawn = [random.SystemRandom().choice(others)] if others else []
    return [f for f in files if f.endswith(".py")] + drawn


def scan_texts(changes: dict[str, tuple[str | None, str]]) -> list[str]:
    """The scan's void reasons for changed `.py` files given as path -> (starting text or None, text after), with
    the limits grading applies (`SCAN_LIMIT`, `SCAN_BYTES`): the miner runs it on the gold code, so a task whose
    own gold patch grading would void is never kept."""
    changed = sorted(path for path in changes if path.endswith(".py"))
    if len(changed) > SCAN_LIMIT:
        return [f"{len(changed)} changed Python files (more than {SCAN_LIMIT} cannot be scanned)"]
    void: list[str] = []
    for path in changed:
        before, after = changes[path]
        size = len(after.encode("utf-8"))
        if size > SCAN_BYTES:
            void.append(f"{path}: {size} bytes, over the scan's {SCAN_BYTES} byte limit")
        else:
            void += tree.scan(path, before, after)
    return void


async def plant(
    runtime: vf.Runtime,
    suite: Suite,
    calls: list[behaviour.RecordedCall] | None = None,
    sources: Mapping[str, bytes] | None = None,
) -> list[canary_source.Canary]:
    """The canaries of every file `canary_targets` draws (not written yet). `sources`: files whose bytes in the tree
    the host holds (the owned files grading just wrote); the others are read from the box."""
    made: list[canary_source.Canary] = []
    taken = {t.split("::", 1)[0] for t in [*suite.targets, *suite.fail_to_pass, *suite.pass_to_pass]}
    known = mutants.answers(calls or [])
    for original in canary_targets(suite):
        try:
            held = (sources or {}).get(original)
            data = held[:SCAN_BYTES] if held is not None else await runtime.read(original, max_bytes=SCAN_BYTES)
            source = data.decode("utf-8")
        except (vf.SandboxError, OSError, UnicodeDecodeError):
            continue
        prefer = frozenset(
            t.split("::", 1)[1].split("[")[0] for t in suite.fail_to_pass if t.startswith(original + "::")
        )
        made += canary_source.planted(original, source, taken, prefer, known=known)
    return made


@dataclass
class Session:
    """One pytest run through the launcher: its records, void reasons, output and exit."""

    records: list[dict]
    void: list[str]
    output: str
    network_isolated: bool
    exit_code: int | None
    """The launcher's exit status (124 or 137: killed by `timeout`); None when the run did not return in time."""
    jailed: bool = False
    """The run was in the jail (`composer_prime.process.jail`)."""


@dataclass
class Launched:
    """A pytest session's steps in a `Batch`: its launch and the nonce its records carry."""

    launched: Step
    nonce: str
    wait_s: float


def session_steps(
    batch: Batch, suite: Suite, workdir: str, paths: list[str], first: list[str], timeout_s: float
) -> Launched:
    """Add to `batch` a pytest run on `paths` through the trusted launcher (the tests of `first` before all others):
    its files written into a fresh scratch folder, the launch, the folder removed."""
    scratch = f"/tmp/composer-prime-grade-{secrets.token_hex(12)}"
    nonce = secrets.token_hex(16)
    plugin_args = [arg for name in suite.plugins for arg in ("-p", name)]
    spec = {
        "args": [
            *("-c", f"{scratch}/pytest.ini", "--rootdir", workdir, "--confcutdir", workdir),
            *("-p", "no:cacheprovider", "--continue-on-collection-errors", "--color=no", "-q"),
            *plugin_args,
            *paths,
        ],
        "pythonpath": [f"{workdir}/{p}".rstrip("/.") if p != "." else workdir for p in suite.pythonpath],
        "nonce": nonce,
        "plugin_dirs": [scratch] if suite.plugins else [],
        "first": first,
    }
    batch.write(f"{scratch}/bootstrap.py", BOOTSTRAP.read_bytes())
    batch.write(f"{scratch}/pytest.ini", trusted_ini(suite.settings, workdir, suite.pythonpath).encode())
    batch.write(f"{scratch}/spec.json", json.dumps(spec).encode())
    for name, source in suite.plugins.items():
        batch.write(f"{scratch}/{name}.py", source.encode())
    interpreter = [suite.python, "-I", "-S", "-B", f"{scratch}/bootstrap.py", f"{scratch}/spec.json"]
    jail = Jail((workdir, scratch), tuple(suite.hidden)) if suite.jail else None
    argv = launch_argv(suite.isolate_network, timeout_s, interpreter, cap=suite.python, jail=jail)
    launched = batch.launch(argv, timeout_s + 30)
    batch.run(["rm", "-rf", "--", scratch], always=True)
    return Launched(launched, nonce, timeout_s + 30)


def session(suite: Suite, launched: Launched) -> Session:
    """A session's records, void reasons, output and exit, once its batch ran."""
    step = launched.launched
    if step.result.get("timed_out") or not step.reported:
        return Session([], [], step.result.get("error", ""), False, None)
    stdout = step.stdout
    records, void, rest = read_stream(stdout, launched.nonce)
    output = rest + "\n" + step.stderr
    confined = jailed(stdout)
    if suite.jail and suite.hidden and not confined:
        void.append("the suite ran outside the jail, where the code under test could read the expected side")
    return Session(records, void, output, marks(stdout)[0], step.exit, confined)


async def run_suite(
    runtime: vf.Runtime,
    suite: Suite,
    workdir: str,
    calls: list[behaviour.RecordedCall] | None = None,
    sources: Mapping[str, bytes] | None = None,
    batch: Batch | None = None,
) -> tuple[Grade, dict[str, str], dict]:
    """Plant canaries, run the suite through the launcher; (grade without judging, outcomes, canary names).

    Sessions, one after the other, each canary file written just before its session and removed after it: the
    canaries of a file whose import changes state outside it, each in a session of its own (`Canary.alone`); then the
    suite, with the other canary modules before every other test module, in a random order; then the copies that
    share their test with a mutant whose expected side is wrong, each in a session of its own (`Canary.late`). So a
    mutant runs before every test that makes its original's calls, in time and not only in its session. All of it is
    one run of the grading driver (`batch`), after the steps `batch` already holds. `calls`: the gold's recorded
    calls, from which the swapped canaries take their inputs; `sources`: see `plant`."""
    grade = Grade()
    made = await plant(runtime, suite, calls, sources) if suite.canaries else []
    canaries = {key: value for canary in made for key, value in canary.expect.items()}
    main = [c for c in made if not c.alone and not c.late]
    random.SystemRandom().shuffle(main)
    batch = batch if batch is not None else Batch()
    alone = [_canary_steps(batch, suite, workdir, c) for c in made if c.alone and not c.late]
    first = [c.path for c in main]
    _write_canaries(batch, main)
    suite_steps = session_steps(batch, suite, workdir, [*first, *suite.targets], first, suite.timeout_s)
    if first:
        batch.run(["rm", "-rf", "--", *first], always=True)
    late = [_canary_steps(batch, suite, workdir, c) for c in made if c.late]
    started = time.monotonic()
    await batch.execute(runtime, suite.python)
    records: list[dict] = []
    for launched in [*alone, *late]:
        canary_run = session(suite, launched)
        records += [r for r in canary_run.records if "exit" not in r and "collected" not in r]
        grade.void += canary_run.void
    suite_run = session(suite, suite_steps)
    if suite_run.exit_code is None:
        grade.timed_out = True
        grade.error = f"the test run did not return within {suite.timeout_s + 30:g}s"
        return grade, {}, canaries
    grade.void += suite_run.void
    grade.output_tail = suite_run.output[-4000:]
    grade.network_isolated = suite_run.network_isolated
    grade.jailed = suite_run.jailed
    grade.timed_out = suite_run.exit_code in (124, 137)
    grade.seconds = time.monotonic() - started
    exits = [r["exit"] for r in suite_run.records if isinstance(r.get("exit"), int)]
    grade.exit_code = exits[-1] if exits else None
    if grade.timed_out:
        grade.error = f"the test run was killed after {suite.timeout_s:g}s"
    elif grade.exit_code is None:
        grade.error = f"pytest did not finish its session (exit {suite_run.exit_code}); see output_tail"
    return grade, outcomes_from_records(records + suite_run.records), canaries


def _write_canaries(batch: Batch, made: list[canary_source.Canary]) -> None:
    """Add the canary files' writes, after removing whatever stands at their paths (a folder the agent left there)."""
    if made:
        batch.run(["rm", "-rf", "--", *(canary.path for canary in made)])
    for canary in made:
        batch.write(canary.path, canary.source.encode())


def _canary_steps(batch: Batch, suite: Suite, workdir: str, canary: canary_source.Canary) -> Launched:
    """One canary file in a session of its own: written, run, removed (a session that did not finish leaves its
    canaries not run, which voids where their originals ran)."""
    _write_canaries(batch, [canary])
    launched = session_steps(batch, suite, workdir, [canary.path], [], suite.timeout_s)
    batch.run(["rm", "-f", "--", canary.path], always=True)
    return launched


async def grade(
    runtime: vf.Runtime,
    suite: Suite,
    baseline: Baseline,
    before_run: Callable[[vf.Runtime], Awaitable[str | None]] | None = None,
    calls: list[behaviour.RecordedCall] | None = None,
    check: Callable[[vf.Runtime], Awaitable[list[str]]] | None = None,
    regression: list[behaviour.RecordedCall] | None = None,
) -> Grade:
    """End the rollout's processes, copy the tree, clean it, run the suite with canaries, and judge it (see the module
    docstring). `before_run` (swe-gym: remove the files the test patch deletes) runs on the graded tree after the
    cleaning; a message it returns is the grade's error and nothing runs. `calls` (feature-deletion): the feature's
    recorded behaviour, replayed first, before any test file is written; the replay runs in a PID namespace of its
    own where the box allows it (its processes die with it), and elsewhere the reaper kills every process it left
    before the tree is cleaned. `regression`: the PASS_TO_PASS tests' recorded calls into the source files
    (`mining.regression`), replayed in the same process after `calls` and judged alike (the grade's `replay` counts
    both). `check(where)` (the grading interpreter's fingerprint, taken where the suite runs:
    the grader box on docker and podman, else the box) runs beside the suite run, once every process that ran the
    candidate before it (the rollout's, the replay's) is dead; the void reasons it returns join the grade's.

    It never raises (but for cancellation): a tree it cannot handle (`Void`) or any failure on the way (a copy that
    fails on a path over PATH_MAX, a box that went away) is a void grade with the reason, so a rollout is scored 0,
    never dropped as a failed trace."""
    started = time.monotonic()
    boxed = suite.private_copy and suite.grader_box and type(runtime).__name__ in CONTAINER_RUNTIMES
    if type(runtime).__name__ == "SubprocessRuntime":
        # every rollout's box lies beside this one: a concurrent rollout's tree (solved, or another task of the same
        # repository whose starting tree still holds this task's code) is an answer the graded code must not read
        boxes = os.path.dirname(os.path.normpath(str(getattr(runtime, "workdir", "") or "/")))
        hidden = [*suite.hidden, boxes] if boxes != "/" else suite.hidden
        suite = suite.model_copy(update={"jail": True, "hidden": hidden})
    with host_tools(runtime) as host:
        try:
            return await _grade(host, suite, baseline, before_run, calls, check, started, boxed, regression)
        except Void as exc:
            result = Grade(void=[str(exc)[:1000]])
        except Exception as exc:  # every failure of grading, whatever the tree held: a void grade, never a raise
            logger.warning("grading failed, the grade is void: %s: %s", type(exc).__name__, exc)
            result = Grade(void=[f"grading failed: {type(exc).__name__}: {exc}"[:1000]])
    return judge(result, {}, {}, suite, started)


async def _grade(
    runtime: vf.Runtime,
    suite: Suite,
    baseline: Baseline,
    before_run: Callable[[vf.Runtime], Awaitable[str | None]] | None,
    calls: list[behaviour.RecordedCall] | None,
    check: Callable[[vf.Runtime], Awaitable[list[str]]] | None,
    started: float,
    boxed: bool,
    regression: list[behaviour.RecordedCall] | None = None,
) -> Grade:
    """`grade`'s steps, which may raise; `runtime` is the box as grading runs it (`host_tools`), `boxed` whether the
    tree is graded in a grader box."""
    ending = asyncio.ensure_future(end_rollout(runtime))
    if boxed:  # the grader box starts while the rollout's processes are ended; the tree is packed after
        view = await grader_box_copy(runtime, suite.python, ending)
        ended = ending.result()
    else:
        ended = await ending
        view = await private_copy(runtime) if suite.private_copy else runtime
    try:
        result, outcomes, canaries = await _grade_tree(view, suite, baseline, before_run, calls, check, regression)
    finally:
        if view is not runtime:
            await view.remove()
    result.isolation, result.isolation_note, result.private_copy = ended.isolation, ended.note, view is not runtime
    result.grader_box = boxed
    return judge(result, outcomes, canaries, suite, started)


async def _grade_tree(
    runtime: vf.Runtime,
    suite: Suite,
    baseline: Baseline,
    before_run: Callable[[vf.Runtime], Awaitable[str | None]] | None,
    calls: list[behaviour.RecordedCall] | None,
    check: Callable[[vf.Runtime], Awaitable[list[str]]] | None = None,
    regression: list[behaviour.RecordedCall] | None = None,
) -> tuple[Grade, dict[str, str], dict]:
    """The grading steps 0-5 on `runtime` (the private copy's view): the grade without judgement, outcomes, canaries.

    Two runs of the grading driver (`batch`): the first removes the bytecode, replays, reaps what the replay left
    (where it had no PID namespace of its own) and lists the tree with the changed files' bytes; the host then
    decides what to remove and write, and the second removes, writes and runs every session (three, with
    `before_run` between the writes and the sessions)."""
    if isinstance(runtime, CopyView):
        workdir = runtime.root
    else:
        workdir = (await run_checked(runtime, ["pwd", "-P"], "grading: reading the work directory")).stdout.strip()
    replayed, mismatches, replay_tail, overflowed = 1.0, [], "", []
    looking = Batch()
    # the replay and the suite judge the code the scan reads: no bytecode the agent left (a `.pyc` in `__pycache__`
    # runs in place of its source, a sourceless one imports alone; one the starting tree held may have been rewritten)
    looking.run(["sh", "-c", tree.REMOVE_BYTECODE], check="grading: removing bytecode")
    replaying = reaping = None
    token = runtime.env.get(BOX_VAR) or new_token()
    # the feature's calls first, then the PASS_TO_PASS tests' (the order the miner checked them in on the gold)
    replayed_calls = [*(calls or []), *(regression or [])]
    if replayed_calls:
        jail = tuple(suite.hidden) if suite.jail else None
        replaying = behaviour.replay_steps(
            looking,
            replayed_calls,
            workdir,
            suite.python,
            suite.pythonpath,
            suite.timeout_s,
            suite.isolate_network,
            jail,
        )
        # in its own PID namespace, nothing the replay started outlived it; elsewhere the reaper runs before the listing
        reaping = looking.reap_unless_own_pids(replaying.launched, reap_argv(workdir, token))
    looked = look_steps(looking, baseline)
    await looking.execute(runtime, suite.python)
    if replaying is not None and reaping is not None:
        answers, replay_tail, _ = await behaviour.answers(replaying)
        replayed, mismatches = behaviour.compare(replayed_calls, answers)
        overflowed = overflow(replay_tail, "the replay")
        if not reaping.result.get("skipped"):
            try:
                reaped(reaping.exit, reaping.stdout, reaping.stderr, token)
            except ReapError as exc:
                raise vf.SandboxError(f"grading: {exc}") from exc
    writing = Batch()
    removed, void, patch, _ = await prepare_tree(runtime, baseline, looked, writing)
    void = [*overflowed, *void]
    error = None
    if before_run is not None:
        await writing.execute(runtime, suite.python)
        writing = Batch()
        error = await before_run(runtime)
    checked = asyncio.create_task(check(runtime)) if check is not None else None
    try:
        if error is not None:
            await writing.execute(runtime, suite.python)
            result, outcomes, canaries = Grade(error=error), {}, {}
        else:
            result, outcomes, canaries = await run_suite(runtime, suite, workdir, calls, baseline.owned, writing)
    finally:
        void += await checked if checked is not None else []
    result.removed, result.void, result.patch = removed, [*void, *result.void], patch
    result.replay, result.replay_calls, result.replay_mismatches = replayed, len(replayed_calls), mismatches[:20]
    result.regression_calls = len(regression or [])
    if mismatches:
        result.output_tail = (result.output_tail + "\n--- replay ---\n" + replay_tail)[-6000:]
    return result, outcomes, canaries


def judge(result: Grade, outcomes: dict[str, str], canaries: dict[str, str], suite: Suite, started: float) -> Grade:
    """Fill in the fractions and the canary verdict."""
    if result.error is None:
        result.void += canary_source.verdicts(canaries, outcomes)
    result.fail_to_pass, result.fail_to_pass_failed = fraction(outcomes, suite.fail_to_pass, suite.baseline_outcomes)
    result.pass_to_pass, result.pass_to_pass_failed = fraction(outcomes, suite.pass_to_pass, suite.baseline_outcomes)
    result.seconds = time.monotonic() - started
    return result
