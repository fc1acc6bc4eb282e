"""Local mode: SWE-Gym instances on the subprocess runtime, without container images.

Two things are prepared on the host, each once, under `cache_dir`, and reused by every rollout:

- a **snapshot** per instance (`snapshots/<instance_id>/`): a git repository holding one commit whose tree is
  `base_commit`'s tree, exported from a clone of the project (`repo_sources`, or a mirror clone of
  `https://github.com/<repo>.git`). Only that tree's objects are in it: no history, no refs, no tags, nothing
  written after `base_commit`. Each rollout's box is a `git clone --no-hardlinks` of it.
- a **Python environment** per repo and version (`envs/<owner__name>/<version>-<spec hash>/`): a venv made with
  the configured interpreter, with the install commands run once in a reference checkout of the first instance
  of that version (typically `pip install -e .` plus test dependencies). The box's own tree shadows the
  reference checkout through `PYTHONPATH`, so the code under test is always the box's.

Preparation is atomic and safe under concurrency (several env-server workers, several rollouts): each entry is
built under an exclusive file lock; a snapshot is built under a temporary name and renamed into place, and an
environment (venvs are not relocatable) is built in place and only counts once its `.ready` marker is written
last — a half-built one is wiped and rebuilt by the next holder of the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

from filelock import FileLock, Timeout
from pydantic import BaseModel, ConfigDict, Field

from composer_prime.atomic import write_atomic
from composer_prime.process.commands import run_checked_host
from swe_gym.rows import SWEGymRow

logger = logging.getLogger(__name__)

SNAPSHOT_IDENTITY = {
    "GIT_AUTHOR_NAME": "swe-gym",
    "GIT_AUTHOR_EMAIL": "swe-gym@localhost",
    "GIT_COMMITTER_NAME": "swe-gym",
    "GIT_COMMITTER_EMAIL": "swe-gym@localhost",
}
GIT_TIMEOUT_S = 1800.0


class RepoEnvConfig(BaseModel):
    """How the Python environment of one repository is built."""

    model_config = ConfigDict(extra="forbid")

    python: str = "python3"
    """Interpreter the venv is created from (a name on PATH or a path), e.g. `python3.9` for an old pandas."""
    install: list[str] = Field(default_factory=lambda: ["python -m pip install -e .", "python -m pip install pytest"])
    """Shell commands run once, in a reference checkout, with the venv first on PATH."""
    with_pip: bool = True
    """Create the venv with pip (off saves a few seconds when `install` needs no pip)."""
    pythonpath: list[str] = Field(default_factory=lambda: ["."])
    """Box-relative directories put first on PYTHONPATH, so the box's code shadows the reference checkout
    (`["src"]` for a src-layout project)."""


class LocalConfig(BaseModel):
    """Local mode (subprocess runtime): where the repositories come from and how environments are built."""

    model_config = ConfigDict(extra="forbid")

    cache_dir: Path = Path("~/.cache/composer-prime/swe-gym")
    """Root of the snapshots, mirrors and environments; shared by all workers on a host."""
    repo_sources: dict[str, str] = Field(default_factory=dict)
    """`owner/name` -> a git clone on this host (path) or a git URL to mirror, for repos not at the default URL."""
    repo_source_template: str = "https://github.com/{repo}.git"
    """Git URL of a repo missing from `repo_sources`; mirrored once into `cache_dir/mirrors/`."""
    env: RepoEnvConfig = Field(default_factory=RepoEnvConfig)
    """Environment recipe for repos missing from `envs`."""
    envs: dict[str, RepoEnvConfig] = Field(default_factory=dict)
    """`owner/name` -> its environment recipe."""
    site_packages: list[Path] = Field(default_factory=list)
    """Site-packages directories made visible in every venv through a `.pth` file (e.g. to reuse an installed
    pytest instead of installing one); empty keeps the venvs isolated."""
    prep_timeout_s: float = Field(default=7200.0, gt=0)
    """Upper bound for one preparation step (a clone, an install command, waiting for another worker's lock)."""

    def root(self) -> Path:
        return self.cache_dir.expanduser().resolve()

    def env_for(self, repo: str) -> RepoEnvConfig:
        return self.envs.get(repo, self.env)


class PrepError(RuntimeError):
    """Local preparation failed; the message names the step, the command and the fix."""


def slug(name: str) -> str:
    return name.replace("/", "__")


@contextlib.contextmanager
def exclusive(lock_path: Path, timeout_s: float) -> Iterator[None]:
    """Hold an exclusive file lock on `lock_path` (across processes and threads), waiting at most `timeout_s`."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(lock_path, timeout=timeout_s):
            yield
    except Timeout:
        raise PrepError(
            f"waited {timeout_s:.0f}s for the lock {lock_path}; another preparation holds it. "
            "Raise local.prep_timeout_s, or remove the lock file if no worker is preparing"
        ) from None


def run(argv: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None, timeout_s: float) -> str:
    """Run a host command; a failure raises PrepError with the command and its output's tail."""
    return run_checked_host(argv, error=PrepError, timeout_s=timeout_s, cwd=cwd, env=env)


def _is_url(source: str) -> bool:
    return "://" in source or source.startswith("git@")


def source_of(config: LocalConfig, repo: str) -> str:
    return config.repo_sources.get(repo) or config.repo_source_template.format(repo=repo)


def git_dir_of(config: LocalConfig, repo: str) -> Path:
    """The git directory to export from: a local clone as given, or a mirror of the repo's URL (made once)."""
    source = source_of(config, repo)
    if not _is_url(source):
        path = Path(source).expanduser()
        if not path.exists():
            raise PrepError(f"repo_sources[{repo!r}] = {source!r} does not exist; point it at a git clone of {repo}")
        return Path(run(["git", "-C", str(path), "rev-parse", "--absolute-git-dir"], timeout_s=60).strip())
    mirror = config.root() / "mirrors" / f"{slug(repo)}.git"
    with exclusive(mirror.with_suffix(".lock"), config.prep_timeout_s):
        if not mirror.exists():
            logger.info("swe-gym: mirroring %s from %s (once per host)", repo, source)
            tmp = mirror.with_name(f".tmp-{mirror.name}-{uuid.uuid4().hex[:8]}")
            try:
                run(["git", "clone", "--mirror", "--quiet", source, str(tmp)], timeout_s=config.prep_timeout_s)
                tmp.rename(mirror)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return mirror


def _has_commit(git_dir: Path, sha: str) -> bool:
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "-e", f"{sha}^{{commit}}"],
        check=False,
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0


