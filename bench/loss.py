"""Forward+backward throughput of composer_loss against PRIME-RL's default loss, side by side in one run.

Both losses run through PRIME-RL's own `compute_loss` over the same packed micro batch when PRIME_RL_SRC names a
PRIME-RL checkout (the real call path: one loss call per packed sample, sum, divide by the rl-token count).
Without PRIME_RL_SRC only composer_loss is timed, through a local loop of the same shape, and no ratio is printed.

    python bench/loss.py [--samples 8] [--tokens 65536] [--hint-frac 0.05] [--reps 20] [--device cpu]

Target (issue 2): composer_loss costs at most 1.25x PRIME-RL's default loss.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from composer_prime.loss import composer_loss  # noqa: E402


def load_prime_rl():
    src = os.environ.get("PRIME_RL_SRC")
    if not src:
        return None
    for sub in ("src", "packages/prime-rl-configs/src"):
        sys.path.insert(0, str(Path(src) / sub))
    from prime_rl.configs.trainer import CustomLossConfig, DefaultLossConfig
    from prime_rl.trainer.rl.loss import compute_loss, setup_rl_loss_fn

    return compute_loss, setup_rl_loss_fn, CustomLossConfig, DefaultLossConfig


def make_batch(samples: int, tokens: int, hint_frac: float, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    base, extra = divmod(tokens, samples)
    lengths = [base + (1 if i < extra else 0) for i in range(samples)]
    batch = {k: [] for k in ("trainer_logprobs", "inference_logprobs", "ref_logprobs", "advantages", "loss_mask")}
    for n in lengths:
        t = -torch.rand(n, generator=gen) * 4
        i = (t + torch.randn(n, generator=gen) * 0.05).clamp(max=0)
        prompt = n // 4
        mask = torch.ones(n, dtype=torch.bool)
        mask[:prompt] = False
        hint = (torch.rand(n, generator=gen) < hint_frac) & mask
        ref = torch.where(hint, (t + torch.randn(n, generator=gen)).clamp(max=-1e-3), torch.zeros(n))
        adv = torch.randn(1, generator=gen).expand(n).clone()
        for key, value in zip(batch, (t, i, ref, adv, mask), strict=True):
            batch[key].append(value.to(device))
    return batch


def time_fn(fn, reps: int, device: str) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=65536)
    parser.add_argument("--hint-frac", type=float, default=0.05)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    batch = make_batch(args.samples, args.tokens, args.hint_frac, args.device)
    rl_tokens = int(sum(m.sum() for m in batch["loss_mask"]))
    prime_rl = load_prime_rl()

    def step(loss_fn, with_ref: bool):
        t = [x.detach().requires_grad_(True) for x in batch["trainer_logprobs"]]
        refs = batch["ref_logprobs"] if with_ref else None
        if prime_rl is not None:
            compute_loss = prime_rl[0]
            loss, _ = compute_loss(
                trainer_logprobs=t,
                inference_logprobs=batch["inference_logprobs"],
                ref_logprobs=refs,
                advantages=batch["advantages"],
                loss_mask=batch["loss_mask"],
                rl_weights=None,
                ce_weights=None,
                ref_kl_weights=None,
                rl_loss_fn=loss_fn,
                rl_scale=rl_tokens,
                ce_scale=1,
                ref_kl_scale=1,
            )
        else:
            from types import SimpleNamespace

            loss = t[0].sum() * 0.0
            for k in range(len(t)):
                inputs = SimpleNamespace(
                    trainer_logprobs=t[k],
                    inference_logprobs=batch["inference_logprobs"][k],
                    ref_logprobs=None if refs is None else refs[k],
                    advantages=batch["advantages"][k],
                    loss_mask=batch["loss_mask"][k],
                    loss_weights=None,
                )
                loss = loss + loss_fn(inputs).loss
            loss = loss / rl_tokens
        loss.backward()

    rows: list[tuple[str, float]] = []
    if prime_rl is not None:
        _, setup_rl_loss_fn, CustomLossConfig, DefaultLossConfig = prime_rl
        default_fn = setup_rl_loss_fn(DefaultLossConfig())
        composer_fn = setup_rl_loss_fn(CustomLossConfig(import_path="composer_prime.loss.composer_loss"))
        # Interleave the candidates so drift in machine load hits all of them alike.
        candidates = {
            "prime-rl default_loss_fn": (default_fn, False),
            "composer_loss, no reference stream": (composer_fn, False),
            f"composer_loss, {args.hint_frac:.0%} hint tokens": (composer_fn, True),
        }
    else:
        candidates = {
            "composer_loss, no reference stream": (composer_loss, False),
            f"composer_loss, {args.hint_frac:.0%} hint tokens": (composer_loss, True),
        }
    timings: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(3):
        for name, (fn, with_ref) in candidates.items():
            reps = max(1, args.reps // 3)
            timings[name].append(time_fn(lambda fn=fn, ref=with_ref: step(fn, ref), reps, args.device))
    rows = [(name, min(ts)) for name, ts in timings.items()]

    total = sum(len(t) for t in batch["trainer_logprobs"])
    print(
        f"forward+backward over one packed micro batch: {args.samples} samples, {total} tokens "
        f"({rl_tokens} on the loss mask), device={args.device}, torch threads={torch.get_num_threads()}"
    )
    print(f"{'loss':<40} {'ms / batch':>12} {'Mtok/s':>10} {'vs default':>11}")
    reference = rows[0][1] if prime_rl is not None else None
    for name, seconds in rows:
        ratio = f"{seconds / reference:>10.2f}x" if reference else f"{'n/a':>11}"
        print(f"{name:<40} {seconds * 1e3:>12.2f} {total / seconds / 1e6:>10.2f} {ratio}")
    if prime_rl is None:
        print("PRIME_RL_SRC is not set: no PRIME-RL default loss to compare against, so no ratio.")
    else:
        worst = max(s for _, s in rows[1:]) / reference
        print(f"worst composer/default ratio: {worst:.2f}x (target <= 1.25x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
