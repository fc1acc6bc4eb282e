"""composer_loss on tiny hand-built tensors; every expected value is derived in a comment."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from composer_prime.loss import composer_loss
from composer_prime.loss_config import ComposerLossConfig

LN2 = math.log(2.0)


@dataclass
class Inputs:
    """Same attribute names as PRIME-RL's LossInputs (pinned by tests/contract)."""

    trainer_logprobs: torch.Tensor
    inference_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor | None
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    loss_weights: torch.Tensor | None = None


def make(probs_trainer, probs_inference, advantages, ref=None, mask=None, weights=None) -> Inputs:
    t = torch.tensor([math.log(p) for p in probs_trainer], dtype=torch.float64, requires_grad=True)
    i = torch.tensor([math.log(p) for p in probs_inference], dtype=torch.float64)
    n = len(probs_trainer)
    return Inputs(
        trainer_logprobs=t,
        inference_logprobs=i,
        ref_logprobs=None if ref is None else torch.tensor(ref, dtype=torch.float64),
        advantages=torch.tensor(advantages, dtype=torch.float64),
        loss_mask=torch.ones(n, dtype=torch.bool) if mask is None else torch.tensor(mask),
        loss_weights=None if weights is None else torch.tensor(weights, dtype=torch.float64),
    )


def run(inputs: Inputs, **kwargs):
    """composer_loss with `kwargs`; the hand values below are of the ungated hint term unless a test sets `hint_gate`."""
    kwargs.setdefault("hint_gate", "none")
    out = composer_loss(inputs, **kwargs)
    out.loss.backward()
    return out, inputs.trainer_logprobs.grad


def test_policy_gradient_sign_and_size_positive_advantage():
    # p_t = 0.5, p_i = 0.4: ratio = 1.25, probs moved up by 0.1 < 0.2 so the token is kept.
    # loss = -A * ratio = -2 * 1.25 = -2.5; d loss / d logp_t = -A * ratio = -2.5 (descent raises logp_t).
    out, grad = run(make([0.5], [0.4], [2.0]), kl_tau=0.0)
    assert out.loss.item() == pytest.approx(-2.5)
    assert grad.tolist() == pytest.approx([-2.5])


def test_policy_gradient_sign_and_size_negative_advantage():
    # Same token with A = -2: loss = +2.5, gradient +2.5 (descent lowers logp_t).
    out, grad = run(make([0.5], [0.4], [-2.0]), kl_tau=0.0)
    assert out.loss.item() == pytest.approx(2.5)
    assert grad.tolist() == pytest.approx([2.5])


def test_trust_region_masks_conditioned_on_advantage_sign():
    # token 0: p 0.5 -> 0.9 (moved up 0.4 > 0.2), A = +1: masked (pushing further up).
    # token 1: same move, A = -1: kept; loss = +1 * ratio = 0.9 / 0.5 = 1.8.
    # token 2: p 0.6 -> 0.2 (moved down 0.4 > 0.2), A = -1: masked (pushing further down).
    # token 3: same move, A = +1: kept; loss = -1 * 0.2 / 0.6 = -1/3.
    # total = 1.8 - 1/3; gradient = -A * ratio on kept tokens, exactly 0 on masked ones (kl_tau = 0).
    inputs = make([0.9, 0.9, 0.2, 0.2], [0.5, 0.5, 0.6, 0.6], [1.0, -1.0, -1.0, 1.0])
    out, grad = run(inputs, kl_tau=0.0)
    assert out.loss.item() == pytest.approx(1.8 - 1 / 3)
    assert grad.tolist() == pytest.approx([0.0, 1.8, 0.0, -1 / 3])
    assert grad[0].item() == 0.0 and grad[2].item() == 0.0
    assert out.metrics["composer/rl/is_masked"].item() == pytest.approx(0.5)
    assert out.metrics["composer/rl/is_masked_high"].item() == pytest.approx(0.25)
    assert out.metrics["composer/rl/is_masked_low"].item() == pytest.approx(0.25)


