"""What one published version holds: the manifest, its framing, and the checkpoint digest.

A version's payload is a sequence of shard files (SHARDCAST's `shard_00001.bin`, ...). All shards but the last carry
the body: the codec blobs of one or two sections, each section starting on a fresh shard. The last shard carries the
manifest, framed so that a reader can tell a complete one from a truncated or corrupt one on its own, and signed by
the origin (`signing.py`) so that a client can tell the origin's manifest from anyone else's:

    b"CPDELTA1" | u64 little-endian JSON length | JSON | blake3(JSON) (32 bytes) | Ed25519 signature of JSON (64 bytes)

The blake3 tells a damaged shard (fetched again) from a forged one (the signature fails: refused, never retried).

A section is either `delta` (turns the checkpoint of `base_step`, identified by `base_digest`, into this step's) or
`full` (this step's checkpoint from nothing). Keyframes carry a `full` section and, when there was a previous version,
a `delta` section too, so that clients already at the previous step never download the keyframe.

The checkpoint digest names the exact bytes of a checkpoint directory: blake3 over the sorted `name:digest` lines of
its files (file digests are trees of chunk digests, see `checkpoint.py`). Every version records its own digest and
the digest of its base, which is how a client proves it holds
the right base before applying a delta and the right result after. `run_id` names the training run the version
belongs to, so one key can sign several runs and a client serves only its own. `sequence` orders publications within
a run: it grows with every version the origin publishes, across restarts and re-publications of a step (a resumed
trainer re-broadcasting an older step gets a newer sequence), so a client can refuse a validly signed but older
publication replayed at it.
"""

from __future__ import annotations

import json
import struct
from typing import Literal

import blake3
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from composer_prime.relay import signing

MAGIC = b"CPDELTA1"
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
FORMAT = "composer-prime-delta/1"
_DIGEST_BYTES = 32


class ManifestError(ValueError):
    """A manifest shard that is truncated, corrupt or not ours."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Blob(_Strict):
    offset: int = Field(ge=0)
    """Byte offset of the blob inside its section's body."""
    length: int = Field(ge=1)
    """Blob length in bytes."""


class TensorEntry(_Strict):
    name: str
    """Tensor name, as in the safetensors header."""
    dtype: str
    """safetensors dtype string (`BF16`, `F32`, ...)."""
    shape: list[int]
    """Tensor shape."""
    itemsize: int = Field(ge=1, le=8)
    """Element width the codec used (1 for dtypes it treats as plain bytes)."""
    nbytes: int = Field(ge=0)
    """Tensor size in bytes."""
    digest: str
    """blake3 over the blake3 digests of the tensor's chunks (see `checkpoint.py`)."""
    changed: int = Field(ge=0)
    """Elements whose bit pattern differs from the base (all of them in a full section)."""
    chunks: list[Blob]
    """One codec blob per chunk of at most `chunk_elements` elements, in order."""


class FileEntry(_Strict):
    name: str
    """File name inside the step directory."""
    size: int = Field(ge=0)
    """File size in bytes."""
    digest: str
    """safetensors: blake3 of the header bytes followed by the tensor digests; raw: blake3 of the piece digests."""
    kind: Literal["safetensors", "raw"]
    """`safetensors`: header blob + one entry per tensor in file order; `raw`: zstd blobs of the bytes."""
    header: Blob | None = None
    """safetensors only: zstd of the 8-byte length prefix and the JSON header, verbatim."""
    tensors: list[TensorEntry] = []
    """safetensors only: the tensors, in the order their bytes appear in the file."""
    raw: list[Blob] = []
    """raw only: codec FULL blobs of consecutive byte ranges."""


class Section(_Strict):
    kind: Literal["delta", "full"]
    """`delta` needs the base checkpoint; `full` stands alone."""
    base_step: int | None = None
    """delta only: the step this section applies to."""
    base_digest: str | None = None
    """delta only: checkpoint digest the base must have."""
    first_shard: int = Field(ge=1)
    """1-based index of the section's first body shard."""
    num_shards: int = Field(ge=0)
    """Body shards the section spans."""
    size: int = Field(ge=0)
    """Body bytes of the section."""
    files: list[FileEntry]
    """Every file of the step directory except `STABLE`."""


class ShardEntry(_Strict):
    size: int = Field(ge=0)
    """Shard size in bytes."""
    blake3: str
    """blake3 of the shard file."""


class Manifest(_Strict):
    format: Literal["composer-prime-delta/1"] = FORMAT
    """Payload format; readers refuse any other."""
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    """The training run this version belongs to (the origin's `run_id`); a client serves one run's versions only."""
    step: int = Field(ge=0)
    """Trainer step this version is (`broadcasts/step_N`); the SHARDCAST version name is `v{step}`."""
    sequence: int = Field(ge=1)
    """Publication order within the run: larger than every version the origin published before (unix time in ns at
    publication, or one more than the last it recorded if the clock went back). A re-published step gets a new,
    larger one."""
    digest: str
    """Checkpoint digest of the step directory."""
    keyframe: bool
    """Whether the version carries a `full` section."""
    chunk_elements: int = Field(ge=1)
    """Codec chunk size in elements."""
    sections: list[Section]
    """One or two sections (delta first)."""
    shards: list[ShardEntry]
    """Body shards (all but the manifest shard), in order."""

    def section(self, kind: Literal["delta", "full"]) -> Section | None:
        return next((section for section in self.sections if section.kind == kind), None)


def checkpoint_digest(file_hashes: dict[str, str]) -> str:
    lines = "".join(f"{name}:{digest}\n" for name, digest in sorted(file_hashes.items()))
    return blake3.blake3(lines.encode()).hexdigest()


def frame_manifest(manifest: Manifest, key: Ed25519PrivateKey) -> bytes:
    body = manifest.model_dump_json().encode()
    return MAGIC + struct.pack("<Q", len(body)) + body + blake3.blake3(body).digest() + signing.sign(key, body)


def parse_manifest(data: bytes, key: Ed25519PublicKey) -> Manifest:
    """The manifest in a manifest shard, once its signature verifies against `key`.

    `ManifestError`: the shard is damaged or truncated (worth fetching again). `signing.SignatureError`: it is intact
    but unsigned or not signed by `key` (refused: fetching it again would get the same forgery). The JSON is parsed
    only after the signature verifies.
    """
    head = len(MAGIC) + 8
    if len(data) < head + _DIGEST_BYTES or not data.startswith(MAGIC):
        raise ManifestError(f"not a {FORMAT} manifest shard ({len(data)} bytes, starts {data[:8]!r})")
    (length,) = struct.unpack("<Q", data[len(MAGIC) : head])
    signed = head + length + _DIGEST_BYTES + signing.SIGNATURE_BYTES
    body = data[head : head + length]
    if len(data) == signed - signing.SIGNATURE_BYTES and blake3.blake3(body).digest() == data[head + length :]:
        raise signing.SignatureError("the manifest is unsigned (an origin that does not sign, or a forgery)")
    if len(data) != signed:
        raise ManifestError(f"manifest shard is {len(data)} bytes, its framing says {signed}")
    if blake3.blake3(body).digest() != data[head + length : head + length + _DIGEST_BYTES]:
        raise ManifestError("manifest checksum mismatch: the shard is corrupt")
    signing.verify(key, body, data[head + length + _DIGEST_BYTES :])
    try:
        return Manifest.model_validate(json.loads(body))
    except (ValueError, ValidationError) as err:
        raise ManifestError(f"manifest does not parse: {err}") from err
