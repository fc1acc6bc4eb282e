"""The grading module's pure parts: record folding, judgement, canary verdicts, stray policy, machinery scan and the
trusted ini (the e2e red-team suite runs all of it in real boxes)."""

from __future__ import annotations

import json
import time

from composer_prime.grading import tree
from composer_prime.grading.grade import Grade
from composer_prime.grading.grader import Suite, judge
from composer_prime.grading.pytest_config import repo_settings, trusted_ini
from composer_prime.pytest_outcomes import outcomes_from_records


def rec(test_id: str, when: str, outcome: str, xfail: bool = False, sub: int | None = None) -> dict:
    return {"id": test_id, "when": when, "outcome": outcome, "xfail": xfail, **({"sub": sub} if sub else {})}


RECORDS = [
    rec("t.py::ok", "setup", "passed"),
    rec("t.py::ok", "call", "passed"),
    rec("t.py::ok", "teardown", "passed"),
    rec("t.py::bad", "call", "failed"),
    rec("t.py::teardown", "call", "passed"),
    rec("t.py::teardown", "teardown", "failed"),
    rec("t.py::fixture", "setup", "failed"),
    rec("t.py::skip", "setup", "skipped"),
    rec("t.py::xf", "call", "skipped", xfail=True),
    rec("t.py::xp", "call", "passed", xfail=True),
    rec("broken.py", "collect", "failed"),
    {"exit": 1},
]


def test_records_fold_into_outcomes() -> None:
    assert outcomes_from_records(RECORDS) == {
        "t.py::ok": "PASSED",
        "t.py::bad": "FAILED",
        "t.py::teardown": "ERROR",
        "t.py::fixture": "ERROR",
        "t.py::skip": "SKIPPED",
        "t.py::xf": "XFAIL",
        "t.py::xp": "XPASS",
        "broken.py": "ERROR",
    }


def suite(f2p: list[str], p2p: list[str], baseline: dict[str, str] | None = None) -> Suite:
    return Suite(fail_to_pass=f2p, pass_to_pass=p2p, targets=["t.py"], timeout_s=10, baseline_outcomes=baseline or {})


def test_judgement_follows_swe_bench_and_canaries_void() -> None:
    outcomes = outcomes_from_records(RECORDS)
    baseline = {"t.py::xf": "XFAIL", "t.py::skip": "SKIPPED"}
    graded = suite(["t.py::ok", "t.py::xf"], ["t.py::skip", "t.py::ok"], baseline)
    ok = judge(Grade(), dict(outcomes), {}, graded, time.monotonic())
    assert ok.solved and ok.fail_to_pass == 1.0 and ok.pass_to_pass == 1.0
    # XFAIL, XPASS and SKIPPED are passes only for a test that was so at baseline (`pytest.xfail()` is no fix)
    for test in ("t.py::xf", "t.py::xp", "t.py::skip"):
        f2p = judge(Grade(), dict(outcomes), {}, suite([test], []), 0)
        p2p = judge(Grade(), dict(outcomes), {}, suite([], [test]), 0)
        assert not f2p.solved and not p2p.solved and f2p.fail_to_pass_failed == p2p.pass_to_pass_failed == [test]
    wrong_kind = judge(Grade(), dict(outcomes), {}, suite(["t.py::skip"], [], {"t.py::skip": "XFAIL"}), 0)
    assert not wrong_kind.solved
    bad = judge(Grade(), dict(outcomes), {}, suite(["t.py::ok", "t.py::skip"], ["t.py::teardown", "t.py::gone"]), 0)
    assert not bad.solved and bad.fail_to_pass == 0.5 and bad.fail_to_pass_failed == ["t.py::skip"]
    assert bad.pass_to_pass == 0.0 and bad.pass_to_pass_failed == ["t.py::teardown", "t.py::gone"]
    # a canary whose outcome is not the expected one voids an otherwise perfect grade: a copy must come back as its
    # original, a mutant of a passing test must fail
    canaries = {"t.py::ok": "=t.py::bad", "t.py::xf": "!t.py::ok"}
    forged = judge(Grade(), dict(outcomes), canaries, suite(["t.py::ok"], []), 0)
    assert not forged.solved and forged.void == [
        "canary t.py::ok came back PASSED (its original FAILED)",
        "canary t.py::xf came back XFAIL (its original passed)",
    ]
    assert forged.metrics()["void"] == 1.0 and forged.fail_to_pass == 1.0
    timed_out = judge(Grade(timed_out=True), dict(outcomes), {}, suite(["t.py::ok"], []), 0)
    assert not timed_out.solved and timed_out.metrics()["timed_out"] == 1.0
    errored = judge(Grade(error="pytest did not finish"), dict(outcomes), {}, suite(["t.py::ok"], []), 0)
    assert not errored.solved


