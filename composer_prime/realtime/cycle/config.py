"""Settings of `composer-prime realtime` (docs/realtime.md). Every field is also a flag; `@ file.toml` loads a file
(tomls/qwen3-32b-realtime.toml is the cluster example)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from composer_prime.local.launch import default_cache
from composer_prime.local.venvs import TORCH_CPU_INDEX
from composer_prime.realtime.cycle.cluster import PrimeRLConfig
from composer_prime.realtime.cycle.trainer import TrainerConfig
from composer_prime.realtime.ingest.spool import SpoolConfig
from composer_prime.realtime.ingest.staleness import StalenessConfig
from composer_prime.realtime.monitors.alerts import MonitorsConfig
from composer_prime.realtime.monitors.pii import PIIConfig
from composer_prime.realtime.monitors.reward import RewardModelConfig


class CadenceConfig(BaseModel):
    """How often and how much."""

    model_config = ConfigDict(extra="forbid")

    interval_min: float = Field(300.0, ge=0)
    """Minutes from the start of one cycle to the start of the next (Composer 2 ships every five hours: 300)."""
    cycles: int = Field(0, ge=0)
    """Stop after this many cycles in total (counting cycles of earlier runs of the same state dir); 0 runs forever."""
    steps: int = Field(4, ge=1)
    """Optimizer steps per cycle over the cycle's episodes."""
    min_episodes: int = Field(8, ge=1)
    """A cycle with fewer episodes does not train or ship (its episodes carry over to the next cycle)."""
    min_group: int = Field(2, ge=1)
    """A `group` with fewer sessions in the batch uses the batch mean as its baseline."""
    max_user_share: float = Field(1.0, gt=0, le=1)
    """At most this share of a batch from one user (the rest of that user's sessions are dropped, counted
    `user_capped`), so that one user's taste cannot steer a version; 1.0: no cap."""
    max_group_share: float = Field(1.0, gt=0, le=1)
    """At most this share of a batch from one `group` (a repository; counted `group_capped`); 1.0: no cap."""


class GatesConfig(BaseModel):
    """What a trained policy must pass to ship."""

    model_config = ConfigDict(extra="forbid")

    heldout_max_drop: float = Field(0.02, ge=0)
    """The held-out score may fall at most this much below the served policy's score."""


