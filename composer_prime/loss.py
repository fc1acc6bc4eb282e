"""composer_loss: the three-channel rl loss, plugged into PRIME-RL as `[trainer.loss] type = "custom"`.

PRIME-RL calls the rl loss once per packed sample with 1-D streams over the sample's tokens (`LossInputs`) and
divides the returned token *sum* by the global rl-token count. Composer puts three signals into those streams
(DESIGN.md, "The three channels on the wire"):

1. RLVR + trace replay arrive folded into `advantages` (outcome advantage plus per-step replay credit).
2. Hint self-distillation arrives in `ref_logprobs`: on a hint-target token it holds the live policy's logprob of
   the sampled token under the hint-conditioned context (strictly negative); everywhere else it is 0.0, which is
   also what PRIME-RL fills for samples that ship no reference stream. So 0.0 means "no hint here".
3. Nothing else: `loss_weights` is honoured when PRIME-RL passes one, composer itself ships none.

Per token t on the loss mask, with r = exp(trainer - inference) the importance ratio and p = exp(logprob):

    pg_adv[t]   = adv_tau * advantages[t]                     if the DPPO trust region keeps t, else 0
    hint_adv[t] = w * g[t] * (ref[t] - trainer[t]).detach()   if t is a hint token kept by its trust region, else 0
    loss[t]     = -(pg_adv[t] + hint_adv[t]) * r[t] + kl_tau * log(r[t])**2

with w = min(hint_coef * n_loss / n_hint, hint_token_cap) per sample (n_loss loss-mask tokens, n_hint hint tokens):
the hint channel's total weight in a sample is at most `hint_coef` times its rl tokens however many tokens were
targeted (`hint_norm = "token"` makes w = hint_coef instead), and g[t] = 1, or with `hint_gate = "sigmoid"` SDAR's
detached gate g[t] = sigmoid(hint_gate_alpha * (ref[t] - trainer[t])) (Lu et al., arXiv 2605.15155): tokens the
hint-conditioned policy endorses are distilled strongly, tokens it rejects softly attenuated.

The trust regions follow PRIME-RL's default loss (DPPO-Binary TV, arXiv:2602.04879): a token is dropped when its
probability already moved past the bound in the direction the update pushes it (up for a positive signal, down
for a negative one). The hint term is the sampled-token reverse-KL estimator of on-policy self-distillation
(OPSD / SDPO; Cursor's "targeted RL with textual feedback"): its gradient pulls the trainer's logprob toward the
hint-conditioned one, and it lives in the rl component so that PRIME-RL normalises it by all rl tokens rather than
by the few hint tokens (PRIME-RL's `ref_kl` component would give a handful of hint tokens the weight of a batch).

The module imports torch but not PRIME-RL: `inputs` is duck-typed on `LossInputs` and the result only needs
`.loss` and `.metrics`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from composer_prime.loss_config import ComposerLossConfig, parse_loss_kwargs


@dataclass
class ComposerLossOutputs:
    """Duck-type of PRIME-RL's `LossOutputs`: a token-sum loss and 0-dim metric tensors."""

    loss: Float[Tensor, ""]
    metrics: dict[str, Tensor]


def _masked_mean(values: Tensor, mask: Tensor, count: Tensor) -> Tensor:
    """Mean of `values` over `mask` without a host sync; 0 when the mask is empty."""
    return torch.where(mask, values, torch.zeros_like(values)).sum() / count