def test_trust_region_bounds_are_configurable():
    # With dppo_mask_high = 0.5 the 0.4 upward move of token 0 above is inside the region: kept, loss = -1.8.
    out, _ = run(make([0.9], [0.5], [1.0]), kl_tau=0.0, dppo_mask_high=0.5)
    assert out.loss.item() == pytest.approx(-1.8)


def test_hint_gradient_pulls_trainer_toward_reference():
    # token 0: p_t = p_i = 0.3, ref = log 0.6: gap = ref - logp_t = ln 2 > 0, ratio = 1, A = 0.
    #   loss = -hint_coef * gap * ratio = -ln 2; gradient = -ln 2 < 0, so descent raises logp_t toward ref.
    # token 1: p_t = p_i = 0.6, ref = log 0.3: gap = -ln 2, loss = +ln 2, gradient = +ln 2 (lowers logp_t).
    # Per-token weighting (hint_norm = "token") with hint_coef = 1 isolates the per-token math.
    inputs = make([0.3, 0.6], [0.3, 0.6], [0.0, 0.0], ref=[math.log(0.6), math.log(0.3)])
    out, grad = run(inputs, kl_tau=0.0, hint_norm="token", hint_coef=1.0)
    assert out.loss.item() == pytest.approx(0.0)
    assert grad.tolist() == pytest.approx([-LN2, LN2])
    assert out.metrics["composer/hint/token_frac"].item() == pytest.approx(1.0)
    assert out.metrics["composer/hint/ref_gap"].item() == pytest.approx(0.0)


def test_sigmoid_gate_weights_endorsed_tokens_more_and_leaves_rl_untouched():
    # SDAR's gate g = sigmoid(alpha * gap), detached, alpha = 1. Per-token weighting with hint_coef = 1.
    # token 0: p_t = p_i = 0.3, ref = log 0.6: gap = ln 2, g = sigmoid(ln 2) = 2/3 (endorsed).
    #   hint loss = -g * gap * ratio = -(2/3) ln 2; gradient -(2/3) ln 2 (the gate is not differentiated).
    # token 1: p_t = p_i = 0.6, ref = log 0.3: gap = -ln 2, g = sigmoid(-ln 2) = 1/3 (rejected, attenuated).
    #   hint loss = +(1/3) ln 2; gradient +(1/3) ln 2.
    # token 2: no hint (ref 0.0), A = 2, p_t = 0.5, p_i = 0.4: pg loss -A * ratio = -2.5, gradient -2.5 as ungated.
    inputs = make([0.3, 0.6, 0.5], [0.3, 0.6, 0.4], [0.0, 0.0, 2.0], ref=[math.log(0.6), math.log(0.3), 0.0])
    out, grad = run(inputs, kl_tau=0.0, hint_norm="token", hint_coef=1.0, hint_gate="sigmoid")
    assert out.loss.item() == pytest.approx(-(2 / 3) * LN2 + (1 / 3) * LN2 - 2.5)
    assert grad.tolist() == pytest.approx([-(2 / 3) * LN2, (1 / 3) * LN2, -2.5])
    assert out.metrics["composer/hint/gate"].item() == pytest.approx(0.5)  # (2/3 + 1/3) / 2 hint tokens
    # alpha = 3: g = sigmoid(3 ln 2) = 8/9 and sigmoid(-3 ln 2) = 1/9
    out, grad = run(
        make([0.3, 0.6], [0.3, 0.6], [0.0, 0.0], ref=[math.log(0.6), math.log(0.3)]),
        kl_tau=0.0,
        hint_norm="token",
        hint_coef=1.0,
        hint_gate="sigmoid",
        hint_gate_alpha=3.0,
    )
    assert grad.tolist() == pytest.approx([-(8 / 9) * LN2, (1 / 9) * LN2])
    # "none" is the ungated term: gradients -ln 2 and +ln 2, gate metric 1
    out, grad = run(
        make([0.3, 0.6], [0.3, 0.6], [0.0, 0.0], ref=[math.log(0.6), math.log(0.3)]),
        kl_tau=0.0,
        hint_norm="token",
        hint_coef=1.0,
    )
    assert grad.tolist() == pytest.approx([-LN2, LN2]) and out.metrics["composer/hint/gate"].item() == 1.0


