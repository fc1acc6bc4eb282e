"""Encode a checkpoint directory against a base one, and decode it back, one tensor chunk at a time.

A safetensors file is `u64 header length | JSON header | tensor bytes`. The encoder keeps the header verbatim (zstd)
and codes each tensor's bytes with the codec, against the base tensor of the same name (any file of the base step,
so tensors may move between shards) when dtype and shape match, and in full otherwise. A file whose tensors do not
tile its data section exactly, and any other file (`model.safetensors.index.json`, adapter configs), is coded as raw
bytes. Memory stays bounded by a few chunks: files are memory-mapped and walked in `chunk_elements` pieces.

Every tensor, every file and the whole checkpoint carry a blake3 digest, built as a tree so that chunks can be hashed
in parallel and no byte is hashed twice: a chunk's digest is blake3 of its bytes; a tensor's is blake3 of its chunk
digests; a safetensors file's is blake3 of its header bytes followed by its tensor digests (a raw file's: of its piece
digests); the checkpoint's is blake3 of the sorted `name:digest` lines of its files. The decoder checks each as soon
as its bytes are written and raises `DecodeError` naming the file and tensor at the first mismatch.
"""

from __future__ import annotations

import json
import os
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import blake3
import numpy as np
import zstandard

from composer_prime.relay import codec
from composer_prime.relay.manifest import Blob, FileEntry, TensorEntry

ITEMSIZE = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
RAW_CHUNK_BYTES = 64 * 1024**2
DEFAULT_THREADS = min(8, os.cpu_count() or 1)
MARKER = "STABLE"
# Empty marker files PRIME-RL drops into a step dir: `STABLE` (trainer, written last) and `NCCL_READY` (the
# orchestrator touches it in `weight_dir` on every update, whatever the transport). They are not checkpoint content.
MARKERS = (MARKER, "NCCL_READY")

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
    """Files that make up a step directory: everything but PRIME-RL's markers and dot-files (temp names)."""
    return sorted(
        p.name for p in step_dir.iterdir() if p.is_file() and p.name not in MARKERS and not p.name.startswith(".")
    )


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
            tensors.append(
                (name, str(info["dtype"]), tuple(int(d) for d in info["shape"]), data_start + begin, end - begin)
            )
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


def _ordered(pool: ThreadPoolExecutor, fn: Callable, items: Iterable, window: int) -> Iterator:
    """`fn(item)` for each item, in order, with at most `window` jobs in flight (bounds memory)."""
    pending: deque = deque()
    for item in items:
        pending.append(pool.submit(fn, item))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _digest(head: bytes, parts: list[bytes]) -> str:
    return blake3.blake3(head + b"".join(parts)).hexdigest()


class _Bases:
    """Memory-maps of the base checkpoint's files, opened once each; a tensor's elements as a view."""

    def __init__(self) -> None:
        self.maps: dict[Path, np.ndarray] = {}

    def view(self, loc: TensorLoc, itemsize: int) -> np.ndarray:
        if loc.path not in self.maps:
            self.maps[loc.path] = _map(loc.path)
        return codec.element_view(self.maps[loc.path][loc.start : loc.start + loc.nbytes], itemsize)


@dataclass
class _Coding:
    """What every file of one encode or decode shares: the thread pool, the job, the base, the progress callback."""

    pool: ThreadPoolExecutor
    job: Callable[[tuple], tuple]
    threads: int
    chunk_elements: int
    base: dict[str, TensorLoc] | None
    bases: _Bases
    progress: Progress | None

    def run(self, jobs: Iterable) -> Iterator:
        """Job results in order, at most two jobs per thread in flight."""
        return _ordered(self.pool, self.job, jobs, 2 * self.threads)

    def tick(self, nbytes: int) -> None:
        if self.progress:
            self.progress(nbytes)


