"""Which learning rate lets the smoke's reload probe tell trained weights from stale ones.

The probe (`composer_prime/smoke/probe.py`) flags a reload whose served logprobs differ from the trainer's forward of
the loaded weights by more than `PROBE_LIMIT` (0.01 nats). Serving stale weights is caught only if one step of
training moves the probe's logprobs by more than that, measured on what PRIME-RL broadcasts: bf16 safetensors.

For each learning rate: one AdamW step of PRIME-RL's defaults (betas 0.9/0.999, weight decay 0.01, grad clip 1.0) on
the warm-started smoke policy, a next-token loss over the bundled repository's files; then the share of the weights
whose bf16 value changed and the largest |change| of the probe prompt's logprobs between the bf16 start and bf16
trained weights (fp32 forward, as the probe runs it).

Run in the smoke's PRIME-RL venv: `python bench/smoke_lr.py MODEL_DIR`, where MODEL_DIR is the `model` folder in the
`work` folder of a smoke's `--out`.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

LRS = (2e-6, 2e-5, 5e-5, 2e-4, 2e-3)


def main(argv: list[str]) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from composer_prime.smoke import TOYREPO
    from composer_prime.smoke.probe import probe_ids
    from composer_prime.smoke.report import PROBE_LIMIT

    model_dir = Path(argv[0])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    start = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    text = "\n".join(p.read_text() for p in sorted(TOYREPO.rglob("*.py")))
    batch = torch.tensor([tokenizer(text)["input_ids"][:1024]])
    ids = torch.tensor([probe_ids(model_dir)])

    def probe(model: torch.nn.Module) -> torch.Tensor:
        bf16 = copy.deepcopy(model).to(torch.bfloat16).to(torch.float32)  # the broadcast's rounding
        with torch.no_grad():
            return torch.log_softmax(bf16(ids).logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0]

    before = probe(start)
    print(f"probe bar (PROBE_LIMIT): {PROBE_LIMIT} nats\n")
    print("| lr | bf16 weights changed | probe logprobs moved (max, nats) | over the bar |")
    print("|---|---|---|---|")
    for lr in LRS:
        model = copy.deepcopy(start)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01)
        loss = model(batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        changed = total = 0
        for (_, p0), (_, p1) in zip(start.named_parameters(), model.named_parameters(), strict=True):
            changed += int((p0.detach().bfloat16() != p1.detach().bfloat16()).sum())
            total += p0.numel()
        moved = float((probe(model) - before).abs().max())
        print(f"| {lr:.0e} | {changed / total:.2%} | {moved:.2e} | {'yes' if moved > PROBE_LIMIT else 'no'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
