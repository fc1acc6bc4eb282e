"""The chunk codec: exact round trips for every element width, and loud failures on damaged blobs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from composer_prime.relay import codec
from tests.support.rl_checkpoints import ModelShape, RLTrainer


def _bf16_bits(tensor: torch.Tensor) -> np.ndarray:
    return tensor.contiguous().view(torch.uint16).numpy().ravel().copy()


@pytest.fixture(scope="module")
def rl_step_pair() -> tuple[np.ndarray, np.ndarray]:
    """All weights of a tiny LM before and after one real AdamW step (fp32 master, bf16 broadcast), as uint16."""
    trainer = RLTrainer(ModelShape(), lr=3e-6)
    trainer.step()
    before = trainer.bf16_state_dict()
    trainer.step()
    after = trainer.bf16_state_dict()
    return (
        np.concatenate([_bf16_bits(t) for t in before.values()]),
        np.concatenate([_bf16_bits(t) for t in after.values()]),
    )


def test_long_gaps_use_the_escape_stream():
    old = np.zeros(3_000_000, dtype="<u2")
    new = old.copy()
    positions = [0, 254, 255 + 254 + 1, 2_999_999]  # gaps 0, 253, 255 (escaped), 2_489_489 (escaped)
    new[positions] = 7
    blob, changed = codec.encode_chunk(old, new)
    assert changed == 4
    assert np.array_equal(codec.decode_chunk(old, blob, old.size, 2), new)
    assert np.flatnonzero(codec.decode_chunk(old, blob, old.size, 2)).tolist() == positions
    assert blob[1:3] == bytes([4, 2])  # 4 changes, 2 escaped gaps
    with pytest.raises(codec.CodecError, match="expected"):
        codec.decode_chunk(old, blob[:2] + bytes([1]) + blob[3:], old.size, 2)


@pytest.mark.parametrize("xor", [True, False])
def test_real_rl_step_round_trips_bit_exact(rl_step_pair, xor):
    old, new = rl_step_pair
    changed = int((old != new).sum())
    assert 0 < changed < old.size // 5, "a 3e-6 AdamW step should change a few percent of bf16 values"
    blob, n_changed = codec.encode_chunk(old, new, xor=xor)
    assert blob[0] == (codec.DELTA_XOR if xor else codec.DELTA)
    assert n_changed == changed
    assert len(blob) < new.nbytes / 8
    decoded = codec.decode_chunk(old, blob, new.size, 2)
    assert decoded.dtype == np.dtype("<u2")
    assert np.array_equal(decoded, new)


def test_xor_values_beat_raw_values_on_rl_steps(rl_step_pair):
    old, new = rl_step_pair
    xor_blob, _ = codec.encode_chunk(old, new, xor=True)
    raw_blob, _ = codec.encode_chunk(old, new, xor=False)
    assert len(xor_blob) < len(raw_blob)


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_every_element_width_round_trips(itemsize):
    rng = np.random.default_rng(itemsize)
    dtype = np.dtype(f"<u{itemsize}")
    old = rng.integers(0, np.iinfo(dtype).max, size=5000, dtype=dtype, endpoint=True)
    new = old.copy()
    idx = rng.choice(old.size, size=120, replace=False)
    new[idx] = rng.integers(0, np.iinfo(dtype).max, size=idx.size, dtype=dtype, endpoint=True)
    for base in (old, None):
        blob, _ = codec.encode_chunk(base, new)
        assert np.array_equal(codec.decode_chunk(base, blob, new.size, itemsize), new)


def test_bit_patterns_not_float_values_decide_what_changed():
    def as_bits(xs: list[float]) -> np.ndarray:
        return torch.tensor(xs, dtype=torch.bfloat16).view(torch.uint16).numpy().copy()

    old = as_bits([0.0, 1.0, float("nan"), 2.0])
    new = as_bits([-0.0, 1.0, float("nan"), 2.0])
    new[2] = old[2] ^ 0x0001  # another NaN payload: float-equal in no sense, bit-different
    blob, changed = codec.encode_chunk(old, new)
    assert changed == 2
    assert np.array_equal(codec.decode_chunk(old, blob, 4, 2), new)


def test_unchanged_chunk_is_one_byte_and_dense_change_falls_back_to_full():
    old = np.arange(1000, dtype="<u2")
    assert codec.encode_chunk(old, old.copy()) == (bytes([codec.SAME]), 0)
    new = old + 1
    blob, changed = codec.encode_chunk(old, new)
    assert blob[0] == codec.FULL and changed == 1000
    assert np.array_equal(codec.decode_chunk(old, blob, 1000, 2), new)


def test_empty_chunk_round_trips():
    empty = np.zeros(0, dtype="<u2")
    for base in (None, empty):
        blob, _ = codec.encode_chunk(base, empty)
        assert codec.decode_chunk(base, blob, 0, 2).size == 0


def test_damaged_blobs_fail_loudly(rl_step_pair):
    old, new = rl_step_pair
    blob, _ = codec.encode_chunk(old, new)
    with pytest.raises(codec.CodecError):
        codec.decode_chunk(old, blob[: len(blob) // 2], new.size, 2)  # truncated zstd frame
    with pytest.raises(codec.CodecError, match="unknown blob kind"):
        codec.decode_chunk(old, bytes([9]) + blob[1:], new.size, 2)
    with pytest.raises(codec.CodecError, match="needs a base"):
        codec.decode_chunk(None, blob, new.size, 2)
    with pytest.raises(codec.CodecError, match="base chunk has"):
        codec.decode_chunk(old[:-1], blob, new.size, 2)
    with pytest.raises(codec.CodecError):
        codec.decode_chunk(old[:100], blob, 100, 2)  # positions run past the chunk or counts disagree
    with pytest.raises(codec.CodecError, match="empty blob"):
        codec.decode_chunk(old, b"", new.size, 2)


def test_element_view_refuses_ragged_bytes():
    with pytest.raises(codec.CodecError, match="whole number"):
        codec.element_view(b"\x00\x01\x02", 2)
    with pytest.raises(codec.CodecError, match="1, 2, 4 or 8"):
        codec.element_view(b"\x00" * 6, 3)
