"""`composer-prime mine-corpus`'s settings (`CorpusConfig`), with no heavy import: `--help` and a bad value answer at
once, before any package is fetched."""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic.fields import FieldInfo

from composer_prime.mining.config import MineConfig

PACKAGE_FILE = "package.json"
"""Each package folder's record of its mining (`package.py`), written last."""
PER_CORPUS = ("repo", "out", "test_cmd", "host_copies")
"""MineConfig fields mine-corpus sets itself: the fetched tree, the package folder, the image's interpreter, and
host_copies (off: the host's site-packages are not the image's, which is searched for the gold code instead)."""


def _docstrings(cls: type) -> dict[str, str]:
    """The docstring under each field of `cls` (the house style's field documentation)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body  # type: ignore[attr-defined]
    found = {}
    for first, second in zip(body, body[1:], strict=False):
        if isinstance(first, ast.AnnAssign) and isinstance(first.target, ast.Name):
            if isinstance(second, ast.Expr) and isinstance(second.value, ast.Constant):
                found[first.target.id] = inspect.cleandoc(str(second.value.value))
    return found


def _described(field: FieldInfo, doc: str | None) -> FieldInfo:
    copied = copy.copy(field)
    copied.description = field.description or doc
    return copied


_MINER_DOCS = _docstrings(MineConfig)
MinerOptions = create_model(  # every mine-features option but the three above, kept in step with MineConfig
    "MinerOptions",
    __config__=ConfigDict(extra="forbid"),
    __doc__="The miner's own options (`composer-prime mine-features --help`), applied to every package.",
    **{
        name: (field.annotation, _described(field, _MINER_DOCS.get(name)))
        for name, field in MineConfig.model_fields.items()
        if name not in PER_CORPUS
    },
)

SPEC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


class GitSource(BaseModel):
    """A git repository at one ref: a team's own code, or a project whose sdist lacks its tests."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1)
    """What `git fetch` takes: an https or ssh URL, or a local path."""
    ref: str = Field(min_length=1)
    """A branch, a tag or a commit the server serves (`git fetch --depth 1 URL REF`); recorded as the version."""
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """The package's name in the corpus (its folder `<name>-<ref>` and the tasks' `repo`); None: the URL's last part
    without `.git`."""
    requires: list[str] = []
    """Test requirements the repository's metadata does not declare (PEP 508 strings, e.g. `hypothesis>=6`)."""


class CorpusConfig(BaseModel):
    """What `composer-prime mine-corpus` mines, where, and in which images."""

    model_config = ConfigDict(extra="forbid")

    packages: list[str] = []
    """PyPI sdists as `NAME==VERSION` (downloaded on this machine from `find_links` or `index_url`, nothing built)."""
    repos: list[GitSource] = []
    """Git repositories with a ref, as TOML tables: `[[repos]]` with `url` and `ref` (optional `name`, `requires`)."""
    out: Path
    """The corpus folder: `packages/<name>-<version>/` per package (tasks.jsonl, base tarballs, package.json). A
    re-run skips the packages whose package.json is there."""
    runtime: Literal["podman", "docker"] = "podman"
    """The container CLI that builds the images and runs the mining and validation boxes."""
    base_image: str = Field("docker.io/library/python:3.11-slim", min_length=1)
    """The image with the Python the packages need (a local or pullable reference); each package's image adds its
    pinned test dependencies. It needs glibc and tar, sha256sum, timeout, unshare; git is installed if missing."""
    image_prefix: str = Field("localhost/composer-prime-env", min_length=1)
    """Repository prefix of the built images (`<prefix>/<name>:<version>-<hash>`); name your registry to push them."""
    index_url: str | None = None
    """The simple index (PEP 503/691) of the sdists, and pip's `--index-url` for the wheels (None: PyPI for the
    sdists, pip's own configuration for the wheels). A `file://` URL names a folder with `<name>/index.html`."""
    find_links: list[str] = []
    """Folders or URLs of sdists and wheels (e.g. a folder of your own), looked in before the index; pip's
    `--find-links` for the wheels."""
    requires: list[str] = []
    """Test requirements added to every package (PEP 508 strings); pytest is always added."""
    package_requires: dict[str, list[str]] = {}
    """Test requirements of one PyPI package that its metadata does not declare, by its name in `packages`
    (`[package_requires]` in TOML: `boltons = ["pytest<9"]`)."""
    jobs: int = Field(1, ge=1, le=64)
    """Packages mined at once (each runs its own containers)."""
    dataset: bool = True
    """Rebuild the corpus's Hugging Face dataset (parquet shards and card in `out`, as `composer-prime corpus-dataset`
    builds it) after each package; needs the `corpus` extra (pyarrow, datasets), else it is skipped with a note."""
    publish: bool = False
    """With `dataset`: keep only packages whose license allows redistribution (`corpus-dataset --publish`)."""
    retry_failed: bool = False
    """Mine again the packages whose package.json records an error (a failed baseline, a resolution error)."""
    miner: MinerOptions = Field(default_factory=MinerOptions)  # type: ignore[valid-type]
    """The miner's own options, for every package (`--miner.max-tasks 50`, `[miner]` in TOML)."""
    shard: str | None = Field(None, pattern=r"^[0-9]+/[0-9]+$")
    """`K/N`: mine only the K-th of N shares of the packages (1 <= K <= N), so N machines mine one config, each into
    its own --out, e.g. `--shard 3/8`; a package's share is fixed by its name and version, not by its place in the
    list. `composer-prime corpus-dataset --out ALL --shards DIR ...` merges the shard folders."""

    @field_validator("shard")
    @classmethod
    def _shard_in_range(cls, shard: str | None) -> str | None:
        if shard is not None:
            k, n = map(int, shard.split("/"))
            if not 1 <= k <= n:
                raise ValueError(f"shard {shard!r}: K/N needs 1 <= K <= N (e.g. 1/4 ... 4/4)")
        return shard

    @field_validator("packages")
    @classmethod
    def _pinned(cls, packages: list[str]) -> list[str]:
        for spec in packages:
            if not SPEC.match(spec.strip()):
                raise ValueError(
                    f"package {spec!r} is not NAME==VERSION; pin each PyPI package to one release (e.g. toolz==1.2.0)"
                )
        return [spec.strip() for spec in packages]

    @model_validator(mode="after")
    def _something_to_mine(self) -> CorpusConfig:
        if not self.packages and not self.repos:
            raise ValueError("nothing to mine: set packages (NAME==VERSION, ...) or [[repos]] (url, ref)")
        return self

    @model_validator(mode="after")
    def _each_once(self) -> CorpusConfig:
        seen: set[str] = set()
        for key in [spec.lower() for spec in self.packages] + [f"{repo.url}@{repo.ref}" for repo in self.repos]:
            if key in seen:
                raise ValueError(f"{key} is listed twice; list each package (or repository at a ref) once")
            seen.add(key)
        return self

    @model_validator(mode="after")
    def _requires_name_a_package(self) -> CorpusConfig:
        names = {spec.split("==", 1)[0] for spec in self.packages}
        unknown = sorted(set(self.package_requires) - names)
        if unknown:
            raise ValueError(
                f"package_requires names {unknown}, which packages does not list ({sorted(names)}); key it by the "
                "name as written in packages (git repositories take `requires` in their [[repos]] table)"
            )
        return self