class EvalConfig(BaseModel):
    """The held-out evaluation of each trained policy (the demo has its own and ignores this)."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(default_factory=list)
    """argv of a command that scores a candidate on held-out tasks and prints `{"score": <float>}` as its last
    stdout line (e.g. a PRIME-RL eval of the Feature Deletion held-out split). `{weights}` becomes the candidate's
    bf16 step dir (the broadcast layout), `{model_dir}` the version-0 model dir (config, tokenizer), `{cycle}` the
    cycle. Empty: no held-out score; the held-out gate and the reward-vs-held-out monitor then do not apply."""
    timeout_s: float = Field(3600.0, gt=0)
    """The command is stopped after this long and the cycle fails (and resumes from its checkpoint)."""


class ShipConfig(BaseModel):
    """Where a passing policy goes."""

    model_config = ConfigDict(extra="forbid")

    admin_urls: list[str] = Field(default_factory=list)
    """Relay client proxies (or inference servers) to tell about a new version: `/pause`, `/update_weights
    {"weight_dir": ...}`, `/resume`, as PRIME-RL's orchestrator does. Empty: write the broadcast only (a relay
    origin watching `<state_dir>/broadcasts` publishes it)."""
    timeout_s: float = Field(600.0, gt=0)
    """Per request."""
    admin_token_file: Path | None = None
    """File holding the relay client proxies' admin token, sent as `Authorization: Bearer <token>` (their
    `admin_token_file`), readable by its owner only; the proxies refuse calls without it."""

    @model_validator(mode="after")
    def _token_readable(self) -> ShipConfig:
        if self.admin_token_file is not None:
            from composer_prime.relay.signing import check_owner_only

            check_owner_only(self.admin_token_file, "ship.admin_token_file")
        if self.admin_token_file is not None and not self.admin_token():
            raise ValueError(
                f"ship.admin_token_file = '{self.admin_token_file}' is missing or empty; give the file holding the "
                "relay clients' admin token"
            )
        return self

    def admin_token(self) -> str | None:
        if self.admin_token_file is None:
            return None
        try:
            return self.admin_token_file.read_text().strip() or None
        except (OSError, UnicodeDecodeError):
            return None


class DemoConfig(BaseModel):
    """The CPU demonstration: scripted users with known preferences use the served tiny policy between cycles."""

    model_config = ConfigDict(extra="forbid")

    sessions: int = Field(24, ge=1)
    """Sessions the simulated users open per cycle."""
    noise: float = Field(0.1, ge=0, le=0.5)
    """Chance that a user's signal is flipped (users are inconsistent)."""
    lagged_share: float = Field(0.15, ge=0, le=1)
    """Share of sessions served by a lagging replica, `lag` versions behind (a rolling deploy)."""
    lag: int = Field(3, ge=1)
    """How far behind the lagging replica is."""
    junk: bool = True
    """Also write a duplicate session, a malformed line, a session without logprobs and one with a secret per cycle,
    so the report shows every skip counter at work."""
    population: Literal["honest", "hack"] = "honest"
    """`honest`: alice and bob, who run hidden tests on every answer. `hack` adds carol, who keeps whatever turns her
    test run green, and warm-starts the policy on a third answer that deletes her test file's asserts: the
    `edits_disable_tests` monitor's case (docs/realtime.md)."""
    seed: int = 0
    """Seed of the policy, the warm start and the users."""
    max_tokens: int = Field(24, ge=4)
    """Most tokens per answer."""
    threads: int = Field(1, ge=1)
    """torch CPU threads (1: the tiny model runs fastest on one thread of a shared machine)."""
    prime_rl: Path | None = None
    """Train through PRIME-RL's own `rl` on this CPU instead of the single-process trainer: a PRIME-RL source tree at
    559b447 with its `deps/verifiers` (as `composer-prime smoke --prime-rl` takes). The runner patches a private copy
    and builds the smoke's two venvs under `cache` (once), launches `rl` with the realtime-sessions source over the
    demo's spool, and each cycle judges, gates and ships PRIME-RL's newest broadcast (docs/realtime.md, "The CPU
    demonstration")."""
    cache: Path = Field(default_factory=default_cache)
    """With `prime_rl`: where the patched copy and the venvs are built and reused; the smoke's `--cache`, so one
    build serves both."""
    torch_index: str = TORCH_CPU_INDEX
    """With `prime_rl`: the extra package index for the venvs' CPU torch (as the smoke's `--torch-index`; `""` on a
    machine that holds the wheel)."""