BASELINE = {p: "aa" for p in ["pkg/__init__.py", "pkg/core.py", "tests/test_core.py", "conftest.py", "setup.cfg"]}


def test_a_link_over_a_starting_file_is_removed_not_kept_unscanned() -> None:
    current = {p: sha for p, sha in BASELINE.items() if p != "pkg/core.py"}  # pkg/core.py is now a link
    assert tree.strays(BASELINE, current, ["pkg/core.py"], owned=[]) == ["pkg/core.py"]
    assert tree.changed_python(BASELINE, current, current) == []  # which is why the scan would not have read it


def test_strays_keep_new_modules_and_data_of_the_tasks_packages_only() -> None:
    current = {
        **BASELINE,
        "pkg/helpers.py": "bb",  # a new module in a source folder: kept
        "pkg/sub/mod.py": "bb",  # a new subpackage of the task's package (red team 39c's `shop/money/`): kept
        "pkg/sub/__init__.py": "bb",
        "pkg/rules.json": "bb",  # a data file beside the module (`shop/discount_rules.json`): kept
        "pkg/sub/table.csv": "bb",
        "helpers/util.py": "bb",  # a new top-level folder: first on sys.path, it could shadow pytest: removed
        "pkg/native.so": "bb",  # code the scan cannot read: removed
        "pkg/native.so.1": "bb",  # a versioned library, which ctypes loads as well
        "pkg/fast.cpython-311-x86_64-linux-gnu.so": "bb",
        "pkg/pytest.ini": "bb",  # configuration: removed
        "pkg/.hidden.json": "bb",
        "pkg/tests/test_more.py": "bb",  # a test module, under a package or not: removed
        "pytest.py": "bb",
        "src/pytest/__main__.py": "bb",
        "tests/test_0000_helpers.py": "bb",
        "pkg/test_extra.py": "bb",  # a module named like a test (red40's `shop/ab_test.py`): a module, kept
        "pkg/ab_test.py": "bb",
        "pkg/.hidden/evil.py": "bb",  # anything in a dot-folder (red40's R9): removed
        "pkg/conftest.py": "bb",
        "pkg/sitecustomize.py": "bb",
        "evil.pth": "bb",
        ".pytest.ini": "bb",
        "pkg/__pycache__/core.cpython-311.pyc": "bb",
        "tests/test_core.py": "cc",  # an owned file: rewritten, never removed
    }
    removed = tree.strays(BASELINE, current, ["pkg/link.py"], owned=["tests/test_core.py", "tests/test_new.py"])
    assert removed == sorted(
        [
            ".pytest.ini",
            "evil.pth",
            "pkg/__pycache__/core.cpython-311.pyc",
            "helpers/util.py",
            "pkg/.hidden.json",
            "pkg/.hidden/evil.py",
            "pkg/conftest.py",
            "pkg/fast.cpython-311-x86_64-linux-gnu.so",
            "pkg/link.py",
            "pkg/native.so",
            "pkg/native.so.1",
            "pkg/pytest.ini",
            "pkg/sitecustomize.py",
            "pkg/tests/test_more.py",
            "pytest.py",
            "src/pytest/__main__.py",
            "tests/test_0000_helpers.py",
        ]
    )
    assert tree.changed_python(BASELINE, {**current, "pkg/core.py": "aa11"}, ["pkg/core.py", "pkg/helpers.py"]) == [
        "pkg/helpers.py"
    ]


def test_scan_flags_machinery_in_added_lines_only() -> None:
    before = "import pytest\n\n\n@pytest.fixture\ndef db():\n    return {}\n"
    fixture_edit = before + "\n\n@pytest.fixture\ndef cache():\n    return []\n"
    assert tree.scan("conftest.py", before, fixture_edit) == []
    forged = before + "\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    yield\n"
    reasons = tree.scan("conftest.py", before, forged)
    assert [r.split(": ")[1] for r in reasons] == ["a pytest hook", "pytest plugin machinery"]
    assert tree.scan("pkg/__init__.py", "", "import sys\nsys.modules['pytest'].x = None\n")[0].startswith(
        "pkg/__init__.py: sys.modules games"
    )
    assert tree.scan("pkg/m.py", "", "r.outcome = 'passed'\n")[0].startswith("pkg/m.py: report rewriting")
    # a hook already in the starting file is not the agent's
    assert tree.scan("conftest.py", forged, forged + "\nX = 1\n") == []
    # honest library code is not machinery: toolz 1.0.0's `curry` (its gold code was voided by a `keywords[` pattern)
    assert tree.scan("toolz/functoolz.py", "", "            default = keywords[param.name]\n") == []


