"""One smoke run, start to end (the steps are listed in `command.py`'s docstring and docs/smoke.md)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from composer_prime.local.launch import ENV_SERVER_PORTS, cache_lock
from composer_prime.process.group import ProcessFailed, group, run
from composer_prime.process.ports import free_port, free_port_blocks, reserve
from composer_prime.smoke.config import SmokeConfig
from composer_prime.smoke.console import Status, StepLines, progress_line, teacher_url_warning
from composer_prime.smoke.outdir import Busy, claimed, fresh, linked_logs, resume_point, rotate_logs, run_dir
from composer_prime.smoke.rehearsal import strip_ansi

RULE_FOR = {
    "COMPOSER_TEACHER_OPENAI_URL": "checker",
    "COMPOSER_TEACHER_GEMINI_URL": "skeptic",
    "COMPOSER_TEACHER_DEEPSEEK_URL": "checker",
}
"""The launch config's teachers (their `base_url_var`s) and the rule-based local teacher each is routed to."""
TEACHER_KEYS = ("OPENAI_API_KEY", "GEMINI_API_KEY", "DEEPSEEK_API_KEY")


def wait_for_port(port: int, process: Any, what: str, log: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ProcessFailed(f"{what} exited (code {process.returncode}) before it listened; see {log}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise ProcessFailed(f"{what} did not listen on 127.0.0.1:{port} within {timeout_s:.0f} s; see {log}")


def execute(config: SmokeConfig, overlays: list[Path], project: Path) -> int:
    out = config.out.resolve()
    with claimed(out), Status(config.live) as status:
        return _execute(config, overlays, project, out, status)


def _execute(config: SmokeConfig, overlays: list[Path], project: Path, out: Path, status: Status) -> int:
    from composer_prime.local.tree import private_copy
    from composer_prime.local.venvs import ensure_venv, requirement_sets, write_wrappers
    from composer_prime.smoke import reloads

    started = time.monotonic()
    work, logs, cache = out / "work", out / "logs", config.cache.expanduser().resolve()
    resume = resume_point(work, config.steps) if config.resume else None
    rotate_logs(out)  # before `work/` goes: the previous run's logs link into it
    if resume is None:
        fresh(work)
    else:
        shutil.rmtree(work / "reloads", ignore_errors=True)  # the killed run's probes: never reported
    meta: dict[str, Any] = {
        "config": config.model_dump(mode="json"),
        "overlays": [str(p) for p in overlays],
        "timings": {},
        "machine": machine(project, config.prime_rl.resolve()),  # type: ignore[union-attr]
    }

    with cache_lock(cache, "building or checking the venvs and the patched PRIME-RL", status.note):
        status.stage("patching a private copy of PRIME-RL for CPU")
        tree = private_copy(config.prime_rl.resolve(), cache)  # type: ignore[union-attr]
        t0 = time.monotonic()
        sets = requirement_sets(project, tree)
        venvs = {name: ensure_venv(name, steps, cache, config.torch_index, status.note) for name, steps in sets.items()}
        meta["timings"]["venvs_s"] = time.monotonic() - t0
    bin_dir = write_wrappers(work / "bin", venvs["prime-rl"], venvs["vllm"], tree)
    python = str(venvs["prime-rl"] / "bin" / "python")
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(bin_dir), str(venvs["prime-rl"] / "bin"), os.environ["PATH"]]),
        "PYTHONUNBUFFERED": "1",
    }

    if config.dry_run:
        status.stage("PRIME-RL's rl --dry-run")
        argv = [str(bin_dir / "rl"), *launch_args(project, overlays, config.steps, 8000), "--dry-run"]
        run(argv, logs / "rl.log", "PRIME-RL's rl --dry-run", cwd=work, env=env)
        configs = run_dir(work)
        print(
            f"dry run: PRIME-RL accepted the launch config; its sub-configs are in {configs / 'configs' if configs else work}"
        )
        return 0

    t0 = time.monotonic()
    if resume is None:
        with cache_lock(cache, "preparing or copying the mined tasks and the warm-started policy", status.note):
            meta["setup"] = prepare_inputs(config, python, env, work, cache, logs, status)
    else:  # the run's own tasks and start model, as its checkpoints were trained from
        meta["setup"] = json.loads((work / "setup.json").read_text())
        meta["resumed_from"] = resume[1]
        status.note(f"resuming {resume[0].name} from its checkpoint of step {resume[1]} (PRIME-RL's own resume)")
    meta["timings"]["prepare_s"] = time.monotonic() - t0

    teacher_port = free_port()
    with group(
        [python, "-m", "composer_prime.smoke.referees", "--port", str(teacher_port)], logs / "teachers.log", env=env
    ) as teachers:
        if config.teacher_url is None:
            wait_for_port(teacher_port, teachers, "the local teachers", logs / "teachers.log")
            env |= {var: f"http://127.0.0.1:{teacher_port}/{rule}/v1" for var, rule in RULE_FOR.items()}
            env |= {key: "smoke" for key in TEACHER_KEYS}
        else:
            env |= {var: config.teacher_url for var in RULE_FOR}
            if (warning := teacher_url_warning(config.teacher_url)) is not None:
                status.note(warning)
        port = inference_port(config.port)
        url = f"http://127.0.0.1:{port}"
        # PRIME-RL's launcher maps its processes to GPU ids it reads from CUDA_VISIBLE_DEVICES (one for inference, one
        # for the trainer); on CPU they only label the processes.
        env |= {"CUDA_VISIBLE_DEVICES": "0,1", "WANDB_MODE": "disabled"}
        argv = [str(bin_dir / "rl"), *launch_args(project, overlays, config.steps, port)]
        if resume is not None:
            argv += ["--run.name", resume[0].name, "--resume.step", str(resume[1])]
        meta["rl_command"] = argv
        t0 = time.monotonic()
        ids = json.loads((work / "model" / "probe.json").read_text())["token_ids"]
        probes = reloads.Watcher(url, ids, "model", work, work / "reloads")
        step_lines = StepLines(work, config.steps)
        with group(argv, logs / "rl.log", cwd=work, env=env) as rl, linked_logs(work, logs):
            shown = ""
            while rl.poll() is None:
                probes.poll()
                for text in step_lines.poll():
                    status.note(text)
                line = progress_line(work, config.steps)
                if line != shown:
                    status.stage(line)
                    shown = line
                time.sleep(0.5)
        meta["timings"]["rl_s"] = time.monotonic() - t0
        meta["probes"], meta["probes_missed"], meta["probe_errors"] = probes.records, probes.missed, probes.errors
    if rl.returncode != 0:
        raise ProcessFailed(
            f"PRIME-RL's rl failed (exit code {rl.returncode}); its log is {logs / 'rl.log'}, its "
            f"processes' logs are in {logs / 'prime-rl'}{failure_detail(work, logs)}"
        )
    meta["seconds"] = time.monotonic() - started
    meta["machine"]["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    (work / "meta.json").write_text(json.dumps(meta, indent=1))
    status.stage("building the report from PRIME-RL's outputs")
    run([python, "-m", "composer_prime.smoke.report", str(work), str(out)], logs / "report.log", "the report", env=env)
    sys.stdout.write((out / "report.txt").read_text())
    return 0


def machine(project: Path, tree: Path) -> dict[str, Any]:
    """What a reader of the report needs to compare runs: when, where, at what load, from which code."""
    import platform
    import subprocess

    from composer_prime.local.tree import source_commit

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(project), *args], capture_output=True, text=True, timeout=30)
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    commit = source_commit(tree)
    return {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "composer_prime": git("rev-parse", "--short", "HEAD") + (" (modified)" if git("status", "--porcelain") else ""),
        "prime_rl_tree": f"{tree} ({'git ' + commit[:9] if commit else 'no .git: checked by content'})",
    }


