"""PRIME-RL on this CPU without PRIME-RL installed: the import stand-ins for its CUDA-only packages, and the checks on
the tree the private copy is made from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from composer_prime.local.tree import PATCH, PINNED_BLOBS, PINNED_COMMIT, TreeError, check_tree

TARGETS_DIR = Path(__file__).resolve().parents[3] / "composer_prime" / "seam"
STUB_PROBE = """
import sys
from composer_prime.local.stubs_finder import StubbedOnCPU, install
install()
from torchtitan.distributed.expert_parallel import expert_parallel, ExpertParallel
from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateResponse

def f():
    return 7

assert expert_parallel(f) is f
class Sub(ExpertParallel):  # subclassing a stand-in works at import
    pass
try:
    Sub()
except StubbedOnCPU as err:
    assert "torchtitan.distributed.expert_parallel.ExpertParallel" in str(err), err
else:
    raise SystemExit("a stand-in was instantiated")
r = GenerateResponse.model_validate_json('{"prompt_logprobs": [null, {"5": {"logprob": -1.5, "rank": 1}}], "x": 1}')
assert r.prompt_logprobs[1][5].logprob == -1.5
import json  # a real module is untouched
print("ok")
"""


def test_stand_ins_import_and_refuse_calls() -> None:
    done = subprocess.run([sys.executable, "-c", STUB_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_clip_grad_norm_stand_in_clips_like_torch() -> None:
    torch = pytest.importorskip("torch")
    from composer_prime.local.stubs_finder import _clip_grad_norm_

    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(1))
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    total = _clip_grad_norm_(iter([a, b]), max_norm=1.0)
    assert total.item() == pytest.approx(5.0)  # sqrt(3^2 + 4^2)
    assert a.grad.tolist() == pytest.approx([0.6, 0.0], abs=1e-5)  # scaled by 1/5 (plus torch's 1e-6 guard)
    assert b.grad.tolist() == pytest.approx([0.8], abs=1e-5)


def _tree(root: Path, verifiers: bool = True) -> Path:
    (root / "src" / "prime_rl" / "entrypoints").mkdir(parents=True)
    (root / "src" / "prime_rl" / "entrypoints" / "rl.py").write_text("")
    if verifiers:
        (root / "deps" / "verifiers").mkdir(parents=True)
        (root / "deps" / "verifiers" / "pyproject.toml").write_text("")
    return root


def test_tree_checks_name_the_fix(tmp_path: Path) -> None:
    with pytest.raises(TreeError, match="not a PRIME-RL source tree"):
        check_tree(tmp_path)
    with pytest.raises(TreeError, match="submodule update --init deps/verifiers"):
        check_tree(_tree(tmp_path / "a", verifiers=False))
    other = _tree(tmp_path / "b")
    git = ["git", "-C", str(other), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    with pytest.raises(TreeError, match=f"checkout {PINNED_COMMIT}"):
        check_tree(other)
    with pytest.raises(TreeError, match="no git metadata, so its commit is checked by content: .* is missing"):
        check_tree(_tree(tmp_path / "c"))  # a source tree without git metadata: checked by content


def test_a_tree_without_git_is_checked_by_content_and_the_differing_file_named(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "t")
    first = sorted(PINNED_BLOBS)[0]
    (tree / first).parent.mkdir(parents=True, exist_ok=True)
    (tree / first).write_text("class TrainerConfig: ...\n")  # present, but not 559b447's
    with pytest.raises(TreeError) as err:
        check_tree(tree)
    assert f"{first} differs from PRIME-RL {PINNED_COMMIT}'s" in str(err.value)
    assert f"checkout {PINNED_COMMIT}" in str(err.value)  # the fix


def _module_file(module: str) -> str:
    """Where PRIME-RL 559b447 keeps `module` (the configs live in their own package)."""
    rel = module.replace(".", "/")
    root = "packages/prime-rl-configs/src/" if module.startswith("prime_rl.configs.") else "src/"
    return root + (f"{rel}/__init__.py" if module == "prime_rl.orchestrator.algo" else f"{rel}.py")


def test_the_pinned_blobs_cover_every_file_the_patch_and_the_seam_depend_on() -> None:
    import re

    from composer_prime.seam.hook import TARGETS

    pre_images = dict(re.findall(r"^diff --git a/(\S+) .*\nindex ([0-9a-f]+)\.\.", PATCH.read_text(), re.M))
    changed = {rel: blob for rel, blob in pre_images.items() if set(blob) != {"0"}}  # not the files it adds
    assert changed and all(PINNED_BLOBS[rel].startswith(blob) for rel, blob in changed.items())
    seam = {_module_file(module) for module in TARGETS}
    seam_source = "".join(p.read_text() for p in Path(TARGETS_DIR).glob("*.py"))
    seam |= {_module_file(m) for m in re.findall(r"from (prime_rl\.[\w.]+) import", seam_source)}
    assert set(PINNED_BLOBS) == set(changed) | seam


def test_the_venv_key_follows_what_is_installed_not_the_tool_settings(tmp_path: Path) -> None:
    from composer_prime.local.venvs import requirement_sets, venv_key

    root = Path(__file__).resolve().parents[3]
    project = tmp_path / "composer-prime"
    project.mkdir()
    pyproject = project / "pyproject.toml"
    pyproject.write_text((root / "pyproject.toml").read_text())
    steps = requirement_sets(project, tmp_path / "prime-rl")["vllm"]
    key = venv_key(steps, "")
    pyproject.write_text(pyproject.read_text().replace('testpaths = ["tests', 'testpaths = ["other", "tests'))
    assert venv_key(steps, "") == key  # a pytest setting: no rebuild
    pyproject.write_text(pyproject.read_text().replace('"pydantic>=2.7"', '"pydantic>=2.8"'))
    assert venv_key(steps, "") != key  # a dependency: a new venv
    assert venv_key(steps, "https://download.pytorch.org/whl/cpu") != venv_key(steps, "")
