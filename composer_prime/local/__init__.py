"""PRIME-RL's own processes on this machine's CPUs: what `composer-prime smoke` and the realtime CPU demo
(`composer-prime realtime --demo.prime-rl PATH`) run PRIME-RL's `rl` with (docs/smoke.md, "PRIME-RL on CPU").

- `prime_rl_cpu.patch`: the CPU patch of PRIME-RL 559b447 (proposed upstream in docs/upstream.md);
- `tree`: a private copy of a PRIME-RL tree with the patch applied (the user's tree is never written);
- `venvs`: the two venvs PRIME-RL's processes run in and the console-script wrappers its launcher starts them by;
- `stubs_finder`, `stubs/sitecustomize.py`: import-level stand-ins for the CUDA-only packages PRIME-RL imports;
- `inference`: PRIME-RL's inference server as the wrapper runs it, the vLLM CPU environment, the prefill client;
- `policy`: the tiny Qwen3-architecture policy with a locally trained tokenizer that the CPU runs serve and train;
- `launch`: what every launch shares: the checkout, the CPU launch config, the cache and its lock (which names
  its holder to a run that waits), the ports.

Processes are started and stopped through `composer_prime.process`. Importing the package is cheap: torch,
transformers and PRIME-RL load inside the functions that need them.

May import: `composer_prime.process`, `composer_prime.atomic`.
"""
