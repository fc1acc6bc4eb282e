"""`composer-prime relay origin|client`: the two ends of the weight relay (see docs/relay.md).

Options are the fields of `OriginConfig` and of `RelayClientConfig` (the fetcher's and the proxy's settings), parsed
by `composer_prime.cli.parse_config`: kebab-case flags, docstring help, `@ relay.toml`.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

ROLES = {
    "origin": "on the trainer host: publish each broadcasts/step_N as a compressed SHARDCAST version",
    "client": "on an inference host: admin proxy that materialises weight_dir from the relay, then calls vLLM",
    "keygen": "make the origin's Ed25519 signing key pair (private key for the origin, public key for clients)",
}


def main(argv: list[str], prog: str) -> int:
    from composer_prime.cli import UsageError, parse_config

    if not argv or argv[0] not in ROLES:
        roles = "\n".join(f"  {role:<8} {text}" for role, text in ROLES.items())
        usage = f"usage: {prog} ROLE [@ FILE] [OPTIONS]\n\nroles:\n{roles}\n\n`{prog} ROLE --help` lists the options."
        if argv and argv[0] in ("-h", "--help"):
            print(usage)
            return 0
        raise UsageError(
            f"{prog}: name a role, origin, client or keygen{f' (got {argv[0]!r})' if argv else ''}\n\n{usage}"
        )
    role, rest = argv[0], argv[1:]
    if role == "keygen":
        from composer_prime.relay.signing import KeygenConfig, write_key_pair

        keys = parse_config(KeygenConfig, rest, f"{prog} keygen", description=ROLES["keygen"])
        try:
            write_key_pair(keys.private_key_file, keys.public_key_file)
        except OSError as err:
            raise UsageError(f"{prog} keygen: {err}") from None
        print(
            f"private key (origin's signing_key_file): {keys.private_key_file}\n"
            f"public key (clients' verify_key_file): {keys.public_key_file}"
        )
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    # httpx logs every request at INFO, and the client polls the listing twice a second: the relay logs what it
    # fetched and built itself.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if role == "origin":
        from composer_prime.relay.origin import Origin, OriginConfig

        config = parse_config(OriginConfig, rest, f"{prog} origin", description=ROLES["origin"])
        make = lambda: Origin(config)  # noqa: E731
    else:
        from composer_prime.relay.client import Fetcher
        from composer_prime.relay.proxy import Proxy, RelayClientConfig

        config = parse_config(RelayClientConfig, rest, f"{prog} client", description=ROLES["client"])
        make = lambda: Proxy(config, Fetcher(config))  # noqa: E731
    from composer_prime.relay.transport import RelayError

    try:
        service = make()
    except (OSError, RelayError) as err:  # an unwritable data or store dir, an unreadable served.json
        raise UsageError(f"{prog} {role}: {err}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        service.run(stop)
    except OSError as err:  # e.g. the port is taken
        print(f"{prog} {role}: {err}; choose another --port", file=sys.stderr)
        return 1
    return 0