def test_trusted_ini_keeps_only_safe_settings() -> None:
    settings = repo_settings(
        {
            "setup.cfg": "[tool:pytest]\naddopts = -p evil --doctest-modules -x\nmarkers =\n  slow: slow\n",
            "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-p other"\npythonpath = ["lib"]\n',
        }
    )
    assert settings == {"addopts": "-p other", "pythonpath": "lib"}  # pyproject.toml comes first
    assert trusted_ini(settings, "/box", [".", "src"]) == "[pytest]\npythonpath = /box /box/src /box/lib\n"
    cfg = repo_settings({"setup.cfg": "[tool:pytest]\naddopts = -p evil --doctest-modules -x\nmarkers =\n  slow: s\n"})
    assert trusted_ini(cfg, "/box", ["."]) == (
        "[pytest]\npythonpath = /box\naddopts = --doctest-modules\nmarkers = slow: s\n"
    )


def finished(test_id: str, *reports: tuple[str, str, bool, int]) -> dict:
    """The recorder's line for one finished test: (when, outcome, sub, count) per kind of report."""
    entries = [{"when": w, "outcome": o, "xfail": False, "sub": sub, "n": n} for w, o, sub, n in reports]
    return {"id": test_id, "reports": entries}


def test_outcome_stream_folds_subtests_into_their_test() -> None:
    """One record per test: its `subTest` blocks are counted there; a failing one fails the test, no void."""
    from composer_prime.grading.stream import read_stream

    def stream(*records: dict) -> str:
        return "\n".join(f"n1 {json.dumps(r)}" for r in records)

    fine = finished(
        "t.py::T::test_x", ("setup", "passed", False, 1), ("call", "passed", True, 900), ("call", "passed", False, 1)
    )
    collected = {"collected": ["t.py::T::test_x"]}
    records, void, _ = read_stream(stream(collected, fine, {"exit": 0}), "n1")
    assert void == [] and outcomes_from_records(records) == {"t.py::T::test_x": "PASSED"}
    one_fails = finished(
        "t.py::T::test_x", ("call", "passed", True, 899), ("call", "failed", True, 1), ("call", "passed", False, 1)
    )
    records, void, _ = read_stream(stream(one_fails), "n1")
    assert void == [] and outcomes_from_records(records) == {"t.py::T::test_x": "FAILED"}
    # a phase reported twice outside subTest blocks, or a test recorded twice, voids
    twice = finished("t.py::T::test_x", ("call", "failed", False, 1), ("call", "passed", False, 1))
    assert read_stream(stream(twice), "n1")[1] == ["t.py::T::test_x (call) reported twice in the outcome stream"]
    counted = finished("t.py::T::test_x", ("call", "passed", False, 2))
    assert read_stream(stream(counted), "n1")[1] == ["t.py::T::test_x (call) reported twice in the outcome stream"]
    assert read_stream(stream(fine, one_fails), "n1")[1] == [
        "t.py::T::test_x (test) recorded twice in the outcome stream"
    ]
    # a lone report outside a test's line is not the recorder's
    assert read_stream(stream(rec("t.py::T::test_x", "call", "passed")), "n1")[:2] == (
        [],
        ["a malformed CollectLine in the outcome stream"],
    )


def test_outcome_stream_takes_nothing_back() -> None:
    from composer_prime.grading.stream import read_stream

    nonce = "n0"
    ok = finished("t.py::ok", ("setup", "passed", False, 1), ("call", "passed", False, 1))
    lines = [
        f"{nonce} " + json.dumps({"collected": ["t.py::ok"]}),
        f"{nonce} " + json.dumps(ok),
        f"{nonce} " + json.dumps(rec("broken.py", "collect", "failed")),
        "printed by a test",
        f"{nonce} " + json.dumps({"exit": 1}),
    ]
    records, void, rest = read_stream("\n".join(lines), nonce)
    assert void == [] and rest == "printed by a test"
    assert records == [
        rec("t.py::ok", "setup", "passed"),
        rec("t.py::ok", "call", "passed"),
        rec("broken.py", "collect", "failed"),
        {"exit": 1},
    ]
    forged = [*lines, f"{nonce} " + json.dumps(ok), "n1 {}"]
    records, void, _ = read_stream("\n".join(forged), nonce)
    assert void == [
        "records after the end of the session in the outcome stream",
        "t.py::ok (test) recorded twice in the outcome stream",
    ]