def test_the_default_gate_is_sigmoid():
    # token 0 of the gate test above with no kwargs but per-token weighting: gradient -(2/3) ln 2
    inputs = make([0.3], [0.3], [0.0], ref=[math.log(0.6)])
    out = composer_loss(inputs, kl_tau=0.0, hint_norm="token", hint_coef=1.0)
    out.loss.backward()
    assert inputs.trainer_logprobs.grad.tolist() == pytest.approx([-(2 / 3) * LN2])


def test_a_bad_gate_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"hint_gate = 'sdar'"):
        run(make([0.5], [0.4], [1.0]), hint_gate="sdar")
    with pytest.raises(ValueError, match=r"hint_gate_alpha = 0"):
        run(make([0.5], [0.4], [1.0]), hint_gate="sigmoid", hint_gate_alpha=0)


def test_hint_coef_scales_the_hint_gradient():
    # gradient = -hint_coef * ln 2 with hint_coef = 0.25.
    out, grad = run(make([0.3], [0.3], [0.0], ref=[math.log(0.6)]), kl_tau=0.0, hint_coef=0.25, hint_norm="token")
    assert grad.tolist() == pytest.approx([-0.25 * LN2])


def test_zero_hint_gradient_on_every_non_target_token():
    # Every token has p_t = p_i = 0.5 and A = 0, kl_tau = 0: only a hint token can get a gradient.
    # token 0: ref = log 0.25, on the mask      -> hint token, gradient = -(log 0.25 - log 0.5) = ln 2
    # token 1: ref = 0.0 (PRIME-RL's fill)      -> no hint, gradient exactly 0
    # token 2: ref = +0.5 (not strictly < 0)    -> no hint, gradient exactly 0
    # token 3: ref = -inf (ruled out)           -> no hint, gradient exactly 0
    # token 4: ref = log 0.25 but off the mask  -> no hint, gradient exactly 0
    inputs = make(
        [0.5] * 5,
        [0.5] * 5,
        [0.0] * 5,
        ref=[math.log(0.25), 0.0, 0.5, -math.inf, math.log(0.25)],
        mask=[True, True, True, True, False],
    )
    out, grad = run(inputs, kl_tau=0.0, hint_norm="token", hint_coef=1.0)
    assert grad[0].item() == pytest.approx(LN2)
    assert grad[1:].tolist() == [0.0, 0.0, 0.0, 0.0]
    # 1 hint token among 4 loss-mask tokens.
    assert out.metrics["composer/hint/token_frac"].item() == pytest.approx(0.25)


def test_hint_coef_zero_removes_the_hint_term():
    # With hint_coef = 0 the loss and gradient equal those of the same sample with no reference stream:
    # token 0 (A = 1, ratio 1.25) loss -1.25; token 1 (A = 0) contributes only drift, which is 0 here (ratio 1).
    base = dict(probs_trainer=[0.5, 0.3], probs_inference=[0.4, 0.3], advantages=[1.0, 0.0])
    with_ref, grad_ref = run(make(**base, ref=[math.log(0.9), math.log(0.9)]), hint_coef=0.0)
    no_ref, grad_none = run(make(**base))
    assert with_ref.loss.item() == pytest.approx(no_ref.loss.item())
    assert grad_ref.tolist() == pytest.approx(grad_none.tolist())
    assert no_ref.loss.item() == pytest.approx(-1.25 + 1e-3 * math.log(1.25) ** 2)