def encode_files(
    new_dir: Path,
    base: dict[str, TensorLoc] | None,
    sink: BlobSink,
    chunk_elements: int,
    level: int = codec.DEFAULT_LEVEL,
    xor: bool = True,
    progress: Progress | None = None,
    threads: int = DEFAULT_THREADS,
) -> tuple[list[FileEntry], dict[str, str]]:
    """Code every file of `new_dir` (against `base` when given) into `sink`. Returns the entries and file digests.

    Chunks are coded on `threads` threads (numpy, zstd and blake3 release the GIL) and written in order.
    """

    def encode_job(job: tuple) -> tuple[bytes, int, bytes, int]:
        old, new = job
        blob, changed = codec.encode_chunk(old, new, level, xor)
        return blob, changed, blake3.blake3(new.view(np.uint8)).digest(), new.nbytes

    entries = []
    with ThreadPoolExecutor(threads) as pool:
        coding = _Coding(pool, encode_job, threads, chunk_elements, base, _Bases(), progress)
        for name in checkpoint_files(new_dir):
            path = new_dir / name
            data = _map(path)
            layout = read_layout(path) if name.endswith(".safetensors") else None
            if layout is None:
                entries.append(_encode_raw(name, data, sink, coding))
            else:
                header = sink.write(zstandard.ZstdCompressor(level=level).compress(layout.header))
                entries.append(_encode_safetensors(name, data, layout, header, sink, coding))
    return entries, {entry.name: entry.digest for entry in entries}


def _encode_raw(name: str, data: np.ndarray, sink: BlobSink, coding: _Coding) -> FileEntry:
    pieces = [(None, data[lo : lo + RAW_CHUNK_BYTES]) for lo in range(0, data.size, RAW_CHUNK_BYTES)]
    blobs, parts = [], []
    for blob, _, part, nbytes in coding.run(pieces):
        blobs.append(sink.write(blob))
        parts.append(part)
        coding.tick(nbytes)
    return FileEntry(name=name, size=data.size, digest=_digest(b"", parts), kind="raw", raw=blobs)


def _encode_safetensors(
    name: str, data: np.ndarray, layout: SafetensorsLayout, header: Blob, sink: BlobSink, coding: _Coding
) -> FileEntry:
    jobs, plans = [], []
    size = coding.chunk_elements
    for tensor, dtype, shape, start, nbytes in layout.tensors:
        itemsize = _itemsize(dtype, nbytes)
        new = codec.element_view(data[start : start + nbytes], itemsize)
        loc = coding.base.get(tensor) if coding.base is not None else None
        usable = loc is not None and loc.dtype == dtype and loc.shape == shape and loc.nbytes == nbytes
        old = coding.bases.view(loc, itemsize) if usable else None
        starts = range(0, max(new.size, 1), size)
        plans.append((tensor, dtype, shape, itemsize, nbytes, len(starts)))
        jobs += [(None if old is None else old[lo : lo + size], new[lo : lo + size]) for lo in starts]
    results = coding.run(jobs)
    tensors, tensor_digests = [], []
    for tensor, dtype, shape, itemsize, nbytes, n_chunks in plans:
        blobs, parts, changed = [], [], 0
        for blob, n_changed, part, chunk_bytes in (next(results) for _ in range(n_chunks)):
            blobs.append(sink.write(blob))
            parts.append(part)
            changed += n_changed
            coding.tick(chunk_bytes)
        digest = _digest(b"", parts)
        tensor_digests.append(bytes.fromhex(digest))
        tensors.append(
            TensorEntry(
                name=tensor,
                dtype=dtype,
                shape=list(shape),
                itemsize=itemsize,
                nbytes=nbytes,
                digest=digest,
                changed=changed,
                chunks=blobs,
            )
        )
    digest = _digest(layout.header, tensor_digests)
    return FileEntry(name=name, size=data.size, digest=digest, kind="safetensors", header=header, tensors=tensors)


def _write(f, data: np.ndarray) -> None:
    f.write(memoryview(np.ascontiguousarray(data)).cast("B"))


