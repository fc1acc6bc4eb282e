"""`composer-prime mine-corpus` on the CPU: its input errors, its resume, what a failed or killed package leaves, and
how it reads a package (metadata, license, requirements in the image's marker environment, a git ref). The run with
podman is tests/e2e/corpus/test_mine_corpus_podman.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from composer_prime.corpus import config as corpus_config
from composer_prime.corpus import images, sources
from composer_prime.corpus import package as corpus_package
from composer_prime.corpus.config import CorpusConfig, MinerOptions
from composer_prime.mining.config import MineConfig

REPO = Path(__file__).resolve().parents[3]
CLI = "import sys; from composer_prime.cli import main; sys.exit(main(sys.argv[1:]))"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
NO_ENGINE = {**ENV, "PATH": os.path.dirname(sys.executable)}
"""A PATH with this interpreter and no container CLI."""
BASE = images.Base(
    image="localhost/none:1",
    python="python",
    version="3.11",
    impl="cpython",
    abi="cp311",
    glibc="2.36",
    machine="x86_64",
    missing=(),
    apt=True,
    markers={
        "python_version": "3.11",
        "python_full_version": "3.11.2",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
        "implementation_name": "cpython",
        "implementation_version": "3.11.2",
        "platform_release": "",
        "platform_version": "",
        "platform_python_implementation": "CPython",
    },
)


def mine_corpus(*args: str, env: dict[str, str] = ENV) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLI, "mine-corpus", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
        check=False,
    )


def test_help_lists_the_corpus_and_the_miners_options():
    done = mine_corpus("--help")
    assert done.returncode == 0, done.stderr
    for flag in (
        "--packages",
        "--repos",
        "--runtime",
        "--base-image",
        "--index-url",
        "--jobs",
        "--miner.max-tasks",
        "--miner.min-replayed-calls",
    ):
        assert flag in done.stdout, flag


def test_the_miners_options_follow_mine_config():
    assert set(MinerOptions.model_fields) == set(MineConfig.model_fields) - {"repo", "out", "test_cmd", "host_copies"}
    assert all(field.description for field in MinerOptions.model_fields.values())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--packages", "toolz", "--out", "{tmp}/out"], "'toolz' is not NAME==VERSION"),
        (["--out", "{tmp}/out"], "nothing to mine"),
        (["--packages", "toolz==1.2.0", "Toolz==1.2.0", "--out", "{tmp}/out"], "toolz==1.2.0 is listed twice"),
        (["--packages", "toolz==1.2.0", "--out", "{tmp}/file"], "--out {tmp}/file: a file, not a folder"),
        (
            ["--packages", "toolz==1.2.0", "--out", "{tmp}/out", "--find-links", "{tmp}/nowhere"],
            "--find-links {tmp}/nowhere: no such folder",
        ),
        (["--packages", "toolz==1.2.0", "--out", "{tmp}/out", "--jobs", "0"], "jobs"),
        (["--packages", "toolz==1.2.0", "--out", "{tmp}/out", "--miner.max-tasks", "0"], "--miner.max-tasks"),
        (["--packages", "toolz==1.2.0", "--out", "{tmp}/out", "--runtime", "lxc"], "runtime"),
        (
            ["--packages", "toolz==1.2.0", "--out", "{tmp}/out", "--package-requires", '{{"boltons": ["pytest<9"]}}'],
            "package_requires names ['boltons'], which packages does not list",
        ),
        (["--packages", "toolz==1.2.0", "--out", "{tmp}/out"], "--runtime podman: `podman` is not on PATH"),
        (
            ["--packages", "a-b==1.0", "a==b-1.0", "--out", "{tmp}/out"],
            "a-b==1.0 and a==b-1.0 both map to packages/a-b-1.0",
        ),
        (
            [
                "--repos",
                '[{{"url": "https://git.example/org1/utils.git", "ref": "v1"}}, '
                '{{"url": "https://git.example/org2/utils.git", "ref": "v1"}}]',
                "--out",
                "{tmp}/out",
            ],
            "https://git.example/org1/utils.git@v1 and https://git.example/org2/utils.git@v1 both map to packages/utils-v1",
        ),
        (
            ["--repos", '[{{"url": "https://git.example/org2/utils.git", "ref": "v1"}}]', "--out", "{tmp}/mined"],
            "was mined from 'https://git.example/org1/utils.git@v1', not 'https://git.example/org2/utils.git@v1'",
        ),
    ],
)
def test_bad_input_exits_2_naming_the_option(tmp_path, args, expected):
    (tmp_path / "file").write_text("")
    done_before = tmp_path / "mined" / "packages" / "utils-v1"
    done_before.mkdir(parents=True)
    (done_before / "package.json").write_text(json.dumps({"source": "https://git.example/org1/utils.git@v1"}))
    done = mine_corpus(*[a.format(tmp=tmp_path) for a in args], env=NO_ENGINE)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert expected.format(tmp=tmp_path) in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) < 25


def write_package(folder: Path, error: str | None = None) -> None:
    folder.mkdir(parents=True)
    (folder / "tasks.jsonl").write_text("")
    record = {
        "name": "shop",
        "version": "0.1.0",
        "source": "pypi",
        "license": "MIT",
        "image": None,
        "image_bytes": None,
        "report": {"error": error, "mined": 0, "kept": 0, "seconds": {"total": 1.0}},
    }
    (folder / corpus_config.PACKAGE_FILE).write_text(json.dumps(record))


def test_a_complete_package_is_skipped_and_a_failed_one_retried_on_request(tmp_path):
    out = tmp_path / "out"
    write_package(out / "packages" / "shop-0.1.0")
    done = mine_corpus("--packages", "shop==0.1.0", "--out", str(out), env=NO_ENGINE)  # no podman needed: no work
    assert done.returncode == 0, done.stderr
    assert "1 package(s), 1 already complete" in done.stderr and "shop 0.1.0" in done.stderr

    (out / "packages" / "shop-0.1.0" / corpus_config.PACKAGE_FILE).unlink()
    (out / "packages" / "shop-0.1.0").rename(tmp_path / "gone")
    write_package(out / "packages" / "shop-0.1.0", error="mining: no test passes at baseline")
    assert mine_corpus("--packages", "shop==0.1.0", "--out", str(out), env=NO_ENGINE).returncode == 0
    retried = mine_corpus("--packages", "shop==0.1.0", "--out", str(out), "--retry-failed", "true", env=NO_ENGINE)
    assert retried.returncode == 2 and "0 already complete" in retried.stderr  # it went on to the runtime check
    assert "`podman` is not on PATH" in retried.stderr


@pytest.mark.parametrize("broken", [{"report": None}, {"report": {"seconds": None}}, "no report"])
def test_a_package_json_with_bad_fields_is_a_row_naming_it_not_a_traceback(tmp_path, broken):
    out = tmp_path / "out"
    write_package(out / "packages" / "shop-0.1.0")
    path = out / "packages" / "shop-0.1.0" / corpus_config.PACKAGE_FILE
    record = json.loads(path.read_text())
    if broken == "no report":
        del record["report"]
    else:
        record.update(broken)
    path.write_text(json.dumps(record))
    done = mine_corpus("--packages", "shop==0.1.0", "--out", str(out), env=NO_ENGINE)
    assert "Traceback" not in done.stderr and done.returncode == 0, done.stderr
    assert ("unreadable" in done.stderr) == (broken != {"report": {"seconds": None}})  # null seconds: a row of "0.0"


def worker(tmp_path: Path, config: CorpusConfig) -> tuple[subprocess.Popen, Path]:
    (job,) = corpus_config.planned(config)
    spec = tmp_path / "job.json"
    spec.write_text(
        json.dumps({"config": config.model_dump(mode="json"), "job": job, "base": {**BASE.__dict__, "missing": []}})
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "composer_prime.corpus.package", str(spec)],
        env=ENV,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return proc, Path(job["folder"])


def test_a_package_that_cannot_be_fetched_is_complete_with_its_error(tmp_path):
    (tmp_path / "index").mkdir()
    config = CorpusConfig(packages=["nosuchpkg==1.0"], out=tmp_path / "out", index_url=(tmp_path / "index").as_uri())
    proc, folder = worker(tmp_path, config)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    package = json.loads((folder / corpus_config.PACKAGE_FILE).read_text())
    assert "nosuchpkg==1.0" in package["report"]["error"] and package["report"]["kept"] == 0
    assert (folder / corpus_package.TASKS_FILE).read_text() == ""  # the layout holds for a failed package too
    assert json.loads(stdout.splitlines()[-1])["finished"] is True


def test_a_worker_killed_mid_package_leaves_nothing_that_looks_complete(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    accepting = threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True)
    accepting.start()  # an index that accepts and never answers: the fetch hangs until the kill
    port = server.getsockname()[1]
    config = CorpusConfig(packages=["shop==0.1.0"], out=tmp_path / "out", index_url=f"http://127.0.0.1:{port}/simple")
    proc, folder = worker(tmp_path, config)
    try:
        deadline = time.monotonic() + 60
        while (
            not (folder / corpus_package.LOG_FILE).exists()
            or "fetch:" not in (folder / corpus_package.LOG_FILE).read_text()
        ):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
            time.sleep(0.1)
        accepting.join(timeout=30)
        assert held, "the fetch never reached the index"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        for conn in held:
            conn.close()
        server.close()
    assert not (folder / corpus_config.PACKAGE_FILE).exists() and not (folder / corpus_package.TASKS_FILE).exists()


def test_planned_folders_name_the_package_and_version(tmp_path):
    config = CorpusConfig(
        packages=["toolz==1.2.0"],
        out=tmp_path,
        repos=[{"url": "https://example.com/team/product.git", "ref": "release/2.0"}],
    )
    pypi, git = corpus_config.planned(config)
    assert Path(pypi["folder"]) == tmp_path / "packages" / "toolz-1.2.0" and pypi["source"] == "pypi"
    assert Path(git["folder"]) == tmp_path / "packages" / "product-release_2.0"
    assert git["source"] == "https://example.com/team/product.git@release/2.0"


PKG_INFO = """\
Metadata-Version: 2.1
Name: demo
Version: 2.0
License: BSD
Classifier: License :: OSI Approved :: MIT License
Provides-Extra: test
Provides-Extra: docs
Requires-Dist: attrs>=22
Requires-Dist: tomli; python_version < "3.11"
Requires-Dist: hypothesis; extra == "test"
Requires-Dist: sphinx; extra == "docs"
Requires-Dist: demo[docs]; extra == "testing"
"""


def test_metadata_reads_the_license_and_the_test_requirements(tmp_path):
    (tmp_path / "PKG-INFO").write_text(PKG_INFO)
    (tmp_path / "requirements-test.txt").write_text("pytest-mock>=3  # mocks\n-r base.txt\n")
    meta = sources.read_metadata(tmp_path, "x", "0")
    assert (meta.name, meta.version, meta.license) == ("demo", "2.0", ["BSD", "License :: OSI Approved :: MIT License"])
    assert meta.requires == ["attrs>=22", 'tomli; python_version < "3.11"']
    assert meta.test_requires == ["hypothesis", "demo[docs]", "pytest-mock>=3"]
    wanted, notes = images.select(meta.requires + meta.test_requires, BASE, "demo")
    assert wanted == ["attrs>=22", "hypothesis", "pytest-mock>=3", "pytest"] and notes == []  # tomli: 3.11 has it


def test_license_precedence():
    """The expression wins; else the whole License field and the classifiers are both kept (never a first line or a
    cut: a Commons Clause after an MIT line must reach `licenses.classify`)."""
    mit = "License :: OSI Approved :: MIT License"
    classifiers = [mit, "Programming Language :: Python"]
    assert sources.license_of("Apache-2.0", "BSD", classifiers) == "Apache-2.0"
    assert sources.license_of(None, "BSD", classifiers) == ["BSD", mit]
    assert sources.license_of(None, "BSD", []) == "BSD"
    assert sources.license_of(None, "UNKNOWN", classifiers) == [mit]
    clause = "MIT License\n\nCommons Clause: you may not sell or redistribute the Software"
    assert sources.license_of(None, clause, classifiers) == [clause, mit]
    assert sources.license_of(None, "x" * 500, []) == "x" * 500
    assert sources.license_of(None, None, []) is None


def test_egg_info_requires_and_pyproject_groups(tmp_path):
    (tmp_path / "PKG-INFO").write_text("Metadata-Version: 1.2\nName: old\nVersion: 1.0\nLicense: UNKNOWN\n")
    (tmp_path / "old.egg-info").mkdir()
    (tmp_path / "old.egg-info" / "requires.txt").write_text(
        "six\n\n[test]\nmock\n\n[:sys_platform == 'win32']\ncolorama\n"
    )
    (tmp_path / "pyproject.toml").write_text(
        '[dependency-groups]\ntests = ["coverage", {include-group = "extra"}]\n'
        'extra = ["freezegun"]\ndocs = ["sphinx"]\n'
    )
    meta = sources.read_metadata(tmp_path, "old", "1.0")
    assert meta.license is None
    assert meta.requires == ["six", "colorama; (sys_platform == 'win32')"]
    assert meta.test_requires == ["mock", "coverage", "freezegun"]
    assert images.select(meta.requires, BASE, "old")[0] == ["six", "pytest"]


def test_a_git_repository_is_fetched_at_its_ref(tmp_path):
    repo = tmp_path / "product"
    repo.mkdir()
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]

    def git(*args: str) -> None:
        subprocess.run(["git", *ident, *args], cwd=repo, check=True, capture_output=True, timeout=60)

    git("init", "-q")
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "product"\nlicense = "Proprietary"\n'
        'dependencies = ["attrs"]\n[project.optional-dependencies]\n'
        'test = ["hypothesis"]\n'
    )
    (repo / "core.py").write_text("VERSION = 1\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    git("tag", "v1")
    (repo / "core.py").write_text("VERSION = 2\n")
    git("commit", "-qam", "two")
    tree = sources.fetch_git(repo.as_uri(), "v1", tmp_path / "fetched", "product-v1")
    assert tree.name == "product-v1" and (tree / "core.py").read_text() == "VERSION = 1\n"
    meta = sources.read_metadata(tree, "product", "v1")
    assert (meta.name, meta.version, meta.license) == ("product", "v1", "Proprietary")
    assert meta.requires == ["attrs"] and meta.test_requires == ["hypothesis"]
    with pytest.raises(sources.SourceError, match="nosuchref"):
        sources.fetch_git(repo.as_uri(), "nosuchref", tmp_path / "again", "product-x")


def test_image_tags_are_stable_and_change_with_the_pins():
    one = images.image_tag("localhost/p", "Shop", "0.1.0+local", BASE, {"pytest": "9.2.0"}, "sha256:abc")
    assert one == images.image_tag("localhost/p", "Shop", "0.1.0+local", BASE, {"pytest": "9.2.0"}, "sha256:abc")
    assert one.startswith("localhost/p/shop:0.1.0-local-")
    assert one != images.image_tag("localhost/p", "Shop", "0.1.0+local", BASE, {"pytest": "9.1.0"}, "sha256:abc")


def test_the_build_names_every_pin_so_no_cached_layer_serves_other_pins():
    """The engine caches a RUN layer by its text, not by the mounted wheels: two packages whose pins differ must get
    different RUN lines (shop and toolz once shared toolz's layer)."""
    one = images.containerfile(BASE, {"pytest": "9.2.0", "coverage": "7.17.5"}, "pip-25.3-py3-none-any.whl")
    other = images.containerfile(BASE, {"pytest": "9.2.0"}, "pip-25.3-py3-none-any.whl")
    assert one.startswith(f"FROM {BASE.image}\n") and one != other
    assert "coverage==7.17.5 pytest==9.2.0" in one and "--no-index" in one and "apt-get" not in one
    slim = images.Base(**{**BASE.__dict__, "missing": ("git",)})
    assert "apt-get install -y -q --no-install-recommends git" in images.containerfile(slim, {}, "pip.whl")


def test_packages_run_in_parallel_workers_and_each_gets_its_package_json(tmp_path):
    """Two packages, two workers at once, both failing at the fetch (an empty local index): each folder is complete
    with its own error and the corpus table lists both. No container is needed before the image step."""
    from rich.console import Console

    from composer_prime.corpus import command as corpus_command

    (tmp_path / "index").mkdir()
    config = CorpusConfig(
        packages=["nosuchpkg==1.0", "otherpkg==2.0"],
        out=tmp_path / "out",
        jobs=2,
        index_url=(tmp_path / "index").as_uri(),
    )
    with (tmp_path / "console.txt").open("w") as shown:
        console = Console(file=shown, width=200)
        crashed = corpus_command._run_all(config, corpus_config.planned(config), BASE, console)
        corpus_command._summary(console, corpus_config.planned(config))
    assert crashed == []
    for name in ("nosuchpkg-1.0", "otherpkg-2.0"):
        report = json.loads((tmp_path / "out" / "packages" / name / corpus_config.PACKAGE_FILE).read_text())["report"]
        assert name.replace("-", "==") in report["error"]
    shown = (tmp_path / "console.txt").read_text()
    assert "nosuchpkg 1.0" in shown and "otherpkg 2.0" in shown and "error:" in shown
    assert "dataset: not rebuilt" in shown and not (tmp_path / "out" / "README.md").exists()  # no task to write


def test_progress_without_a_terminal_is_a_line_per_phase_and_every_ten_items():
    """In a log file rich draws no bars: the phases and every tenth candidate still show."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    from composer_prime.corpus.command import _show

    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with Progress(console=console) as progress:
        bar = progress.add_task("shop 0.1.0: queued", total=None)
        for event in [
            {"phase": "fetch"},
            {"phase": "mine", "total": 23},
            *({"done": n} for n in range(1, 24)),
            {"finished": True, "kept": 2},
        ]:
            _show(progress, bar, "shop 0.1.0", event, console)
        progress.update(bar, visible=False)  # as the run does when a package ends
    lines = [line for line in out.getvalue().splitlines() if line.strip()]
    assert lines == [
        "shop 0.1.0: fetch",
        "shop 0.1.0: mine (0/23)",
        "shop 0.1.0: mine 10/23",
        "shop 0.1.0: mine 20/23",
        "shop 0.1.0: mine 23/23",
        "shop 0.1.0: 2 task(s) kept",
    ]