def _check_finite(inputs: Any) -> None:
    """One host sync for all streams; the slow path names the stream and the first bad index."""
    t = inputs.trainer_logprobs.detach()
    acc = t + inputs.inference_logprobs + inputs.advantages
    if inputs.loss_weights is not None:
        acc = acc + inputs.loss_weights
    bad = ~torch.isfinite(acc).all()
    ref = inputs.ref_logprobs
    if ref is not None:
        # -inf is a legal reference (the hint context rules the token out): it is dropped from the hint term.
        bad = bad | (torch.isnan(ref) | (ref == math.inf)).any()
    if not bool(bad):
        return
    streams = {
        "trainer_logprobs": t,
        "inference_logprobs": inputs.inference_logprobs,
        "advantages": inputs.advantages,
        "loss_weights": inputs.loss_weights,
    }
    for name, stream in streams.items():
        if stream is None:
            continue
        nonfinite = ~torch.isfinite(stream)
        if bool(nonfinite.any()):
            idx = int(nonfinite.nonzero()[0, 0])
            raise ValueError(
                f"composer_loss: {name}[{idx}] = {stream[idx].item()} (non-finite; {int(nonfinite.sum())} of "
                f"{stream.numel()} tokens). Every input stream must be finite: check the orchestrator's "
                f"{'advantages' if name == 'advantages' else 'logprobs'} for this sample."
            )
    bad_ref = torch.isnan(ref) | (ref == math.inf)
    idx = int(bad_ref.nonzero()[0, 0])
    raise ValueError(
        f"composer_loss: ref_logprobs[{idx}] = {ref[idx].item()}. A reference logprob must be finite and <= 0 "
        "(or -inf to drop the token): check the hint scoring for this sample."
    )


def composer_loss(inputs: Any, **kwargs: Any) -> ComposerLossOutputs:
    """PRIME-RL custom rl loss: policy gradient + hint self-distillation + drift. Returns a token sum."""
    config = parse_loss_kwargs(kwargs)
    if config.check_finite:
        _check_finite(inputs)
    return composer_loss_terms(
        trainer_logprobs=inputs.trainer_logprobs,
        inference_logprobs=inputs.inference_logprobs,
        ref_logprobs=inputs.ref_logprobs,
        advantages=inputs.advantages,
        loss_mask=inputs.loss_mask,
        loss_weights=inputs.loss_weights,
        config=config,
    )


def _hint_weight(
    hint: Bool[Tensor, " seq"], loss_mask: Bool[Tensor, " seq"], config: ComposerLossConfig, dtype: torch.dtype
) -> float | Tensor:
    """Per-hint-token weight (a float, or a 0-dim tensor computed without a host sync): see `hint_norm`."""
    if config.hint_norm == "token":
        return config.hint_coef
    share = config.hint_coef * loss_mask.sum().to(dtype) / hint.sum().clamp_min(1).to(dtype)
    return share.clamp_max(config.hint_token_cap)


def composer_loss_terms(
    trainer_logprobs: Float[Tensor, " seq"],
    inference_logprobs: Float[Tensor, " seq"],
    ref_logprobs: Float[Tensor, " seq"] | None,
    advantages: Float[Tensor, " seq"],
    loss_mask: Bool[Tensor, " seq"],
    loss_weights: Float[Tensor, " seq"] | None,
    config: ComposerLossConfig,
) -> ComposerLossOutputs:
    """The math of `composer_loss` on plain tensors (see the module docstring for the formula)."""
    log_ratio = trainer_logprobs - inference_logprobs
    ratio = torch.exp(log_ratio)
    probs_diff = torch.exp(trainer_logprobs) - torch.exp(inference_logprobs)
    moved_up = probs_diff > config.dppo_mask_high
    moved_down = probs_diff < -config.dppo_mask_low

    positive = advantages > 0
    negative = advantages < 0
    pg_masked_high = positive & moved_up
    pg_masked_low = negative & moved_down
    pg_keep = loss_mask & ~(pg_masked_high | pg_masked_low)
    zeros = torch.zeros_like(trainer_logprobs)
    signal = torch.where(pg_keep, config.adv_tau * advantages, zeros)

    hint = _hint_term(ref_logprobs, trainer_logprobs, loss_mask, probs_diff, (moved_up, moved_down), config)
    if hint is not None:
        signal = signal + hint.signal

    drift = torch.where(loss_mask, log_ratio * log_ratio, zeros)
    per_token = -signal * ratio + config.kl_tau * drift
    if loss_weights is not None:
        per_token = per_token * loss_weights
    loss = per_token.sum()

    with torch.no_grad():
        n = loss_mask.sum().clamp_min(1)
        mismatch_kl = ratio - log_ratio - 1
        pg_term = torch.where(pg_keep, config.adv_tau * advantages, zeros) * ratio
        metrics = {
            "composer/rl/pg_loss": -pg_term.sum() / n,
            "composer/rl/is_masked": _masked_mean((pg_masked_high | pg_masked_low).float(), loss_mask, n),
            "composer/rl/is_masked_high": _masked_mean(pg_masked_high.float(), loss_mask, n),
            "composer/rl/is_masked_low": _masked_mean(pg_masked_low.float(), loss_mask, n),
            "composer/drift/log_ratio_sq": drift.sum() / n,
            "composer/mismatch_kl": _masked_mean(mismatch_kl, loss_mask, n),
        }
        metrics |= _hint_metrics(hint, ratio, n, zeros.sum())
    return ComposerLossOutputs(loss=loss, metrics=metrics)


