"""`[trainer.loss.kwargs]` of `composer_prime.loss.composer_loss`: its config, with no torch import.

The loss parses its kwargs with this on its first call in the trainer; the import hook validates the same kwargs when
PRIME-RL parses a TOML (`composer_prime/seam/checks.py`), so a typo fails at launch, before any GPU is touched.
Errors name the key, the value and what is allowed.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

LOSS_IMPORT_PATH = "composer_prime.loss.composer_loss"


class ComposerLossConfig(BaseModel):
    """`[trainer.loss.kwargs]` of the composer loss. Defaults are the recipe's setting for Qwen3-32B."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    adv_tau: float = Field(1.0, ge=0)
    """Scale of the policy-gradient term on `advantages` (PRIME-RL's default loss uses the same name and default)."""

    dppo_mask_low: float = Field(0.2, ge=0)
    """Policy-gradient trust region, downward: a token with a negative advantage is dropped once
    p_trainer - p_inference < -dppo_mask_low (PRIME-RL default 0.2)."""

    dppo_mask_high: float = Field(0.2, ge=0)
    """Policy-gradient trust region, upward: a token with a positive advantage is dropped once
    p_trainer - p_inference > dppo_mask_high (PRIME-RL default 0.2)."""

    hint_coef: float = Field(0.02, ge=0)
    """Strength of the hint self-distillation term. With `hint_norm = "sample"` it is the hint channel's share of a
    sample's rl signal: the hint tokens of a sample together weigh at most `hint_coef` x its loss-mask tokens, however
    many tokens were targeted. It acts only with hints on (`HintConfig.enabled`, on by default). 0.02 is the lowest
    share measured in docs/evidence.md (CPU table, rows `full-coef0.05`/`full-coef0.15` against `full` at 0.02):
    0.05 is behind by 3.5 +- 1.4 points of AUC and 0.15 by 8.4 +- 1.8, both on every seed, and replay alone (no hint
    term) is ahead of 0.02 on every seed. In the outside experiment of docs/loss.md
    ("Choosing hint_coef") shares of 0.02-0.06 beat GRPO and 0.18 and above lost 3-36 points. 0 disables the term."""

    hint_norm: Literal["sample", "token"] = "sample"
    """How hint tokens are weighted. `sample`: each hint token of a sample weighs
    min(hint_coef * n_loss / n_hint, hint_token_cap), so the channel's total does not grow with the number of
    targeted tokens. `token`: each hint token weighs hint_coef, so the channel grows with them (the OPSD/SDPO form)."""

    hint_token_cap: float = Field(1.0, gt=0)
    """With `hint_norm = "sample"`: the most one hint token may weigh, in units of advantage per nat of hint gap.
    Keeps a sample with a handful of hint tokens from concentrating its whole hint share on them."""

    hint_gate: Literal["none", "sigmoid"] = "sigmoid"
    """Per-token gate on the hint term. `sigmoid` (default): SDAR's gate (Lu et al., arXiv 2605.15155): each kept hint
    token weighs w * g, g = sigmoid(hint_gate_alpha * (ref - trainer)), detached, so tokens the hint-conditioned
    policy endorses (ref above trainer) are distilled strongly and tokens it rejects are softly attenuated; the
    policy-gradient term is untouched. `none`: every kept hint token weighs w. The default follows docs/evidence.md's
    CPU table: `full-gated` is ahead of `full` (ungated) by 1.7 +- 1.2 points of AUC on every seed of 5, and ahead of
    `full-coef0.01` (ungated at half the coefficient, the gate's strength at small gaps) by 0.7 +- 0.9 on every seed,
    so the gate's per-token shaping helps beyond the weaker channel; without replay (`hints-gated` vs `hints`) it is
    level (-0.1 +- 2.4)."""

    hint_gate_alpha: float = Field(1.0, gt=0, allow_inf_nan=False)
    """Sharpness of the sigmoid gate, per nat of hint gap (`hint_gate = "sigmoid"`; ignored otherwise). The gate is 1/2
    at a gap of 0, so at the same `hint_coef` the gated channel runs at about half the strength of the ungated one
    where gaps are small: compare gated arms with an ungated one at half the coefficient (docs/evidence.md)."""

    hint_mask_low: float = Field(0.2, ge=0)
    """Hint trust region, downward: a hint token whose reference is below the trainer is dropped once
    p_trainer - p_inference < -hint_mask_low (the bound PRIME-RL's ref_kl component hard-codes)."""

    hint_mask_high: float = Field(0.2, ge=0)
    """Hint trust region, upward: a hint token whose reference is above the trainer is dropped once
    p_trainer - p_inference > hint_mask_high."""

    kl_tau: float = Field(1e-3, ge=0)
    """Weight of the drift term kl_tau * log(ratio)**2 on every loss-mask token (PRIME-RL default 1e-3)."""

    check_finite: bool = True
    """Raise on NaN or +-inf in an input stream instead of returning a NaN loss. Costs one host sync per sample."""


_PARSED: dict[str, ComposerLossConfig] = {}


def parse_loss_kwargs(kwargs: dict[str, Any]) -> ComposerLossConfig:
    """Parse `[trainer.loss.kwargs]` once per distinct kwargs; errors name the key, the value and what is allowed."""
    key = json.dumps(kwargs, sort_keys=True, default=repr)
    config = _PARSED.get(key)
    if config is None:
        config = _PARSED[key] = _parse(kwargs)
    return config


def _parse(kwargs: dict[str, Any]) -> ComposerLossConfig:
    try:
        return ComposerLossConfig(**kwargs)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            field = ".".join(str(p) for p in err["loc"]) or "<kwargs>"
            value = kwargs.get(field, err.get("input"))
            if err["type"] == "extra_forbidden":
                allowed = ", ".join(ComposerLossConfig.model_fields)
                problems.append(f"unknown key {field!r} = {value!r}; allowed keys: {allowed}")
            else:
                problems.append(f"{field} = {value!r}: {err['msg']}")
        raise ValueError(
            "Invalid [trainer.loss.kwargs] for composer_prime.loss.composer_loss: "
            + "; ".join(problems)
            + ". Fix the key in your TOML (see ComposerLossConfig for each field's meaning and bounds)."
        ) from None
