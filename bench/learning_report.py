"""Figures, table and curves of bench/learning.py's runs (no torch: it reads the runs' accuracy curves).

Per run, with `warm` its accuracy at step 0 (the shared warm start): steps to +10 / +20 points (the first evaluation
at or above warm + 0.10 / 0.20; unreached counts as beyond the last step), final accuracy (last evaluation), and
AUC = the mean accuracy gain over warm across the evaluations after step 0, in points. Per arm, each figure as
mean +- std over seeds, and paired against GRPO: per seed the arm's figure minus GRPO's (speedup: GRPO's steps over
the arm's, over the seeds where both reached the mark).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from composer_prime.atomic import write_atomic

MARKS = (0.10, 0.20)
READING = {
    "no_hint": "no hint",
    "right_hint": "after a right hint",
    "wrong_hint": "after a wrong hint",
    "follows_wrong_hint": "copying the wrong hint",
    "pass_no_hint": "episode pass rate without a hint",
    "pass_right_hints": "with a right hint before every step",
}


def figures(run: dict[str, Any], steps: int) -> dict[str, Any]:
    curve = run["curve"]
    warm = curve[0][1]
    reach = {}
    for mark in MARKS:
        reach[mark] = next((s for s, acc in curve[1:] if acc >= warm + mark - 1e-9), None)
    gains = [acc - warm for _, acc in curve[1:]] or [0.0]
    totals = run["totals"]
    return {
        "warm": warm,
        "reach": reach,
        "final": curve[-1][1],
        "auc": 100 * sum(gains) / len(gains),
        "hint_share": totals["hint_tokens"] / totals["rl_tokens"] if totals["rl_tokens"] else 0.0,
        "sibling_share": totals.get("sibling_targets", 0.0) / totals["hint_targets"] if totals["hint_targets"] else 0.0,
        "prefill_share": totals["prefill_tokens"] / totals["rollout_tokens"] if totals["rollout_tokens"] else 0.0,
        "prefill_requests": totals["prefill_requests"] / steps,
        "prefill_passes": totals["prefill_passes"] / steps,
        "steps": steps,
    }


def _ms(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    if not values:
        return "n/a"
    mean = statistics.fmean(values) * scale
    std = statistics.stdev(values) * scale if len(values) > 1 else 0.0
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _steps(values: list[int | None], steps: int) -> str:
    reached = sorted(v for v in values if v is not None)
    if not reached:
        return f"not reached (0/{len(values)})"
    filled = sorted(v if v is not None else steps + 1 for v in values)
    median = statistics.median(filled)
    median_text = f">{steps}" if median > steps else f"{median:g}"
    return f"{median_text} [{reached[0]}-{reached[-1]}] ({len(reached)}/{len(values)})"


def _speedup(arm: list[int | None], base: list[int | None]) -> str:
    ratios = [b / a for a, b in zip(arm, base, strict=True) if a and b]
    if not ratios:
        return "n/a"
    return f"{statistics.median(ratios):.2f}x ({len(ratios)} seeds)"


def table(results: dict[str, Any]) -> tuple[str, dict[str, dict[str, Any]]]:
    steps = results["settings"]["steps"]
    names = [a["name"] for a in results["arms"]]
    by_arm: dict[str, dict[int, dict[str, Any]]] = {n: {} for n in names}
    losses: dict[str, str] = {}
    for run in results["runs"]:
        by_arm[run["arm"]][run["seed"]] = figures(run, steps)
        losses[run["arm"]] = run["loss"]
    seeds = sorted(by_arm["grpo"])
    base = by_arm["grpo"]
    summary: dict[str, dict[str, Any]] = {}
    header = (
        "| arm | loss | steps to +10 pts | steps to +20 pts | speedup to +20 vs GRPO | final acc % | "
        "Δ final vs GRPO (pts) | AUC (pts) | Δ AUC vs GRPO (pts) | Δ AUC vs replay (pts) | hint tokens / rl tokens | "
        "sibling share of hint targets | extra compute: prefill tokens / rollout tokens | prefilled sequences / step | "
        "prefill passes / step |"
    )
    replay = by_arm.get("replay")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for name in names:
        runs = [by_arm[name][s] for s in seeds]
        r10 = [r["reach"][0.10] for r in runs]
        r20 = [r["reach"][0.20] for r in runs]
        d_final = [by_arm[name][s]["final"] - base[s]["final"] for s in seeds]
        d_auc = [by_arm[name][s]["auc"] - base[s]["auc"] for s in seeds]
        d_replay = [by_arm[name][s]["auc"] - replay[s]["auc"] for s in seeds] if replay else []
        summary[name] = {
            "reach10": r10,
            "reach20": r20,
            "final": [r["final"] for r in runs],
            "auc": [r["auc"] for r in runs],
            "d_final": d_final,
            "d_auc": d_auc,
            "d_auc_replay": d_replay,
        }
        lines.append(
            f"| {name} | {losses[name]} | {_steps(r10, steps)} | {_steps(r20, steps)} | "
            f"{'—' if name == 'grpo' else _speedup(r20, [base[s]['reach'][0.20] for s in seeds])} | "
            f"{_ms([r['final'] for r in runs], 100)} | {'—' if name == 'grpo' else _ms(d_final, 100)} | "
            f"{_ms([r['auc'] for r in runs])} | {'—' if name == 'grpo' else _ms(d_auc)} | "
            f"{'—' if name == 'replay' or not replay else _ms(d_replay)} | "
            f"{statistics.fmean(r['hint_share'] for r in runs):.3f} | "
            f"{statistics.fmean(r['sibling_share'] for r in runs):.3f} | "
            f"{statistics.fmean(r['prefill_share'] for r in runs):.3f} | "
            f"{statistics.fmean(r['prefill_requests'] for r in runs):.1f} | "
            f"{statistics.fmean(r['prefill_passes'] for r in runs):.1f} |"
        )
    warm = [w["accuracy"] for w in results["warm_start"]]
    reading = {case: [w["hint_reading"][case] for w in results["warm_start"]] for case in READING}
    s = results["settings"]
    warmup = f" ({s['warmup']}-step warmup)" if s.get("warmup") else ""
    head = (
        f"{len(seeds)} seeds (paired), warm start {_ms(warm, 100)} % held-out accuracy; {s['steps']} RL steps x "
        f"{s['prompts']} prompts x {s['group']} samples at temperature {s['temperature']:g}, policy "
        f"{s['size']} ({results['parameters']:,} parameters), lr {s['lr']}{warmup}, {base_text(results)}, "
        f"{s['task_steps']}-step problems, teacher wrong on {s['teacher_error']:.0%} of steps, device {s['device']}; {results['wall_seconds']:.0f} s wall with "
        f"{results['workers']} worker(s).\n\nHint reading of the warm start (greedy step in a right context, % right): "
        + ", ".join(f"{label} {_ms(reading[case], 100)}" for case, label in READING.items())
        + "."
    )
    return head + "\n\n" + "\n".join(lines) + "\n", summary


def base_text(results: dict[str, Any]) -> str:
    steps = results["base"]["steps"]
    return (
        f"hint drill {steps} steps" if results["settings"]["size"].startswith("gru") else f"pretraining {steps} steps"
    )


def plot(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    names = [a["name"] for a in results["arms"]]
    main = [n for n in names if "-" not in n]
    sweeps = ["grpo", *[n for n in names if "-" in n or n == "full"]]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, group, title in ((axes[0], main, "arms"), (axes[1], sweeps, "sweeps (full recipe)")):
        for name in group:
            curves = [r["curve"] for r in results["runs"] if r["arm"] == name]
            if not curves:
                continue
            xs = [s for s, _ in curves[0]]
            gains = [[100 * (acc - c[0][1]) for _, acc in c] for c in curves]
            mean = [statistics.fmean(col) for col in zip(*gains, strict=True)]
            std = [statistics.stdev(col) if len(col) > 1 else 0.0 for col in zip(*gains, strict=True)]
            (line,) = ax.plot(xs, mean, label=name)
            ax.fill_between(
                xs,
                [m - d for m, d in zip(mean, std, strict=True)],
                [m + d for m, d in zip(mean, std, strict=True)],
                color=line.get_color(),
                alpha=0.15,
            )
        for mark in MARKS:
            ax.axhline(100 * mark, color="grey", lw=0.6, ls="--")
        ax.set_title(title)
        ax.set_xlabel("RL step")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("held-out accuracy gain over warm start (points)")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    write_atomic(path, tmp.read_bytes())
    tmp.unlink()
    return True


def write(results: dict[str, Any], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    text, summary = table(results)
    results = {**results, "summary": summary}
    write_atomic(out / "results.json", json.dumps(results, indent=1, default=str) + "\n")
    write_atomic(out / "table.md", text)
    if not plot(results, out / "curves.png"):
        text += "\n(matplotlib is not installed: no curves.png)\n"
    return text


def _gap(reading: dict[str, list[float]], without: str, with_: str) -> str:
    diff = [b - a for a, b in zip(reading[without], reading[with_], strict=True)]
    return f"{_ms(reading[without], 100)} / {_ms(reading[with_], 100)} ({_ms(diff, 100)})"


def write_sizes(out: Path, sizes: list[str]) -> str:
    """`<out>/table.md`: the hint channel against model size (one row per size, paired AUC differences to GRPO and
    replay, the warm start's hint reading), then each size's own table."""
    results = [json.loads((out / size / "results.json").read_text()) for size in sizes]
    names = [a["name"] for a in results[0]["arms"] if a["name"] != "grpo"]
    heads = ["size", "parameters", "warm start %", "pass % without / with right hints (gap)"]
    heads += ["step % right without / with a right hint (gap)", *(f"{n}: Δ AUC vs GRPO / vs replay" for n in names)]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in results:
        summary = r["summary"]
        reading = {c: [w["hint_reading"][c] for w in r["warm_start"]] for c in READING}
        cells = [r["settings"]["size"], f"{r['parameters']:,}", _ms([w["accuracy"] for w in r["warm_start"]], 100)]
        cells += [_gap(reading, "pass_no_hint", "pass_right_hints"), _gap(reading, "no_hint", "right_hint")]
        cells += [
            f"{_ms(summary[n]['d_auc'])} / {_ms(summary[n]['d_auc_replay']) if n != 'replay' else '—'}" for n in names
        ]
        lines.append("| " + " | ".join(cells) + " |")
    text = "\n".join(lines) + "\n"
    for size in sizes:
        text += f"\n## {size}\n\n" + (out / size / "table.md").read_text()
    write_atomic(out / "table.md", text)
    return text