INPUTS = ("tasks.jsonl", "eval-tasks.jsonl", "mined.jsonl", "model", "setup.json")


def inputs_key(settings: dict[str, Any]) -> str:
    """The prepared inputs depend on the settings and on the code that makes them (mining, the policy, the warm
    start, the harness, the bundled repository): any change to those files makes new inputs."""
    import hashlib

    root = Path(__file__).resolve().parents[2]  # the checkout the venvs install (local.launch.project_root)
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    for package in (root / "composer_prime", root / "composer_agent", root / "environments" / "feature_deletion"):
        for file in sorted(package.rglob("*")):
            if file.is_file() and file.suffix != ".pyc" and "__pycache__" not in file.parts:
                digest.update(str(file.relative_to(package)).encode() + file.read_bytes())
    return digest.hexdigest()[:16]


def prepare_inputs(
    config: SmokeConfig, python: str, env: dict[str, str], work: Path, cache: Path, logs: Path, status: Status
) -> dict[str, Any]:
    """Mine the tasks and warm-start the policy into `work` (`prepare.py`), or copy them from the cache, where a run
    with the same settings and code left them (the warm start is most of a smoke's set-up)."""
    settings = {
        "tasks": config.tasks,
        "seed": config.seed,
        "policy": config.policy.model_dump(),
        "warm_start": config.warm_start.model_dump(),
    }
    kept = cache / f"inputs-{inputs_key(settings)}"
    if not (kept / ".complete").is_file():
        status.stage("mining tasks and warm-starting the tiny policy")
        (work / "prepare.json").write_text(json.dumps(settings))
        lines = run(
            [python, "-m", "composer_prime.smoke.prepare", str(work / "prepare.json"), str(work)],
            logs / "prepare.log",
            "the input preparation (mining, warm start)",
            env=env,
            on_json=lambda line: "progress" in line and status.stage(line["progress"]),
        )
        (work / "setup.json").write_text(json.dumps(lines[-1]))
        if kept.exists():
            shutil.rmtree(kept)
        kept.mkdir(parents=True)
        for name in INPUTS:
            copy(work / name, kept / name)
        for extra in work.glob("mined.jsonl.*"):  # the miner's repository snapshot the tasks point at
            copy(extra, kept / extra.name)
        (kept / ".complete").write_text("")
    else:
        status.stage(f"reusing the mined tasks and the warm-started policy ({kept})")
        for item in kept.iterdir():
            if item.name != ".complete":
                copy(item, work / item.name)
    return json.loads((work / "setup.json").read_text())


