"""Mine Feature Deletion tasks from a tested repository (see the package docstring for the algorithm).

All work happens in a private copy of the repository; the repository itself is only read. Each kept task is
appended to the output file as one line (I/O linear in tasks), so an interrupted run leaves a valid file (an
unfinished last line is cut off on resume) and the next run resumes: tasks already in it are kept, candidates
already rejected (recorded in `<out>.skipped.json`) are not retried.

A candidate first runs only the test files a deletion can affect (those holding a test that calls the feature, or
naming it); only a candidate that breaks enough of them pays for the full suite, which fixes FAIL_TO_PASS and
PASS_TO_PASS exactly.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from composer_prime.atomic import write_atomic
from composer_prime.grading.behaviour import RecordedCall, mismatch
from composer_prime.grading.grader import scan_texts
from composer_prime.mining.behaviour import blind, record_behaviour
from composer_prime.mining.collection import INI, guarded_mains, widened_config
from composer_prime.mining.config import MineConfig, check_inputs
from composer_prime.mining.copies import HINT_LIMIT, CopyIndex, installed_copies
from composer_prime.mining.deletion import CannotDelete, Deletion, delete_feature
from composer_prime.mining.features import Feature, discover, is_protected_file, is_source_file, is_test_file
from composer_prime.mining.patch import unified_patch
from composer_prime.mining.prompt import call_sites, render
from composer_prime.mining.ranking import covering_tests, rank, top_packages, why_kept
from composer_prime.mining.record import FeatureSpec, MinedTask, load_rows
from composer_prime.mining.regression import record_suite_calls, unaffected
from composer_prime.mining.snapshot import fingerprint, leaked_files, list_files, pack_tree, task_tree, write_tree
from composer_prime.mining.stub import stub_feature
from composer_prime.mining.testrun import TestCommandFailed, TestCommandTimeout, TestRun, replay_calls, run_tests
from composer_prime.pytest_outcomes import PASSING, passing


class MiningError(Exception):
    """The run cannot start or go on (bad repository, failing baseline, changed repository on resume)."""


class NoPassingTests(MiningError):
    """No test passes at baseline: the tests' dependencies are missing, or the command is not the right one."""

    def __init__(self, repo: Path, exit_code: int | None, tail: str):
        super().__init__(
            f"the test command found no passing tests in {repo} (exit code {exit_code}); check --test-cmd. "
            f"Last output lines:\n{tail}"
        )
        self.exit_code, self.tail = exit_code, tail


class MiningInputError(MiningError):
    """The command's input is unusable (`config.check_inputs`, an --out that cannot be resumed), found before any
    work; the CLI exits 2."""


@dataclass(frozen=True)
class _Workspace:
    """What every candidate of one run shares: the repository's files, the baseline, the private work copy."""

    repo_name: str
    repo_fp: str
    files: dict[str, bytes]
    texts: dict[str, str]
    """The files that decode as UTF-8."""
    baseline_passed: frozenset[str]
    baseline_outcomes: dict[str, str]
    """Outcome at baseline of the passing tests whose outcome is not PASSED (XFAIL)."""
    work: Path
    """The private copy where deletions are applied and the suite runs."""
    copies: CopyIndex
    """Token shingles of every text file, for the near-copy check."""


