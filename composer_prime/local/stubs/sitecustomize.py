"""Import-level stand-ins for PRIME-RL's CUDA-only dependencies, in every process of the smoke's PRIME-RL venv.

Python imports `sitecustomize` at start-up from `sys.path`; the smoke puts this folder on `PYTHONPATH` of PRIME-RL's
launcher, orchestrator, env servers and torchrun trainer ranks (never of the inference server, which has the real
vLLM). It installs `composer_prime.local.stubs_finder`, which answers imports of packages no CPU wheel provides
(docs/smoke.md, "PRIME-RL on CPU")."""

from composer_prime.local.stubs_finder import install

install()
