"""PRIME-RL 559b447 on CPU: the patch the smoke applies to a private copy of a PRIME-RL tree, and import-level
stand-ins for its CUDA-only dependencies (docs/smoke.md, "PRIME-RL on CPU"; proposed upstream in docs/upstream.md)."""
