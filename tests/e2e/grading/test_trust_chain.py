"""Red team, the trust chain (docs/grading.md): each link attacked as an RL policy would, on the subprocess runtime.

- the expected side on the host: the agent reads the tasks file (its own gold patch) or the source clone that holds
  the fix and applies it; potent where the rollout is not jailed, 0.0 in the jail, which covers them;
- host execution: the agent plants `timeout`, `sh`, `rm` and `find` in swe-gym's shared venv, first on `PATH`; the
  jail keeps the venv read-only, and grading names its programs by host path even where the agent could write;
- the network: the agent's commands reach a server on the host's loopback only with `rollout_network = ["*"]`;
- test ownership: a PASS_TO_PASS test in `calc/tests.py`, a test file only by the repository's own `python_files`,
  emptied beside a fix that breaks it, is restored at grading (potent against plain pytest over the agent's tree);
- the blind replay: a fix that answers the replay (no pytest loaded) with a stub and the tests honestly passes an
  oracle of the FAIL_TO_PASS calls alone, and fails one that records their files' PASS_TO_PASS calls beside them.

The task files, boxes and source clones live under a folder outside /tmp (the jail gives the agent a private
/tmp, which would hide them without any cover).
"""

from __future__ import annotations

import http.server
import secrets
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import verifiers.v1 as vf
from feature_deletion.taskset import FeatureDeletionConfig, FeatureDeletionTaskset
from swe_gym.taskset import SWEGymTask, SWEGymTaskset, SWEGymTasksetConfig

from composer_prime.grading.behaviour import mismatch
from composer_prime.mining.behaviour import blind
from composer_prime.mining.testrun import replay_calls
from tests.support.featdel_repo import mined_shop
from tests.support.rollouts import scripted_rollout
from tests.support.scripted_server import tool
from tests.support.swegym_repo import (
    FAIL_TO_PASS,
    OWN_RULES_TEST,
    build_toy_instance,
    local_task_config,
    write_jsonl,
)

pytestmark = pytest.mark.slow

JAILS = (
    subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "--mount", "--net", "true"], capture_output=True
    ).returncode
    == 0
)
needs_jail = pytest.mark.skipif(not JAILS, reason="the jail needs root (unshare --mount --pid --net)")
UNJAILED = {"isolate_processes": False, "expected_side": "readable"}
"""A rollout outside the jail, as the grader ran every rollout before it: the attacks' potency."""


