"""The two streams the grader reads from a process the candidate's code runs in (the suite's outcome stream and the
replay's answers): whatever is written there, the reader returns a verdict with a reason and never raises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_prime.grading.behaviour import RecordedCall, compare, read_answers
from composer_prime.grading.stream import MAX_LINE, read_stream

NONCE = "n0"
CALLS = [
    RecordedCall(target="shop.pricing:apply_discount", args=[["int", "1"]], result=["float", "0.5"], args_after=[]),
    RecordedCall(
        target="shop.pricing:apply_discount", args=[], raised=["exc", "builtins:ValueError", []], args_after=[]
    ),
    RecordedCall(target="shop.cart:Cart.items", args=[], result=["dict", [[["str", "a"], ["int", "1"]]]]),
]


def line(record: object) -> str:
    return f"{NONCE} {json.dumps(record)}"


def passed(test_id: str) -> dict:
    return {"id": test_id, "reports": [{"when": "call", "outcome": "passed", "xfail": False, "sub": False, "n": 1}]}


def test_a_stream_that_ends_before_every_collected_test_reported_voids() -> None:
    """The recorder announces what it collected; an end of session with a collected test unreported means its
    writer was silenced (or pre-empted by a forger that missed an id)."""
    ids = ["t.py::test_a", "t.py::test_b[1]", "t.py::test_b[2]"]
    whole = [line({"collected": ids}), *(line(passed(i)) for i in ids), line({"exit": 0})]
    assert read_stream("\n".join(whole), NONCE)[1] == []
    cut = [line({"collected": ids}), line(passed(ids[0])), line(passed(ids[1])), line({"exit": 0})]
    assert read_stream("\n".join(cut), NONCE)[1] == [
        "the outcome stream ended before 1 collected test(s) reported (its writer went away): t.py::test_b[2]"
    ]
    unannounced = [line(passed(ids[0])), line({"exit": 0})]
    assert read_stream("\n".join(unannounced), NONCE)[1] == ["the outcome stream never announced the collected tests"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"raised": []}', "a malformed record in the outcome stream (keys ['raised'])"),
        ('{"id": "t.py::a", "reports": [[]]}', "a malformed TestLine in the outcome stream"),
        ('{"id": "t.py::a", "reports": {"when": "call"}}', "a malformed TestLine in the outcome stream"),
        ('{"id": ["t"], "reports": []}', "a malformed TestLine in the outcome stream"),
        (
            '{"id": "t.py::a", "reports": [{"when": "call", "outcome": "passed", "xfail": 0, "sub": false, "n": 1}]}',
            "a malformed TestLine in the outcome stream",
        ),
        ('{"exit": "0"}', "a malformed ExitLine in the outcome stream"),
        ('{"exit": true}', "a malformed ExitLine in the outcome stream"),
        ('{"collected": "t.py::a"}', "a malformed CollectedLine in the outcome stream"),
        ("[" * 100_000 + "]" * 100_000, "a record nested too deeply in the outcome stream"),
        ('{"exit": 0' + " " * MAX_LINE + "}", f"a record of {MAX_LINE + 11} characters in the outcome stream"),
        (b'{"exit": 0\xff\xfe}'.decode(errors="replace"), "a malformed record in the outcome stream (not JSON)"),
        ('"\\udc80"', "a malformed record in the outcome stream (not an object)"),
    ],
)
def test_a_malformed_stream_line_voids_with_its_reason(text: str, reason: str) -> None:
    records, void, _ = read_stream(f"{NONCE} {text}", NONCE)
    assert records == [] and len(void) == 1 and void[0].startswith(reason)


@pytest.mark.parametrize(
    "answer",
    [
        {"i": 0, "raised": []},
        {"i": 1, "raised": ["exc"]},
        {"i": 0, "result": ["float", "not a number"], "args_after": []},
        {"i": 0, "result": ["float", ["nested"]], "args_after": []},
        {"i": 2, "result": ["dict", 5], "args_after": []},
        {"i": 2, "result": ["dict", [[1]]], "args_after": []},
        {"i": 2, "result": ["dict", [5]], "args_after": []},
        {"i": 0, "result": None, "args_after": "x"},
    ],
)
def test_a_malformed_replay_answer_is_a_mismatch(answer: dict) -> None:
    answers = read_answers(line(answer), NONCE, len(CALLS))
    replayed, wrong = compare(CALLS, answers)
    assert replayed == 0.0 and len(wrong) == 3


def test_an_answer_bomb_is_no_answer_and_is_never_parsed() -> None:
    """Millions of `[]` in one answer (the 16 MiB the launcher keeps) would cost hundreds of MB once parsed: a line
    over `ANSWER_CONTAINERS` lists and objects is no answer; an answer of a value as large as a recording keeps
    (`values.MAX_NODES`) still counts."""
    import tracemalloc

    from composer_prime.grading.behaviour import ANSWER_CONTAINERS
    from composer_prime.grading.values import MAX_NODES

    bomb = f'{NONCE} {{"i": 0, "result": ["list", [{", ".join(["[]"] * 1_000_000)}]]}}'
    assert bomb.count("[") > ANSWER_CONTAINERS
    tracemalloc.start()
    answers = read_answers(bomb, NONCE, 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert answers == [None] and peak < 50 << 20, peak  # parsed, the million lists would take over 56 MB
    large = line({"i": 0, "result": ["list", [["int", "1"]] * (MAX_NODES - 1)]})
    assert read_answers(large, NONCE, 1)[0] == {"i": 0, "result": ["list", [["int", "1"]] * (MAX_NODES - 1)]}


def test_replay_lines_of_the_wrong_kind_are_no_answer() -> None:
    lines = [
        line({"i": True, "result": ["int", "1"]}),
        line({"i": "0", "result": ["int", "1"]}),
        line({"i": 0, "result": ["int", "1"], "extra": 1}),
        f"{NONCE} {'{' * 50_000}",
        f"{NONCE} {{" + '"i": 0, "result": ' + "[" * 100_000 + "]" * 100_000 + "}",
    ]
    assert read_answers("\n".join(lines), NONCE, len(CALLS)) == [None, None, None]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(["id", "reports", "when", "outcome", "xfail", "sub", "n", "exit", "collected", "i", "result"])
RECORDS = st.dictionaries(KEYS, JSON, max_size=6) | JSON
LINES = st.one_of(
    RECORDS.map(lambda record: line(record)),
    st.text(max_size=40).map(lambda text: f"{NONCE} {text}"),
    st.binary(max_size=40).map(lambda data: f"{NONCE} " + data.decode(errors="replace")),
    st.integers(1, 3000).map(lambda depth: f"{NONCE} " + "[" * depth * 20 + "]" * depth * 20),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(LINES, max_size=8))
def test_no_outcome_stream_crashes_the_reader(lines: list[str]) -> None:
    records, void, _ = read_stream("\n".join(lines), NONCE)
    assert isinstance(records, list) and all(isinstance(reason, str) for reason in void)


ANSWERS = st.fixed_dictionaries(
    {"i": st.integers(-1, 3)},
    optional={
        "result": JSON,
        "raised": JSON,
        "error": JSON,
        "args_after": JSON,
        "kwargs_after": st.dictionaries(st.text(max_size=4), JSON, max_size=3),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(ANSWERS.map(line), LINES), max_size=8))
def test_no_replay_answer_crashes_the_judgement(lines: list[str]) -> None:
    answers = read_answers("\n".join(lines), NONCE, len(CALLS))
    replayed, wrong = compare(CALLS, answers)
    assert 0.0 <= replayed <= 1.0 and all(isinstance(reason, str) for reason in wrong)


def test_the_agents_diff_is_git_style_and_skips_what_git_ignores() -> None:
    from composer_prime.grading.diff import file_diff, ignore_rules, ignored

    assert file_diff("a.py", b"x = 1\n", b"x = 2\n") == (
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
    )
    assert file_diff("n.py", None, b"y").startswith("diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null")
    assert file_diff("n.py", None, b"y").endswith("+y\n\\ No newline at end of file\n")
    assert file_diff("b.bin", b"\xff", b"\xfe").endswith("Binary files a/b.bin and b/b.bin differ\n")
    rules = ignore_rules(b"# comment\n/build/\n*.log\n!keep.log\ndocs/_gen\n")
    assert [ignored(p, rules) for p in ("pkg/__pycache__/m.pyc", "build/x.py", "src/build/x.py", "a/b.log")] == [
        True,
        True,
        False,
        True,
    ]
    assert [ignored(p, rules) for p in ("docs/_gen/x.md", "docs/_gen", "pkg/build", "x.egg-info/PKG-INFO")] == [
        True,
        True,
        False,
        True,
    ]


def _launch(program: str, limit_s: float = 30) -> subprocess.CompletedProcess:
    from composer_prime.grading.launch import launch_argv

    argv = launch_argv(False, limit_s, [sys.executable, "-c", program], cap=sys.executable)
    return subprocess.run(argv, capture_output=True, timeout=120, check=False)


def test_the_capping_stage_keeps_both_ends_and_a_cut_stream_voids() -> None:
    """What the launched program writes reaches the caller capped in the box: the head and tail of stdout, a note
    where the middle was dropped, one trailer; a dropped stdout voids the outcome stream, whatever it held."""
    from composer_prime.grading.launch import OUT_HEAD, OUT_TAIL, TRAILER, marks

    ids = ["t.py::test_a"]
    records = [line({"collected": ids}), line(passed(ids[0])), line({"exit": 0})]
    program = (
        "import os, sys\n"
        f"os.write(1, {(records[0] + chr(10)).encode()!r})\n"
        "for _ in range(40): os.write(1, b'y' * (1 << 20))\n"
        f"os.write(1, {(chr(10) + records[1] + chr(10) + records[2] + chr(10)).encode()!r})\n"
        "for _ in range(4): os.write(2, b'e' * (1 << 20))\n"
        "sys.exit(3)\n"
    )
    done = _launch(program)
    out = done.stdout.decode()
    total = 40 * (1 << 20) + sum(len(r) + 1 for r in records) + 1
    dropped = total - OUT_HEAD - OUT_TAIL
    assert done.returncode == 3 and marks(out) == (False, False)
    assert len(done.stdout) < OUT_HEAD + OUT_TAIL + 1000 and len(done.stderr) < 400_000
    trailer = f"{TRAILER} stdout {total} {dropped} stderr {4 << 20} {(4 << 20) - (320 << 10)}"
    assert out.rstrip("\n").rsplit("\n", 1)[1] == trailer
    assert "bytes dropped here]" in out and "bytes dropped here]" in done.stderr.decode()
    assert read_stream(out, NONCE)[1] == [
        f"the outcome stream: the run wrote {total} bytes to its stdout, over the {OUT_HEAD + OUT_TAIL} byte cap "
        f"({dropped} dropped unread)"
    ]
    honest = _launch(f"print({records[0]!r}); print({records[1]!r}); print({records[2]!r})")
    assert read_stream(honest.stdout.decode(), NONCE)[1] == []
    assert honest.stdout.decode().endswith(f"{TRAILER} stdout {sum(len(r) + 1 for r in records)} 0 stderr 0 0\n")


def test_the_capping_stage_does_not_wait_for_a_daemon_holding_its_pipes() -> None:
    started = time.monotonic()
    done = _launch("import subprocess; subprocess.Popen(['sleep', '60'], start_new_session=True); print('bye')")
    assert done.returncode == 0 and b"bye\n" in done.stdout
    assert time.monotonic() - started < 20


def test_the_listing_names_what_stands_in_the_way(tmp_path) -> None:
    """`LIST_FILES` in a real tree: a folder at an owned path, a folder named like a canary, a fifo and a link go
    before grading writes; a cut listing, a failed `find` and a name that is not UTF-8 are problems."""
    from composer_prime.grading import tree

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "tests" / "test_held.py").mkdir(parents=True)
    (tmp_path / "tests" / "test_held.py" / "inner.txt").write_text("in the way\n")
    (tmp_path / "tests" / "test_held_extra.py").mkdir()
    (tmp_path / "pkg.py" / "sub").mkdir(parents=True)  # a starting-tree folder named `*.py` stays
    (tmp_path / "pkg.py" / "sub" / "keep.txt").write_text("k\n")
    os.mkfifo(tmp_path / "pkg" / "pipe.py")
    (tmp_path / "to_root").symlink_to("/")
    with open(tmp_path / "pkg" / "huge.bin", "wb") as out:  # sparse: listed by its size, never read
        out.truncate(tree.HASH_BYTES + 1)
    (tmp_path / "pkg" / "blob.bin").write_bytes(b"b" * 1000)
    for n in range(3):  # hard links: listed by size, never hashed once per link (300 links to 64 MiB took minutes)
        os.link(tmp_path / "pkg" / "blob.bin", tmp_path / "pkg" / f"link{n}.bin")
    done = subprocess.run(["sh", "-c", tree.LIST_FILES], cwd=tmp_path, capture_output=True, check=True, timeout=60)
    seen = tree.read_listing(done.stdout.decode())
    assert seen.problem is None
    links = [f"pkg/link{n}.bin" for n in range(3)]
    assert sorted(seen.files) == sorted(
        ["pkg.py/sub/keep.txt", "pkg/huge.bin", "pkg/mod.py", "tests/test_held.py/inner.txt", "pkg/blob.bin", *links]
    )
    assert seen.files["pkg/huge.bin"] == f"?{tree.HASH_BYTES + 1}"
    assert {seen.files[p] for p in ["pkg/blob.bin", *links]} == {"?1000"}
    assert seen.files["pkg/mod.py"] == tree.sha256(b"x = 1\n")
    assert seen.links == ["to_root"] and seen.others == ["pkg/pipe.py"]
    baseline = ["pkg/mod.py", "pkg.py/sub/keep.txt", "tests/test_held.py"]
    assert tree.in_the_way(baseline, seen, ["tests/test_held.py"]) == [
        "pkg/pipe.py",
        "tests/test_held.py",
        "tests/test_held_extra.py",
    ]
    assert "over 33554432 bytes" in tree.read_listing(done.stdout.decode().rsplit("e 0", 1)[0]).problem
    assert "find exit 1" in tree.read_listing("e 1\0").problem
    assert "not UTF-8" in tree.read_listing("l bad\ufffd.py\0e 0\0").problem
