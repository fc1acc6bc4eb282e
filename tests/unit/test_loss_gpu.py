"""composer_loss on CUDA agrees with the CPU computation (runs on GPU machines only)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from composer_prime.loss import composer_loss

pytestmark = [pytest.mark.gpu]


def test_cuda_matches_cpu_in_value_and_gradient():
    gen = torch.Generator().manual_seed(0)
    n = 4096
    t = -torch.rand(n, generator=gen) * 3
    i = (t + torch.randn(n, generator=gen) * 0.1).clamp(max=0)
    hint = torch.rand(n, generator=gen) < 0.1
    ref = torch.where(hint, (t + torch.randn(n, generator=gen)).clamp(max=-1e-3), torch.zeros(n))
    adv = torch.randn(n, generator=gen)
    mask = torch.rand(n, generator=gen) > 0.2

    def run(device: str):
        tl = t.clone().to(device).requires_grad_(True)
        out = composer_loss(
            SimpleNamespace(
                trainer_logprobs=tl,
                inference_logprobs=i.to(device),
                ref_logprobs=ref.to(device),
                advantages=adv.to(device),
                loss_mask=mask.to(device),
                loss_weights=None,
            )
        )
        out.loss.backward()
        return out.loss.detach().cpu(), tl.grad.cpu(), {k: v.cpu() for k, v in out.metrics.items()}

    cpu_loss, cpu_grad, cpu_metrics = run("cpu")
    gpu_loss, gpu_grad, gpu_metrics = run("cuda")
    torch.testing.assert_close(gpu_loss, cpu_loss, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(gpu_grad, cpu_grad, rtol=1e-5, atol=1e-6)
    for key in cpu_metrics:
        torch.testing.assert_close(gpu_metrics[key], cpu_metrics[key], rtol=1e-5, atol=1e-6)