def prepare_snapshot(config: LocalConfig, row: SWEGymRow) -> Path:
    """The single-commit repository of `row.base_commit`'s tree, built once per instance."""
    target = config.root() / "snapshots" / slug(row.instance_id)
    if (target / ".git").is_dir():
        return target
    git_dir = git_dir_of(config, row.repo)
    with exclusive(target.with_name(f"{target.name}.lock"), config.prep_timeout_s):
        if (target / ".git").is_dir():
            return target
        if not _has_commit(git_dir, row.base_commit) and _is_url(source_of(config, row.repo)):
            with exclusive(git_dir.with_suffix(".lock"), config.prep_timeout_s):
                run(["git", "--git-dir", str(git_dir), "remote", "update", "--prune"], timeout_s=config.prep_timeout_s)
        if not _has_commit(git_dir, row.base_commit):
            raise PrepError(
                f"instance {row.instance_id!r}: base_commit {row.base_commit} is not in {git_dir}; fetch it there, "
                f"or point local.repo_sources[{row.repo!r}] at a clone that has it"
            )
        tmp = target.with_name(f".tmp-{target.name}-{uuid.uuid4().hex[:8]}")
        try:
            tmp.mkdir(parents=True)
            export = {"GIT_INDEX_FILE": str(tmp / ".swe-gym-export-index")}
            git = ["git", "--git-dir", str(git_dir)]
            run([*git, "read-tree", row.base_commit], env=export, timeout_s=GIT_TIMEOUT_S)
            # An explicit work tree: the source may be bare (a mirror), and its own work tree must stay untouched.
            run(
                [*git, "--work-tree", str(tmp), "checkout-index", "--all", "--force"],
                env=export,
                timeout_s=GIT_TIMEOUT_S,
            )
            (tmp / ".swe-gym-export-index").unlink()
            date = run([*git, "show", "-s", "--format=%cI", row.base_commit], timeout_s=60).strip()
            commit_env = {**SNAPSHOT_IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
            run(["git", "init", "--quiet", "--initial-branch=main", str(tmp)], timeout_s=60)
            # -f: the export is exactly the tracked tree, including files a .gitignore would skip.
            run(["git", "-C", str(tmp), "add", "--all", "--force"], timeout_s=GIT_TIMEOUT_S)
            message = f"{row.repo} at {row.base_commit} (SWE-Gym {row.instance_id})"
            run(
                ["git", "-C", str(tmp), "commit", "--quiet", "--no-verify", "-m", message],
                env=commit_env,
                timeout_s=GIT_TIMEOUT_S,
            )
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def env_key(config: LocalConfig, repo: str) -> str:
    spec = config.env_for(repo)
    blob = json.dumps(
        {
            "python": spec.python,
            "install": spec.install,
            "pip": spec.with_pip,
            "site": [str(p) for p in config.site_packages],
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def env_path(config: LocalConfig, row: SWEGymRow) -> Path:
    return config.root() / "envs" / slug(row.repo) / f"{slug(row.version)}-{env_key(config, row.repo)}"


def reference_code(venv: Path) -> list[Path]:
    """The code of an env's reference checkout the agent must not read (`prepare_env` builds the env from whichever
    instance came first, which may be past another instance's fix): the checkout `src`, and the copies a non-editable
    install (`pip install .`) put in the env's site-packages, found by the checkout's top-level module and package
    names (also under a `src/` layout). The box's tree shadows both through PYTHONPATH, so no test needs them."""
    src = venv / "src"
    names = set()
    for top in (src, src / "src"):
        for entry in top.iterdir() if top.is_dir() else ():
            package = entry.is_dir() and (entry / "__init__.py").is_file()
            module = entry.is_file() and entry.suffix == ".py" and entry.name not in ("setup.py", "conftest.py")
            if package or module:
                names.add(entry.name)
    sites = sorted(venv.glob("lib*/python*/site-packages"))
    copies = [site / name for site in sites for name in sorted(names) if (site / name).exists()]
    return [src, *copies] if src.is_dir() else copies


def venv_vars(venv: Path) -> dict[str, str]:
    return {"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}


def prepare_env(config: LocalConfig, row: SWEGymRow, snapshot: Path) -> Path:
    """The venv for `row.repo` at `row.version`, built once (from `snapshot` as the reference checkout)."""
    venv = env_path(config, row)
    ready = venv / ".ready"
    if ready.is_file():
        return venv
    spec = config.env_for(row.repo)
    with exclusive(venv.with_name(f"{venv.name}.lock"), config.prep_timeout_s):
        if ready.is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)  # a half-built env from an interrupted preparation
        started = time.monotonic()
        logger.info("swe-gym: building the %s %s environment at %s (once per host)", row.repo, row.version, venv)
        venv_argv = [spec.python, "-m", "venv", str(venv)]
        if not spec.with_pip:
            venv_argv.insert(3, "--without-pip")
        run(venv_argv, timeout_s=config.prep_timeout_s)
        if config.site_packages:
            site = run(
                [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                timeout_s=60,
            ).strip()
            lines = "".join(f"{Path(p).expanduser().resolve()}\n" for p in config.site_packages)
            write_atomic(Path(site) / "swe_gym_site_packages.pth", lines)
        src = venv / "src"
        run(["git", "clone", "--quiet", "--no-hardlinks", str(snapshot), str(src)], timeout_s=GIT_TIMEOUT_S)
        log = venv / "prep.log"
        for command in spec.install:
            logger.info("swe-gym: %s %s: %s", row.repo, row.version, command)
            out = run(["bash", "-c", command], cwd=src, env=venv_vars(venv), timeout_s=config.prep_timeout_s)
            with log.open("a") as handle:
                handle.write(f"$ {command}\n{out}\n")
        record = {
            "repo": row.repo,
            "version": row.version,
            "reference_instance": row.instance_id,
            "python": spec.python,
            "install": spec.install,
            "seconds": round(time.monotonic() - started, 1),
        }
        write_atomic(ready, json.dumps(record, indent=2) + "\n")
        logger.info("swe-gym: %s %s environment ready in %.0fs", row.repo, row.version, record["seconds"])
    return venv


def box_env(config: LocalConfig, row: SWEGymRow, workdir: str) -> dict[str, str]:
    """Process environment of a local box: the prepared venv first on PATH, the box's tree first on PYTHONPATH."""
    spec = config.env_for(row.repo)
    paths = [os.path.normpath(os.path.join(workdir, entry)) for entry in spec.pythonpath]
    return {**venv_vars(env_path(config, row)), "PYTHONPATH": os.pathsep.join(paths)}
