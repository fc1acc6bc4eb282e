"""The single-process trainer of `composer-prime realtime` (`composer_prime/realtime/cycle/trainer.py`) on its own:
samples from a branched trace, the broadcast layout, the loss split by channel."""

from __future__ import annotations

import json

import pytest
import torch

from composer_prime.local import policy
from composer_prime.realtime.cycle.trainer import (
    Sample,
    TrainerConfig,
    assign_advantages,
    broadcast,
    trace_samples,
    train_step,
)
from tests.support.traces import assistant, build_trace, tool, tool_call


@pytest.fixture(scope="module")
def tokenizer():
    text = "You are a coding agent. Restore `double` in calc.py. def double(x): return x * 2"
    return policy.build_tokenizer([text] * 3, 300)


def test_samples_train_a_shared_node_once_and_carry_advantages_and_references():
    system, user = {"role": "system", "content": "s"}, {"role": "user", "content": "u"}
    first = assistant("", tool_call("c1", "create", path="a.py"), tokens=3, logprob=-0.1)
    trace = build_trace(
        [
            [system, user, first, tool("c1", "ok"), assistant("summary", tokens=2, logprob=-0.2)],
            [system, user, first, {"role": "user", "content": "again"}, assistant("done", tokens=4, logprob=-0.3)],
        ]
    )
    # compact sampled order: first (3 tokens), summary (2), done (4)
    assign_advantages(trace, [1.0] * 3 + [2.0] * 2 + [3.0] * 4)
    trace.nodes[2].reference_logprobs = [-0.05, -0.06, -0.07]
    one, two = trace_samples(trace)
    assert sum(one.mask) == 5 and sum(two.mask) == 4  # `first` is trained in the first sample only
    assert [a for a, m in zip(one.advantages, one.mask, strict=True) if m] == [1.0, 1.0, 1.0, 2.0, 2.0]
    assert [a for a, m in zip(two.advantages, two.mask, strict=True) if m] == [3.0] * 4
    assert [r for r in one.ref_logprobs if r] == [-0.05, -0.06, -0.07]
    assert [lp for lp, m in zip(one.logprobs, one.mask, strict=True) if m] == [-0.1] * 3 + [-0.2] * 2
    with pytest.raises(ValueError, match="8 advantages for 9 sampled tokens"):
        assign_advantages(trace, [0.0] * 8)


def test_broadcast_writes_prime_rl_layout(tokenizer, tmp_path):
    from safetensors import safe_open

    model = policy.build_model(tokenizer, policy.PolicyShape(hidden_size=32, layers=1, heads=2, max_len=512))
    step_dir = broadcast(model, tmp_path, 7)
    assert step_dir == tmp_path / "broadcasts" / "step_7"
    assert sorted(p.name for p in step_dir.iterdir()) == ["STABLE", "model.safetensors"]
    with safe_open(step_dir / "model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt"}
        names = set(f.keys())
        embed = f.get_tensor("model.embed_tokens.weight")
    assert "lm_head.weight" not in names  # tied: stored once, as HF checkpoints do
    assert names == {n for n in model.state_dict() if n != "lm_head.weight"}
    assert embed.dtype == torch.bfloat16
    assert torch.equal(embed, model.model.embed_tokens.weight.detach().to(torch.bfloat16))
    json.dumps(model.config.to_dict())  # the config the server loads is plain JSON


def test_loss_channels_add_up_to_the_loss():
    """pg + hint + kl, each weighted by its sample's share of the rl tokens, is the loss; PRIME-RL's per-sample-mean
    metrics are not (two samples of different lengths and a non-zero kl_tau make sure of it)."""
    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(16, 16)

        def forward(self, input_ids):
            return type("Out", (), {"logits": self.emb(input_ids) @ self.emb.weight.T})()

    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    short = Sample(
        token_ids=[1, 2, 3],
        mask=[False, True, True],
        logprobs=[0.0, -2.0, -3.0],
        advantages=[0.0, 1.0, 1.0],
        ref_logprobs=None,
    )
    long = Sample(
        token_ids=[4, 5, 6, 7, 8, 9],
        mask=[False, True, True, True, True, True],
        logprobs=[0.0, -2.5, -2.0, -3.0, -2.0, -1.5],
        advantages=[0.0, -0.5, -0.5, -0.5, -0.5, -0.5],
        ref_logprobs=[0.0, -1.0, 0.0, 0.0, -0.5, 0.0],
    )
    out = train_step(model, optimizer, [short, long], {"hint_coef": 0.5, "kl_tau": 0.1}, TrainerConfig())
    assert out["loss/pg"] + out["loss/hint"] + out["loss/kl"] == pytest.approx(out["loss"], rel=1e-6, abs=1e-9)
    assert out["loss/hint"] != 0 and out["loss/kl"] > 0
    assert out["hint_share"] == pytest.approx(2 / 7)  # 2 hint tokens of 7 rl tokens
    plain = out["composer/rl/pg_loss"] + out["composer/hint/loss"] + out["composer/drift/log_ratio_sq"]
    assert plain != pytest.approx(out["loss"], rel=1e-3)
