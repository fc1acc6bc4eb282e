"""`composer-prime smoke --prime-rl` as a user runs it: Ctrl-C at each stage ends every process within 5 s, and an
unreachable teacher is a warning and a count, not a silent zero. They need PRIME-RL's source (`PRIME_RL_SRC`, at
559b447 with deps/verifiers) and the smoke's venvs already built (`COMPOSER_SMOKE_CACHE`, the `--cache` of an earlier
smoke); `.ci/smoke` runs them after its own smoke run built both."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SRC = os.environ.get("PRIME_RL_SRC")
CACHE = os.environ.get("COMPOSER_SMOKE_CACHE")
needs = pytest.mark.skipif(not (SRC and CACHE), reason="needs PRIME_RL_SRC and COMPOSER_SMOKE_CACHE (.ci/smoke)")


def smoke(out: Path, cache: str, *extra: str) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "composer_prime",
        "smoke",
        "--prime-rl",
        str(SRC),
        "--cache",
        cache,
        "--torch-index",
        "",
        "--no-live",
        "--out",
        str(out),
        *extra,
    ]
    # Ctrl-C's SIGINT at its default disposition in the smoke: a test run from a background job of a non-interactive
    # shell (`.ci/run &`) inherits SIGINT ignored, which Python keeps, and the smoke would never see the interrupt.
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def ours(root: Path) -> list[str]:
    """Processes (other than this test's) whose command line or working folder is under `root`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().split()[2]
        except OSError:
            continue
        if state != "Z" and (str(root) in cmdline or cwd.startswith(str(root))):
            found.append(f"{entry.name}: {cmdline[:120]}")
    return found


def interrupt_when(process: subprocess.Popen, marker: str, timeout_s: float = 900.0) -> list[str]:
    """Read the smoke's output until a line holds `marker`, then send it SIGINT (what Ctrl-C sends). The rest of its
    output is read on in a thread into the returned list, so a full pipe never holds the smoke up."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if marker in line:
            time.sleep(1.0)
            process.send_signal(signal.SIGINT)
            threading.Thread(target=lines.extend, args=(process.stdout,), daemon=True).start()
            return lines
        if time.monotonic() > deadline:
            break
    process.kill()
    raise AssertionError(f"never reached {marker!r}:\n{''.join(lines[-20:])}")


def exit_code(process: subprocess.Popen, lines: list[str]) -> tuple[int, float]:
    """The smoke's exit code after the interrupt and how long it took; its last output if it has not exited in 30 s
    (then killed, with its session)."""
    start = time.monotonic()
    try:
        code = process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError(
            "the smoke did not exit 30 s after Ctrl-C; its last output:\n" + "".join(lines[-40:])
        ) from None
    return code, time.monotonic() - start


def venvs_only(cache: Path) -> str:
    """A cache with the built venvs and the patched PRIME-RL copy of `CACHE` but no prepared inputs, so the run
    mines and warm-starts again."""
    cache.mkdir()
    for item in Path(str(CACHE)).iterdir():
        if item.name.startswith(("venv-", "prime-rl-")) and item.is_dir():
            (cache / item.name).symlink_to(item.resolve())
    return str(cache)


@needs
@pytest.mark.parametrize("marker", ["warm start", "orchestrator: ", "Train batch"])
def test_ctrl_c_stops_every_process_within_5_s(tmp_path: Path, marker: str) -> None:
    cache = venvs_only(tmp_path / "cache") if marker == "warm start" else str(CACHE)
    process = smoke(tmp_path / "out", cache)
    lines = interrupt_when(process, marker)
    code, took = exit_code(process, lines)
    time.sleep(0.5)
    assert took < 5, f"Ctrl-C took {took:.1f} s:\n" + "".join(lines[-40:])
    assert code == 130, "".join(lines[-40:])
    assert ours(tmp_path) == []


@needs
def test_ctrl_c_during_the_venv_build_leaves_no_venv_that_looks_complete(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    process = smoke(tmp_path / "out", str(cache))
    lines = interrupt_when(process, "building the")
    code, took = exit_code(process, lines)
    assert code == 130 and took < 5, (code, took, "".join(lines[-40:]))
    assert ours(tmp_path) == []
    assert not list(cache.glob("venv-*/.complete"))


@needs
def test_an_unreachable_teacher_is_a_warning_and_a_count(tmp_path: Path) -> None:
    process = smoke(tmp_path / "out", str(CACHE), "--steps", "1", "--teacher-url", "http://127.0.0.1:9/v1")
    output, _ = process.communicate(timeout=1500)
    assert process.returncode == 0, output[-3000:]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["teacher_failed_queries"] > 0
    assert "teacher queries failed" in output
    assert "--teacher-url http://127.0.0.1:9/v1 does not answer" in output  # said before PRIME-RL starts
    assert "warning: teacher 'gpt-4.1-mini' failed at step 1: http://127.0.0.1:9/v1" in output  # once, with the URL


@needs
@pytest.mark.skipif(
    os.environ.get("COMPOSER_PRIME_TWO_SMOKES") != "1",
    reason="two 1-step smokes at once take 15-16 min of both cores (measured at load 6-12): COMPOSER_PRIME_TWO_SMOKES=1 "
    "runs them; CI's smoke stage does not",
)
def test_two_smokes_into_different_out_folders_run_side_by_side_to_the_end(tmp_path: Path) -> None:
    # Started together, each picks the ports PRIME-RL binds while the other's are reserved and not yet bound (its
    # orchestrator binds the ZMQ pair a minute later): "Address already in use" in either fails it.
    runs = [smoke(tmp_path / f"out{k}", str(CACHE), "--steps", "1") for k in (1, 2)]
    outputs = [process.communicate(timeout=1800)[0] for process in runs]
    for k, (process, output) in enumerate(zip(runs, outputs, strict=True), start=1):
        assert process.returncode == 0, output[-3000:]
        assert len(json.loads((tmp_path / f"out{k}" / "report.json").read_text())["steps"]) == 1
