"""Weight-relay benchmark: how small are RL-step deltas, how fast are they made, applied and shipped.

For each learning rate (1e-6, 3e-6, 1e-5) and master-weight dtype, a causal LM (~52M parameters, 103 MB in bf16) is
trained with real AdamW steps on a REINFORCE-shaped loss (tests/support/rl_checkpoints.py). After `--warmup` steps,
`--steps` consecutive steps are broadcast in PRIME-RL's layout and measured:

- changed: fraction of bf16 values whose bit pattern differs from the previous step;
- ratio: checkpoint bytes / delta-section bytes, for XORed values (the default) and for raw new values;
- vs bound: delta bytes / the order-0 entropy bound of what that layout codes: the change mask (N * H(p)) plus, per
  changed value, the XOR pattern (k * H(old ^ new)) for the relay's default, or the new value (k * H(new)) for raw
  values; near 1.00 means the coder is as good as any coder that knows only the change rate and the histogram;
- keyframe: checkpoint bytes / the full (keyframe) section of the first version;
- encode / decode: MB/s of checkpoint processed, against a plain file copy of the same bytes (`copy`);
- loopback: time from STABLE to the step rebuilt in a client's store (encode at the origin + HTTP fetch + decode +
  checks + atomic write) against fetching the full checkpoint over the same HTTP server;
- at 1 Gbit/s: the same two paths with the wire time computed for a 1 Gbit/s link instead of loopback;
- security cost: the same step fetched and rebuilt by three clients of one origin, side by side in one run,
  interleaved (the order rotates every repeat: ABC, BCA, CAB, ...; `--repeats` rounds, the built step deleted between
  rounds): **plain** (HTTP, the manifest's signature not checked: the relay before signing), **signed** (HTTP, the
  signature checked) and **signed+TLS** (HTTPS with a P-256 certificate, the signature checked). End to end is the
  origin's encode (signing included; less the measured signing time for plain) plus the client's fetch and rebuild.
  Reported: each arm's median with its interquartile range, and the median (and IQR) of the per-round ratios to
  plain, with the 1-minute load average before and after the row (the machine is shared). The signature's own time
  is measured on that step's manifest: signing it (origin, once per version) and verifying it (client). The transport
  alone: every shard of the version fetched into memory over HTTP and over HTTPS, 4 x repeats times, alternating.

fp32 master is PRIME-RL's default (`optimization_dtype = "float32"`): the optimizer updates fp32 weights and the
broadcast casts them to bf16. bf16 master (`optimization_dtype = "bfloat16"`) updates the bf16 weights directly, so
sub-ulp updates are lost and far fewer values change. Run: `python bench/relay.py` (add `--quick` for a smaller
model).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from composer_prime.relay import checkpoint, protocol, signing
from composer_prime.relay.client import ClientConfig, Fetcher
from composer_prime.relay.http import serve_in_thread
from composer_prime.relay.manifest import MAGIC
from composer_prime.relay.origin import Origin, OriginConfig, static_app
from composer_prime.relay.transport import server_tls
from tests.support.relay_pki import signing_keys, tls_files
from tests.support.rl_checkpoints import ModelShape, RLTrainer, param_count, write_broadcast_step

LINK_BYTES_PER_S = 125e6  # 1 Gbit/s


def entropy_bits(values: np.ndarray) -> float:
    if values.size == 0:
        return 0.0
    _, counts = np.unique(values, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def bits_of(step_dir: Path) -> np.ndarray:
    """Every bf16 value of a step, as bit patterns, in a fixed tensor order."""
    index = checkpoint.scan_checkpoint(step_dir)
    return np.concatenate(
        [
            np.fromfile(loc.path, dtype="<u2", count=loc.nbytes // 2, offset=loc.start)
            for _, loc in sorted(index.items())
            if loc.dtype == "BF16"
        ]
    )


def ckpt_bytes(step_dir: Path) -> int:
    return sum((step_dir / f).stat().st_size for f in checkpoint.checkpoint_files(step_dir))


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(directory: Path) -> ThreadingHTTPServer:
    handler = partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def copy_files(src: Path, dest: Path) -> None:
    for name in checkpoint.checkpoint_files(src):
        shutil.copyfile(src / name, dest / name)


def fetch_full(url: str, step_dir: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for name in checkpoint.checkpoint_files(step_dir):
        with urllib.request.urlopen(f"{url}/{step_dir.name}/{name}", timeout=120) as r, (dest / name).open("wb") as f:
            shutil.copyfileobj(r, f, 1 << 20)
            f.flush()
            os.fsync(f.fileno())


def measure(
    shape: ModelShape, lr: float, master: torch.dtype, warmup: int, steps: int, work: Path, repeats: int = 3
) -> dict:
    trainer = RLTrainer(shape, lr, master_dtype=master)
    for _ in range(warmup):
        trainer.step()
    run = work / "run"
    broadcasts = run / "broadcasts"
    shutil.rmtree(work, ignore_errors=True)
    write_broadcast_step(trainer.bf16_state_dict(), broadcasts, 0)
    rows = []
    e2e: dict[str, list[float]] = {"plain": [], "signed": [], "tls": []}  # end-to-end seconds, every round
    private, public = signing_keys(work / "keys")
    pki = tls_files(work / "tls")
    origin = Origin(
        OriginConfig(
            output_dir=run,
            data_dir=work / "pub",
            host="127.0.0.1",
            port=0,
            keyframe_interval=10_000,
            signing_key_file=private,
            run_id="bench",
        )
    )
    origin.publish(0)
    server = origin.serve()
    url = server.url
    tls_server = serve_in_thread(
        static_app(origin.data_dir, tls=True), "127.0.0.1", 0, "bench-tls", server_tls(pki.cert, pki.key, None)
    )
    full_server = serve(broadcasts)
    full_url = f"http://127.0.0.1:{full_server.server_address[1]}"
    fetcher = Fetcher(
        ClientConfig(servers=[url], store_dir=work / "store", keep_steps=2, verify_key_file=public, run_id="bench")
    )
    fetcher.ensure_step(0)
    fetcher_tls = Fetcher(
        ClientConfig(
            servers=[tls_server.url],
            store_dir=work / "store-tls",
            keep_steps=2,
            verify_key_file=public,
            tls_ca_file=pki.ca,
            run_id="bench",
        )
    )
    fetcher_tls.ensure_step(0)
    fetcher_plain = Fetcher(
        ClientConfig(
            servers=[url], store_dir=work / "store-plain", keep_steps=2, verify_key_file=public, run_id="bench"
        )
    )
    fetcher_plain.verify_key = _NoSignatureCheck()  # the relay before signing: manifests read, never verified
    fetcher_plain.ensure_step(0)
    arms = {"plain": fetcher_plain, "signed": fetcher, "tls": fetcher_tls}
    keyframe = fetcher.manifest(fetcher.listing()[0]).section("full").size
    for step in range(1, steps + 1):
        trainer.step()
        new = write_broadcast_step(trainer.bf16_state_dict(), broadcasts, step)
        old = broadcasts / f"step_{step - 1}"
        total = ckpt_bytes(new)
        a, b = bits_of(old), bits_of(new)
        changed = np.flatnonzero(a != b)
        p = changed.size / a.size
        h_mask = 0.0 if p in (0.0, 1.0) else -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
        mask_bits = a.size * h_mask
        bound = (mask_bits + changed.size * entropy_bits(b[changed])) / 8  # what the raw-values layout codes
        bound_xor = (mask_bits + changed.size * entropy_bits(a[changed] ^ b[changed])) / 8  # what the relay codes

        t_encode, _ = timed(partial(origin.publish, step))
        delta_size = fetcher.manifest(fetcher.listing()[step]).section("delta").size
        raw_dir = work / "raw"
        shutil.rmtree(raw_dir, ignore_errors=True)
        raw_manifest, _ = protocol.encode_version(
            new,
            step,
            protocol.Base(step - 1, old, ""),
            False,
            raw_dir,
            1 << 30,
            1 << 23,
            3,
            origin.key,
            1,
            "bench",
            xor=False,
        )
        raw_size = raw_manifest.section("delta").size
        # Side by side, interleaved: the order rotates every round so no arm always finds a warmer page cache or a
        # quieter machine; the built step is deleted between rounds (its base stays).
        t_sign, t_verify = signature_times(origin, step)
        names = list(arms)
        for repeat in range(repeats):
            for name in names[repeat % 3 :] + names[: repeat % 3]:
                if repeat:
                    shutil.rmtree(arms[name].step_dir(step))
                t_client = timed(partial(arms[name].ensure_step, step))[0]
                e2e[name].append(t_encode - (t_sign if name == "plain" else 0.0) + t_client)
        wire = fetch_times(fetcher, fetcher_tls, step, 4 * repeats)
        t_fetch_apply = float(np.median(e2e["signed"][-repeats:])) - t_encode
        t_decode, _ = timed(partial(_decode_again, fetcher, origin.data_dir, step, work / "redecode"))
        copy_dir = work / "copy"
        shutil.rmtree(copy_dir, ignore_errors=True)
        copy_dir.mkdir()
        t_copy, _ = timed(partial(copy_files, new, copy_dir))
        shutil.rmtree(work / "full", ignore_errors=True)
        t_full, _ = timed(partial(fetch_full, full_url, new, work / "full"))
        rows.append(
            {
                "changed": p,
                "total": total,
                "delta": delta_size,
                "raw": raw_size,
                "bound": bound,
                "bound_xor": bound_xor,
                "t_encode": t_encode,
                "t_decode": t_decode,
                "t_copy": t_copy,
                "t_e2e": t_encode + t_fetch_apply,
                "t_full": t_full,
                "t_sign": t_sign,
                "t_verify": t_verify,
                "t_get": wire["http"],
                "t_get_tls": wire["https"],
                "keyframe": keyframe,
            }
        )
        shutil.rmtree(old, ignore_errors=True)
    server.stop()
    tls_server.stop()
    full_server.shutdown()
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} | {"e2e": e2e}


class _NoSignatureCheck:
    """Stands in for the origin's public key in the plain arm: every signature passes, as before signing existed."""

    def verify(self, signature: bytes, data: bytes) -> None:
        pass


