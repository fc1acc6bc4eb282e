"""Weight relay: PRIME-RL filesystem broadcasts to remote inference hosts as lossless deltas over SHARDCAST's protocol.

- `codec`: one tensor chunk, old + new bit patterns in, blob out (pure).
- `manifest`: what a published version holds, its framing, the checkpoint digest.
- `checkpoint`: a step directory encoded against a base one and decoded back, chunk by chunk, digests checked.
- `protocol`: SHARDCAST's listing and shard layout; writing a version, reading a section.
- `signing`: the origin's Ed25519 key; signing and verifying manifests.
- `trust`: what a client accepts beyond a signature: nothing older than it served, nothing out of order.
- `transport`: TLS from certificate files; fetching from relay servers with bounded retries.
- `origin`: `composer-prime relay origin` (trainer host).
- `client`, `store`, `proxy`: `composer-prime relay client` (inference host): fetch and rebuild steps, the built
  steps on disk, the admin proxy (only the orchestrator's token).
- `http`: the aiohttp servers both ends run in a background thread.
- `command`: the CLI wiring.

See docs/relay.md.

May import: `composer_prime.atomic`, `composer_prime.cli`.
"""
