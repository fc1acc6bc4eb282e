"""Weight relay: PRIME-RL filesystem broadcasts to remote inference hosts as lossless deltas over SHARDCAST's protocol.

- `codec`: one tensor chunk, old + new bit patterns in, blob out (pure).
- `manifest`: what a published version holds, its framing, the checkpoint digest.
- `checkpoint`: a step directory encoded against a base one and decoded back, chunk by chunk, digests checked.
- `protocol`: SHARDCAST's listing and shard layout; writing a version, reading a section.
- `origin`: `composer-prime relay origin` (trainer host).
- `client`, `proxy`: `composer-prime relay client` (inference host): fetch and rebuild steps; the admin proxy.
- `http`: the aiohttp servers both ends run in a background thread.
- `command`: the CLI wiring.

See docs/relay.md.
"""