def spread(values: list[float]) -> str:
    p25, p50, p75 = np.percentile(values, [25, 50, 75])
    return f"{p50:.3f} [{p25:.3f}-{p75:.3f}]"


def fetch_times(plain: Fetcher, tls: Fetcher, step: int, repeats: int) -> dict[str, float]:
    """Seconds to GET every shard of version `step` into memory, over HTTP and over HTTPS (the transport alone, no
    checks or decoding): median of `repeats`, alternating which goes first."""
    listed = plain.listing()[step]
    paths = [f"{protocol.version_name(step)}/{protocol.shard_name(i)}" for i in range(1, listed.num_shards + 1)]
    samples: dict[str, list[float]] = {"http": [], "https": []}
    pair = [(plain, "http"), (tls, "https")]
    for repeat in range(repeats):
        for client, name in pair if repeat % 2 else pair[::-1]:
            samples[name].append(timed(lambda c=client: [c.remote.get(path, 1 << 40) for path in paths])[0])
    return {name: float(np.median(values)) for name, values in samples.items()}


def signature_times(origin: Origin, step: int, repeats: int = 50) -> tuple[float, float]:
    """Seconds to sign and to verify the manifest of published `step` (mean of `repeats`)."""
    listed = origin.listing[step]
    shard = (origin.data_dir / protocol.version_name(step) / protocol.shard_name(listed.num_shards)).read_bytes()
    body = shard[len(MAGIC) + 8 : -32 - signing.SIGNATURE_BYTES]
    signature, public = shard[-signing.SIGNATURE_BYTES :], origin.key.public_key()
    t_sign = timed(lambda: [signing.sign(origin.key, body) for _ in range(repeats)])[0] / repeats
    t_verify = timed(lambda: [signing.verify(public, body, signature) for _ in range(repeats)])[0] / repeats
    return t_sign, t_verify