def copy(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dest)
    else:
        shutil.copy2(src, dest)


def inference_port(asked: int) -> int:
    """The inference server's port: `--port` where it is free and no other run reserved it, else a free one; both
    reserved for this process (`process/ports.py`)."""
    if asked == 0:
        return free_port()
    if not reserve(asked):
        raise Busy(
            f"--port = {asked}: the port is in use or reserved by another run on this machine; pass another "
            "port or 0 (a free one)"
        )
    return asked


def launch_args(project: Path, overlays: list[Path], steps: int, port: int) -> list[str]:
    """`rl`'s arguments: the CPU launch config, the overlays in order, then what the smoke decides: steps, and ports
    for everything PRIME-RL binds (the inference server, the ZMQ rollout transport's pair, the env servers), each
    reserved for this process until it exits, so smokes into different `--out` folders run side by side."""
    args = ["@", str(project / "tomls" / "cpu-smoke.toml")]
    for overlay in overlays:
        args += ["@", str(overlay)]
    zmq, env_servers = free_port_blocks(2, ENV_SERVER_PORTS, avoid=(port,))
    return [
        *args,
        "--max-steps",
        str(steps),
        "--inference.server.host",
        "127.0.0.1",
        "--inference.server.port",
        str(port),
        "--orchestrator.model.client.base-url",
        f"http://127.0.0.1:{port}/v1",
        "--rollout-transport.type",
        "zmq",
        "--rollout-transport.port",
        str(zmq),
        "--orchestrator.env-server-base-port",
        str(env_servers),
    ]


def failure_detail(work: Path, logs: Path, lines: int = 15) -> str:
    """What PRIME-RL's launcher said failed, and the end of that process's own log."""
    said = [
        strip_ansi(line).strip()
        for line in (logs / "rl.log").read_text(errors="replace").splitlines()
        if "failed with exit code" in line or "Error" in line
    ][-3:]
    folder = run_dir(work)
    names = {"orchestrator": "orchestrator.log", "trainer": "trainer.log", "inference": "inference.log"}
    detail = "".join(f"\n  {line}" for line in said)
    for key, name in names.items():
        if any(key in line.lower() for line in said) and folder is not None:
            log = folder / "logs" / "latest" / name
            if log.is_file():
                tail = [strip_ansi(x) for x in log.read_text(errors="replace").splitlines()[-lines:]]
                detail += f"\nthe end of {log}:\n" + "\n".join(f"  {x}" for x in tail)
    return detail
