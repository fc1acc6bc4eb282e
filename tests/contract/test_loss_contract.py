"""composer_loss driven by PRIME-RL's own CustomLossConfig, setup_rl_loss_fn and compute_loss."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch

from tests.contract.conftest import PINNED_COMMIT

IMPORT_PATH = "composer_prime.loss.composer_loss"
KL = 1e-3


@pytest.fixture(scope="module")
def prl():
    from prime_rl.configs import trainer as configs
    from prime_rl.trainer.rl import loss

    return type("PrimeRL", (), {"loss": loss, "configs": configs})


def composer_fn(prl, **kwargs):
    kwargs.setdefault("hint_gate", "none")  # the hand values are of the ungated term unless a test sets the gate
    config = prl.configs.CustomLossConfig(import_path=IMPORT_PATH, kwargs=kwargs)
    return prl.loss.setup_rl_loss_fn(config)


def lp(probs):
    return torch.tensor([math.log(p) for p in probs], dtype=torch.float64)


def test_checkout_is_the_pinned_commit(prime_rl_commit):
    if prime_rl_commit is None:
        pytest.skip("PRIME_RL_SRC has no git metadata; cannot check that it is commit 559b447")
    assert prime_rl_commit.startswith(PINNED_COMMIT), (
        f"PRIME_RL_SRC is at {prime_rl_commit}, the contract is pinned to {PINNED_COMMIT}: "
        f"run `git -C $PRIME_RL_SRC checkout {PINNED_COMMIT}`"
    )


def test_loss_inputs_field_names_we_rely_on(prl):
    # composer_loss reads exactly these attributes; a rename upstream must fail here, not in a training run.
    assert [f.name for f in dataclasses.fields(prl.loss.LossInputs)] == [
        "trainer_logprobs",
        "inference_logprobs",
        "ref_logprobs",
        "advantages",
        "loss_mask",
        "loss_weights",
    ]
    assert [f.name for f in dataclasses.fields(prl.loss.LossOutputs)] == ["loss", "metrics"]
    params = inspect.signature(prl.loss.compute_loss).parameters
    assert {"ref_logprobs", "rl_weights", "rl_loss_fn", "rl_scale"} <= set(params)


def test_custom_loss_config_parses_the_toml_block(prl):
    from pydantic import TypeAdapter

    block = {"type": "custom", "import_path": IMPORT_PATH, "kwargs": {"hint_coef": 0.5, "kl_tau": 1e-3}}
    config = TypeAdapter(prl.configs.LossConfig).validate_python(block)
    assert isinstance(config, prl.configs.CustomLossConfig)
    from prime_rl.utils.utils import import_object

    from composer_prime.loss import composer_loss

    assert import_object(config.import_path) is composer_loss


def packed_batch():
    """Three samples packed as compute_loss receives them: two composer samples and one that ships no reference
    stream (PRIME-RL fills 0.0 for it in a mixed micro batch)."""
    samples = [
        # composer sample with two hint tokens; token 0 is prompt (off the mask).
        dict(
            t=[0.5, 0.3, 0.6, 0.5],
            i=[0.5, 0.3, 0.6, 0.4],
            adv=[0.5, 0.5, 0.5, 0.5],
            ref=[0.0, math.log(0.6), 0.0, math.log(0.25)],
            mask=[False, True, True, True],
        ),
        # composer sample without hint targets (all-zero reference).
        dict(t=[0.5, 0.5], i=[0.5, 0.5], adv=[-1.0, -1.0], ref=[0.0, 0.0], mask=[True, True]),
        # a non-composer sample: 0.0-filled reference, a token past the upward trust region with A > 0.
        dict(t=[0.9], i=[0.5], adv=[1.0], ref=[0.0], mask=[True]),
    ]
    t = [lp(s["t"]).requires_grad_(True) for s in samples]
    return dict(
        trainer_logprobs=t,
        inference_logprobs=[lp(s["i"]) for s in samples],
        ref_logprobs=[torch.tensor(s["ref"], dtype=torch.float64) for s in samples],
        advantages=[torch.tensor(s["adv"], dtype=torch.float64) for s in samples],
        loss_mask=[torch.tensor(s["mask"]) for s in samples],
    )


def test_compute_loss_on_a_mixed_packed_batch_matches_hand_values(prl):
    batch = packed_batch()
    loss, metrics = prl.loss.compute_loss(
        **batch,
        rl_weights=None,
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=composer_fn(prl),
        rl_scale=6,
        ce_scale=1,
        ref_kl_scale=1,
    )
    ln2, r = math.log(2), 1.25
    # sample 0 has 3 loss tokens, 2 of them hint tokens: each hint token weighs w = 0.02 * 3 / 2 = 0.03
    # (default hint_coef 0.02, hint_norm "sample", under the cap of 1).
    w = 0.03
    # sample 0: token 1: -(A + w * gap) = -(0.5 + w ln2)      (ratio 1, ref = log 0.6 vs trainer log 0.3)
    #           token 2: -0.5                                  (ref 0.0: no hint)
    #           token 3: -(0.5 - w ln2) * 1.25 + kl * ln(1.25)^2  (gap = log .25 - log .5 = -ln2, probs moved 0.1)
    s0 = -(0.5 + w * ln2) - 0.5 - (0.5 - w * ln2) * r + KL * math.log(r) ** 2
    # sample 1: two tokens, A = -1, ratio 1: +1 each.
    s1 = 2.0
    # sample 2: p 0.5 -> 0.9 with A = +1 is outside the trust region: only drift kl * ln(1.8)^2.
    s2 = KL * math.log(1.8) ** 2
    assert loss.item() == pytest.approx((s0 + s1 + s2) / 6)

    loss.backward()
    g0, g1, g2 = (t.grad.tolist() for t in batch["trainer_logprobs"])
    # d/d logp_t of -(signal) * ratio + kl * log_ratio^2 = -signal * ratio + 2 kl log_ratio, divided by rl_scale.
    assert g0 == pytest.approx([0.0, -(0.5 + w * ln2) / 6, -0.5 / 6, (-(0.5 - w * ln2) * r + 2 * KL * math.log(r)) / 6])
    assert g1 == pytest.approx([1 / 6, 1 / 6])
    assert g2 == pytest.approx([2 * KL * math.log(1.8) / 6])
    # Metrics come back stacked, one value per sample.
    assert metrics["composer/hint/token_frac"].tolist() == pytest.approx([2 / 3, 0.0, 0.0])
    assert metrics["composer/rl/is_masked_high"].tolist() == pytest.approx([0.0, 0.0, 1.0])


def test_the_sigmoid_gate_through_compute_loss_matches_hand_values(prl):
    batch = packed_batch()
    gated = composer_fn(prl, hint_gate="sigmoid", hint_gate_alpha=2.0)
    loss, metrics = prl.loss.compute_loss(
        **batch,
        rl_weights=None,
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=gated,
        rl_scale=6,
        ce_scale=1,
        ref_kl_scale=1,
    )
    ln2, r, w = math.log(2), 1.25, 0.03
    # As in the ungated test, each hint advantage times g = sigmoid(2 * gap): gap +ln2 -> g = 4/5, gap -ln2 -> 1/5.
    s0 = -(0.5 + w * 0.8 * ln2) - 0.5 - (0.5 - w * 0.2 * ln2) * r + KL * math.log(r) ** 2
    s1, s2 = 2.0, KL * math.log(1.8) ** 2
    assert loss.item() == pytest.approx((s0 + s1 + s2) / 6)
    loss.backward()
    g0 = batch["trainer_logprobs"][0].grad.tolist()
    assert g0 == pytest.approx(
        [0.0, -(0.5 + w * 0.8 * ln2) / 6, -0.5 / 6, (-(0.5 - w * 0.2 * ln2) * r + 2 * KL * math.log(r)) / 6]
    )
    assert metrics["composer/hint/gate"].tolist() == pytest.approx([0.5, 0.0, 0.0])  # (4/5 + 1/5) / 2


def test_matches_prime_rl_default_loss_without_hints(prl):
    # With no hint tokens composer_loss is PRIME-RL's default DPPO + KL loss: same value, same gradients.
    gen = torch.Generator().manual_seed(0)
    lengths = [37, 5, 64, 1, 20, 11, 48, 9]

    def batch():
        t = [(-torch.rand(n, generator=gen, dtype=torch.float64) * 3).requires_grad_(True) for n in lengths]
        i = [
            (x.detach() + torch.randn(n, generator=gen, dtype=torch.float64) * 0.3).clamp(max=0)
            for x, n in zip(t, lengths, strict=True)
        ]
        adv = [torch.randn(1, generator=gen, dtype=torch.float64).expand(n).clone() for n in lengths]
        mask = [torch.rand(n, generator=gen) > 0.3 for n in lengths]
        return dict(trainer_logprobs=t, inference_logprobs=i, advantages=adv, loss_mask=mask)

    common = dict(rl_weights=None, ce_weights=None, ref_kl_weights=None, rl_scale=123, ce_scale=1, ref_kl_scale=1)
    b = batch()
    ours, _ = prl.loss.compute_loss(**b, ref_logprobs=None, rl_loss_fn=composer_fn(prl), **common)
    ours.backward()
    ours_grads = [t.grad.clone() for t in b["trainer_logprobs"]]
    for t in b["trainer_logprobs"]:
        t.grad = None
    default_fn = prl.loss.setup_rl_loss_fn(prl.configs.DefaultLossConfig())
    theirs, _ = prl.loss.compute_loss(**b, ref_logprobs=None, rl_loss_fn=default_fn, **common)
    theirs.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-12)
    for a, g in zip(ours_grads, (t.grad for t in b["trainer_logprobs"]), strict=True):
        torch.testing.assert_close(a, g, rtol=1e-12, atol=1e-15)
    # A micro batch where every reference is PRIME-RL's 0.0 fill is the same as one with no reference stream.
    for t in b["trainer_logprobs"]:
        t.grad = None
    zeros = [torch.zeros(n, dtype=torch.float64) for n in lengths]
    filled, _ = prl.loss.compute_loss(**b, ref_logprobs=zeros, rl_loss_fn=composer_fn(prl), **common)
    assert filled.item() == pytest.approx(ours.item(), rel=1e-12)


def test_rl_weights_reach_the_loss_as_loss_weights(prl):
    # rl_weights [2, 0, 0.5] on tokens with A = 1, ratio 1: compute_loss masks the 0-weight token and passes
    # the weights through; loss = (2 * -1 + 0.5 * -1) / 3 = -2.5 / 3.
    t = [lp([0.5, 0.5, 0.5]).requires_grad_(True)]
    loss, _ = prl.loss.compute_loss(
        trainer_logprobs=t,
        inference_logprobs=[lp([0.5, 0.5, 0.5])],
        ref_logprobs=None,
        advantages=[torch.ones(3, dtype=torch.float64)],
        loss_mask=[torch.ones(3, dtype=torch.bool)],
        rl_weights=[torch.tensor([2.0, 0.0, 0.5], dtype=torch.float64)],
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=composer_fn(prl),
        rl_scale=3,
        ce_scale=1,
        ref_kl_scale=1,
    )
    assert loss.item() == pytest.approx(-2.5 / 3)
    loss.backward()
    assert t[0].grad.tolist() == pytest.approx([-2 / 3, 0.0, -0.5 / 3])


def test_all_masked_micro_batch_still_backpropagates(prl):
    t = [lp([0.5, 0.4]).requires_grad_(True)]
    loss, _ = prl.loss.compute_loss(
        trainer_logprobs=t,
        inference_logprobs=[lp([0.4, 0.4])],
        ref_logprobs=[torch.tensor([-1.0, -1.0], dtype=torch.float64)],
        advantages=[torch.ones(2, dtype=torch.float64)],
        loss_mask=[torch.zeros(2, dtype=torch.bool)],
        rl_weights=None,
        ce_weights=None,
        ref_kl_weights=None,
        rl_loss_fn=composer_fn(prl),
        rl_scale=1,
        ce_scale=1,
        ref_kl_scale=1,
    )
    assert loss.item() == 0.0
    loss.backward()
    assert t[0].grad.tolist() == [0.0, 0.0]


def test_bad_kwargs_fail_on_the_first_call_through_setup_rl_loss_fn(prl):
    from prime_rl.trainer.rl.loss import LossInputs

    fn = composer_fn(prl, hint_coeff=2.0)
    inputs = LossInputs(
        trainer_logprobs=lp([0.5]),
        inference_logprobs=lp([0.5]),
        ref_logprobs=None,
        advantages=torch.ones(1, dtype=torch.float64),
        loss_mask=torch.ones(1, dtype=torch.bool),
    )
    with pytest.raises(ValueError, match="hint_coeff"):
        fn(inputs)
