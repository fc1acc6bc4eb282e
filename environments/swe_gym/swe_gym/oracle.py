"""The gold patch's behaviour for one SWE-Gym instance: recorded once on the host, replayed against every candidate.

Feature Deletion replays the deleted feature's recorded calls (`composer_prime.grading.behaviour`); this is the same
mechanism for a bug fix. In a scratch copy of the instance's snapshot with the gold patch and the test patch applied,
the FAIL_TO_PASS tests (and the PASS_TO_PASS tests of their files) run once through the grader's launcher with the
behaviour recorder in `package` mode (`composer_prime.mining.behaviour_plugin`): every call a test makes straight
into a non-test file records its arguments, its result or raised exception and its arguments after the call. What is kept is the oracle:

1. calls whose values have no strict form (paths, callbacks, objects with `__slots__`) are dropped; an iterator a
   call returns (a generator) is drained by a lone replay of the gold, and an exception class the gold patch adds is
   recorded as the nearest base the starting tree has (`mining.behaviour.floored`);
2. so are calls whose values name a test module or pytest (a replay would import the agent's copy of them), and calls
   whose arguments hold an instance with private attributes (`self._items`): rebuilding it would hand a candidate
   the gold's private representation, which an honest fix need not share;
3. the rest are replayed twice against the gold tree exactly as grading replays them (a fresh `python -I -S -B`
   process, no pytest): only calls answered as recorded both times stay (the others depend on state the tests set
   up, on time or on chance);
4. the oracle is usable when some call is left, the calls are not replay-blind (`mining.behaviour.blind`: a stub
   that ignores its input would answer them all, however the starting code answers them), and at least one of them
   the starting code answers otherwise (replayed against the snapshot without the gold patch): an oracle the unfixed
   code passes tells nothing. Only a usable oracle discriminates: neither a stub answering every call with one value
   nor the unfixed code's answers pass it.

Beside it, the PASS_TO_PASS tests' calls into the source files are recorded on the same gold tree and kept where the
starting code answers them alike (`Oracle.regression`, `composer_prime.mining.regression`): those of the tests outside
the FAIL_TO_PASS files (a usable oracle holds the others' already), or of every PASS_TO_PASS test where the oracle is
not usable. Grading replays them either way, so a regression in a file no FAIL_TO_PASS test reaches shows outside
pytest.

The oracle (expected side included) is written atomically to `<cache_dir>/oracles/<instance_id>.json` on the host,
held in the env server's memory at setup and never written into a box; grading sends only the calls' arguments to the
replayer. Why an instance has no usable oracle is one of `REASONS`, on the oracle and on every grade of it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from composer_prime.atomic import write_atomic
from composer_prime.grading.behaviour import RecordedCall, mismatch
from composer_prime.mining.behaviour import (
    blind,
    existed_before,
    floored,
    names_test_code,
    record_calls,
    replayed_as_recorded,
    with_drained_results,
)
from composer_prime.mining.regression import private_state, record_suite_calls, unaffected
from composer_prime.mining.testrun import TestCommandFailed, TestCommandTimeout, replay_calls
from swe_gym.grading import file_of_test
from swe_gym.local import GIT_TIMEOUT_S, LocalConfig, PrepError, env_path, exclusive, run, slug
from swe_gym.rows import SWEGymRow

REASONS = {
    "gold fails its tests": "the FAIL_TO_PASS tests do not all pass with the gold patch in the recording run",
    "no calls into the package": "no test called a function of a non-test file straight from a test file",
    "no strict form": "every call had an argument, result or exception without a strict form (paths, callbacks, "
    "objects with __slots__, iterators of more than values.MAX_ITEMS items)",
    "test-side values": "every call's values name a test module or pytest",
    "private state in the arguments": "every call, or every call the starting code answers otherwise, was handed an "
    "instance with private attributes",
    "not reproducible": "no call was answered as recorded by two lone replays of the gold code",
    "replay blind": "a stub that ignores its input would answer every call as recorded",
    "base answers as the gold": "the starting code answers every call as the gold does (what the fix changes shows only "
    "across calls, or in state the calls do not return)",
}
"""Why an instance has no usable oracle: the first stage (in this order) that left nothing to replay."""


class Oracle(BaseModel):
    """One instance's recorded gold behaviour and what became of the calls the FAIL_TO_PASS tests made."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instance_id: str
    key: str
    """Hash of what the recording depends on (base commit, patches, FAIL_TO_PASS, environment); another key means
    the row changed and the oracle is recorded again."""
    calls: list[RecordedCall] = []
    """The calls kept, with the gold's answers (the expected side: host only)."""
    regression: list[RecordedCall] = []
    """The calls the PASS_TO_PASS tests make into the source files (those outside the FAIL_TO_PASS files where the
    oracle is usable, every one's where it is not), with the gold's answers, kept where the starting code answers them
    alike (`composer_prime.mining.regression`): replayed at grading whether or not the oracle is usable, so a
    regression in a file the FAIL_TO_PASS tests never reach shows outside the test process."""
    reason: str | None = None
    """Why there is no usable oracle (a key of `REASONS`); None when there is one."""
    detail: str = ""
    """What the reason rests on (the failing tests, the blind answer)."""
    seen: int = Field(0, ge=0)
    """Calls the tests made into the package, as recorded (deduplicated)."""
    no_strict_form: int = Field(0, ge=0)
    test_side: int = Field(0, ge=0)
    private_state: int = Field(0, ge=0)
    not_reproducible: int = Field(0, ge=0)
    discriminating: int = Field(0, ge=0)
    """Kept calls the starting code answers otherwise."""
    seconds: float = 0.0

    @property
    def usable(self) -> bool:
        return self.reason is None and bool(self.calls)

    def summary(self) -> dict:
        """What a trace may carry: counts and the reason, never the expected side."""
        return {
            "usable": self.usable,
            "reason": self.reason,
            "calls": len(self.calls),
            "regression_calls": len(self.regression),
            **self.model_dump(
                include={"seen", "no_strict_form", "test_side", "private_state", "not_reproducible", "discriminating"}
            ),
        }