def test_scan_texts_voids_what_grading_would() -> None:
    """The miner's check of gold code: added lines only, `.py` files only, the size limit as at grading."""
    from composer_prime.grading.grader import SCAN_BYTES, scan_texts

    before = "import sys\n\n\ndef f():\n    return 1\n"
    gold = before + "\n\ndef g():\n    return sys.modules['pytest']\n"
    assert scan_texts({"pkg/m.py": (before, gold)}) == ["pkg/m.py: sys.modules games: \"return sys.modules['pytest']\""]
    assert scan_texts({"pkg/m.py": (gold, gold + "X = 1\n"), "notes.txt": (None, "sys.modules")}) == []
    assert scan_texts({"pkg/new.py": (None, "import sys\nsys.modules['pytest'] = None\n")})[0].startswith(
        "pkg/new.py: sys.modules games"
    )
    big = "x = 1\n" * (SCAN_BYTES // 6 + 1)
    assert scan_texts({"pkg/big.py": (None, big)}) == [
        f"pkg/big.py: {len(big)} bytes, over the scan's {SCAN_BYTES} byte limit"
    ]


def test_the_grader_box_unpacks_regular_files_and_folders_only(tmp_path) -> None:
    """The archive is packed by the agent's `tar`, which may have been replaced: unpacking keeps regular files and
    folders inside the fresh root, drops links, devices, absolute and `..` names, and set-id bits."""
    import io
    import os
    import subprocess
    import sys
    import tarfile

    from composer_prime.grading.private_copy import _UNPACK

    def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", mode: int = 0o644, link: str = ""):
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.linkname, info.size = kind, mode, link, len(data)
        return info, io.BytesIO(data) if data else None

    outside = tmp_path / "outside"
    outside.mkdir()
    archive = tmp_path / "tree.tar"
    with tarfile.open(archive, "w") as tar:
        for info, data in [
            member("./pkg", tarfile.DIRTYPE, mode=0o755),
            member("./pkg/mod.py", data=b"X = 1\n"),
            member("./pkg/run.sh", data=b"#!/bin/sh\n", mode=0o6755),
            member("./pkg/up", tarfile.SYMTYPE, link=str(outside)),
            member("./pkg/up/evil.py", data=b"evil\n"),
            member("./pkg/hard", tarfile.LNKTYPE, link="pkg/mod.py"),
            member("../escape.py", data=b"evil\n"),
            member(str(outside / "abs.py"), data=b"evil\n"),
            member("./pkg/fifo", tarfile.FIFOTYPE),
        ]:
            tar.addfile(info, data)
    root = tmp_path / "root"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _UNPACK, str(archive), str(root)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(root.resolve())
    found = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    # the link is dropped, so the file named through it lands in a plain folder inside the root, not outside
    assert found == ["pkg", "pkg/mod.py", "pkg/run.sh", "pkg/up", "pkg/up/evil.py"], found
    assert not (root / "pkg/up").is_symlink()
    assert (root / "pkg/mod.py").read_bytes() == b"X = 1\n"
    assert oct(os.stat(root / "pkg/run.sh").st_mode & 0o7777) == oct(0o755)
    assert list(outside.iterdir()) == [] and not (tmp_path / "escape.py").exists() and not archive.exists()


def test_canaries_go_to_every_fail_to_pass_file_and_one_drawn_pass_to_pass_file() -> None:
    from composer_prime.grading.grader import canary_targets

    f2p = ["tests/test_a.py::test_x[1]", "tests/test_b.py::T::test_y", "tests/test_a.py::test_z"]
    both = Suite(fail_to_pass=f2p, pass_to_pass=["tests/test_a.py::test_w"], targets=["tests"], timeout_s=1)
    assert canary_targets(both) == ["tests/test_a.py", "tests/test_b.py"]  # no file holds only PASS_TO_PASS tests
    p2p = ["tests/test_c.py::test_1", "tests/test_d.py::test_2", "tests/test_a.py::test_w"]
    drawn = {
        canary_targets(Suite(fail_to_pass=f2p, pass_to_pass=p2p, targets=["tests"], timeout_s=1))[2] for _ in range(40)
    }
    assert drawn == {"tests/test_c.py", "tests/test_d.py"}


def test_prime_rls_run_folder_is_read_from_the_env_servers_command_line(tmp_path) -> None:
    """red40's R2: PRIME-RL keeps every rollout (with what grading reported) in its run folder; the tasksets hide the
    folder of the run their env server serves, as PRIME-RL's launcher names it on the command line."""
    from composer_prime.grading.runtime import run_folders

    config = tmp_path / "outputs" / "run" / "configs" / "envs" / "train" / "feature-deletion.json"
    assert run_folders(["env-server", "@", str(config)]) == [(tmp_path / "outputs" / "run").resolve()]
    assert run_folders(["env-server", "@", str(tmp_path / "env.json")]) == []
    assert run_folders(["pytest", str(config)]) == []
