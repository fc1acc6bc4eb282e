"""Encode a checkpoint directory against a base one, and decode it back, one tensor chunk at a time.

A safetensors file is `u64 header length | JSON header | tensor bytes`. The encoder keeps the header verbatim (zstd)
and codes each tensor's bytes with the codec, against the base tensor of the same name (any file of the base step,
so tensors may move between shards) when dtype and shape match, and in full otherwise. A file whose tensors do not
tile its data section exactly, and any other file (`model.safetensors.index.json`, adapter configs), is coded as raw
bytes. Memory stays bounded by a few chunks: files are memory-mapped and walked in `chunk_elements` pieces.

Every tensor, every file and the whole checkpoint carry a blake3 checksum. The decoder checks each as soon as its
bytes are written and raises `DecodeError` naming the file and tensor at the first mismatch.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import blake3
import numpy as np
import zstandard

from composer_prime.broadcast import codec
from composer_prime.broadcast.manifest import Blob, FileEntry, TensorEntry

ITEMSIZE = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}  # fmt: skip
RAW_CHUNK_BYTES = 64 * 1024**2
MARKER = "STABLE"

Progress = Callable[[int], None]


class DecodeError(ValueError):
    """Decoding did not reproduce the checkpoint the manifest describes."""


class BlobSink(Protocol):
    def write(self, blob: bytes) -> Blob: ...


@dataclass(frozen=True)
class TensorLoc:
    path: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # absolute byte offset in `path`
    nbytes: int


@dataclass(frozen=True)
class SafetensorsLayout:
    header: bytes  # length prefix + JSON, verbatim
    tensors: list[tuple[str, str, tuple[int, ...], int, int]]  # name, dtype, shape, absolute start, nbytes


def checkpoint_files(step_dir: Path) -> list[str]:
    """Files that make up a step directory: everything but the `STABLE` marker and dot-files (temp names)."""
    return sorted(p.name for p in step_dir.iterdir() if p.is_file() and p.name != MARKER and not p.name.startswith("."))


def read_layout(path: Path) -> SafetensorsLayout | None:
    """The layout of a safetensors file whose tensors tile its data section exactly, else None."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            return None
        (length,) = struct.unpack("<Q", prefix)
        if length > min(size - 8, 100 * 1024**2):
            return None
        raw = f.read(length)
    try:
        header = json.loads(raw)
        entries = sorted(
            ((name, info) for name, info in header.items() if name != "__metadata__"),
            key=lambda item: item[1]["data_offsets"][0],
        )
        tensors, cursor, data_start = [], 0, 8 + length
        for name, info in entries:
            begin, end = (int(x) for x in info["data_offsets"])
            if begin != cursor or end < begin:
                return None
            tensors.append((name, str(info["dtype"]), tuple(int(d) for d in info["shape"]), data_start + begin, end - begin))
            cursor = end
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if data_start + cursor != size:
        return None
    return SafetensorsLayout(prefix + raw, tensors)


def scan_checkpoint(step_dir: Path) -> dict[str, TensorLoc]:
    """Tensor name -> where its bytes are, over every safetensors file of a step directory."""
    index: dict[str, TensorLoc] = {}
    for name in checkpoint_files(step_dir):
        layout = read_layout(step_dir / name) if name.endswith(".safetensors") else None
        for tensor, dtype, shape, start, nbytes in layout.tensors if layout else []:
            index[tensor] = TensorLoc(step_dir / name, dtype, shape, start, nbytes)
    return index


def _itemsize(dtype: str, nbytes: int) -> int:
    size = ITEMSIZE.get(dtype, 1)
    return size if nbytes % size == 0 else 1


def _map(path: Path) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=np.uint8)
    return np.memmap(path, dtype=np.uint8, mode="r")


def encode_files(
    new_dir: Path,
    base: dict[str, TensorLoc] | None,
    sink: BlobSink,
    chunk_elements: int,
    level: int = codec.DEFAULT_LEVEL,
    xor: bool = True,
    progress: Progress | None = None,
) -> tuple[list[FileEntry], dict[str, str]]:
    """Code every file of `new_dir` (against `base` when given) into `sink`. Returns the entries and file hashes."""
    entries, hashes = [], {}
    maps: dict[Path, np.ndarray] = {}
    for name in checkpoint_files(new_dir):
        path = new_dir / name
        data = _map(path)
        layout = read_layout(path) if name.endswith(".safetensors") else None
        file_hash = blake3.blake3()
        if layout is None:
            blobs = []
            for start in range(0, data.size, RAW_CHUNK_BYTES):
                piece = data[start : start + RAW_CHUNK_BYTES]
                file_hash.update(piece)
                blobs.append(sink.write(codec.encode_full(piece, level)))
                if progress:
                    progress(piece.size)
            entry = dict(kind="raw", raw=blobs)
        else:
            file_hash.update(layout.header)
            header = sink.write(zstandard.ZstdCompressor(level=level).compress(layout.header))
            tensors = []
            for tensor, dtype, shape, start, nbytes in layout.tensors:
                itemsize = _itemsize(dtype, nbytes)
                new = codec.element_view(data[start : start + nbytes], itemsize)
                old = None
                loc = base.get(tensor) if base is not None else None
                if loc is not None and loc.dtype == dtype and loc.shape == shape and loc.nbytes == nbytes:
                    if loc.path not in maps:
                        maps[loc.path] = _map(loc.path)
                    old = codec.element_view(maps[loc.path][loc.start : loc.start + nbytes], itemsize)
                tensor_hash, blobs, changed = blake3.blake3(), [], 0
                for lo in range(0, max(new.size, 1), chunk_elements):
                    new_chunk = new[lo : lo + chunk_elements]
                    blob, n_changed = codec.encode_chunk(
                        None if old is None else old[lo : lo + chunk_elements], new_chunk, level, xor
                    )
                    blobs.append(sink.write(blob))
                    changed += n_changed
                    tensor_hash.update(new_chunk.view(np.uint8))
                    if progress:
                        progress(new_chunk.nbytes)
                file_hash.update(data[start : start + nbytes])
                tensors.append(
                    TensorEntry(
                        name=tensor, dtype=dtype, shape=list(shape), itemsize=itemsize, nbytes=nbytes,
                        blake3=tensor_hash.hexdigest(), changed=changed, chunks=blobs,
                    )
                )  # fmt: skip
            entry = dict(kind="safetensors", header=header, tensors=tensors)
        hashes[name] = file_hash.hexdigest()
        entries.append(FileEntry(name=name, size=data.size, blake3=hashes[name], **entry))
    return entries, hashes


