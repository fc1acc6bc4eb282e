"""`composer-prime mine-corpus` for real: a tiny package's sdist, served from a find-links folder, and the same package
as a git repository at a tag, mined side by side (`jobs = 2`) into a corpus with podman: each image built from the
base image named by COMPOSER_PRIME_IMAGE (wheels fetched on this machine), the baseline and the miner's runs inside a
box from it, every kept task validated in fresh boxes (gold 1.0, untouched 0.0), and the image holding no copy of the
package's code. `.ci/image` builds the base image and runs these; without podman and COMPOSER_PRIME_IMAGE they skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from composer_prime.mining.record import load_rows
from composer_prime.mining.snapshot import leaked_files
from tests.support.corpus_sdist import LICENSE, write_shop_sdist
from tests.support.featdel_repo import build_shop_repo, git

IMAGE = os.environ.get("COMPOSER_PRIME_IMAGE", "")
REPO = Path(__file__).resolve().parents[3]
CLI = "import sys; from composer_prime.cli import main; sys.exit(main(sys.argv[1:]))"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not IMAGE or shutil.which("podman") is None,
        reason="mine-corpus builds images with podman on COMPOSER_PRIME_IMAGE, a local base image built by .ci/image "
        "(which runs these)",
    ),
]
BOX_ONLY = "tests/test_box.py::test_runs_in_a_podman_box"
BOX_TEST = """\
import os


def test_runs_in_a_podman_box():
    assert os.path.exists("/run/.containerenv")  # podman's marker: the host never runs a mined package's tests
