"""The trained policy on this machine: the single-process trainer step (`trainer.py`: `composer_loss`, AdamW, bf16
broadcast) applied to live episodes, with a durable per-cycle checkpoint.

A checkpoint is a folder `model.safetensors` (fp32 master weights) + `optimizer.pt`, written under a temp name and
renamed into place, so a crash leaves either the whole checkpoint or none. Shipping writes PRIME-RL's filesystem
broadcast (`broadcasts/step_<version>/`, bf16 safetensors, then `STABLE`), the layout the relay origin publishes.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from composer_prime.realtime.durable import DurableError
from composer_prime.realtime.ingest.join import Episode
from composer_prime.realtime.ingest.staleness import importance_weight


class Policy:
    def __init__(self, model_dir: Path, trainer_config: Any, loss_kwargs: dict[str, Any]):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = model_dir
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
        self.model.eval()
        self.trainer_config = trainer_config
        self.loss_kwargs = loss_kwargs
        from composer_prime.realtime.cycle.trainer import make_optimizer

        self.optimizer = make_optimizer(self.model, trainer_config)

    # ------------------------------------------------------------ checkpoints
    def save(self, directory: Path) -> None:
        """Write the checkpoint under a temp name, then rename it into place; a failed write (a full disk) removes the
        temp dir and raises `DurableError`."""
        import torch
        from safetensors.torch import save_file

        from composer_prime.atomic import fsync_dir

        tmp = directory.with_name(f".{directory.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        state = {
            k: v.detach().contiguous()
            for k, v in self.model.state_dict().items()
            if k != "lm_head.weight" or not self.model.config.tie_word_embeddings
        }
        with writing(directory, cleanup=tmp):
            tmp.mkdir(parents=True)
            save_file(state, tmp / "model.safetensors")
            torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
            fsync_dir(tmp)
            tmp.rename(directory)
            fsync_dir(directory.parent)

    def load(self, directory: Path) -> None:
        import torch
        from safetensors.torch import load_file

        self.model.load_state_dict(load_file(directory / "model.safetensors"), strict=False)
        self.model.tie_weights()
        self.optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=True))
        self.model.eval()

    # ------------------------------------------------------------ training
    def sequence_logprobs(self, token_ids: list[int]) -> list[float]:
        """log p(token_i | <i) for every position (0.0 at position 0)."""
        import torch

        with torch.no_grad():
            ids = torch.tensor([token_ids])
            logits = self.model(input_ids=ids).logits[0, :-1].float()
            logp = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]
        return [0.0, *logp.tolist()]

    def weight(self, episode: Episode, cap: float) -> float:
        """The sequence-level importance weight of a stale episode under the current policy."""
        current: list[float] = []
        served: list[float] = []
        for sample in episode.samples:
            now = self.sequence_logprobs(sample.token_ids)
            current += [c for c, m in zip(now, sample.mask, strict=True) if m]
            served += [s for s, m in zip(sample.logprobs, sample.mask, strict=True) if m]
        return importance_weight(current, served, cap)

    def train(self, episodes: list[Episode], steps: int, cap: float) -> list[dict[str, float]]:
        """`steps` optimizer steps over every episode; returns the trainer's figures per step."""
        from composer_prime.realtime.cycle.trainer import Sample, train_step

        weights = {e.session_id: self.weight(e, cap) if e.importance_weighted else 1.0 for e in episodes}
        samples = [
            Sample(
                token_ids=s.token_ids,
                mask=s.mask,
                logprobs=s.logprobs,
                advantages=[e.advantage * weights[e.session_id]] * len(s.token_ids),
                ref_logprobs=None,
            )
            for e in episodes
            for s in e.samples
        ]
        figures = []
        for _ in range(steps):
            figures.append(train_step(self.model, self.optimizer, samples, self.loss_kwargs, self.trainer_config))
        weighted = [weights[e.session_id] for e in episodes if e.importance_weighted]
        if weighted:  # over the stale sessions it scaled; a fresh session's 1.0 is no weight
            figures[-1]["importance_weight_mean"] = sum(weighted) / len(weighted)
            figures[-1]["importance_weighted"] = float(len(weighted))
        return figures

    def broadcast(self, broadcasts: Path, version: int) -> Path:
        """`broadcasts/step_<version>/` as PRIME-RL's filesystem broadcast writes it (idempotent)."""
        from composer_prime.realtime.cycle.trainer import broadcast

        step_dir = broadcasts / "broadcasts" / f"step_{version}"
        if (step_dir / "STABLE").exists():
            return step_dir
        with writing(step_dir):  # no STABLE until the weights are whole; the rerun writes the step again
            return broadcast(self.model, broadcasts, version)


@contextmanager
def writing(target: Path, cleanup: Path | None = None) -> Iterator[None]:
    """Turn a failed write of `target` (a full disk: safetensors and torch raise their own errors for it) into
    `DurableError` naming it and the fix, removing `cleanup` first."""
    try:
        yield
    except Exception as err:  # noqa: BLE001 - every writer's error means the same: the target is not written
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)
        raise DurableError(
            f"cannot write {str(target)!r} ({type(err).__name__}: {err}); free space or fix the "
            "folder's permissions and rerun: the run resumes from the last file written whole"
        ) from None
