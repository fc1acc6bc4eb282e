"""A vLLM general plugin (entry point group `vllm.general_plugins`, the one PRIME-RL registers its own patches in):
prefill scoring at prefix-cache cost, and a tied LM head that follows in-place weight reloads.

Prefill scoring at prefix-cache cost.

vLLM skips reading the prefix cache for any request that asks for `prompt_logprobs`
(`SamplingParams.skip_reading_prefix_cache` defaults to True for them), because the logprobs of cached positions are
never computed. So a hint target, scored as `[context the policy sampled in] + hint + target`, pays a full prefill
of its context although the server holds that context's KV. With this plugin:

- A request may set `sampling_params.skip_reading_prefix_cache = false` (vLLM's own field) together with
  `prompt_logprobs`: it reads the prefix cache and is computed only from its first uncached token on. With the
  server environment variable `COMPOSER_PREFILL_READS_CACHE=1` every `prompt_logprobs` request reads the cache
  (the engine's `Request.get_skip_reading_prefix_cache`), so PRIME-RL's unchanged `prefill_logprobs` (what `InferencePool.score` calls) reads the cache too.
- The positions served from the cache carry no computed logprob. Unpatched vLLM leaves them as uninitialised memory
  (the detokenizer then fails on garbage token ids and the engine's output handler dies); here they carry the
  prompt's own token with logprob `+1.0` and rank 0. A positive logprob cannot be a real one: it marks "served from
  the prefix cache, not scored", and `composer_prime.algorithm.hints.reference_for` refuses such a value on a
  target (a target is always past the hint, which is new, so it is always computed).

A tied LM head follows in-place weight reloads. In a model with `tie_word_embeddings = true` vLLM's `lm_head`
(`ParallelLMHead`) shares its `weight` Parameter with `embed_tokens`. An in-place reload (`reload_weights`, and
PRIME-RL's `load_weights_checkpoint_layerwise`) goes through vLLM's layerwise reload: it loads and re-processes every
layer that receives weights and copies the result into the layer's original tensors, and it puts a layer that
received none back as it was ("ParallelLMHead: Failed to load weights"). A tied head receives none (a tied checkpoint
has no `lm_head.weight`; vLLM 0.26's Qwen3 skips the name even when present), so the shared Parameter gets the new
embeddings but the head's own post-load processing never re-runs. On GPU nothing depends on it (the head multiplies
by `layer.weight`); on CPU that processing packs the weight into a private copy for oneDNN or the SGL kernel
(`dispatch_cpu_unquantized_gemm`) and the head keeps computing logits from the start weights. Here, after each
layerwise reload, every unquantized embedding-like layer that received no weights but shares its Parameter with a
layer that did is processed again from the shared (new) weight; the step is idempotent (a no-op on GPU).

Loaded by vLLM in the API server and in every engine/worker process (`vllm.plugins.load_general_plugins`);
`register` is idempotent. Nothing here runs unless vLLM imports it.
"""

from __future__ import annotations

import os
from typing import Any

CACHED_LOGPROB = 1.0
"""The logprob a cached (not computed) prompt position carries in the response."""

ENV = "COMPOSER_PREFILL_READS_CACHE"
"""Server environment variable: `1` makes every `prompt_logprobs` request read the prefix cache by default."""


def register() -> None:
    _tail_logprobs()
    _tied_heads_follow_reloads()


def _tail_logprobs() -> None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    if getattr(GPUModelRunner, "_composer_tail_logprobs", False):
        return
    original_runner = GPUModelRunner._get_prompt_logprobs_dict

    def _get_prompt_logprobs_dict(self: Any, hidden_states: Any, num_scheduled_tokens: dict[str, int]) -> Any:
        import torch
        from vllm.v1.outputs import LogprobsTensors

        for req_id, count in (self.num_prompt_logprobs or {}).items():
            request = self.requests.get(req_id)
            if request is None or request.prompt_token_ids is None or req_id not in num_scheduled_tokens:
                continue
            cached = request.num_computed_tokens
            if request.in_progress_prompt_logprobs_cpu is None and cached > 0:
                total = len(request.prompt_token_ids)
                tensors = LogprobsTensors.empty_cpu(total - 1, count + 1)
                ids = torch.tensor(request.prompt_token_ids[1 : cached + 1], dtype=tensors.logprob_token_ids.dtype)
                tensors.logprob_token_ids[:cached] = ids[:, None]
                tensors.logprobs[:cached] = CACHED_LOGPROB
                tensors.selected_token_ranks[:cached] = 0
                request.in_progress_prompt_logprobs_cpu = tensors
        return original_runner(self, hidden_states, num_scheduled_tokens)

    GPUModelRunner._get_prompt_logprobs_dict = _get_prompt_logprobs_dict
    GPUModelRunner._composer_tail_logprobs = True

    if os.environ.get(ENV) == "1":
        from vllm.v1.request import Request

        original_skip = Request.get_skip_reading_prefix_cache

        def get_skip_reading_prefix_cache(self: Any) -> bool:
            params = self.sampling_params
            if params is not None and (params.prompt_logprobs is not None or params.prompt_logprob_token_ids):
                return False
            return original_skip(self)

        Request.get_skip_reading_prefix_cache = get_skip_reading_prefix_cache


def _tied_heads_follow_reloads() -> None:
    """Wrap vLLM's `finalize_layerwise_processing`, which every layerwise reload ends with (`finalize_layerwise_reload`
    calls it by its module-global name, so callers that imported either name earlier are covered)."""
    try:
        from vllm.model_executor.model_loader.reload import layerwise
    except ImportError:  # a vLLM without layerwise reload: a reload re-runs every layer's processing itself
        return
    if getattr(layerwise.finalize_layerwise_processing, "_composer", False):
        return
    original = layerwise.finalize_layerwise_processing

    def finalize_layerwise_processing(model: Any, model_config: Any) -> None:
        unloaded = _unloaded_during_reload(model, layerwise.LAYERWISE_INFO)
        original(model, model_config)
        for layer in _tied_to_a_loaded_layer(model, unloaded):
            layer.quant_method.process_weights_after_loading(layer)

    finalize_layerwise_processing._composer = True  # type: ignore[attr-defined]
    layerwise.finalize_layerwise_processing = finalize_layerwise_processing


def _unloaded_during_reload(model: Any, infos: Any) -> list[tuple[Any, set[int]]]:
    """The unquantized embedding-like layers (`VocabParallelEmbedding`, `ParallelLMHead`) that this reload gave no
    weights, each with the ids of the Parameters it held before the reload (what finalize puts back)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    unloaded = []
    for layer in model.modules():
        info = infos.get(layer)
        if info is None or not info.can_load() or info.kernel_tensors is None or info.load_numel > 0:
            continue
        if isinstance(getattr(layer, "quant_method", None), UnquantizedEmbeddingMethod):
            unloaded.append((layer, {id(p) for p in info.kernel_tensors[0].values()}))
    return unloaded


def _tied_to_a_loaded_layer(model: Any, unloaded: list[tuple[Any, set[int]]]) -> list[Any]:
    """Of `unloaded`, the layers whose Parameter another layer of `model` also holds (after finalize), one that was
    loaded: a tied LM head whose embeddings were reloaded."""
    stale = {id(layer) for layer, _ in unloaded}
    loaded_params = {
        id(p) for layer in model.modules() if id(layer) not in stale for p in layer.parameters(recurse=False)
    }
    return [layer for layer, params in unloaded if params & loaded_params]