@dataclass
class _Hint:
    tokens: Bool[Tensor, " seq"]
    """Hint tokens: on the loss mask, reference strictly negative and finite (0.0 = no hint, -inf = ruled out)."""
    gap: Float[Tensor, " seq"]
    """ref - trainer, detached."""
    masked: Bool[Tensor, " seq"]
    """Hint tokens dropped by the hint trust region."""
    signal: Float[Tensor, " seq"]
    """Per-token hint advantage w * g * gap on kept hint tokens, 0 elsewhere."""
    gate: Float[Tensor, " seq"]
    """g: sigmoid(hint_gate_alpha * gap) with `hint_gate = "sigmoid"`, else 1."""


def _hint_term(
    ref_logprobs: Float[Tensor, " seq"] | None,
    trainer_logprobs: Float[Tensor, " seq"],
    loss_mask: Bool[Tensor, " seq"],
    probs_diff: Float[Tensor, " seq"],
    pg_moves: tuple[Tensor, Tensor],
    config: ComposerLossConfig,
) -> _Hint | None:
    """The hint self-distillation term, with its own trust region conditioned on the sign of the gap."""
    if ref_logprobs is None:
        return None
    hint = loss_mask & (ref_logprobs < 0) & (ref_logprobs > -math.inf)
    gap = (ref_logprobs - trainer_logprobs).detach()
    if config.hint_mask_high == config.dppo_mask_high and config.hint_mask_low == config.dppo_mask_low:
        up, down = pg_moves
    else:
        up, down = probs_diff > config.hint_mask_high, probs_diff < -config.hint_mask_low
    masked = hint & (((gap > 0) & up) | ((gap < 0) & down))
    weight = _hint_weight(hint, loss_mask, config, gap.dtype)
    # gap is detached, so the gate is too: it scales the hint advantage, it is not trained
    gate = torch.sigmoid(config.hint_gate_alpha * gap) if config.hint_gate == "sigmoid" else torch.ones_like(gap)
    signal = torch.where(hint & ~masked, weight * gate * gap, torch.zeros_like(gap))
    return _Hint(hint, gap, masked, signal, gate)


def _hint_metrics(hint: _Hint | None, ratio: Tensor, n: Tensor, zero: Tensor) -> dict[str, Tensor]:
    if hint is None:
        return {f"composer/hint/{name}": zero for name in ("loss", "token_frac", "is_masked", "ref_gap", "gate")}
    n_hint = hint.tokens.sum().clamp_min(1)
    return {
        "composer/hint/loss": -(hint.signal * ratio).sum() / n,
        "composer/hint/token_frac": hint.tokens.sum() / n,
        "composer/hint/is_masked": _masked_mean(hint.masked.float(), hint.tokens, n_hint),
        "composer/hint/ref_gap": _masked_mean(hint.gap, hint.tokens, n_hint),
        "composer/hint/gate": _masked_mean(hint.gate, hint.tokens, n_hint),
    }


def prime_rl_default_loss(inputs: Any, **kwargs: Any) -> Any:
    """PRIME-RL's own `default_loss_fn` behind the custom-loss seam, with `kwargs` as its `DefaultLossConfig`.

    For baselines layered on a composer TOML (recipes/grpo-baseline.toml): a TOML overlay can change
    `[trainer.loss] import_path` but cannot remove it, so it cannot switch back to `type = "default"`. Imports
    PRIME-RL, so it only runs inside PRIME-RL's trainer."""
    from prime_rl.configs.trainer import DefaultLossConfig
    from prime_rl.trainer.rl.loss import default_loss_fn

    return default_loss_fn(inputs, DefaultLossConfig(**kwargs))
