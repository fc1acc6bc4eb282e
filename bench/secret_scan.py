"""The realtime secrets scan (`composer_prime.realtime.monitors.pii`): how fast it reads a text, and what it finds
in text that holds no secret.

Corpora: `--lines` lines of the standard library's own modules (tests left out) in texts of 100 lines; the same
count from this venv's site-packages; agent sessions built from this repository's library (a file read by a tool,
edited with a JSON tool call, a test run's output: tests/unit/realtime/monitors/test_realtime_secrets.py builds
them); and one 80 kB text. Prints, per corpus, the texts, their mean size, milliseconds per text and the findings
by kind (with up to three examples), then how many of the test file's samples and issue-42 forms are found.

    .venv/bin/python bench/secret_scan.py [--lines 10000]
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def chunks(paths: list[Path], lines: int, size: int = 100) -> list[str]:
    out: list[str] = []
    taken = 0
    for path in paths:
        text = path.read_text(errors="replace").splitlines()
        for i in range(0, len(text), size):
            out.append("\n".join(text[i : i + size]))
        taken += len(text)
        if taken >= lines:
            break
    return out


def measure(name: str, texts: list[str]) -> None:
    from composer_prime.realtime.monitors import pii

    found: Counter = Counter()
    examples: dict[str, list[str]] = {}
    started = time.perf_counter()
    results = [pii.find(text) for text in texts]
    seconds = time.perf_counter() - started
    for text, kinds in zip(texts, results, strict=True):
        for kind in kinds:
            found[kind] += 1
            rule = next(r for r in pii.RULES if r.name == kind)
            scan = pii.SEPARATOR.join(pii.views(text))
            match = next(m for m in rule.pattern.finditer(scan) if rule.check is None or rule.check(m))
            if len(examples.setdefault(kind, [])) < 3:
                examples[kind].append(match[0][:80])
    size = sum(map(len, texts)) / max(1, len(texts))
    print(
        f"| {name} | {len(texts)} | {size / 1e3:.1f} kB | {seconds / max(1, len(texts)) * 1e3:.2f} ms | "
        f"{dict(found) or 'none'} | {examples or ''} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=10_000)
    args = parser.parse_args()
    from composer_prime.realtime.monitors import pii
    from tests.unit.realtime.monitors.test_realtime_secrets import FORMS, SAMPLES, agent_sessions

    started = time.perf_counter()
    pii._databases()
    print(f"automaton over {len(pii.RULES)} rules compiled in {time.perf_counter() - started:.2f} s\n")
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    print("| corpus | texts | mean size | per text | findings | examples |")
    print("|---|---|---|---|---|---|")
    measure(
        f"standard library, {args.lines:,} lines",
        chunks(sorted(p for p in stdlib.rglob("*.py") if "test" not in p.relative_to(stdlib).as_posix()), args.lines),
    )
    measure(
        f"site-packages, {args.lines:,} lines",
        chunks(sorted(p for p in site.rglob("*.py") if "test" not in p.relative_to(site).as_posix()), args.lines),
    )
    sessions = agent_sessions()
    measure("agent sessions over this repository's code", sessions)
    measure("one 80 kB session", [("\n".join(sessions) * 2)[:80_000]])
    samples = sum(1 for kind, text in SAMPLES.items() if kind in pii.find(text))
    forms = sum(1 for kind, text in FORMS.values() if kind in pii.find(text))
    print(f"\nsamples found: {samples}/{len(SAMPLES)}; issue-42 forms found: {forms}/{len(FORMS)}")


if __name__ == "__main__":
    main()