"""


def mine_corpus(toml: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run(
        [sys.executable, "-c", CLI, "mine-corpus", "@", str(toml)],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        cwd=REPO,
        check=False,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("corpus")
    write_shop_sdist(root / "links", extra={"tests/test_box.py": BOX_TEST})
    repo = build_shop_repo(root)  # the same package as a team's git repository, mined at a tag beside the sdist
    git(repo, "tag", "v1")
    toml = root / "corpus.toml"
    toml.write_text(
        f'packages = ["shop==0.1.0"]\nfind_links = ["{root / "links"}"]\nout = "{root / "out"}"\n'
        f'base_image = "{IMAGE}"\nimage_prefix = "localhost/composer-prime-corpus-test"\njobs = 2\n'
        '[package_requires]\nshop = ["six"]\n'  # a test dependency the metadata does not declare
        f'[[repos]]\nurl = "{repo}"\nref = "v1"\n'
        "[miner]\nmax_tasks = 2\nmin_body_lines = 0\ntest_timeout_s = 60\n"
    )
    done = mine_corpus(toml)
    folder = root / "out" / "packages" / "shop-0.1.0"
    yield toml, folder, done
    for package in (root / "out" / "packages").glob("*/package.json"):
        subprocess.run(
            ["podman", "rmi", "-f", json.loads(package.read_text())["image"]],
            capture_output=True,
            timeout=300,
            check=False,
        )


def test_a_package_is_mined_into_the_corpus_layout(corpus):  # type: ignore[no-untyped-def]
    _, folder, done = corpus
    assert done.returncode == 0, done.stderr[-3000:]
    package = json.loads((folder / "package.json").read_text())
    assert package["name"] == "shop" and package["version"] == "0.1.0" and package["source"] == "pypi"
    assert package["license"] == LICENSE
    assert package["image"].startswith("localhost/composer-prime-corpus-test/shop:0.1.0-")
    report = package["report"]
    assert report["error"] is None and report["kept"] == report["mined"] == 2, report
    assert report["pins"]["pytest"] and report["pins"]["six"] and "shop" not in report["pins"]
    assert package["image_bytes"] > 10_000_000 and report["candidates"] >= 2 and report["seconds"]["total"] > 0
    rows, errors = load_rows(folder / "tasks.jsonl")
    assert not errors and len(rows) == 2
    for row in rows:
        assert row.image == package["image"]
        assert (folder / row.base).is_file()  # the repository state beside the tasks file
        assert BOX_ONLY in row.pass_to_pass  # the baseline and the miner's runs happened in a box from the image
    assert "shop 0.1.0: 2 task(s) kept" in done.stderr and "corpus" in done.stderr


def test_a_git_repository_at_a_ref_is_mined_beside_the_sdist(corpus):  # type: ignore[no-untyped-def]
    _, folder, done = corpus
    git_folder = folder.parent / "shop-repo-v1"
    package = json.loads((git_folder / "package.json").read_text())
    assert package["source"].endswith("shop-repo@v1") and package["version"] == "v1"
    assert package["report"]["error"] is None and package["report"]["kept"] == 2, package["report"]
    rows, errors = load_rows(git_folder / "tasks.jsonl")
    assert not errors and {row.repo for row in rows} == {"shop-repo-v1"}
    assert all(row.image == package["image"] and (git_folder / row.base).is_file() for row in rows)
    assert "shop-repo v1: 2 task(s) kept" in done.stderr


def test_the_dataset_is_rebuilt_after_each_package(corpus):  # type: ignore[no-untyped-def]
    """The two packages hold the same code, so the build keeps one copy of each gold patch (its dedupe)."""
    _, folder, done = corpus
    assert "dataset: 2 task(s) of 2 package(s)" in done.stderr, done.stderr[-2000:]
    card = (folder.parent.parent / "README.md").read_text()
    assert "shop" in card and "shop-repo" in card


def test_every_kept_task_was_validated_in_fresh_boxes(corpus):  # type: ignore[no-untyped-def]
    _, folder, _ = corpus
    verdicts = [json.loads(line) for line in (folder / "validated.jsonl").read_text().splitlines()]
    rows, _ = load_rows(folder / "tasks.jsonl")
    assert {v["task_id"] for v in verdicts if v["kept"]} == {row.task_id for row in rows}
    assert all(v["reason"] is None and v["seconds"] > 0 for v in verdicts)


def test_the_image_holds_no_copy_of_a_tasks_gold_code(corpus, tmp_path):  # type: ignore[no-untyped-def]
    _, folder, _ = corpus
    image = json.loads((folder / "package.json").read_text())["image"]
    rows, _ = load_rows(folder / "tasks.jsonl")
    golds = {
        row.task_id: "\n".join(
            line[1:] for line in row.gold_patch.splitlines() if line.startswith("+") and not line.startswith("+++")
        )
        for row in rows
    }
    container = subprocess.run(
        ["podman", "create", image, "true"], capture_output=True, text=True, timeout=120, check=True
    )
    cid = container.stdout.strip()
    try:
        rootfs = tmp_path / "rootfs.tar"
        subprocess.run(["podman", "export", "-o", str(rootfs), cid], check=True, timeout=600)
    finally:
        subprocess.run(["podman", "rm", "-f", cid], capture_output=True, timeout=120, check=False)
    names, suspects = [], {}
    with tarfile.open(rootfs) as tar:
        for member in tar:
            names.append(member.name)
            if member.isfile() and member.size < 5_000_000:
                data = tar.extractfile(member).read()  # type: ignore[union-attr]
                if b"Cart" in data or b"apply_discount" in data:
                    suspects[member.name] = data
    assert len(names) > 1000  # a whole root filesystem was searched
    for task_id, gold in golds.items():
        assert gold.strip()
        assert leaked_files(suspects, gold) == [], f"{task_id}'s gold code is in the image"
    assert not [n for n in names if "shop" in Path(n).parts or Path(n).name.startswith("shop-")], "an installed copy"


def test_a_rerun_skips_the_complete_package(corpus):  # type: ignore[no-untyped-def]
    toml, folder, _ = corpus
    before = (folder / "package.json").read_bytes()
    again = mine_corpus(toml)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2 package(s), 2 already complete" in again.stderr
    assert (folder / "package.json").read_bytes() == before


def test_a_mining_box_outlives_a_killed_worker_by_its_heartbeat_lapse_only(tmp_path):
    """A worker killed with SIGKILL runs no cleanup: its mining box (a container with the package's scratch folder
    mounted) stops itself once the worker's heartbeat lapses, and `--rm` removes it."""
    import signal
    import time

    script = (
        "import sys, time; from pathlib import Path; import composer_prime.mining.box as box\n"
        "box.HEARTBEAT_LAPSE_S, box.HEARTBEAT_S = 6, 1.0\n"
        "with box.mining_box('podman', sys.argv[1], Path(sys.argv[2])) as name:\n"
        "    print(name, flush=True); time.sleep(600)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", script, IMAGE, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        name = worker.stdout.readline().strip()  # type: ignore[union-attr]
        assert name.startswith("composer-prime-mine-")

        def running() -> bool:
            ps = subprocess.run(
                ["podman", "ps", "-q", "--filter", f"name=^{name}$"],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            return bool(ps.stdout.strip())

        time.sleep(10)  # past the lapse: the heartbeat keeps a live worker's box up
        assert running()
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        deadline = time.monotonic() + 60
        while running() and time.monotonic() < deadline:
            time.sleep(2)
        assert not running(), f"{name} still runs a minute after its worker was killed"
    finally:
        if worker.poll() is None:
            worker.kill()


def test_killing_the_run_mid_mining_stops_its_worker_box_and_scratch(tmp_path):
    """`mine-corpus` SIGKILLed mid-mining (a closed terminal, a preempted job): the kernel sends its worker SIGTERM
    (PR_SET_PDEATHSIG), and the worker unwinds: its mining box stopped, its scratch folder removed, the package not
    recorded as complete. (An orphaned worker also stops at its next progress event, on the broken pipe; the signal
    stops it in the phases without one: the image build, the baseline, a validation.)"""
    import signal
    import time

    write_shop_sdist(tmp_path / "links", extra={"tests/test_box.py": BOX_TEST})
    temp = tmp_path / "tmp"
    temp.mkdir()
    toml = tmp_path / "corpus.toml"
    toml.write_text(
        f'packages = ["shop==0.1.0"]\nfind_links = ["{tmp_path / "links"}"]\nout = "{tmp_path / "out"}"\n'
        f'base_image = "{IMAGE}"\nimage_prefix = "localhost/composer-prime-corpus-kill"\n'
        '[package_requires]\nshop = ["six"]\n[miner]\nmin_body_lines = 0\ntest_timeout_s = 60\n'
    )
    env = {
        **os.environ,
        "TMPDIR": str(temp),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    }
    run = subprocess.Popen(
        [sys.executable, "-c", CLI, "mine-corpus", "@", str(toml)],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    log = tmp_path / "out" / "packages" / "shop-0.1.0" / "mine.log"

    def workers() -> list[int]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"composer_prime.corpus.package" in argv and any(str(temp).encode() in arg for arg in argv):
                found.append(int(proc.name))
        return found

    def boxes() -> list[str]:
        ps = subprocess.run(
            ["podman", "ps", "--format", "{{.Names}} {{.Mounts}}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return [line for line in ps.stdout.splitlines() if str(temp) in line]

    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (log.is_file() and "candidates:" in log.read_text()):
            assert run.poll() is None, "mine-corpus ended before mining began"
            time.sleep(1)
        assert log.is_file() and "candidates:" in log.read_text(), "mining never began"
        assert workers() and boxes()
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + 90
        while (workers() or boxes()) and time.monotonic() < deadline:
            time.sleep(2)
        assert not workers(), "the worker outlived its run"
        assert not boxes(), "the mining box outlived its worker"
        scratch = [
            p.name
            for p in temp.iterdir()
            if p.name.startswith("composer-prime-corpus-") and not p.name.startswith("composer-prime-corpus-jobs-")
        ]
        assert not scratch, scratch  # (the killed run's own job-spec folder stays: SIGKILL runs no cleanup)
        assert not (log.parent / "package.json").exists()
    finally:
        if run.poll() is None:
            run.kill()
        for pid in workers():
            os.kill(pid, signal.SIGKILL)
        images = subprocess.run(
            ["podman", "images", "-q", "--filter", "reference=localhost/composer-prime-corpus-kill/*"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout.split()
        if images:
            subprocess.run(["podman", "rmi", "-f", *images], capture_output=True, timeout=300, check=False)
