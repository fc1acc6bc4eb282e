"""`composer-prime mine-corpus` on a base image that already ships a copy of the mined package, as pip's `_vendor`
ships six: every mined task whose gold code is in that copy is dropped before validation, the reason naming the
file. The base is COMPOSER_PRIME_IMAGE plus `COPY` of the `shop` package's modules to
`/usr/lib/python3/dist-packages/pip/_vendor/shopcopy/` (not importable as `shop`, so the image check passes).
`.ci/image` builds COMPOSER_PRIME_IMAGE and runs these; without podman and COMPOSER_PRIME_IMAGE they skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from composer_prime.corpus.image_copies import MIN_MATCHED, gold_lines
from composer_prime.mining.record import load_rows
from tests.support.corpus_sdist import write_shop_sdist
from tests.support.featdel_repo import FILES

IMAGE = os.environ.get("COMPOSER_PRIME_IMAGE", "")
REPO = Path(__file__).resolve().parents[3]
CLI = "import sys; from composer_prime.cli import main; sys.exit(main(sys.argv[1:]))"
COPY_DIR = "/usr/lib/python3/dist-packages/pip/_vendor/shopcopy"
BASE = "localhost/composer-prime-corpus-test/base-with-shop-copy:ci"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not IMAGE or shutil.which("podman") is None,
        reason="mine-corpus builds images with podman on COMPOSER_PRIME_IMAGE, a local base image built by .ci/image "
        "(which runs these)",
    ),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("corpus-copies")
    context = root / "context"
    for path, text in FILES.items():
        if path.startswith("shop/"):
            (context / "shopcopy" / Path(path).name).parent.mkdir(parents=True, exist_ok=True)
            (context / "shopcopy" / Path(path).name).write_text(text)
    (context / "Containerfile").write_text(f"FROM {IMAGE}\nCOPY shopcopy {COPY_DIR}\n")
    subprocess.run(["podman", "build", "-q", "-t", BASE, str(context)], check=True, capture_output=True, timeout=600)
    write_shop_sdist(root / "links")
    toml = root / "corpus.toml"
    toml.write_text(
        f'packages = ["shop==0.1.0"]\nfind_links = ["{root / "links"}"]\nout = "{root / "out"}"\n'
        f'base_image = "{BASE}"\nimage_prefix = "localhost/composer-prime-corpus-test"\ndataset = false\n'
        "[miner]\nmax_tasks = 3\nmin_body_lines = 0\ntest_timeout_s = 60\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run(
        [sys.executable, "-c", CLI, "mine-corpus", "@", str(toml)],
        capture_output=True,
        text=True,
        timeout=1500,
        env=env,
        cwd=REPO,
        check=False,
    )
    folder = root / "out" / "packages" / "shop-0.1.0"
    yield folder, done
    package = folder / "package.json"
    images = [json.loads(package.read_text())["image"]] if package.exists() else []
    subprocess.run(["podman", "rmi", "-f", *images, BASE], capture_output=True, timeout=300, check=False)


def test_every_task_whose_gold_code_the_base_ships_is_dropped_naming_the_file(corpus):  # type: ignore[no-untyped-def]
    folder, done = corpus
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((folder / "package.json").read_text())["report"]
    assert report["error"] is None and report["mined"] >= 2, report
    mined, _ = load_rows(folder / "mined.jsonl")
    judged = [row for row in mined if len(gold_lines(row.gold_patch)) >= MIN_MATCHED]
    assert len(judged) >= 2, [row.task_id for row in mined]
    for row in judged:
        reason = report["dropped"].get(row.task_id, "")
        assert reason.startswith(f"gold code in the image: {COPY_DIR}/"), (row.task_id, reason)
    kept, _ = load_rows(folder / "tasks.jsonl")
    assert not {row.task_id for row in kept} & {row.task_id for row in judged}
    log = (folder / "mine.log").read_text()
    assert "image copies: " in log and " found" in log
