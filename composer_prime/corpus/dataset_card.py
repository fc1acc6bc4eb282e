"""The dataset card (`README.md`) of a Feature Deletion dataset: written last by `dataset.build_dataset`, read first by
every reader.

Its YAML header's `configs` name every shard, one by one (config `tasks`, the default; config `bases`), which is how
`datasets.load_dataset(DIR)` and the feature-deletion taskset find them, and why renaming the card is the build's
commit point: a shard written for a build that never finished is named by no card. Its body is for
people: how to load it, a table of packages (version, source, license, task counts, image), the packages a published
build left out and why, and the duplicates dropped. What it shows is a build's `DatasetReport`, defined here with
the package records it lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from composer_prime.corpus.licenses import Verdict
from composer_prime.mining.record import MinedTask

CARD = "README.md"
LISTED_DUPLICATES = 50


class PackageInfo(BaseModel):
    """`OUT/packages/<name>-<version>/package.json`, written by mine-corpus."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    """The distribution's name, as on PyPI."""
    version: str = Field(min_length=1)
    """The version mined (the sdist's, or the git ref's)."""
    source: str = Field(min_length=1)
    """`pypi`, or `<git url>@<ref>`."""
    license: str | list[str] | None = None
    """As read from the sdist's metadata: `License-Expression`, else `License`, else the `License ::` trove
    classifiers (a list, or one a line); `licenses.classify` reads it."""
    image: str | None = None
    """The package's environment image; rows without an image of their own take it."""
    image_bytes: int | None = Field(None, ge=0)
    """Size of that image, in bytes (shown in the card)."""
    report: dict[str, Any] = {}
    """mine-corpus's per-package report (candidates, kept, skips by reason, time per task); not read here."""


@dataclass
class Package:
    folder: Path
    info: PackageInfo
    verdict: Verdict
    tasks: list[MinedTask] = field(default_factory=list)
    duplicates: int = 0


@dataclass
class DatasetReport:
    """What a build wrote and left out."""

    out: Path
    files: dict[str, list[str]]
    """Config (`tasks`, `bases`) -> the shards the card names, relative to the dataset folder."""
    tasks: int
    bases: int
    packages: list[Package]
    excluded: dict[str, str]
    """Package folder -> why `publish` left it out (its license)."""
    duplicates: list[tuple[str, str]]
    """(task dropped, task kept) for every task whose gold patch or task_id an earlier task has."""
    problems: list[str]
    """One line per row or package left out for bad input."""


@dataclass(frozen=True)
class CardFiles:
    """The shards a card names."""

    tasks: list[Path]
    bases: list[Path]
    missing: list[str]
    """Shards the card names one by one that are not in the folder."""


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as exc:
        raise ImportError(
            "reading or writing a dataset card needs PyYAML; install it with `pip install 'composer-prime[corpus]'`",
            name="yaml",
        ) from exc
    return yaml


def _header(text: str) -> dict[str, Any] | None:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    for end, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            try:
                header = _yaml().safe_load("\n".join(lines[1:end]))
            except _yaml().YAMLError:
                return None
            return header if isinstance(header, dict) else None
    return None


def _patterns(config: dict[str, Any]) -> list[str]:
    """The `data_files` of one config, in any of the forms the hub accepts (a path, a list of paths, a list of
    {split, path} with a path or a list of paths)."""
    files = config.get("data_files", [])
    entries = files if isinstance(files, list) else [files]
    patterns: list[str] = []
    for entry in entries:
        paths = entry.get("path", []) if isinstance(entry, dict) else entry
        patterns += [str(path) for path in (paths if isinstance(paths, list) else [paths])]
    return patterns


