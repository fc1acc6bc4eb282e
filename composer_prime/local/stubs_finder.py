"""Stand-ins, at import only, for the packages PRIME-RL 559b447 imports unconditionally that no CPU wheel provides.

PRIME-RL imports `torchtitan` (expert parallelism, MoE kernels and the gradient-norm clip), `ring_flash_attn`
(context parallelism), `dion` (the Muon optimizer) and, outside its inference server, `vllm` (the NCCL weight
transport and one response model of the hint-scoring client) at module level, though a dense model trained on one CPU
rank with AdamW, filesystem broadcast and no context parallelism never calls them. `install()` puts a finder on
`sys.meta_path` that answers any import under those roots, when the real package is absent, with a module whose every
attribute is a placeholder class: importing, subclassing and annotating work; calling or instantiating one raises
`StubbedOnCPU` naming what was reached and why it is absent. Some names are real because the CPU path calls them:

- `torchtitan.distributed.utils.clip_grad_norm_`: the trainer clips every step (torchtitan's own algorithm: the total
  norm over DTensor gradients made whole, then `clip_grads_with_norm_`);
- `torchtitan.distributed.expert_parallel.expert_parallel`: a decorator PRIME-RL's MoE layers apply at import time
  (the identity: the layers it wraps run only in MoE models);
- `vllm.entrypoints.scale_out.token_in_token_out.protocol.GenerateResponse` and its `Logprob`: PRIME-RL's
  `prefill_logprobs` validates the server's `/inference/v1/generate` answer with it (a placeholder there would make
  every hint score fail, counted as `hint/skipped/score_failed`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

ROOTS = {
    "torchtitan": "torchtitan (expert parallelism and MoE kernels; GPU only, not on PyPI at PRIME-RL's pinned rev)",
    "ring_flash_attn": "ring-flash-attn (context parallelism; needs flash-attn's CUDA kernels)",
    "dion": "dion (the Muon optimizer; not on PyPI): use AdamW",
    "vllm": "vllm (runs in the inference server's own venv; this venv's processes only import it)",
}


class StubbedOnCPU(RuntimeError):
    """A stand-in of a CUDA-only dependency was called: the run reached a path the CPU smoke does not support."""


def _placeholder(module: str, name: str) -> type:
    why = ROOTS[module.split(".")[0]]

    class _Meta(type):
        def __call__(cls, *args: Any, **kwargs: Any) -> Any:
            raise StubbedOnCPU(f"{module}.{name} was called, but {why} is only stubbed in the CPU smoke's venv")

        def __getattr__(cls, attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _placeholder(module, f"{name}.{attr}")

    return _Meta(name.rsplit(".", 1)[-1], (), {"__module__": module})


class _StubModule(ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(self.__name__, name)
        setattr(self, name, value)
        return value


def _clip_grad_norm_(
    parameters: Any,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
    pp_mesh: Any = None,
    ep_enabled: bool = False,
) -> Any:
    import torch
    from torch.distributed.tensor import DTensor

    parameters = [p for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in parameters], norm_type, error_if_nonfinite, foreach)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def _generate_response(module: ModuleType) -> None:
    from pydantic import BaseModel, ConfigDict

    class Logprob(BaseModel):
        model_config = ConfigDict(extra="allow")
        logprob: float
        rank: int | None = None
        decoded_token: str | None = None

    class GenerateResponse(BaseModel):
        model_config = ConfigDict(extra="allow")
        prompt_logprobs: list[dict[int, Logprob] | None] | None = None

    module.Logprob = Logprob  # type: ignore[attr-defined]
    module.GenerateResponse = GenerateResponse  # type: ignore[attr-defined]


def _expert_parallel(module: ModuleType) -> None:
    def expert_parallel(func: Any) -> Any:
        return func  # a decorator PRIME-RL's MoE layers apply at import; dense models never call them

    module.expert_parallel = expert_parallel  # type: ignore[attr-defined]


REAL = {
    "torchtitan.distributed.utils": lambda m: setattr(m, "clip_grad_norm_", _clip_grad_norm_),
    "torchtitan.distributed.expert_parallel": _expert_parallel,
    "vllm.entrypoints.scale_out.token_in_token_out.protocol": _generate_response,
}


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return _StubModule(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        module.__path__ = []  # every stand-in is a package, so any submodule imports
        fill = REAL.get(module.__name__)
        if fill is not None:
            fill(module)


class _StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, roots: set[str]) -> None:
        self.roots = roots

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)


def install() -> None:
    """Stand in for each root whose real package is not installed (a real one always wins)."""
    if any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
        return
    missing = {root for root in ROOTS if importlib.util.find_spec(root) is None}
    if missing:
        sys.meta_path.append(_StubFinder(missing))