def _decode_again(fetcher: Fetcher, published: Path, step: int, out: Path) -> None:
    """Decode time alone: rebuild `step` from the client's previous step, shards already on disk."""
    manifest = fetcher.manifest(fetcher.listing()[step])
    section = manifest.section("delta")
    version_dir = published / protocol.version_name(step)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    reader = protocol.SectionReader(manifest, section, lambda i: version_dir / protocol.shard_name(i))
    base = checkpoint.scan_checkpoint(fetcher.step_dir(section.base_step))
    checkpoint.decode_files(section.files, reader, base, out, manifest.chunk_elements)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="minutes, not tens of minutes: a ~7M-parameter model, fp32 masters, lr 1e-6 and 1e-5, 2 warm-up steps",
    )
    parser.add_argument("--warmup", type=int, default=5, help="optimizer steps before measuring (5)")
    parser.add_argument("--steps", type=int, default=3, help="consecutive steps measured per row (3)")
    parser.add_argument("--masters", default="fp32,bf16", help="master-weight dtypes to run (fp32,bf16)")
    parser.add_argument(
        "--repeats", type=int, default=9, help="interleaved rounds of plain / signed / signed+TLS per step (9)"
    )
    args = parser.parse_args()
    if args.quick:
        args.masters, args.warmup, args.steps = "fp32", 2, 2
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    shape = (
        ModelShape(vocab=8000, dim=256, layers=4, heads=4, seq=64, batch=8)
        if args.quick
        else ModelShape(vocab=32000, dim=512, layers=6, heads=8, seq=64, batch=8)
    )
    print(
        f"model: {param_count(shape) / 1e6:.1f}M parameters, bf16 broadcast; AdamW (0.9, 0.999), wd 0.01, clip 1.0;"
        f" {args.warmup} warm-up steps, mean of {args.steps} steps per row\n"
    )
    header = (
        "| master | lr | changed | delta ratio (xor) | (raw values) | vs bound: xor | raw | keyframe ratio "
        "| encode MB/s | decode MB/s | copy MB/s | loopback: delta / full | 1 Gbit/s: delta / full "
        "| sign / verify | load avg | e2e s: plain / signed / signed+TLS, median [IQR] "
        "| signed / plain | signed+TLS / plain | shard GETs: https / http |"
    )
    print(header)
    print("|" + "|".join("---" for _ in range(header.count("|") - 1)) + "|")
    masters = {"fp32": torch.float32, "bf16": torch.bfloat16}
    with tempfile.TemporaryDirectory() as tmp:
        for master_name in args.masters.split(","):
            for lr in (1e-6, 1e-5) if args.quick else (1e-6, 3e-6, 1e-5):
                load = os.getloadavg()[0]
                r = measure(shape, lr, masters[master_name], args.warmup, args.steps, Path(tmp) / "work", args.repeats)
                load = f"{load:.1f}-{os.getloadavg()[0]:.1f}"
                e2e = r["e2e"]
                ratio = {arm: [a / b for a, b in zip(e2e[arm], e2e["plain"], strict=True)] for arm in ("signed", "tls")}
                mb = r["total"] / 1e6
                wire_delta = r["t_encode"] + r["t_decode"] + r["delta"] / LINK_BYTES_PER_S
                wire_full = r["total"] / LINK_BYTES_PER_S
                print(
                    f"| {master_name} | {lr:g} | {r['changed']:.2%} | {r['total'] / r['delta']:.1f}x "
                    f"| {r['total'] / r['raw']:.1f}x | {r['delta'] / r['bound_xor']:.2f} | {r['raw'] / r['bound']:.2f} "
                    f"| {r['total'] / r['keyframe']:.2f}x | {mb / r['t_encode']:.0f} "
                    f"| {mb / r['t_decode']:.0f} | {mb / r['t_copy']:.0f} | {r['t_e2e']:.2f}s / {r['t_full']:.2f}s "
                    f"| {wire_delta:.2f}s / {wire_full:.2f}s "
                    f"| {r['t_sign'] * 1e3:.2f} / {r['t_verify'] * 1e3:.2f} ms | {load} "
                    f"| {' / '.join(spread(e2e[arm]) for arm in ('plain', 'signed', 'tls'))} "
                    f"| {spread(ratio['signed'])}x | {spread(ratio['tls'])}x "
                    f"| {r['t_get_tls'] * 1e3:.0f} / {r['t_get'] * 1e3:.0f} ms |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