def test_hint_trust_region_is_its_own():
    # p 0.5 -> 0.9 (moved up 0.4), A = 0, ref = log 0.95 > logp_t: the hint pushes up past the region: masked.
    # The same token with hint_mask_high = 0.5 is kept: loss = -(ln 0.95 - ln 0.9) * 0.9 / 0.5.
    masked, grad = run(make([0.9], [0.5], [0.0], ref=[math.log(0.95)]), kl_tau=0.0, hint_norm="token", hint_coef=1.0)
    assert grad.tolist() == [0.0]
    assert masked.metrics["composer/hint/is_masked"].item() == pytest.approx(1.0)
    kept, _ = run(
        make([0.9], [0.5], [0.0], ref=[math.log(0.95)]),
        kl_tau=0.0,
        hint_mask_high=0.5,
        hint_norm="token",
        hint_coef=1.0,
    )
    assert kept.loss.item() == pytest.approx(-(math.log(0.95) - math.log(0.9)) * 1.8)


def _hint_sample(n_loss: int, n_hint: int) -> Inputs:
    # p_t = p_i = 0.5 on every token, A = 0; the first n_hint tokens have ref = log 0.25, i.e. gap = -ln 2.
    ref = [math.log(0.25)] * n_hint + [0.0] * (n_loss - n_hint)
    return make([0.5] * n_loss, [0.5] * n_loss, [0.0] * n_loss, ref=ref)


def test_sample_norm_keeps_the_hint_channel_share_fixed():
    # Default hint_norm = "sample": each hint token weighs w = min(hint_coef * n_loss / n_hint, hint_token_cap);
    # its gradient is -w * gap * ratio = w * ln 2.
    # 40 loss tokens, 4 hint tokens, hint_coef 0.02: w = 0.02 * 40 / 4 = 0.2.
    _, grad = run(_hint_sample(40, 4), kl_tau=0.0)
    assert grad[:4].tolist() == pytest.approx([0.2 * LN2] * 4)
    assert grad[4:].tolist() == [0.0] * 36
    # 8 hint tokens: w = 0.1, so the channel's total gradient (8 * 0.1 ln 2 = 0.8 ln 2) is what 4 tokens gave.
    _, grad8 = run(_hint_sample(40, 8), kl_tau=0.0)
    assert grad8[:8].tolist() == pytest.approx([0.1 * LN2] * 8)
    assert grad8.sum().item() == pytest.approx(grad.sum().item())
    # 1 hint token in 100: 0.02 * 100 / 1 = 2 is capped at hint_token_cap = 1.
    _, grad1 = run(_hint_sample(100, 1), kl_tau=0.0)
    assert grad1[0].item() == pytest.approx(LN2)
    _, capped = run(_hint_sample(40, 4), kl_tau=0.0, hint_token_cap=0.1)
    assert capped[:4].tolist() == pytest.approx([0.1 * LN2] * 4)
    # hint_norm = "token": every hint token weighs hint_coef, so 8 tokens pull twice as hard as 4.
    _, tok = run(_hint_sample(40, 8), kl_tau=0.0, hint_norm="token")
    assert tok[:8].tolist() == pytest.approx([0.02 * LN2] * 8)


def test_drift_term_on_loss_mask_only():
    # token 0: p 0.5 vs 0.4, A = 0, on mask: drift = kl_tau * ln(1.25)^2; gradient = 2 * kl_tau * ln 1.25.
    # token 1: same probabilities, off the mask: nothing.
    out, grad = run(make([0.5, 0.5], [0.4, 0.4], [0.0, 0.0], mask=[True, False]), kl_tau=0.1)
    assert out.loss.item() == pytest.approx(0.1 * math.log(1.25) ** 2)
    assert grad.tolist() == pytest.approx([0.2 * math.log(1.25), 0.0])