def card_files(folder: Path) -> CardFiles | None:
    """The shards `folder/README.md` names for configs `tasks` and `bases` (sorted glob matches), or None when there
    is no card, no YAML header or no `tasks` config."""
    path = Path(folder) / CARD
    if not path.is_file():
        return None
    header = _header(path.read_text(encoding="utf-8"))
    configs = {c.get("config_name"): c for c in (header or {}).get("configs", []) if isinstance(c, dict)}
    if "tasks" not in configs:
        return None
    found: dict[str, list[Path]] = {}
    missing: list[str] = []
    for name in ("tasks", "bases"):
        patterns = _patterns(configs.get(name, {}))
        found[name] = sorted({match for pattern in patterns for match in Path(folder).glob(pattern) if match.is_file()})
        missing += [p for p in patterns if not any(c in p for c in "*?[") and not (Path(folder) / p).is_file()]
    return CardFiles(found["tasks"], found["bases"], missing)


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_card(report: DatasetReport, *, publish: bool) -> str:
    """The card's text: YAML header (configs, license `other`) and the tables of the module docstring."""
    header = {
        "pretty_name": "Feature Deletion corpus",
        "license": "other",
        "tags": ["code", "software-engineering", "reinforcement-learning", "feature-deletion"],
        "configs": [
            {
                "config_name": "tasks",
                "default": True,
                "data_files": [{"split": "train", "path": report.files["tasks"]}],
            },
            {"config_name": "bases", "data_files": [{"split": "train", "path": report.files["bases"]}]},
        ],
    }
    included = [p for p in report.packages if p.folder.name not in report.excluded]
    lines = [
        "---",
        _yaml().safe_dump(header, sort_keys=False).rstrip(),
        "---",
        "",
        "# Feature Deletion corpus",
        "",
        "Tasks mined by composer-prime (`composer-prime mine-corpus`): a tested feature (function, method, class "
        "or module) was deleted from a real package; the agent rebuilds it, and the package's own tests, held out, "
        "grade the result (FAIL_TO_PASS must pass, PASS_TO_PASS keep passing). Each task runs in its package's "
        "environment image (`image`).",
        "",
        f"**{report.tasks} task(s)** from **{len(included)} package(s)**; {report.bases} repository-state tarball(s); "
        f"{len(report.duplicates)} task(s) dropped as duplicates (a gold patch or task_id an earlier task has); "
        f"{len(report.problems)} row(s) or package(s) left out for bad input. "
        + (
            "Published build: only packages whose license allows redistribution (read from their metadata)."
            if publish
            else "Local build: every package, whatever its license (build with `--publish` before sharing it)."
        ),
        "",
        "## Loading",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        'tasks = load_dataset("PATH_OR_REPO", split="train")           # config `tasks`: one row per task',
        'bases = load_dataset("PATH_OR_REPO", "bases", split="train")  # the repository-state tarballs',
        "```",
        "",
        "A task row's `base` names its tarball in the `bases` config, keyed by (`package`, `base`); `task` holds the "
        "whole mined row as JSON. To train on it, point the feature-deletion taskset at the folder: "
        '`tasks = "/path/to/this/folder"` in the run\'s `[orchestrator.train.source.env.taskset]`.',
        "",
        "## Packages",
        "",
        "| package | version | source | license | redistributable | tasks | duplicates dropped | image | image size |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for package in included:
        info = package.info
        size = f"{info.image_bytes / 2**20:.0f} MiB" if info.image_bytes is not None else ""
        lines.append(
            f"| {_cell(info.name)} | {_cell(info.version)} | {_cell(info.source)} | {_cell(package.verdict.license)} "
            f"| {'yes' if package.verdict.allowed else 'no'} | {len(package.tasks)} | {package.duplicates} "
            f"| {_cell(info.image or '')} | {size} |"
        )
    if report.excluded:
        lines += [
            "",
            "## Excluded packages",
            "",
            "Left out of this published build: their license, as read from "
            "their metadata, is not on the redistribution allowlist (unknown or missing counts as not).",
            "",
            "| package | why |",
            "|---|---|",
        ]
        lines += [f"| {_cell(name)} | {_cell(why)} |" for name, why in sorted(report.excluded.items())]
    if report.duplicates:
        lines += ["", "## Duplicates dropped", ""]
        lines += [
            f"- `{dropped}`: same gold patch or task_id as `{kept}`"
            for dropped, kept in report.duplicates[:LISTED_DUPLICATES]
        ]
        if len(report.duplicates) > LISTED_DUPLICATES:
            lines.append(f"- ... and {len(report.duplicates) - LISTED_DUPLICATES} more")
    lines += [
        "",
        "## Licenses",
        "",
        "Each task carries source code of its package (its tarball, its gold patch) under that package's license, "
        "shown per package above; the tarballs keep the license files the package ships.",
        "",
    ]
    return "\n".join(lines)
