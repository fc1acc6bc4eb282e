"""PRIME-RL's own filesystem-broadcast worker extension for vLLM, loaded from the source tree `PRIME_RL_SRC` names:
`inference/vllm/worker/filesystem.py` (`FileSystemWeightUpdateWorker.update_weights_from_path`) and the reload it
calls, `weight_transfer.load_weights_checkpoint_layerwise`, are PRIME-RL's files as they are. Only the package's
`__init__` is skipped: it installs PRIME-RL's LoRA and fp32-head patches of vLLM, whose fp32-head patch does not fit
vLLM 0.32's `_get_logits` (docs/smoke.md), and neither touches the reload. Pass
`--worker-extension-cls tests.support.prime_rl_worker.FileSystemWeightUpdateWorker` with the repository root on
`PYTHONPATH`."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PACKAGE = "prime_rl.inference.vllm.worker"


def _load(name: str) -> object:
    path = Path(os.environ["PRIME_RL_SRC"]) / "src" / Path(*PACKAGE.split(".")) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{PACKAGE}.{name}", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # filesystem.py imports weight_transfer by this name
    spec.loader.exec_module(module)
    return module


_load("weight_transfer")
FileSystemWeightUpdateWorker = _load("filesystem").FileSystemWeightUpdateWorker  # type: ignore[attr-defined]