def test_loss_weights_scale_each_token():
    # Two kept tokens at ratio 1 with A = 1 and A = -1, weights 2 and 0.5:
    # loss = 2 * (-1) + 0.5 * (+1) = -1.5; gradient = weight * (-A) = [-2, 0.5].
    out, grad = run(make([0.5, 0.5], [0.5, 0.5], [1.0, -1.0], weights=[2.0, 0.5]), kl_tau=0.0)
    assert out.loss.item() == pytest.approx(-1.5)
    assert grad.tolist() == pytest.approx([-2.0, 0.5])


def test_returns_a_token_sum_not_a_mean():
    # Three identical kept tokens with A = 1 at ratio 1: sum = -3 (PRIME-RL divides by the global token count).
    out, _ = run(make([0.5] * 3, [0.5] * 3, [1.0] * 3), kl_tau=0.0)
    assert out.loss.item() == pytest.approx(-3.0)


def test_all_masked_sample_returns_zero_loss_that_backpropagates():
    inputs = make([0.5, 0.3], [0.4, 0.3], [1.0, -1.0], ref=[-1.0, -2.0], mask=[False, False])
    out = composer_loss(inputs)
    assert out.loss.item() == 0.0
    assert out.loss.requires_grad
    out.loss.backward()
    assert inputs.trainer_logprobs.grad is not None
    assert inputs.trainer_logprobs.grad.tolist() == [0.0, 0.0]
    assert all(torch.isfinite(v) for v in out.metrics.values())


def test_metrics_are_namespaced_zero_dim_and_detached():
    out = composer_loss(make([0.5, 0.3], [0.4, 0.3], [1.0, 0.0], ref=[0.0, -1.0]))
    expected = {
        "composer/rl/pg_loss",
        "composer/rl/is_masked",
        "composer/rl/is_masked_high",
        "composer/rl/is_masked_low",
        "composer/drift/log_ratio_sq",
        "composer/mismatch_kl",
        "composer/hint/loss",
        "composer/hint/token_frac",
        "composer/hint/is_masked",
        "composer/hint/ref_gap",
        "composer/hint/gate",
    }
    assert set(out.metrics) == expected
    for value in out.metrics.values():
        assert value.dim() == 0 and not value.requires_grad
    # mismatch KL on token 0: r - ln r - 1 with r = 1.25 -> 0.25 - ln 1.25; token 1 has r = 1 -> 0. Mean over 2.
    assert out.metrics["composer/mismatch_kl"].item() == pytest.approx((0.25 - math.log(1.25)) / 2)
    # pg loss per mask token: -(1 * 1.25) / 2.
    assert out.metrics["composer/rl/pg_loss"].item() == pytest.approx(-0.625)


def test_unknown_kwarg_fails_on_first_call_naming_key_value_and_allowed():
    with pytest.raises(ValueError) as err:
        composer_loss(make([0.5], [0.5], [1.0]), hint_cof=0.5)
    message = str(err.value)
    assert "hint_cof" in message and "0.5" in message and "hint_coef" in message


def test_out_of_range_kwarg_names_field_value_and_bound():
    with pytest.raises(ValueError) as err:
        composer_loss(make([0.5], [0.5], [1.0]), hint_coef=-1.0)
    message = str(err.value)
    assert "hint_coef" in message and "-1.0" in message and "greater than or equal to 0" in message


def test_every_config_field_has_a_docstring():
    import ast
    import inspect

    import composer_prime.loss_config as module

    tree = ast.parse(inspect.getsource(module))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ComposerLossConfig")
    body = cls.body
    documented = set()
    for node, following in zip(body, body[1:], strict=False):
        if isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr):
            if isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
                documented.add(node.target.id)
    assert documented == set(ComposerLossConfig.model_fields)


