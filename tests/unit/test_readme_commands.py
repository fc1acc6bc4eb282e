"""The README opens with the two fresh-machine commands: CI runs the second verbatim (its install and lint, then its
pytest), and the first fetches PRIME-RL
at the pinned commit and runs the smoke on it with the torch index the smoke's venvs need."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from composer_prime.local.tree import FETCH, HTTPS_SUBMODULES, PINNED_COMMIT
from composer_prime.local.venvs import TORCH_CPU_INDEX

REPO = Path(__file__).resolve().parents[2]


def opening_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.DOTALL)
    assert block is not None and block.start() < 400, "the README must open with its commands"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_smoke_then_tests_and_ci_runs_the_tests_command():
    smoke, tests = opening_commands()
    assert smoke.startswith(FETCH) and f"checkout {PINNED_COMMIT}" in smoke
    assert smoke.endswith(f"&& .venv/bin/composer-prime smoke --prime-rl ../prime-rl --torch-index {TORCH_CPU_INDEX}")
    install, _, run = tests.rpartition(" && ")
    assert run == ".venv/bin/python -m pytest"
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    # CI runs it as two lines, the image job started between them (in the background, beside the suite)
    assert install in ci and run in ci[ci.index(install) + 1 :]


def _git(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": "false"}  # no SSH: as without a GitHub key
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=env)


def test_the_submodule_is_fetched_over_https_without_a_github_key(tmp_path):
    # PRIME-RL's .gitmodules names verifiers by SSH; the rewrite in FETCH turns it into the HTTPS URL (git's own
    # expansion, no network) ...
    flags = HTTPS_SUBMODULES.split()
    assert HTTPS_SUBMODULES in FETCH.split("submodule update")[0]
    got = _git(*flags, "ls-remote", "--get-url", "git@github.com:PrimeIntellect-ai/verifiers.git", cwd=tmp_path)
    assert got.stdout.strip() == "https://github.com/PrimeIntellect-ai/verifiers.git", got.stderr
    # ... and `git -c` reaches the clone `submodule update` starts: the same rewrite form, to a local repository
    # standing in for github.com, fetches a submodule named by SSH, which fails without it.
    ident = ["-c", "user.email=t@t", "-c", "user.name=t", "-c", "protocol.file.allow=always"]
    hub = tmp_path / "hub" / "PrimeIntellect-ai"
    for name in ("verifiers.git", "prime-rl"):
        (hub / name).mkdir(parents=True)
        _git("init", "-q", cwd=hub / name)
        (hub / name / "README.md").write_text(name)
        _git("add", "-A", cwd=hub / name)
        _git(*ident, "commit", "-qm", name, cwd=hub / name)
    prime_rl = hub / "prime-rl"
    added = _git(*ident, "submodule", "add", "-q", str(hub / "verifiers.git"), "deps/verifiers", cwd=prime_rl)
    assert added.returncode == 0, added.stderr
    _git(
        "config",
        "-f",
        ".gitmodules",
        "submodule.deps/verifiers.url",
        "git@github.com:PrimeIntellect-ai/verifiers.git",
        cwd=prime_rl,
    )
    _git(*ident, "commit", "-qam", "ssh url", cwd=prime_rl)
    clone = tmp_path / "clone"
    assert _git("clone", "-q", str(prime_rl), str(clone), cwd=tmp_path).returncode == 0
    update = ["submodule", "update", "--init", "deps/verifiers"]
    assert _git(*ident, *update, cwd=clone).returncode != 0  # SSH, no key
    local = flags[1].replace("https://github.com/", f"file://{hub.parent}/")
    done = _git(*ident, "-c", local, *update, cwd=clone)
    assert done.returncode == 0, done.stderr
    assert (clone / "deps" / "verifiers" / "README.md").read_text() == "verifiers.git"
