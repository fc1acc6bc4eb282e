"""The smoke's CPU patch (composer_prime/local/prime_rl_cpu.patch, proposed upstream in docs/upstream.md) against
PRIME-RL 559b447's own tree: it applies to a private copy (never to the tree itself), and the patched sources behave
as the patch says where the unpatched ones do not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from composer_prime.local.tree import PATCH, patched_files, private_copy
from tests.contract.conftest import contract_pythonpath, prime_rl_src

STUBS = Path(__file__).resolve().parents[3] / "composer_prime" / "local" / "stubs"

PROBE = """
import json
from prime_rl.configs.trainer import ModelConfig
out = {}
try:
    ModelConfig(impl="hf", attn="sdpa")
    out["sdpa"] = True
except Exception as err:
    out["sdpa"] = type(err).__name__
try:
    from prime_rl.trainer.device import DEVICE
    out["device"] = DEVICE
except ImportError:
    out["device"] = None
from prime_rl.trainer import parallel_dims
out["mesh_fallback"] = parallel_dims.device_type
print(json.dumps(out))
"""


def probe(tree: Path) -> dict:
    env = {"PYTHONPATH": f"{STUBS}:{contract_pythonpath(tree)}", "CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_cpu_patch_applies_to_a_private_copy_and_changes_what_it_says(tmp_path: Path) -> None:
    src = prime_rl_src()
    assert src is not None
    before = {rel: (src / rel).read_bytes() if (src / rel).exists() else None for rel in patched_files()}
    copy = private_copy(src, tmp_path / "cache")
    assert copy != src and copy.is_relative_to(tmp_path)
    assert {rel: (src / rel).read_bytes() if (src / rel).exists() else None for rel in patched_files()} == before
    assert private_copy(src, tmp_path / "cache") == copy  # reused while the tree and the patch are unchanged
    patched, stock = probe(copy), probe(src)
    assert patched == {"sdpa": True, "device": "cpu", "mesh_fallback": "cpu"}
    assert stock["sdpa"] == "ValidationError" and stock["device"] is None and stock["mesh_fallback"] == "cuda"
    assert "src/prime_rl/trainer/device.py" in patched_files() and PATCH.stat().st_size < 40_000


def test_a_cache_inside_a_git_work_tree_is_patched_and_an_edited_tree_is_copied_again(tmp_path: Path) -> None:
    src = prime_rl_src()
    assert src is not None
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # e.g. --cache inside a clone
    copy = private_copy(src, tmp_path / "cache")
    assert (copy / "src" / "prime_rl" / "trainer" / "device.py").is_file()
    edited = tmp_path / "edited"
    subprocess.run(["cp", "-a", str(src), str(edited)], check=True)
    rl = edited / "src" / "prime_rl" / "entrypoints" / "rl.py"
    rl.write_text(rl.read_text() + "\n# a local fix\n")
    again = private_copy(edited, tmp_path / "cache")
    assert again != copy and "# a local fix" in (again / "src/prime_rl/entrypoints/rl.py").read_text()


def test_a_pinned_tree_without_git_passes_the_content_check_and_an_edited_one_is_named(tmp_path: Path) -> None:
    import shutil

    import pytest

    from composer_prime.local.tree import TreeError, check_tree

    src = prime_rl_src()
    assert src is not None
    tarball = tmp_path / "prime-rl"  # as a release tarball unpacks: no .git
    shutil.copytree(src, tarball, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__"), symlinks=True)
    check_tree(tarball)
    perf = tarball / "src" / "prime_rl" / "trainer" / "perf.py"
    perf.write_text(perf.read_text().replace("mfu", "mfu ", 1))
    with pytest.raises(
        TreeError, match=r"checked by content: src/prime_rl/trainer/perf.py differs from PRIME-RL 559b447"
    ):
        check_tree(tarball)
