"""The teacher hook: N frozen teachers of any model family replay a finished trace and score its steps.

Channel three of the Composer recipe (DESIGN.md). A rollout-level reward cannot say which step of a 100-turn trace
went wrong; teachers replaying the trace step by step can. Teachers are OpenAI-compatible chat endpoints (hosted APIs
or a vLLM of another family): no shared tokenizer, no logprobs. Modules:

- `config`: the TOML settings (teachers, gating, context, budget, cache);
- `schema`: `trace.info["teacher"]` (`TeacherInfo`), the contract with the composer algorithm;
- `gating`: which steps are worth a verdict (failures first, from `composer_prime.evidence`);
- `prompts`: what a teacher sees for one step, and how its verdict is read;
- `client`, `cache`, `budget`: one query (retries, timeouts), the answer cache, the dollar ceilings;
- `hook`: `score_trace`, tying them together; never raises;
- `judge`: the verifiers judge plugin (imports verifiers; the top-level module `composer_teachers` exports it).

Importing this package imports pydantic only; `hook` and `judge` pull httpx, tenacity, filelock and verifiers.

May import: `composer_prime.evidence`, `composer_prime.text`, `composer_prime.atomic`.
"""

from composer_prime.teachers.config import BudgetConfig, ContextConfig, GatingConfig, TeacherConfig, TeachersConfig
from composer_prime.teachers.schema import TeacherInfo, TeacherStep

__all__ = [
    "BudgetConfig",
    "ContextConfig",
    "GatingConfig",
    "TeacherConfig",
    "TeacherInfo",
    "TeacherStep",
    "TeachersConfig",
]