def _write(f, data) -> None:
    f.write(memoryview(np.ascontiguousarray(data)).cast("B") if isinstance(data, np.ndarray) else data)


def decode_files(
    files: list[FileEntry],
    read_blob: Callable[[Blob], bytes],
    base: dict[str, TensorLoc] | None,
    out_dir: Path,
    chunk_elements: int,
    progress: Progress | None = None,
) -> dict[str, str]:
    """Write every file of a section into `out_dir`, checking each checksum. Returns the file hashes."""
    hashes: dict[str, str] = {}
    maps: dict[Path, np.ndarray] = {}
    for entry in files:
        if "/" in entry.name or entry.name in ("", ".", "..", MARKER):
            raise DecodeError(f"manifest names an unsafe file {entry.name!r}")
        file_hash, written = blake3.blake3(), 0
        with (out_dir / entry.name).open("wb") as f:
            if entry.kind == "raw":
                for blob in entry.raw:
                    expected = min(RAW_CHUNK_BYTES, entry.size - written)
                    piece = codec.decode_chunk(None, read_blob(blob), expected, 1)
                    file_hash.update(piece)
                    _write(f, piece)
                    written += piece.size
                    if progress:
                        progress(piece.size)
            else:
                if entry.header is None:
                    raise DecodeError(f"{entry.name}: safetensors entry has no header blob")
                try:
                    header = zstandard.ZstdDecompressor().decompress(read_blob(entry.header), max_output_size=1 << 30)
                except zstandard.ZstdError as err:
                    raise DecodeError(f"{entry.name}: header blob does not decode: {err}") from err
                file_hash.update(header)
                f.write(header)
                written += len(header)
                for tensor in entry.tensors:
                    written += _decode_tensor(entry.name, tensor, read_blob, base, maps, f, file_hash, chunk_elements)
                    if progress:
                        progress(tensor.nbytes)
            f.flush()
            os.fsync(f.fileno())
        if written != entry.size or file_hash.hexdigest() != entry.blake3:
            raise DecodeError(
                f"{entry.name}: rebuilt file ({written} bytes) does not match the published checksum "
                f"({entry.size} bytes, blake3 {entry.blake3[:16]}...)"
            )
        hashes[entry.name] = entry.blake3
    return hashes


def _decode_tensor(file_name, tensor: TensorEntry, read_blob, base, maps, f, file_hash, chunk_elements) -> int:
    count = tensor.nbytes // tensor.itemsize
    old = None
    loc = base.get(tensor.name) if base is not None else None
    if loc is not None and loc.nbytes == tensor.nbytes:
        if loc.path not in maps:
            maps[loc.path] = _map(loc.path)
        old = codec.element_view(maps[loc.path][loc.start : loc.start + loc.nbytes], tensor.itemsize)
    expected_chunks = max(1, -(-count // chunk_elements))
    if len(tensor.chunks) != expected_chunks:
        raise DecodeError(f"{file_name}: tensor {tensor.name} has {len(tensor.chunks)} chunks, expected {expected_chunks}")
    tensor_hash = blake3.blake3()
    for i, blob in enumerate(tensor.chunks):
        lo = i * chunk_elements
        n = min(chunk_elements, count - lo)
        try:
            chunk = codec.decode_chunk(None if old is None else old[lo : lo + n], read_blob(blob), n, tensor.itemsize)
        except codec.CodecError as err:
            raise DecodeError(f"{file_name}: tensor {tensor.name} chunk {i}: {err}") from err
        raw = chunk.view(np.uint8)
        tensor_hash.update(raw)
        file_hash.update(raw)
        _write(f, raw)
    if tensor_hash.hexdigest() != tensor.blake3:
        raise DecodeError(
            f"{file_name}: tensor {tensor.name} does not match its published checksum after decoding "
            "(wrong base checkpoint or corrupt delta)"
        )
    return tensor.nbytes