class RealtimeConfig(BaseModel):
    """One real-time RL loop."""

    model_config = ConfigDict(extra="forbid")

    state_dir: Path = Path("realtime-state")
    """Durable state: cursor and batches per cycle, checkpoints, broadcasts, reports. A restart resumes from it."""
    model_dir: Path | None = None
    """The HF model dir of the policy at version 0 (the CPU trainer trains it). With `demo` set and this unset, the
    demo builds and warm-starts a tiny policy."""
    spool: SpoolConfig = SpoolConfig()
    """The session-log spool."""
    reward: RewardModelConfig = RewardModelConfig()
    """The reward model over signals."""
    staleness: StalenessConfig = StalenessConfig()
    """Old-policy sessions."""
    pii: PIIConfig = PIIConfig()
    """Scrubbing hooks."""
    monitors: MonitorsConfig = MonitorsConfig()
    """Reward-hacking monitors."""
    cadence: CadenceConfig = CadenceConfig()
    """Cycle length and size."""
    gates: GatesConfig = GatesConfig()
    """Ship gates."""
    eval: EvalConfig = EvalConfig()
    """Held-out evaluation."""
    ship: ShipConfig = ShipConfig()
    """Where new policies go."""
    trainer: TrainerConfig = TrainerConfig()
    """The optimizer."""
    loss: dict[str, float] = Field(default_factory=dict)
    """`composer_loss` kwargs (`[trainer.loss.kwargs]`)."""
    demo: DemoConfig | None = None
    """Run the CPU demonstration (`--demo.sessions 24` or `[demo]` turns it on)."""
    prime_rl: PrimeRLConfig | None = None
    """Train through PRIME-RL on a cluster (`[prime_rl]`, tomls/qwen3-32b-realtime.toml): the runner launches it with
    the realtime-sessions source and ships its newest weights each cycle. Unset: the single-process trainer."""

    @model_validator(mode="after")
    def _check(self) -> RealtimeConfig:
        if self.prime_rl is not None and self.demo is not None:
            raise ValueError(
                "prime_rl and demo are both set: the CPU demonstration writes its own PRIME-RL config; "
                "drop [demo] to train a cluster through [prime_rl], or drop [prime_rl] and give "
                "--demo.prime-rl PATH to run the demo through PRIME-RL on this CPU"
            )
        if self.demo is not None and self.demo.prime_rl is not None:
            if not (self.demo.prime_rl / "src" / "prime_rl").is_dir():
                raise ValueError(
                    f"demo.prime_rl = {str(self.demo.prime_rl)!r} is not a PRIME-RL source tree (no "
                    "src/prime_rl); give a PRIME-RL checkout at 559b447 with deps/verifiers"
                )
        through = (
            "prime_rl" if self.prime_rl is not None else "demo.prime_rl" if self.demo and self.demo.prime_rl else None
        )
        if through and self.staleness.mode == "importance_weight":
            raise ValueError(
                f"staleness.mode = 'importance_weight' is not available with {through} (the "
                "realtime-sessions source cannot see the trainer's logprobs when it judges a session); "
                "set staleness.mode = 'drop'"
            )
        if self.model_dir is None and self.demo is None and self.prime_rl is None:
            raise ValueError(
                "model_dir is unset and demo is off: give --model-dir (the HF model dir of the served "
                "policy), [prime_rl] to train through PRIME-RL, or turn the CPU demonstration on with "
                "--demo.sessions N"
            )
        sampling = self.spool.sampling
        if sampling.top_p != 1.0 or sampling.top_k != 0:
            raise ValueError(
                f"spool.sampling: top_p = {sampling.top_p}, top_k = {sampling.top_k}; the trainer scores "
                "the full vocabulary, so only untruncated sessions train: set top_p = 1.0 and top_k = 0 "
                "(and serve the fleet without truncation)"
            )
        if self.prime_rl is None and sampling.temperature != 1.0:
            raise ValueError(
                f"spool.sampling.temperature = {sampling.temperature}; the single-process trainer scores "
                "at temperature 1.0: set it to 1.0 (and serve at 1.0)"
            )
        if self.prime_rl is not None:
            temperature = next(
                float((s.get("sampling") or {}).get("temperature", 1.0))
                for s in self.prime_rl.rl["orchestrator"]["train"]["source"]
                if ((s.get("env") or {}).get("taskset") or {}).get("id") == "realtime-sessions"
            )
            if temperature != sampling.temperature:
                raise ValueError(
                    f"spool.sampling.temperature = {sampling.temperature} but PRIME-RL's realtime source "
                    f"trains at sampling.temperature = {temperature}; set both to the temperature the "
                    "fleet serves at"
                )
        if self.pii.scan and not self.pii.tokenizer:
            name = (self.prime_rl.rl.get("model") or {}).get("name") if self.prime_rl is not None else None
            if self.model_dir is not None:
                self.pii.tokenizer = str(self.model_dir)
            elif name:
                self.pii.tokenizer = str(name)
            elif self.demo is None:
                raise ValueError(
                    "pii.tokenizer is unset and there is no model_dir or prime_rl.rl.model.name to take "
                    "it from: the scan decodes the token streams that train; set pii.tokenizer to the "
                    "served model's tokenizer"
                )
        for url in self.ship.admin_urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"ship.admin_urls: {url!r} is not an http(s) URL")
        return self