@pytest.fixture(scope="module")
def outside() -> Iterator[Path]:
    root = Path.home() / ".cache" / f"composer-prime-trust-{secrets.token_hex(6)}"
    root.mkdir(parents=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def shop_tasks(tmp_path_factory: pytest.TempPathFactory, outside: Path) -> Path:
    """The mined shop tasks file and its tarball, copied outside /tmp."""
    _, tasks_file, _ = mined_shop(tmp_path_factory)
    dest = outside / "featdel"
    shutil.copytree(tasks_file.parent, dest)
    return dest / tasks_file.name


def featdel_task(tasks_file: Path, **task: object) -> vf.Task:
    config = FeatureDeletionConfig(tasks=tasks_file, task={"test_timeout_s": 60, **task})
    return {t.data.name: t for t in FeatureDeletionTaskset(config).load()}["shop-repo:shop/pricing.py::apply_discount"]


@pytest.fixture(scope="module")
def toy(outside: Path):  # type: ignore[no-untyped-def]
    return build_toy_instance(outside / "swegym-src")


def swegym_task(outside: Path, toy, **task: object) -> SWEGymTask:  # type: ignore[no-untyped-def]
    local = {**local_task_config(outside / "swegym-cache", toy.repo), "test_timeout_s": 60, **task}
    rows = write_jsonl(outside / "rows.jsonl", [toy.row])
    (found,) = SWEGymTaskset(SWEGymTasksetConfig(data_file=rows, mode="local", task=local)).load()
    return found


def run(task: vf.Task, *commands: str) -> tuple[vf.Trace, list[str]]:
    """A scripted rollout running `commands`; the trace and what each command printed."""
    steps = [tool("bash", command=command) for command in commands]
    trace, requests = scripted_rollout(task, [*steps, tool("finish", message="done")], timeout_s=240)
    assert trace.ok, trace.errors
    outputs = [m.get("content") or "" for m in requests[-1]["messages"] if m.get("role") == "tool"]
    return trace, [str(o) for o in outputs]


GOLD_FROM_TASKS_FILE = """python3 - "{tasks}" <<'EOF'
import json, subprocess, sys
for line in open(sys.argv[1]):
    row = json.loads(line)
    if row["task_id"].endswith("apply_discount"):
        open("gold.patch", "w").write(row["gold_patch"])
        print(subprocess.run(["git", "apply", "gold.patch"], capture_output=True, text=True).returncode)
EOF
rm -f gold.patch; echo done"""


@needs_jail
def test_the_gold_in_the_tasks_file_is_out_of_reach(shop_tasks: Path) -> None:
    attack = GOLD_FROM_TASKS_FILE.format(tasks=shop_tasks)
    trace, _ = run(featdel_task(shop_tasks, **UNJAILED), attack)
    assert trace.reward == 1.0, trace.info["grading"]  # potent: the tasks file holds the gold patch
    task = featdel_task(shop_tasks)
    assert shop_tasks.resolve() in task.config.hidden_paths
    trace, outputs = run(task, attack, f"wc -c < {shop_tasks}")
    assert trace.reward == 0.0 and outputs[-1].strip().startswith("0"), outputs
    assert trace.metrics["expected_side_hidden"] == 1.0


@needs_jail
def test_the_fix_in_the_source_clone_is_out_of_reach(outside: Path, toy) -> None:  # type: ignore[no-untyped-def]
    attack = f"git -C {toy.repo} show {toy.fix_commit}:calc/ops.py > calc/ops.py; echo $?"
    trace, _ = run(swegym_task(outside, toy, **UNJAILED), attack)
    assert trace.reward == 1.0, trace.info["grading"]  # potent: the clone holds the fix commit
    trace, outputs = run(swegym_task(outside, toy), attack)
    assert trace.reward == 0.0 and "Permission denied\n128\n" in "".join(outputs), outputs  # the clone is covered
    oracles = outside / "swegym-cache" / "oracles"
    assert any(oracles.glob("*.json"))  # recorded on the host, beside the rollout
    _, outputs = run(swegym_task(outside, toy), f"ls -A {oracles}; cat {oracles}/*.json")
    assert "Permission denied" in outputs[0] and ".json\n" not in outputs[0] and "calls" not in outputs[0], outputs


def test_a_rollout_that_could_read_the_expected_side_is_refused(outside: Path, toy) -> None:  # type: ignore[no-untyped-def]
    """Without the jail (isolate_processes = false here; no root elsewhere) the default refuses at setup."""
    trace, _ = scripted_rollout(swegym_task(outside, toy, isolate_processes=False), [tool("finish", message="x")])
    assert not trace.ok and "could read the task's expected side" in trace.errors[0].message
    assert 'expected_side = "readable"' in trace.errors[0].message


PLANT = r"""
marker={marker}
for p in timeout sh rm find sha256sum; do
  printf '#!/bin/sh\necho "$0 $*" >> %s\nexec /usr/bin/%s "$@"\n' "$marker" "$p" > "$VIRTUAL_ENV/bin/$p" \
    && chmod +x "$VIRTUAL_ENV/bin/$p" && echo "planted $p"
done
echo "venv: $VIRTUAL_ENV"
"""


def test_programs_planted_in_the_venv_never_run_at_grading(outside: Path, toy) -> None:  # type: ignore[no-untyped-def]
    marker = outside / f"ran-{secrets.token_hex(4)}"
    plant = PLANT.format(marker=marker)
    if JAILS:
        trace, outputs = run(swegym_task(outside, toy), plant)
        assert "planted" not in outputs[0] and "Read-only file system" in outputs[0], outputs
        assert trace.info["grading"]["jailed"] is True
    task = swegym_task(outside, toy, **UNJAILED)
    venv_bin = Path(task.runtime_env()["VIRTUAL_ENV"]) / "bin"
    try:
        trace, outputs = run(task, plant)
        assert outputs[0].count("planted") == 5, outputs
        # potent: a program that looks `timeout` up on the box's PATH runs the agent's, on the host
        subprocess.run(["timeout", "5", "/bin/true"], env={"PATH": str(venv_bin)}, check=True)
        assert marker.read_text().startswith(str(venv_bin / "timeout"))
        marker.unlink()
        assert trace.info["grading"]["error"] is None  # graded without them
        trace, _ = run(task, "true")  # a later rollout on the same venv: its setup and grading
        # what ran the planted programs is the agent's own shell (composer-agent's workspace, in its unjailed box),
        # never a step of the host's: setup, the reaper, the private copy, the scan, the launcher
        ran = marker.read_text().splitlines() if marker.exists() else []
        hosts = [line for line in ran if "/tmp/composer-agent." not in line and "COMPOSER_BOX=" not in line]
        assert hosts == [], hosts
    finally:
        for name in ("timeout", "sh", "rm", "find", "sha256sum"):
            (venv_bin / name).unlink(missing_ok=True)


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"reachable")

    def log_message(self, *args: object) -> None:
        pass


