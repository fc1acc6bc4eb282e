"""The smoke's command parts that need no PRIME-RL: overlays, the lock and stale report, bad invocations, reload
snapshots and probes, and the report's figures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from composer_prime.cli import UsageError
from composer_prime.local.tree import TreeError
from composer_prime.smoke.command import split_overlays
from composer_prime.smoke.reloads import snapshot
from composer_prime.smoke.report import rollout_figures


def test_an_overlay_that_restates_the_train_sources_is_refused_and_at_needs_a_file(tmp_path: Path) -> None:
    restating = tmp_path / "mine.toml"  # e.g. a user's overlay with the cluster's sources
    restating.write_text('[[orchestrator.train.source]]\nname = "feature-deletion"\n')
    with pytest.raises(UsageError, match=r"restates \[\[orchestrator.train.source\]\]"):
        split_overlays(["@", str(restating)])
    with pytest.raises(UsageError, match="takes a launch overlay"):
        split_overlays(["@", "--torch-index", ""])


def test_overlays_go_to_rl_and_flags_to_the_smoke(tmp_path: Path) -> None:
    recipe = tmp_path / "no-hint.toml"
    recipe.write_text("")
    flags, overlays = split_overlays(["--steps", "2", "@", str(recipe), "--no-live"])
    assert flags == ["--steps", "2", "--no-live"]
    assert overlays == [recipe.resolve()]
    with pytest.raises(UsageError, match="missing.toml"):
        split_overlays(["@", str(tmp_path / "missing.toml")])


def test_a_second_smoke_into_the_same_out_is_refused_and_a_stale_report_goes(tmp_path: Path) -> None:
    from filelock import FileLock

    from composer_prime.smoke.config import SmokeConfig
    from composer_prime.smoke.outdir import LOCK, Busy
    from composer_prime.smoke.run import execute

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("{}")
    config = SmokeConfig(prime_rl=tmp_path / "not-a-tree", out=out, cache=tmp_path / "cache", live=False)
    (out / "report.txt").write_text("old")
    with FileLock(out / LOCK):
        with pytest.raises(Busy, match="another composer-prime smoke"):
            execute(config, [], tmp_path)
    assert (out / "report.json").exists()  # the refused run touched nothing
    with pytest.raises(TreeError):
        execute(config, [], tmp_path)
    assert not (out / "report.json").exists()  # removed at start: no stale report beside a failed run
    assert not (out / "report.txt").exists()


def test_snapshot_keeps_weights_the_trainer_removes(tmp_path: Path) -> None:
    step = tmp_path / "broadcasts" / "step_1"
    step.mkdir(parents=True)
    (step / "model.safetensors").write_bytes(b"weights")
    assert snapshot(step, tmp_path / "kept")
    (step / "model.safetensors").unlink()
    assert (tmp_path / "kept" / "model.safetensors").read_bytes() == b"weights"
    assert not snapshot(step, tmp_path / "kept2")
    assert not (tmp_path / "kept2").exists()


def _episode(group: str, solved: float, failed: float = 0.0, verdicts: int = 0) -> dict:
    steps = [{"scores": {"a": 1.0, "b": 0.0}}] * (verdicts // 2)
    trace = {
        "rewards": {"solved": {"score": solved, "weight": 1.0}, "teacher": {"score": 0.5, "weight": 0.0}},
        "metrics": {
            "composer/teacher/failed": failed,
            "composer/teacher/queries": failed + verdicts,
        },
        "info": {"teacher": {"steps": steps}},
    }
    return {"group": {"id": group}, "traces": [trace]}


def test_rollout_figures_count_flat_groups_and_failed_teachers() -> None:
    rows = [
        _episode("g1", 1.0, verdicts=2),
        _episode("g1", 0.0),
        _episode("g2", 1.0, failed=3.0),
        _episode("g2", 1.0, failed=1.0),
        _episode("g3", 0.0),
        _episode("g3", 0.0),
    ]
    figures = rollout_figures(rows)
    assert figures["reward_mean"] == pytest.approx(3 / 6)  # teacher reward has weight 0
    assert figures["pass_rate"] == pytest.approx(3 / 6)
    assert figures["groups"] == 3
    assert figures["groups_all_equal"] == 2  # g2 (1, 1) and g3 (0, 0) carry no outcome signal
    assert figures["teacher_failed_queries"] == 4
    assert figures["teacher_verdicts"] == 2
    assert figures["teacher_queries"] == 6  # 2 answered + 4 failed
    assert figures["traces"] == 6


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "composer_prime", "smoke", *args], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def _tree(root: Path, verifiers: bool = True) -> Path:
    (root / "src" / "prime_rl" / "entrypoints").mkdir(parents=True)
    (root / "src" / "prime_rl" / "entrypoints" / "rl.py").write_text("")
    if verifiers:
        (root / "deps" / "verifiers").mkdir(parents=True)
        (root / "deps" / "verifiers" / "pyproject.toml").write_text("")
    return root


def test_bad_invocations_name_the_fix_without_a_traceback(tmp_path: Path) -> None:
    done = _cli("--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "--prime-rl PATH is required" in done.stderr and "checkout 559b447" in done.stderr
    done = _cli("--prime-rl", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o"))
    assert done.returncode == 2 and "not a PRIME-RL source tree" in done.stderr
    done = _cli("--prime-rl", str(tmp_path), "--steps", "0")
    assert done.returncode == 2 and "steps" in done.stderr
    done = _cli("--prime-rl", str(_tree(tmp_path / "t")), "--teacher-url", "ftp://x")
    assert done.returncode == 2 and "teacher_url" in done.stderr
    for result in (done,):
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()  # nothing was written before the inputs were checked


def test_a_probe_that_fails_counts_a_missed_reload_and_does_not_stop_the_run(tmp_path: Path) -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from composer_prime.smoke.reloads import Watcher

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # /weights: one reload of a folder that exists
            body = json.dumps({"weights": "broadcasts/step_1", "reloads": 1}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:  # the probe: the server is overloaded
            self.send_response(503)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    (tmp_path / "broadcasts" / "step_1").mkdir(parents=True)
    (tmp_path / "broadcasts" / "step_1" / "model.safetensors").write_bytes(b"w")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        watcher = Watcher(f"http://127.0.0.1:{server.server_address[1]}", [1, 2, 3], "model", tmp_path, tmp_path / "k")
        watcher.poll()
        watcher.poll()  # the same reload is not counted twice
    finally:
        server.shutdown()
        server.server_close()
    assert watcher.records == [] and watcher.missed == 1
    assert "503" in watcher.errors[0]
    assert not (tmp_path / "k" / "reload_1").exists()


def test_a_smoke_never_replaces_folders_it_did_not_make(tmp_path: Path) -> None:
    from composer_prime.smoke.config import SmokeConfig
    from composer_prime.smoke.outdir import Busy
    from composer_prime.smoke.run import execute

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "important.txt").write_text("mine")
    config = SmokeConfig(prime_rl=tmp_path / "not-a-tree", out=tmp_path, cache=tmp_path / "cache", live=False)
    with pytest.raises(Busy, match="no smoke made"):
        execute(config, [], tmp_path)
    assert (tmp_path / "logs" / "important.txt").read_text() == "mine"


def _checkpoint(run: Path, step: int, trainer: bool = True, orchestrator: bool = True) -> None:
    folder = run / "checkpoints" / f"step_{step}"
    (folder / "trainer").mkdir(parents=True)
    (folder / "orchestrator").mkdir(parents=True)
    if trainer:
        (folder / "trainer" / ".metadata").write_bytes(b"dcp")
    if orchestrator:
        (folder / "orchestrator" / "progress.pt").write_bytes(b"pt")


def test_resume_continues_after_the_newest_checkpoint_both_halves_wrote(tmp_path: Path) -> None:
    from composer_prime.smoke.config import SmokeConfig
    from composer_prime.smoke.outdir import MARKER, NotResumable, resume_point
    from composer_prime.smoke.run import execute

    work = tmp_path / "work"
    with pytest.raises(NotResumable, match="no PRIME-RL run folder"):
        resume_point(work, 3)
    run = work / "run" / "feature-deletion--model--abc"
    (run / "configs").mkdir(parents=True)
    with pytest.raises(NotResumable, match="no checkpoint both the trainer and the orchestrator wrote whole"):
        resume_point(work, 3)
    _checkpoint(run, 1)
    _checkpoint(run, 2, trainer=False)  # the orchestrator checkpoints a step before the trainer has trained it
    _checkpoint(run, 3, orchestrator=False)
    assert resume_point(work, 3) == (run, 1)
    with pytest.raises(NotResumable, match="pass --steps 2 or more"):
        resume_point(work, 1)
    # through the command: refused before anything is built, the run left as it was
    (tmp_path / MARKER).touch()
    config = SmokeConfig(prime_rl=tmp_path / "t", out=tmp_path, cache=tmp_path / "c", live=False, resume=True, steps=1)
    with pytest.raises(NotResumable, match="newest checkpoint is step 1"):
        execute(config, [], tmp_path)
    assert (run / "checkpoints" / "step_1" / "trainer" / ".metadata").is_file() and not (tmp_path / "c").exists()
