"""Checks the installed wheels the way a stranger uses them (run by `.ci/artifacts` inside the fresh venv).

1. Every module comes from the venv's site-packages, none is an editable install, and no built metadata names a
   workspace or path source; harness id `composer-agent` resolves from the wheels (there is no `composer-agent`
   distribution: that PyPI name belongs to an unrelated project), and so do the realtime ids (`realtime-sessions`,
   its env, `realtime-replay`).
2. feature-deletion's quickstart, `vf-eval feature-deletion` with no tasks file (the bundled toolz sample), against a
   scripted model on 127.0.0.1 that applies each task's gold patch through composer-agent's tools: 3 traces, reward 1.
3. swe-gym's quickstart in local mode on a small git project with a real fix commit: reward 1.
4. `composer-prime smoke` from the installed wheel: it refuses with what it needs (a clone of composer-prime and
   `--prime-rl PATH`), exit 2, no traceback.

Each stage prints its wall time. The scripted server and the toy project are the test suite's (`tests/support`),
loaded by path: they are stdlib-only and put nothing of the clone on `sys.path`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
KEY_VAR = "ARTIFACTS_MODEL_KEY"


def load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


scripted = load("scripted_server", REPO / "tests" / "support" / "scripted_server.py")
toy = load("swegym_repo", REPO / "tests" / "support" / "swegym_repo.py")


def check(condition: bool, message: str) -> None:
    if not condition:
        sys.exit(f"artifacts: FAILED: {message}")


def stage(name: str, started: float) -> None:
    print(f"artifacts: {name}: ok ({time.monotonic() - started:.1f} s)", flush=True)


def installed_layout(dist: Path) -> None:
    import feature_deletion
    import realtime_replay
    import realtime_sessions
    import swe_gym
    from verifiers.v1.utils.loaders import default_harness_id, environment_class, harness_class, taskset_class

    import composer_agent
    import composer_prime

    site = Path(composer_prime.__file__).resolve().parents[1]
    check(site.name == "site-packages" and Path(sys.prefix).resolve() in site.parents, f"composer_prime from {site}")
    for module in (composer_agent, feature_deletion, swe_gym):
        check(Path(module.__file__).resolve().parents[1] == site, f"{module.__name__} from {module.__file__}")
    for name in ("composer-prime", "feature-deletion", "swe-gym"):
        direct = importlib.metadata.distribution(name).read_text("direct_url.json") or "{}"
        check(not json.loads(direct).get("dir_info", {}).get("editable"), f"{name} is an editable install")
    for wheel in dist.glob("*.whl"):
        with zipfile.ZipFile(wheel) as archive:
            metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            text = archive.read(metadata).decode()
        requires = [line for line in text.splitlines() if line.startswith("Requires-Dist:")]
        check(not any("@" in line or "workspace" in line for line in requires), f"{wheel.name}: {requires}")
    try:
        importlib.metadata.distribution("composer-agent")
        check(False, "a `composer-agent` distribution is installed; the harness ships in composer-prime")
    except importlib.metadata.PackageNotFoundError:
        pass
    (algo,) = importlib.metadata.entry_points(group="prime_rl.algorithms", name="composer")
    check(algo.value == "composer_prime.seam.entry_point:ComposerAlgoConfig", f"entry point {algo}")
    check((site / "composer_prime_seam.pth").is_file(), "the .pth hook (fallback for PRIME-RL 559b447) is missing")
    check(harness_class("composer-agent") is composer_agent.ComposerAgentHarness, "harness id composer-agent")
    check(harness_class("someone/composer-agent@0.1") is composer_agent.ComposerAgentHarness, "hub-style harness id")
    for taskset in ("feature-deletion", "swe-gym"):
        check(default_harness_id(taskset) == taskset, f"{taskset}'s default harness is not composer-agent")
    for module in (realtime_sessions, realtime_replay):
        check(Path(module.__file__).resolve().parents[1] == site, f"{module.__name__} from {module.__file__}")
    realtime = realtime_sessions.RealtimeSessionsTaskset
    check(taskset_class("realtime-sessions") is realtime, "taskset id realtime-sessions")
    check(environment_class("realtime-sessions") is realtime_sessions.ReplayEnv, "realtime-sessions' env")
    check(harness_class("realtime-replay") is realtime_replay.ReplayHarness, "harness id realtime-replay")


def eval_traces(args: list[str], server: object, out: Path) -> list[dict]:
    env = dict(os.environ, **{KEY_VAR: "scripted"})
    argv = [
        "vf-eval",
        *args,
        "-m",
        server.model,
        "--client.base-url",
        server.base_url,
        "--client.api-key-var",
        KEY_VAR,
        "--env.agent.runtime.type",
        "subprocess",
        "--no-push",
        "--no-rich",
        "-o",
        str(out),
    ]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900, check=False)
    check(result.returncode == 0, f"{' '.join(argv)} exited {result.returncode}:\n{result.stderr[-4000:]}")
    (traces_file,) = out.glob("*/traces.jsonl")
    return [trace for line in traces_file.read_text().splitlines() for trace in json.loads(line)["traces"]]


def solved(trace: dict) -> float | None:
    return (trace["rewards"].get("solved") or {}).get("score")


def turn(request: dict) -> int:
    return sum(1 for m in request["messages"] if m["role"] == "tool")


def feature_deletion_quickstart(out: Path) -> None:
    from feature_deletion.taskset import SAMPLE_TASKS

    gold = {row["prompt"]: row["gold_patch"] for row in map(json.loads, SAMPLE_TASKS.read_text().splitlines())}

    def answer(request: dict) -> object:
        prompt = next(m["content"] for m in request["messages"] if m["role"] == "user")
        steps = [
            scripted.tool("create", path=".gold.patch", content=gold[prompt]),
            scripted.tool("bash", command="git apply .gold.patch && rm .gold.patch"),
            scripted.tool("finish", message="rebuilt"),
        ]
        return steps[min(turn(request), 2)]

    with scripted.ScriptedModelServer(answer) as server:
        traces = eval_traces(["feature-deletion", "-n", "3", "-r", "1"], server, out)
    check(len(traces) == 3, f"{len(traces)} traces")
    for trace in traces:
        check(
            trace["ok"] and solved(trace) == 1.0,
            f"feature-deletion trace: {trace.get('errors')}, "
            f"metrics {trace['metrics']}, grading {json.dumps(trace['info'].get('grading'))[:2000]}",
        )


def swe_gym_quickstart(out: Path) -> None:
    instance = toy.build_toy_instance(out / "project")
    rows = toy.write_jsonl(out / "rows.jsonl", [instance.row])
    local = toy.local_task_config(out / "cache", instance.repo)["local"]
    fix = scripted.tool(
        "str_replace",
        path="calc/ops.py",
        old_str="        return lo\n    return x\n",
        new_str="        return lo\n    if x > hi:\n        return hi\n    return x\n",
    )
    flags = []
    for key, value in [*((f"env.{k}", v) for k, v in local.pop("env").items()), *local.items()]:
        flags += [
            f"--env.taskset.task.local.{key.replace('_', '-')}",
            json.dumps(value) if not isinstance(value, str) else value,
        ]
    with scripted.ScriptedModelServer([fix, scripted.tool("finish", message="fixed")]) as server:
        traces = eval_traces(
            [
                "swe-gym",
                "--env.taskset.mode",
                "local",
                "--env.taskset.data-file",
                str(rows),
                *flags,
                "-n",
                "1",
                "-r",
                "1",
            ],
            server,
            out / "eval",
        )
    check(len(traces) == 1 and traces[0]["ok"] and solved(traces[0]) == 1.0, f"swe-gym trace: {traces}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    check(not (Path.cwd() / "composer_prime").exists(), "run from outside the clone")
    for name, run in [
        ("installed layout", lambda: installed_layout(args.dist)),
        ("feature-deletion quickstart", lambda: feature_deletion_quickstart(args.out / "feature-deletion")),
        ("swe-gym quickstart", lambda: swe_gym_quickstart(args.out / "swe-gym")),
    ]:
        started = time.monotonic()
        run()
        stage(name, started)
    started = time.monotonic()
    smoke = ["composer-prime", "smoke", "--prime-rl", str(args.out / "no-prime-rl"), "--out", str(args.out / "smoke")]
    result = subprocess.run(smoke, capture_output=True, text=True, timeout=300, check=False)
    check(
        result.returncode == 2
        and "from a clone of composer-prime" in result.stderr
        and "Traceback" not in result.stderr,
        f"{' '.join(smoke)} exited {result.returncode}:\n{result.stderr[-4000:]}",
    )
    stage("composer-prime smoke refuses outside a clone", started)


if __name__ == "__main__":
    main()