def decode_files(
    files: list[FileEntry],
    read_blob: Callable[[Blob], bytes],
    base: dict[str, TensorLoc] | None,
    out_dir: Path,
    chunk_elements: int,
    progress: Progress | None = None,
    threads: int = DEFAULT_THREADS,
) -> dict[str, str]:
    """Write every file of a section into `out_dir`, checking each digest as it completes. Returns the file digests."""
    digests: dict[str, str] = {}

    def decode_job(job: tuple) -> tuple[np.ndarray, bytes]:
        where, old, blob, count, itemsize = job
        try:
            chunk = codec.decode_chunk(old, read_blob(blob), count, itemsize)
        except codec.CodecError as err:
            raise DecodeError(f"{where}: {err}") from err
        raw = chunk.view(np.uint8)
        return raw, blake3.blake3(raw).digest()

    with ThreadPoolExecutor(threads) as pool:
        coding = _Coding(pool, decode_job, threads, chunk_elements, base, _Bases(), progress)
        for entry in files:
            if "/" in entry.name or entry.name in ("", *MARKERS) or entry.name.startswith("."):
                raise DecodeError(f"manifest names an unsafe file {entry.name!r}")
            with (out_dir / entry.name).open("wb") as f:
                if entry.kind == "raw":
                    jobs = [
                        (entry.name, None, blob, min(RAW_CHUNK_BYTES, entry.size - i * RAW_CHUNK_BYTES), 1)
                        for i, blob in enumerate(entry.raw)
                    ]
                    head, parts = b"", []
                    for raw, part in coding.run(jobs):
                        _write(f, raw)
                        parts.append(part)
                        coding.tick(raw.size)
                else:
                    if entry.header is None:
                        raise DecodeError(f"{entry.name}: safetensors entry has no header blob")
                    try:
                        head = zstandard.ZstdDecompressor().decompress(read_blob(entry.header), max_output_size=1 << 30)
                    except zstandard.ZstdError as err:
                        raise DecodeError(f"{entry.name}: header blob does not decode: {err}") from err
                    f.write(head)
                    parts = _decode_tensors(entry, coding, f)
                f.flush()
                os.fsync(f.fileno())
                written = f.tell()
            if written != entry.size or _digest(head, parts) != entry.digest:
                raise DecodeError(
                    f"{entry.name}: rebuilt file ({written} bytes) does not match the published digest "
                    f"({entry.size} bytes, {entry.digest[:16]}...)"
                )
            digests[entry.name] = entry.digest
    return digests


def _decode_tensors(entry: FileEntry, coding: _Coding, f) -> list[bytes]:
    """Decode one safetensors file's tensors into `f` in order; returns the tensor digests, each checked."""
    jobs, size = [], coding.chunk_elements
    for tensor in entry.tensors:
        count = tensor.nbytes // tensor.itemsize
        loc = coding.base.get(tensor.name) if coding.base is not None else None
        old = coding.bases.view(loc, tensor.itemsize) if loc is not None and loc.nbytes == tensor.nbytes else None
        expected = max(1, -(-count // size))
        if len(tensor.chunks) != expected:
            raise DecodeError(
                f"{entry.name}: tensor {tensor.name} has {len(tensor.chunks)} chunks, expected {expected}"
            )
        for i, blob in enumerate(tensor.chunks):
            lo, n = i * size, min(size, count - i * size)
            where = f"{entry.name}: tensor {tensor.name} chunk {i}"
            jobs.append((where, None if old is None else old[lo : lo + n], blob, n, tensor.itemsize))
    results = coding.run(jobs)
    tensor_digests = []
    for tensor in entry.tensors:
        parts = []
        for raw, part in (next(results) for _ in tensor.chunks):
            _write(f, raw)
            parts.append(part)
        if _digest(b"", parts) != tensor.digest:
            raise DecodeError(
                f"{entry.name}: tensor {tensor.name} does not match its published digest after decoding "
                "(wrong base checkpoint or corrupt delta)"
            )
        tensor_digests.append(bytes.fromhex(tensor.digest))
        coding.tick(tensor.nbytes)
    return tensor_digests