@pytest.mark.parametrize(
    ("stream", "value", "needle"),
    [
        ("trainer_logprobs", float("nan"), "trainer_logprobs[1]"),
        ("inference_logprobs", -math.inf, "inference_logprobs[1]"),
        ("advantages", math.inf, "advantages[1]"),
        ("loss_weights", float("nan"), "loss_weights[1]"),
        ("ref_logprobs", float("nan"), "ref_logprobs[1]"),
        ("ref_logprobs", math.inf, "ref_logprobs[1]"),
    ],
)
def test_non_finite_input_raises_naming_stream_and_index(stream, value, needle):
    inputs = make([0.5, 0.5], [0.5, 0.5], [1.0, 1.0], ref=[0.0, -1.0], weights=[1.0, 1.0])
    tensor = getattr(inputs, stream).detach().clone()
    tensor[1] = value
    setattr(inputs, stream, tensor)
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        composer_loss(inputs)


def test_check_finite_can_be_disabled():
    inputs = make([0.5], [0.5], [float("nan")])
    out = composer_loss(inputs, check_finite=False)
    assert math.isnan(out.loss.item())


# --- settings a mutant could swap or drop: unequal bounds, adv_tau != 1, weights on every term ----------------------


def test_unequal_dppo_bounds_each_guard_their_own_direction():
    # dppo_mask_low = 0.1, dppo_mask_high = 0.3, kl_tau = 0, ratio r = p_t / p_i.
    # token 0: A = -1, p 0.5 -> 0.35 (moved down 0.15 > 0.1): dropped; with the high bound (0.3) it would be kept.
    # token 1: A = +1, p 0.5 -> 0.65 (moved up 0.15 < 0.3): kept, loss -1 * 1.3; with the low bound it would be dropped.
    bounds = {"dppo_mask_low": 0.1, "dppo_mask_high": 0.3, "kl_tau": 0.0}
    out, grad = run(make([0.35, 0.65], [0.5, 0.5], [-1.0, 1.0]), **bounds)
    assert out.loss.item() == pytest.approx(-1.3)
    assert grad.tolist() == pytest.approx([0.0, -1.3])
    assert out.metrics["composer/rl/is_masked_low"].item() == pytest.approx(0.5)
    assert out.metrics["composer/rl/is_masked_high"].item() == pytest.approx(0.0)


def test_unequal_hint_bounds_each_guard_their_own_direction():
    # hint_mask_low = 0.1, hint_mask_high = 0.3, A = 0, kl_tau = 0, hint_norm "token", hint_coef 1.
    # token 0: p 0.5 -> 0.35, ref = log 0.2 < logp_t (gap < 0, pushes down), moved down 0.15 > 0.1: masked.
    # token 1: p 0.5 -> 0.65, ref = log 0.9 > logp_t (gap > 0, pushes up), moved up 0.15 < 0.3: kept;
    #   loss = -(ln 0.9 - ln 0.65) * 1.3.
    kwargs = {"hint_mask_low": 0.1, "hint_mask_high": 0.3, "kl_tau": 0.0, "hint_norm": "token", "hint_coef": 1.0}
    out, grad = run(make([0.35, 0.65], [0.5, 0.5], [0.0, 0.0], ref=[math.log(0.2), math.log(0.9)]), **kwargs)
    gap1 = math.log(0.9) - math.log(0.65)
    assert out.loss.item() == pytest.approx(-gap1 * 1.3)
    assert grad.tolist() == pytest.approx([0.0, -gap1 * 1.3])
    # is_masked is over hint tokens (1 of 2), not over all loss tokens.
    assert out.metrics["composer/hint/is_masked"].item() == pytest.approx(0.5)
    # ref_gap: mean of ref - trainer over the hint tokens = ((ln 0.2 - ln 0.35) + gap1) / 2.
    expected_gap = ((math.log(0.2) - math.log(0.35)) + gap1) / 2
    assert out.metrics["composer/hint/ref_gap"].item() == pytest.approx(expected_gap)


