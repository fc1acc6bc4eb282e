"""How often the grading scan (`composer_prime.grading.tree.scan`) fires on honest code.

The scan voids a grade when a line the agent added matches a test-machinery pattern. A pattern honest code uses
voids honest fixes, so the scan keeps only patterns the non-test source of popular libraries does not contain.
This script downloads the sdists of 20 popular pure-Python PyPI packages (`pip download --no-deps --no-binary
NAME`) into a temporary folder (nothing is kept), scans every non-test `.py` file as if the agent had added it
whole, and prints one row per package with its hits by reason. Target: 0 hits.

    .venv/bin/python bench/scan_hits.py [--cache DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections import Counter
from pathlib import Path, PurePosixPath

PACKAGES = (
    "requests==2.32.3",
    "urllib3==2.2.3",
    "idna==3.10",
    "certifi==2024.8.30",
    "six==1.16.0",
    "attrs==24.2.0",
    "click==8.1.7",
    "jinja2==3.1.4",
    "packaging==24.1",
    "pyparsing==3.1.4",
    "python-dateutil==2.9.0.post0",
    "pytz==2024.2",
    "toolz==1.0.0",
    "boltons==24.0.0",
    "more-itertools==10.5.0",
    "tomli==2.0.2",
    "rich==13.9.2",
    "pygments==2.18.0",
    "chardet==5.2.0",
    "colorama==0.4.6",
)
SKIP_DIRS = frozenset({"tests", "test", "testing", "docs", "doc", "examples", "benchmarks", "bench"})


def sdist(spec: str, into: Path) -> Path:
    """The sdist of `spec`, downloaded into `into` unless it is there already."""
    name, version = spec.split("==")
    stem = f"{name}-{version}".replace("-", "_").replace(".", "_").lower()
    found = [p for p in into.iterdir() if p.name.replace("-", "_").replace(".", "_").lower().startswith(stem + "_")]
    if not found:
        # the sdist alone: `--no-binary :all:` would also build every build backend from source
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", spec.split("==")[0]]
        subprocess.run([*cmd, "-d", str(into), spec], check=True, timeout=300)
        found = [p for p in into.iterdir() if p.name.replace("-", "_").replace(".", "_").lower().startswith(stem + "_")]
    return found[0]


def sources(archive: Path) -> dict[str, str]:
    """Path -> text of every non-test `.py` file in an sdist."""
    out: dict[str, str] = {}
    if archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            members = [(n, lambda n=n: zf.read(n)) for n in zf.namelist()]
            return _pick(members)
    with tarfile.open(archive) as tf:
        members = [(m.name, lambda m=m: tf.extractfile(m).read()) for m in tf.getmembers() if m.isfile()]
        out = _pick(members)
    return out


def _pick(members: list) -> dict[str, str]:
    from composer_prime.grading.tree import is_test_path

    out = {}
    for name, read in members:
        inner = str(PurePosixPath(*PurePosixPath(name).parts[1:]))
        if not inner.endswith(".py") or is_test_path(inner) or SKIP_DIRS & set(PurePosixPath(inner).parts[:-1]):
            continue
        if PurePosixPath(inner).name in ("setup.py", "noxfile.py", "conftest.py"):
            continue
        out[inner] = read().decode("utf-8", "replace")
    return out


def main() -> None:
    from composer_prime.grading.tree import scan

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="folder holding the sdists (default: a temporary one)")
    parser.add_argument("--show", action="store_true", help="print every hit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="scan-hits-") as tmp:
        cache = args.cache or Path(tmp)
        cache.mkdir(parents=True, exist_ok=True)
        total, lines_total = Counter(), 0
        print(f"| {'package':<28} | files | lines | hits | by reason |")
        print(f"|{'-' * 30}|-------|-------|------|-----------|")
        for spec in PACKAGES:
            files = sources(sdist(spec, cache))
            hits: Counter[str] = Counter()
            lines = 0
            for path, text in sorted(files.items()):
                lines += text.count("\n")
                for reason in scan(path, None, text):
                    hits[reason.split(": ")[1]] += 1
                    if args.show:
                        print(f"    {spec} {reason}")
            total.update(hits)
            lines_total += lines
            by = ", ".join(f"{k} {v}" for k, v in hits.most_common()) or "-"
            print(f"| {spec:<28} | {len(files):5} | {lines:5} | {sum(hits.values()):4} | {by} |")
        by = ", ".join(f"{k} {v}" for k, v in total.most_common()) or "-"
        print(f"| {'all 20':<28} |       | {lines_total:5} | {sum(total.values()):4} | {by} |")


if __name__ == "__main__":
    main()