@needs_jail
def test_the_agents_commands_reach_no_network_unless_opened(outside: Path, toy) -> None:  # type: ignore[no-untyped-def]
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hello)
    server.timeout = 1
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        fetch = (
            f"python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{server.server_port}', "
            f'timeout=3).read().decode())" 2>&1 | tail -1'
        )
        _, outputs = run(swegym_task(outside, toy, rollout_network=["*"]), fetch)
        assert outputs[0].startswith("reachable"), outputs  # potent: the host's loopback is one request away
        _, outputs = run(swegym_task(outside, toy), fetch)
        assert "reachable" not in outputs[0] and "Connection refused" in outputs[0], outputs
    finally:
        server.shutdown()
        server.server_close()


STUB_UNDER_REPLAY = """

import sys as _sys

_fixed = clamp


def clamp(x, lo, hi):
    if "pytest" not in _sys.modules:  # the replay: no test is watching
        return hi
    return _fixed(x, lo, hi)
"""


def test_a_stub_for_the_replay_fails_an_oracle_that_records_the_neighbours(outside: Path, toy) -> None:  # type: ignore[no-untyped-def]
    """Every FAIL_TO_PASS call of the toy row answers `hi`: an oracle of those calls alone is blind to `return hi`
    (the fix below passes it and the tests), while the PASS_TO_PASS calls of the same files tell the stub apart."""
    fix = "python3 - <<'EOF'\n" + (
        "src = open('calc/ops.py').read().replace('        return lo\\n    return x\\n', "
        "'        return lo\\n    if x > hi:\\n        return hi\\n    return x\\n')\n"
        f"open('calc/ops.py', 'w').write(src + {STUB_UNDER_REPLAY!r})\nEOF"
    )
    task = swegym_task(outside, toy, **UNJAILED)
    oracle = task.oracle()
    assert oracle is not None and oracle.usable and len(oracle.calls) > len(FAIL_TO_PASS)
    assert blind(oracle.calls) is None
    trace, _ = run(task, fix)
    grading = trace.info["grading"]
    assert trace.reward == 0.0 and grading["replay"] < 1.0 and grading["fail_to_pass"] == 1.0, grading
    assert not grading["void"] and grading["pass_to_pass"] == 1.0, grading
    # potent against an oracle of the FAIL_TO_PASS calls alone: blind, and the stub answers all of them
    alone = [call for call in oracle.calls if call.test in FAIL_TO_PASS]
    assert alone and blind(alone) is not None
    tree = outside / f"stubbed-{secrets.token_hex(4)}"
    subprocess.run(["git", "clone", "-q", str(toy.repo), str(tree)], check=True, timeout=60)
    subprocess.run(["git", "checkout", "-q", toy.base_commit], cwd=tree, check=True, timeout=60)
    subprocess.run(["bash", "-c", fix], cwd=tree, check=True, timeout=60)
    python = [str(Path(task.runtime_env()["VIRTUAL_ENV"]) / "bin" / "python"), "-m", "pytest"]
    answers = replay_calls(python, tree, alone, 60, ["."])
    assert [mismatch(call, answer) for call, answer in zip(alone, answers, strict=True)] == [None] * len(alone)
    answers = replay_calls(python, tree, oracle.calls, 60, ["."])
    assert any(mismatch(call, answer) for call, answer in zip(oracle.calls, answers, strict=True))