def test_hint_metrics_denominators_with_non_hint_tokens():
    # 4 loss tokens, 2 hint tokens, one of them masked by its trust region: is_masked = 1/2 (over hint tokens),
    # token_frac = 2/4. Token 0: p 0.5 -> 0.9 with ref above (pushes up past 0.2): masked.
    # Token 1: p = 0.5, ref log 0.25.
    inputs = make([0.9, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5], [0.0] * 4, ref=[math.log(0.95), math.log(0.25), 0.0, 0.0])
    out, _ = run(inputs, kl_tau=0.0)
    assert out.metrics["composer/hint/is_masked"].item() == pytest.approx(0.5)
    assert out.metrics["composer/hint/token_frac"].item() == pytest.approx(0.5)
    assert out.metrics["composer/hint/ref_gap"].item() == pytest.approx(
        ((math.log(0.95) - math.log(0.9)) + (math.log(0.25) - math.log(0.5))) / 2
    )


def test_adv_tau_scales_the_policy_gradient():
    # A = 2, adv_tau = 0.25, ratio 1.25 (kept): loss = -0.25 * 2 * 1.25 = -0.625.
    out, grad = run(make([0.5], [0.4], [2.0]), kl_tau=0.0, adv_tau=0.25)
    assert out.loss.item() == pytest.approx(-0.625)
    assert grad.tolist() == pytest.approx([-0.625])


def test_loss_weights_scale_the_drift_term_too():
    # A = 0, ratio 1.25, kl_tau = 0.1, weight 3: loss = 3 * 0.1 * ln(1.25)^2 (PRIME-RL's default weights every term).
    out, grad = run(make([0.5], [0.4], [0.0], weights=[3.0]), kl_tau=0.1)
    assert out.loss.item() == pytest.approx(3 * 0.1 * math.log(1.25) ** 2)
    assert grad.tolist() == pytest.approx([3 * 0.2 * math.log(1.25)])


def prime_rl_default_reference(t, i, adv, mask, weights, low, high, adv_tau, kl_tau):
    """PRIME-RL's `default_loss_fn` at 559b447 (DPPO-Binary TV + Kimi-K2.5 KL), written out from its formula."""
    log_ratio = t - i
    ratio = torch.exp(log_ratio)
    diff = torch.exp(t) - torch.exp(i)
    invalid = torch.where(adv > 0, diff > high, diff < -low)
    keep = mask & ~invalid
    per_token = -(keep * (adv_tau * adv) * ratio) + kl_tau * (mask * log_ratio**2)
    return (per_token * weights).sum()


@pytest.mark.parametrize("seed", range(4))
def test_equals_prime_rl_default_loss_without_hints(seed):
    # No hint stream (None, and PRIME-RL's all-0.0 fill): value and gradient equal the reference formula, with unequal
    # bounds, adv_tau != 1, kl_tau != 1e-3 and per-token weights.
    gen = torch.Generator().manual_seed(seed)
    n = 64
    t0 = torch.log(torch.rand(n, generator=gen, dtype=torch.float64) * 0.98 + 0.01)
    i = torch.log(torch.rand(n, generator=gen, dtype=torch.float64) * 0.98 + 0.01)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    mask = torch.rand(n, generator=gen) > 0.2
    weights = torch.rand(n, generator=gen, dtype=torch.float64) * 2
    settings = {"dppo_mask_low": 0.15, "dppo_mask_high": 0.35, "adv_tau": 0.7, "kl_tau": 0.05}
    t_ref = t0.clone().requires_grad_(True)
    expected = prime_rl_default_reference(
        t_ref, i, adv, mask, weights, settings["dppo_mask_low"], settings["dppo_mask_high"], 0.7, 0.05
    )
    expected.backward()
    for ref in (None, torch.zeros(n, dtype=torch.float64)):
        t = t0.clone().requires_grad_(True)
        inputs = Inputs(t, i, ref, adv, mask, weights)
        out = composer_loss(inputs, **settings)
        out.loss.backward()
        assert out.loss.item() == pytest.approx(expected.item(), rel=1e-12)
        assert torch.allclose(t.grad, t_ref.grad, rtol=1e-12, atol=1e-15)
