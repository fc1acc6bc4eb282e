"""`composer-prime relay origin|client`: the two ends of the weight relay (see docs/weight-broadcast.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="relay_command", metavar="ROLE", required=True)

    origin = sub.add_parser(
        "origin",
        help="on the trainer host: publish each broadcasts/step_N as a compressed SHARDCAST version",
        description="Watch <output-dir>/broadcasts/step_N/STABLE, encode each new step as a lossless delta against "
        "the previous one (keyframe every --keyframe-interval versions) and serve the versions over HTTP.",
    )
    origin.add_argument("--output-dir", required=True, help="PRIME-RL output_dir (the one holding broadcasts/)")
    origin.add_argument("--data-dir", required=True, help="where versions are written and served from")
    origin.add_argument("--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")
    origin.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000, SHARDCAST's)")
    origin.add_argument("--keyframe-interval", type=int, default=20, help="full checkpoint every N versions (20)")
    origin.add_argument("--keep-keyframes", type=int, default=2, help="keyframes kept listed, with their deltas (2)")
    origin.add_argument("--shard-size", type=int, default=50_000_000, help="bytes per shard file (50 MB)")
    origin.add_argument("--chunk-elements", type=int, default=1 << 23, help="codec chunk size in elements (8M)")
    origin.add_argument("--zstd-level", type=int, default=3, help="zstd level (3)")
    origin.add_argument("--raw-values", action="store_true", help="store changed values as-is instead of XORed")
    origin.add_argument("--poll-interval", type=float, default=1.0, help="seconds between scans for new steps")

    client = sub.add_parser(
        "client",
        help="on an inference host: admin proxy that materialises weight_dir from the relay, then calls vLLM",
        description="Serve PRIME-RL's admin API (point admin_base_url here). POST /update_weights builds the step "
        "locally from the relay and forwards it to --upstream with weight_dir rewritten; other calls pass through.",
    )
    client.add_argument("--servers", required=True, help="comma-separated relay URLs (origin or SHARDCAST relays)")
    client.add_argument("--upstream", required=True, help="the real vLLM admin base URL, e.g. http://127.0.0.1:8000")
    client.add_argument("--store-dir", required=True, help="local directory for downloads and built steps")
    client.add_argument("--host", default="0.0.0.0", help="bind address (default 0.0.0.0)")
    client.add_argument("--port", type=int, default=8100, help="proxy port (default 8100)")
    client.add_argument("--keep-steps", type=int, default=2, help="built steps kept on disk (2)")
    client.add_argument("--wait-for-version", type=float, default=600.0, help="seconds to wait for a step (600)")
    client.add_argument("--concurrency", type=int, default=4, help="shards fetched in parallel (4)")
    client.add_argument("--retries", type=int, default=5, help="attempts per shard (5)")
    client.add_argument("--http-timeout", type=float, default=30.0, help="per-request timeout in seconds (30)")
    client.add_argument("--no-prefetch", action="store_true", help="build steps only when /update_weights asks")


def _flag(loc: tuple) -> str:
    names = {"xor_values": "raw-values", "wait_for_version_s": "wait-for-version", "http_timeout_s": "http-timeout",
             "poll_interval_s": "poll-interval", "prefetch": "no-prefetch"}  # fmt: skip
    field = str(loc[0]) if loc else "?"
    return "--" + names.get(field, field.replace("_", "-"))


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from composer_prime.broadcast.client import ClientConfig, Fetcher
    from composer_prime.broadcast.origin import Origin, OriginConfig
    from composer_prime.broadcast.proxy import Proxy, ProxyConfig

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        if args.relay_command == "origin":
            config = OriginConfig(
                output_dir=args.output_dir, data_dir=args.data_dir, host=args.host, port=args.port,
                keyframe_interval=args.keyframe_interval, keep_keyframes=args.keep_keyframes,
                shard_size=args.shard_size, chunk_elements=args.chunk_elements, zstd_level=args.zstd_level,
                xor_values=not args.raw_values, poll_interval_s=args.poll_interval,
            )  # fmt: skip
            service = Origin(config)
        else:
            servers = [s.strip() for s in args.servers.split(",") if s.strip()]
            fetcher = Fetcher(
                ClientConfig(
                    servers=servers, store_dir=args.store_dir, keep_steps=args.keep_steps,
                    wait_for_version_s=args.wait_for_version, http_timeout_s=args.http_timeout,
                    retries=args.retries, concurrency=args.concurrency,
                )
            )  # fmt: skip
            config = ProxyConfig(upstream=args.upstream, host=args.host, port=args.port, prefetch=not args.no_prefetch)
            service = Proxy(config, fetcher)
    except ValidationError as err:
        for error in err.errors():
            print(
                f"relay {args.relay_command}: {_flag(error['loc'])} = {error.get('input')!r}: {error['msg']}",
                file=sys.stderr,
            )
        return 2
    except OSError as err:
        print(f"relay {args.relay_command}: {err}", file=sys.stderr)
        return 2

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        service.run(stop)
    except OSError as err:  # e.g. the port is taken
        print(f"relay {args.relay_command}: {err}", file=sys.stderr)
        return 1
    return 0