class Miner:
    """One mining run. `log` receives progress lines (the CLI prints them to stderr)."""

    def __init__(self, config: MineConfig, log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)):
        self.config = config
        self.log = log
        self.skipped_path = config.out.with_name(config.out.name + ".skipped.json")
        self.timeout_s = config.test_timeout_s or 300.0
        """The limit of one candidate's run; set from the untraced baseline run."""
        self.covered: dict[str, int] = {}
        """Feature key -> how many baseline tests call it."""
        self.covering: dict[str, set[str]] = {}
        """Feature key -> the baseline tests that call it."""
        self.excluded: dict[str, str] = {}
        """Tests that fail at baseline (id -> outcome): no task uses them."""
        self.stats: dict[str, float] = {}
        """Figures of the last run: baseline times, candidates tried, seconds spent on candidates."""
        self.suite_calls: dict[str, list[RecordedCall]] = {}
        """Repository fingerprint -> the calls the baseline's passing tests make into the source files, recorded once
        on the original code (`regression.record_suite_calls`); each task keeps those of its PASS_TO_PASS tests that
        it leaves alone."""

    def _load_previous(self, repo_fp: str) -> tuple[list[MinedTask], dict[str, str]]:
        tasks: list[MinedTask] = []
        self._drop_unfinished_row()
        if self.config.out.exists():
            tasks, errors = load_rows(self.config.out)
            if errors:
                raise MiningInputError(
                    f"cannot resume {self.config.out}: " + "; ".join(errors) + " (fix or delete the file, or pass "
                    "another --out)"
                )
            stale = [task.task_id for task in tasks if task.repo_fingerprint != repo_fp]
            if stale:
                raise MiningInputError(
                    f"cannot resume {self.config.out}: {len(stale)} task(s) were mined from a different state of "
                    f"the repository (e.g. {stale[0]}); pass another --out or delete the file"
                )
        skipped: dict[str, str] = {}
        if self.skipped_path.exists():
            data = json.loads(self.skipped_path.read_text(encoding="utf-8"))
            # skips decided under another deletion mode are tried again
            if data.get("repo_fingerprint") == repo_fp and data.get("deletion", "whole") == self.config.deletion:
                skipped = dict(data.get("skipped", {}))
        return tasks, skipped

    def _append(self, task: MinedTask) -> None:
        """Append one row (one write of a whole line, then fsync): the file grows, it is never rewritten."""
        self.config.out.parent.mkdir(parents=True, exist_ok=True)
        with self.config.out.open("a", encoding="utf-8") as handle:
            handle.write(task.model_dump_json() + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _save(self, skipped: dict[str, str], repo_fp: str) -> None:
        record = {
            "repo_fingerprint": repo_fp,
            "deletion": self.config.deletion,
            "skipped": skipped,
            "baseline_excluded": self.excluded,
        }
        write_atomic(self.skipped_path, json.dumps(record, indent=1))

    def _drop_unfinished_row(self) -> None:
        """A run killed mid-append leaves a last line without its newline: cut it off (it is mined again)."""
        out = self.config.out
        if not out.exists() or out.stat().st_size == 0:
            return
        data = out.read_bytes()
        if data.endswith(b"\n"):
            return
        keep = data.rfind(b"\n") + 1
        with out.open("r+b") as handle:
            handle.truncate(keep)
        self.log(f"resuming: dropped an unfinished last row of {out} ({len(data) - keep} bytes)")

    def _baseline(self, work: Path) -> TestRun:
        """Run the suite untraced (to size the limits), then traced; tests that do not pass in both are excluded."""
        config = self.config
        self.log(f"baseline: running {' '.join(config.test_cmd)} in a copy of {config.repo}")
        try:
            plain = run_tests(config.test_cmd, work, config.baseline_timeout_s)
            self.timeout_s = config.test_timeout_s or float(max(60, round(4 * plain.seconds)))
            traced_limit = max(self.timeout_s, 30 * plain.seconds + 60)  # profiling slows call-heavy suites
            run = run_tests(config.test_cmd, work, traced_limit, trace=True)
        except (TestCommandTimeout, TestCommandFailed) as exc:
            raise MiningError(f"baseline: {exc}") from exc
        both = passing(plain.outcomes) & passing(run.outcomes)
        self.excluded = {
            test: plain.outcomes.get(test, "not run") if test not in passing(plain.outcomes) else run.outcomes[test]
            for test in set(plain.outcomes) | set(run.outcomes)
            if test not in both
            and "FAILED" in (plain.outcomes.get(test), run.outcomes.get(test))
            or test not in both
            and "ERROR" in (plain.outcomes.get(test), run.outcomes.get(test))
        }
        if self.excluded:
            shown = ", ".join(sorted(self.excluded)[:10]) + (" ..." if len(self.excluded) > 10 else "")
            self.log(
                f"baseline: {len(self.excluded)} test(s) fail at baseline and are excluded from every task: {shown}"
            )
        if not both:
            raise NoPassingTests(config.repo, run.exit_code, "\n".join(run.output.splitlines()[-15:]))
        self.log(
            f"baseline: {len(both)} tests pass ({plain.seconds:.1f}s untraced, {run.seconds:.1f}s traced); "
            f"limit per run {self.timeout_s:g}s"
        )
        self.stats.update(baseline_untraced_s=plain.seconds, baseline_traced_s=run.seconds)
        outcomes = {test: outcome for test, outcome in run.outcomes.items() if test not in self.excluded}
        return TestRun(outcomes, run.exit_code, plain.seconds, run.output, run.calls)

    def run(self) -> list[MinedTask]:
        config = self.config
        try:
            check_inputs(config)
        except ValueError as err:
            raise MiningInputError(str(err)) from None
        repo = config.repo.expanduser().resolve()
        files = list_files(repo)
        widened = widened_config(files)
        if widened is not None:  # unittest-style test names: the mined tree carries the pytest.ini that collects them
            files = {**files, INI: widened[0]}
            self.log(widened[1])
        guarded = guarded_mains(files)
        if guarded is not None:  # a module-level unittest.main() would end pytest's collection
            files = {**files, **guarded[0]}
            self.log(guarded[1])
        repo_fp = fingerprint(files)
        tasks, skipped = self._load_previous(repo_fp)
        done = {task.task_id for task in tasks}
        if tasks:
            self.log(f"resuming: {len(tasks)} task(s) already in {config.out}, {len(skipped)} candidate(s) skipped")
        if config.max_tasks is not None and len(tasks) >= config.max_tasks:
            self.log(f"done: {config.out} already holds {len(tasks)} task(s), --max-tasks {config.max_tasks}")
            return tasks
        texts = {path: data.decode("utf-8") for path, data in files.items() if _is_text(data)}
        self.base_name = f"{config.out.name}.{repo_fp}.tar.gz"
        base_path = config.out.with_name(self.base_name)
        made = [path for path in (base_path, self.skipped_path) if not path.exists()]
        try:
            if base_path in made:
                write_atomic(base_path, pack_tree(files))
            tasks = self._mine(repo, files, repo_fp, texts, tasks, done, skipped)
        except BaseException:
            if not config.out.exists():  # a failed or interrupted run that wrote no task leaves nothing behind
                for path in made:
                    path.unlink(missing_ok=True)
            raise
        if not config.out.exists() and base_path in made:  # no task names the snapshot; the skip record says why
            base_path.unlink(missing_ok=True)
            self.log(f"no task kept: why each candidate was skipped is in {self.skipped_path}")
        return tasks

    def _mine(
        self,
        repo: Path,
        files: dict[str, bytes],
        repo_fp: str,
        texts: dict[str, str],
        tasks: list[MinedTask],
        done: set[str],
        skipped: dict[str, str],
    ) -> list[MinedTask]:
        config = self.config
        with tempfile.TemporaryDirectory(prefix="composer-prime-mine-") as scratch:
            work = Path(scratch) / repo.name
            write_tree(work, files)
            baseline = self._baseline(work)
            installed = installed_copies(top_packages(texts)) if config.host_copies else {}
            if installed:
                self.log(
                    f"copies: {len(installed)} installed file(s) named like this repository's packages are checked"
                )
            copies = CopyIndex({**texts, **installed})
            passed = passing(baseline.outcomes)
            unusual = {test: baseline.outcomes[test] for test in passed if baseline.outcomes[test] != "PASSED"}
            space = _Workspace(repo.name, repo_fp, files, texts, frozenset(passed), unusual, work, copies)
            candidates = self._candidates(texts, baseline)
            self.log(f"candidates: {len(candidates)} feature(s) exercised by some but not all tests")
            started, kept_now, tried, reasons, untried = time.monotonic(), 0, 0, Counter(), 0
            for index, feature in enumerate(candidates, start=1):
                if config.max_tasks is not None and len(tasks) >= config.max_tasks:
                    rest = candidates[index - 1 :]
                    untried = sum(1 for f in rest if f"{repo.name}:{f.key}" not in done and f.key not in skipped)
                    break
                task_id = f"{repo.name}:{feature.key}"
                if task_id in done or feature.key in skipped:
                    continue
                prefix = f"[{index}/{len(candidates)}] {feature.key} ({feature.kind})"
                tried += 1
                try:
                    task = self._try(feature, task_id, space)
                except _Skip as skip:
                    skipped[feature.key] = str(skip)
                    reasons[skip.kind] += 1
                    self.log(f"{prefix}: skipped: {skip}")
                    self._save(skipped, repo_fp)
                    continue
                tasks.append(task)
                kept_now += 1
                self._append(task)
                self.log(
                    f"{prefix}: kept (FAIL_TO_PASS {len(task.fail_to_pass)}, PASS_TO_PASS {len(task.pass_to_pass)}); "
                    f"{len(tasks)} task(s) in {config.out}"
                )
            self._save(skipped, repo_fp)
        elapsed = time.monotonic() - started
        self.stats.update(candidates=len(candidates), tried=tried, candidate_seconds=elapsed)
        summary = ", ".join(f"{count} {kind}" for kind, count in reasons.most_common()) or "none"
        left = f"; {untried} candidate(s) not tried (--max-tasks {config.max_tasks} reached)" if untried else ""
        self.log(
            f"done: {kept_now} new task(s), {len(tasks)} in {config.out} ({elapsed:.1f}s); skipped: {summary}{left}"
        )
        return tasks

    def _candidates(self, texts: dict[str, str], baseline: TestRun) -> list[Feature]:
        """Features worth a task, best first (`rank`): covered by some but not all passing tests, not trivially small."""
        features = [f for path, text in sorted(texts.items()) if is_source_file(path) for f in discover(path, text)]
        small = [f for f in features if f.kind in ("function", "method") and f.body_lines < self.config.min_body_lines]
        if small:
            self.log(f"candidates: {len(small)} function(s)/method(s) under --min-body-lines left out")
        features = [f for f in features if f not in small]
        calls = baseline.calls
        if calls is None:
            self.log("tracing: the pytest plugin did not report; trying every candidate (slower)")
            self.covered = {}
            return sorted(features, key=_order)
        passed = passing(baseline.outcomes)
        calls = {test: called for test, called in calls.items() if test in passed}
        kept = []
        for feature in features:
            covered = covering_tests(feature, calls)
            if self.config.min_tests <= len(covered) < len(passed):
                kept.append(feature)
                self.covered[feature.key] = len(covered)
                self.covering[feature.key] = covered
        return sorted(kept, key=lambda f: (rank(f, self.covered[f.key]), _order(f)))

    def _try(self, feature: Feature, task_id: str, space: _Workspace) -> MinedTask:
        """Delete `feature` in the configured mode (`auto`: whole, then stub where the whole deletion cannot be
        made, stops pytest or leaves a test module uncollectable), run the suite, and build the task; raise `_Skip`
        with the reason when it does not qualify."""
        modes = MODES[self.config.deletion] if feature.kind != "module" else ("whole",)
        for number, mode in enumerate(modes):
            last = number == len(modes) - 1
            try:
                return self._try_mode(feature, task_id, space, mode, strict_collection=not last)
            except _Skip as skip:
                if last or skip.kind not in FALL_BACK:
                    raise
        raise AssertionError("unreachable: the last mode raises or returns")

    def _try_mode(
        self, feature: Feature, task_id: str, space: _Workspace, mode: str, strict_collection: bool
    ) -> MinedTask:
        """`_try` in one deletion mode; `strict_collection`: a test module that no longer collects is a skip."""
        texts, files = space.texts, space.files
        try:
            if mode == "stub":
                deletion = stub_feature(texts, feature, docstring=self.config.stub_docstring)
            else:
                deletion = delete_feature(texts, feature)
        except CannotDelete as exc:
            raise _Skip("not deletable", str(exc)) from exc
        overlaps = space.copies.overlaps(deletion.removed, deletion.changed, skip=[feature.path])
        near = {path: share for path, share in overlaps.items() if share >= self.config.near_copy}
        if any(not is_protected_file(path) for path in near):
            shown = ", ".join(f"{path} ({share:.0%})" for path, share in sorted(near.items(), key=lambda x: -x[1]))
            raise _Skip("near copy", f"the deleted code mostly reappears in {shown}")
        voided = scan_texts({path: (before, texts[path]) for path, before in deletion.changed.items()})
        if voided:
            raise _Skip("gold voided", "grading's scan voids the gold code itself: " + "; ".join(voided[:3]))
        affected = self._affected_files(feature, texts)
        try:
            if affected:
                first = self._run_deleted(space.work, deletion, texts, targets=affected)
                broken = [t for t in space.baseline_passed if t in first.outcomes and first.outcomes[t] not in PASSING]
                collection_errors = [t for t, o in first.outcomes.items() if o == "ERROR" and "::" not in t]
                if strict_collection and collection_errors:
                    raise _Skip("uncollectable", f"test module(s) no longer collect without it: {collection_errors[0]}")
                if len(broken) < self.config.min_tests and not collection_errors:
                    raise _Skip(
                        "too few failing",
                        f"{len(broken)} test(s) fail without it in the affected files (need {self.config.min_tests})",
                    )
            run = self._run_deleted(space.work, deletion, texts)
        except TestCommandTimeout as exc:
            raise _Skip("timed out", str(exc)) from exc
        except TestCommandFailed as exc:  # the baseline ran: it is the deletion that stops pytest (a conftest import)
            tail = str(exc).strip().splitlines()[-1][:200]
            raise _Skip("breaks everything", f"pytest does not start without it: {tail}") from exc
        uncollectable = sorted(t for t, o in run.outcomes.items() if o == "ERROR" and "::" not in t)
        if strict_collection and uncollectable:
            raise _Skip("uncollectable", f"test module(s) no longer collect without it: {', '.join(uncollectable[:3])}")
        fail_to_pass = sorted(t for t in space.baseline_passed if run.outcomes.get(t) not in PASSING)
        pass_to_pass = sorted(space.baseline_passed - set(fail_to_pass))
        if len(fail_to_pass) < self.config.min_tests:
            raise _Skip(
                "too few failing", f"{len(fail_to_pass)} test(s) fail without it (need {self.config.min_tests})"
            )
        if not pass_to_pass:
            raise _Skip("breaks everything", "every test fails without it: no PASS_TO_PASS tests remain")
        test_files = sorted(path for path in texts if is_protected_file(path))
        held_out = sorted({test.split("::", 1)[0] for test in fail_to_pass})
        visible_copies = sorted(path for path in near if path not in held_out)
        if visible_copies:
            raise _Skip("near copy", f"the deleted code mostly reappears in the visible {visible_copies}")
        outside = [path for path in held_out if path not in test_files]
        if outside:
            raise _Skip("tests outside test files", f"FAIL_TO_PASS tests live in {outside} (doctests?)")
        visible = task_tree(files, held_out, deletion.edits)
        leaked = leaked_files(visible, deletion.removed)
        if leaked:
            raise _Skip("snapshot", f"the deleted code is still present in {', '.join(leaked)}")
        visible_texts = {
            path: data.decode("utf-8", "replace") for path, data in visible.items() if path.endswith(".py")
        }
        imports_removed = sorted(path for path in deletion.changed if path != feature.path)
        partial = frozenset(path for path, share in overlaps.items() if share >= HINT_LIMIT)
        prompt = render(
            feature, call_sites(visible_texts, feature, exclude=partial), imports_removed, stub=mode == "stub"
        )
        gold_patch = unified_patch(
            before={path: deletion.changed[path] for path in deletion.changed},
            after={path: texts[path] for path in deletion.changed},
        )
        calls, not_kept = self._behaviour(
            feature, space.work, sorted({*held_out, *self._affected_files(feature, texts)}), deletion.changed
        )
        if len(calls) < self.config.min_replayed_calls:
            raise _Skip(
                "no behaviour",
                f"{len(calls)} call(s) into it replay as recorded ({not_kept} skipped; need "
                f"{self.config.min_replayed_calls}, --min-replayed-calls)",
            )
        why = blind(calls)
        if why and self.config.min_replayed_calls > 0:
            raise _Skip(
                "replay blind",
                f"each of its {len(calls)} replayable call(s) {why} and leaves its arguments unchanged: a stub that "
                "ignores its input would replay as recorded (its effect is elsewhere, e.g. module state)",
            )
        regression = self._regression(space, pass_to_pass, deletion, texts, calls)
        return MinedTask(
            task_id=task_id,
            repo=space.repo_name,
            repo_fingerprint=space.repo_fp,
            feature=FeatureSpec(kind=feature.kind, path=feature.path, qualname=feature.qualname, deletion=mode),
            prompt=prompt,
            base=self.base_name,
            changes=deletion.edits,
            test_files=test_files,
            held_out=held_out,
            fail_to_pass=fail_to_pass,
            pass_to_pass=pass_to_pass,
            baseline_outcomes={
                t: o for t, o in space.baseline_outcomes.items() if t in fail_to_pass or t in pass_to_pass
            },
            behaviour=calls,
            behaviour_skipped=not_kept,
            pass_to_pass_behaviour=regression,
            gold_patch=gold_patch,
            test_cmd=self.config.test_cmd,
            test_timeout_s=self.timeout_s,
            why=why_kept(feature, self.covered.get(feature.key, len(fail_to_pass))),
        )

    def _behaviour(
        self, feature: Feature, work: Path, targets: list[str], starting: dict[str, str | None]
    ) -> tuple[list[RecordedCall], int]:
        spec = {"path": feature.path, "qualname": feature.qualname, "kind": feature.kind}
        try:
            return record_behaviour(self.config.test_cmd, work, spec, targets, self.timeout_s, starting)
        except (TestCommandTimeout, TestCommandFailed) as exc:
            raise _Skip("no behaviour", f"the recording run failed: {exc}") from exc

    def _regression(
        self,
        space: _Workspace,
        pass_to_pass: list[str],
        deletion: Deletion,
        texts: dict[str, str],
        calls: list[RecordedCall],
    ) -> list[RecordedCall]:
        """The calls the task's PASS_TO_PASS tests make into the source files (`composer_prime.mining.regression`):
        recorded once per repository state, then kept where grading's order (the feature's calls first) answers them as
        recorded on the original code and the task's starting tree (the deletion applied) answers them alike."""
        if space.repo_fp not in self.suite_calls:
            try:
                recorded, _ = record_suite_calls(
                    self.config.test_cmd, space.work, sorted(space.baseline_passed), self.timeout_s
                )
            except (TestCommandTimeout, TestCommandFailed) as exc:
                self.log(f"recording the PASS_TO_PASS calls failed, no task of this run replays them: {exc}")
                recorded = []
            self.suite_calls[space.repo_fp] = recorded
        wanted = set(pass_to_pass)
        mine = [call for call in self.suite_calls[space.repo_fp] if call.test in wanted]
        if not mine:
            return []
        answers = replay_calls(self.config.test_cmd, space.work, [*calls, *mine], self.timeout_s)
        mine = [c for c, a in zip(mine, answers[len(calls) :], strict=True) if mismatch(c, a) is None]
        with _deleted(space.work, deletion, texts):
            return unaffected(self.config.test_cmd, space.work, mine, self.timeout_s)

    def _affected_files(self, feature: Feature, texts: dict[str, str]) -> list[str]:
        """Test files a deletion of `feature` can break: those with a test that calls it, or naming it."""
        files = {test.split("::", 1)[0] for test in self.covering.get(feature.key, ())}
        name = re.compile(rf"\b{re.escape(feature.name)}\b")
        files |= {path for path, text in texts.items() if is_test_file(path) and name.search(text)}
        return sorted(path for path in files if path.endswith(".py") and path in texts)

    def _run_deleted(
        self, work: Path, deletion: Deletion, texts: dict[str, str], targets: list[str] | None = None
    ) -> TestRun:
        """Run the suite (or `targets`) with the deletion applied to the work copy, then put the originals back."""
        with _deleted(work, deletion, texts):
            return run_tests(self.config.test_cmd, work, self.timeout_s, targets=targets)


@contextlib.contextmanager
def _deleted(work: Path, deletion: Deletion, texts: dict[str, str]) -> Iterator[None]:
    """The work copy with `deletion` applied (the task's starting tree, less its held-out tests), the originals put
    back after."""
    try:
        for path, text in deletion.changed.items():
            if text is None:
                (work / path).unlink()
            else:
                (work / path).write_text(text, encoding="utf-8")
        yield
    finally:
        for path in deletion.changed:
            (work / path).write_text(texts[path], encoding="utf-8")


MODES = {"whole": ("whole",), "stub": ("stub",), "auto": ("whole", "stub")}
"""The deletions `MineConfig.deletion` tries, in order."""
FALL_BACK = frozenset({"not deletable", "breaks everything", "uncollectable"})
"""Skips of the whole deletion after which `auto` tries the stub: the name is needed for the rest to load."""


class _Skip(Exception):
    def __init__(self, kind: str, reason: str):
        super().__init__(f"{kind}: {reason}")
        self.kind = kind


def _is_text(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _order(feature: Feature) -> tuple[str, bool, int]:
    """Reading order within a file, whole modules last."""
    return feature.path, feature.kind == "module", feature.start