def folder_name(name: str, version: str) -> str:
    """`<name>-<version>` with what a path cannot hold replaced."""
    return "".join(c if c.isalnum() or c in "._+-" else "_" for c in f"{name}-{version}")


def planned(config: CorpusConfig) -> list[dict]:
    """Every package of the config: name, version, source, folder, and its fetch (`spec` or `git`)."""
    jobs = []
    for spec in config.packages:
        name, version = spec.split("==", 1)
        jobs.append({"name": name, "version": version, "source": "pypi", "spec": spec})
    for repo in config.repos:
        name = repo.name or repo.url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        jobs.append({"name": name, "version": repo.ref, "source": f"{repo.url}@{repo.ref}", "git": repo.model_dump()})
    for job in jobs:
        job["folder"] = str(config.out / "packages" / folder_name(job["name"], job["version"]))
    if config.shard is not None:
        k, n = map(int, config.shard.split("/"))
        jobs = [job for job in jobs if shard_of(Path(job["folder"]).name, n) == k]
    return jobs


def shard_of(folder: str, shards: int) -> int:
    """The share (1..`shards`) a package's folder name falls in: a hash, so adding packages moves none."""
    return int.from_bytes(hashlib.sha256(folder.encode()).digest()[:8], "big") % shards + 1


def check_inputs(config: CorpusConfig) -> None:
    """Refuse, before any work, an --out that cannot be written and find-links folders that do not exist. Raises
    ValueError naming the option, the value and the fix."""
    out = config.out.expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {config.out}: a file, not a folder; pass a folder (it is created if missing)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".probe."):
            pass
    except OSError as err:
        raise ValueError(
            f"--out {config.out}: cannot write there ({err.strerror or err}); pass a writable folder"
        ) from None
    folders = [folder for folder in config.find_links if "://" not in folder and not os.path.isdir(folder)]
    if folders:
        raise ValueError(f"--find-links {folders[0]}: no such folder; pass a folder of sdists and wheels or a URL")
    owners: dict[str, str] = {}
    for job in planned(config):
        folder = job["folder"]
        if folder in owners:  # `org1/utils@v1` and `org2/utils@v1`, refs `release/1` and `release_1`, `a-b==1` ...
            raise ValueError(
                f"{owners[folder]} and {job['source'] if job['source'] != 'pypi' else job['spec']} both map to "
                f"packages/{Path(folder).name}; give one a `name` of its own in [[repos]]"
            )
        owners[folder] = job["source"] if job["source"] != "pypi" else job["spec"]
        record = Path(folder) / PACKAGE_FILE
        try:
            done = json.loads(record.read_text("utf-8")) if record.is_file() else None
        except (OSError, json.JSONDecodeError):
            done = None  # unreadable: mined again
        if isinstance(done, dict) and done.get("source") not in (None, job["source"]):
            raise ValueError(
                f"{record} was mined from {done.get('source')!r}, not {job['source']!r}; give this source a `name` "
                "of its own in [[repos]], or another --out"
            )


def check_runtime(config: CorpusConfig) -> None:
    """Refuse a container CLI that is not installed (checked once there is a package to mine)."""
    if shutil.which(config.runtime) is None:
        raise ValueError(
            f"--runtime {config.runtime}: `{config.runtime}` is not on PATH; install it or pick the "
            "other runtime (podman, docker)"
        )