WEAKENED_OWN_TEST = """python3 - <<'EOF'
src = open('calc/ops.py').read().replace('        return lo\\n    return x\\n',
    '        return lo\\n    if x > hi:\\n        return hi\\n    return x\\n')
open('calc/ops.py', 'w').write(src.replace('return a + b', 'return abs(a + b)'))
open('calc/tests.py', 'w').write('def test_add_negative():\\n    pass\\n')
EOF"""
"""Fixes clamp, breaks `add` for negative sums (the recorded `add(2, 3)` still answers 5), and empties the
PASS_TO_PASS test that would tell: `calc/tests.py`, a test file only by the repository's own `python_files`."""


def test_a_test_file_by_the_repositorys_own_rules_is_restored(outside: Path) -> None:
    """Test ownership follows the repository's collection rules (`pytest.ini`'s `python_files`), not a path
    heuristic: the agent's edit of `calc/tests.py` is undone at grading and its PASS_TO_PASS test fails."""
    folder = outside / "own-rules"  # its own cache: the instance id is the plain toy's
    toy = build_toy_instance(folder / "src", own_rules=True)
    task = swegym_task(folder, toy, **UNJAILED)
    trace, _ = run(task, WEAKENED_OWN_TEST)
    grading = trace.info["grading"]
    assert grading["fail_to_pass"] == 1.0, grading
    assert trace.reward == 0.0 and grading["pass_to_pass_failed"] == [OWN_RULES_TEST], grading
    # the test's own call, `add(-1, -1)`, is among the PASS_TO_PASS calls replayed outside pytest: it tells too
    assert any(" calc.ops:add: " in why for why in grading["replay_mismatches"]), grading
    # potent: graded as the agent left it, the tree passes every FAIL_TO_PASS and PASS_TO_PASS test
    tree = outside / f"weakened-{secrets.token_hex(4)}"
    subprocess.run(["git", "clone", "-q", str(toy.repo), str(tree)], check=True, timeout=60)
    subprocess.run(["git", "checkout", "-q", toy.fix_commit, "--", "tests"], cwd=tree, check=True, timeout=60)
    subprocess.run(["git", "checkout", "-q", toy.base_commit, "--", "calc"], cwd=tree, check=True, timeout=60)
    subprocess.run(["bash", "-c", WEAKENED_OWN_TEST], cwd=tree, check=True, timeout=60)
    ids = [*FAIL_TO_PASS, OWN_RULES_TEST]
    python = str(Path(task.runtime_env()["VIRTUAL_ENV"]) / "bin" / "python")
    plain = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ids], cwd=tree, timeout=120)
    assert plain.returncode == 0


def test_the_env_servers_credentials_are_not_the_agents_or_the_codes(
    shop_tasks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """red40's R5: the subprocess runtime hands the env server's environment to every command of the box. Credentials
    (`HF_TOKEN`, `AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`: verifiers itself drops only `*API_KEY*`) would be one `env`
    away from the agent, and from there on its trace and in the data that trains; the code under test at grading
    could print them into the report. Both run with them unset; an ordinary variable stays."""
    monkeypatch.setenv("HF_TOKEN", "hf_composer_trust_4417")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws_composer_trust_4417")
    monkeypatch.setenv("COMPOSER_TRUST_PLAIN", "plain-4417")
    probe = (
        "import os as _os, sys as _sys\n"
        "_sys.stderr.write('leaked-4417' if {'HF_TOKEN', 'AWS_SECRET_ACCESS_KEY'} & set(_os.environ) else "
        "'clean-4417')\n"
    )
    trace, outputs = run(
        featdel_task(shop_tasks),
        "env | grep -c 4417; echo ${HF_TOKEN:-none} ${AWS_SECRET_ACCESS_KEY:-none}",
        f"cat >> shop/pricing.py <<'EOF'\n{probe}EOF\ntrue",
    )
    assert outputs[0].split()[:3] == ["0", "none", "none"], outputs  # the agent's commands get a curated environment
    tail = trace.info["grading"].get("output_tail", "")
    assert "clean-4417" in tail and "leaked-4417" not in tail, trace.info["grading"]