RECORDING = 4
"""The recording rules' version, part of the key: an oracle recorded under older rules (before iterators were drained,
exceptions the gold adds floored to a base the starting code has, the PASS_TO_PASS calls of the FAIL_TO_PASS
files recorded beside them, and every PASS_TO_PASS test's calls recorded as `regression`) is recorded again."""


def oracle_key(local: LocalConfig, row: SWEGymRow) -> str:
    blob = json.dumps(
        [
            RECORDING,
            row.base_commit,
            row.patch,
            row.test_patch,
            sorted(row.fail_to_pass),
            sorted(row.pass_to_pass),
            str(env_path(local, row)),
        ],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def oracle_path(folder: Path, instance_id: str) -> Path:
    return folder / f"{slug(instance_id)}.json"


def load_oracle(path: Path) -> Oracle | None:
    """The oracle stored at `path`, None where there is none; a file that does not parse is refused, naming it."""
    if not path.is_file():
        return None
    try:
        return Oracle.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise PrepError(
            f"{path} is not a swe-gym oracle ({exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}); delete it and run "
            "swe-gym-prepare again"
        ) from None


def prepare_oracle(local: LocalConfig, row: SWEGymRow, snapshot: Path, timeout_s: float) -> Oracle:
    """The instance's oracle, recorded once per host (under a lock, written atomically) and re-recorded when its
    key changes."""
    path = oracle_path(local.root() / "oracles", row.instance_id)
    key = oracle_key(local, row)
    found = load_oracle(path)
    if found is not None and found.key == key:
        return found
    with exclusive(path.with_name(f"{path.name}.lock"), local.prep_timeout_s):
        found = load_oracle(path)
        if found is not None and found.key == key:
            return found
        oracle = record_oracle(local, row, snapshot, key, timeout_s)
        write_atomic(path, oracle.model_dump_json(indent=1) + "\n")
    return oracle


def _text(path: Path) -> str | None:
    """A file of the starting tree (the host's snapshot), None where it has none."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _checkout(snapshot: Path, dest: Path, patches: list[str]) -> None:
    """`dest` = a copy of the snapshot's tree with `patches` applied (the snapshot is the host's own: trusted)."""
    safe = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": str(dest.parent)}
    run(["git", "clone", "--quiet", "--no-hardlinks", str(snapshot), str(dest)], env=safe, timeout_s=GIT_TIMEOUT_S)
    for index, patch in enumerate(patches):
        (dest.parent / f"{dest.name}-{index}.patch").write_text(patch, encoding="utf-8")
        run(
            ["git", "apply", "--whitespace=nowarn", str(dest.parent / f"{dest.name}-{index}.patch")],
            cwd=dest,
            env=safe,
            timeout_s=GIT_TIMEOUT_S,
        )


def record_oracle(local: LocalConfig, row: SWEGymRow, snapshot: Path, key: str, timeout_s: float) -> Oracle:
    """Record the gold behaviour of `row` in scratch copies of `snapshot` (see the module docstring)."""
    started = time.monotonic()
    python = str(env_path(local, row) / "bin" / "python")
    pythonpath = local.env_for(row.repo).pythonpath
    test_cmd = [python, "-m", "pytest"]
    scratch_root = local.root() / "tmp"
    scratch_root.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    targets = list(dict.fromkeys(file_of_test(test) for test in row.fail_to_pass))

    def result(calls: list[RecordedCall], reason: str | None, detail: str = "") -> Oracle:
        regression = []
        if reason != "gold fails its tests":  # a usable oracle replays its files' PASS_TO_PASS calls already
            skip = targets if reason is None else []
            regression = _regression(test_cmd, gold, base, row, timeout_s, pythonpath, skip)
        return Oracle(
            instance_id=row.instance_id,
            key=key,
            calls=calls if reason is None else [],
            regression=regression,
            reason=reason,
            detail=detail,
            seconds=round(time.monotonic() - started, 2),
            **counts,
        )

    with tempfile.TemporaryDirectory(prefix="swe-gym-oracle-", dir=scratch_root) as scratch:
        gold, base = Path(scratch) / "gold", Path(scratch) / "base"
        try:
            _checkout(snapshot, gold, [row.patch, row.test_patch])
        except PrepError as exc:
            return result([], "gold fails its tests", f"the patches do not apply: {str(exc)[:400]}")
        # The PASS_TO_PASS tests of the same files are recorded too: the unfixed code answers their calls as the
        # gold does, so they tell no fix apart alone, but beside the FAIL_TO_PASS calls they defeat a stub that
        # answers every call one way (`return hi` for a clamp whose failing cases all return `hi`).
        neighbours = [test for test in row.pass_to_pass if file_of_test(test) in targets]
        feature = {"kind": "package", "tests": [*row.fail_to_pass, *neighbours]}
        try:
            calls, unserialisable, outcomes = record_calls(test_cmd, gold, feature, targets, timeout_s, pythonpath)
        except (TestCommandTimeout, TestCommandFailed) as exc:  # the host's fault, not the row's: nothing is stored
            raise PrepError(f"recording the oracle of {row.instance_id}: {exc}") from None
        failing = [test for test in row.fail_to_pass if outcomes.get(test) != "PASSED"]
        if failing:
            return result([], "gold fails its tests", f"not PASSED with the gold patch: {failing[:5]}")
        shutil.copytree(snapshot, base, ignore=shutil.ignore_patterns(".git"))
        seen = len(calls) + unserialisable
        calls = with_drained_results(test_cmd, gold, calls, timeout_s, pythonpath)  # iterators, as the gold's replay
        calls = floored(calls, existed_before(gold, lambda path: _text(snapshot / path), pythonpath))
        counts.update(seen=seen, no_strict_form=seen - len(calls))
        if not calls:
            return result([], "no strict form" if seen else "no calls into the package")
        kept = [call for call in calls if not names_test_code(call)]
        counts["test_side"] = len(calls) - len(kept)
        if not kept:
            return result([], "test-side values")
        plain = [call for call in kept if not private_state([call.args, list(call.kwargs.values())])]
        private = [call for call in kept if not any(call is other for other in plain)]
        counts["private_state"] = len(private)
        if not plain:
            return result([], "private state in the arguments")
        stable = replayed_as_recorded(test_cmd, gold, [*plain, *private], timeout_s, pythonpath)
        stable = replayed_as_recorded(test_cmd, gold, stable, timeout_s, pythonpath)
        stable_private = [call for call in stable if any(call is other for other in private)]
        stable = [call for call in stable if any(call is other for other in plain)]
        counts["not_reproducible"] = len(plain) - len(stable)
        if not stable:
            return result([], "not reproducible")
        why = blind(stable)
        answers = replay_calls(test_cmd, base, [*stable, *stable_private], timeout_s, pythonpath)
        told = [mismatch(c, a) is not None for c, a in zip([*stable, *stable_private], answers, strict=True)]
        counts["discriminating"] = sum(told[: len(stable)])
        if why is not None:
            # A stub crafted for these calls (`return hi` where every call answers with `hi`) passes them: a candidate
            # that tells the replay from the tests (no pytest loaded) answers it with the stub and forges the tests;
            # the reward is then decided by the tests alone, which the code under test can reach. Not usable.
            return result([], "replay blind", why)
        if not counts["discriminating"]:
            if any(told[len(stable) :]):  # only calls handed the gold's private state tell the fix apart
                return result([], "private state in the arguments", "only calls handed private state tell")
            return result([], "base answers as the gold")
        return result(stable, None)


def _regression(
    test_cmd: list[str],
    gold: Path,
    base: Path,
    row: SWEGymRow,
    timeout_s: float,
    pythonpath: list[str],
    skip: list[str],
) -> list[RecordedCall]:
    """The calls the PASS_TO_PASS tests of files not in `skip` make into the source files (`mining.regression`),
    recorded on the `gold` tree and kept where the starting tree `base` answers them alike; none where the recording
    run fails (the tests and the canaries then guard those tests alone)."""
    tests = [test for test in row.pass_to_pass if file_of_test(test) not in skip]
    targets = list(dict.fromkeys(file_of_test(test) for test in tests))
    try:
        calls, _ = record_suite_calls(test_cmd, gold, tests, timeout_s, targets, pythonpath)
        return unaffected(test_cmd, base, calls, timeout_s, pythonpath)
    except (TestCommandTimeout, TestCommandFailed):
        return []
