"""The task family, the rule-based teacher and the small policy of bench/learning.py.

**Task: step-by-step arithmetic through tool-like turns.** A problem is a start value and K operations (`+d` or
`-d`, d in 1..9, values mod 100, two digits). The user message gives the start and the first operation; each
assistant turn writes one step, `45+7=52` (exactly `STEP_CHARS` sampled characters), and the tool answers with the
next operation (`next -4`) or `done`. The exact verifier checks the written program: it passes the episode when every
step's line is right given the previous step's written result, so the last result is the true final value. A failed
episode has identifiable error sites: the steps whose own line is wrong (a bad copy of the previous result or of the
operation, or a bad sum).

**Teacher: a rule-based reviewer that is sometimes wrong.** It checks every step against the previous step's written
result and the given operation, scores it +1 (right) or -1 (wrong) and, on a wrong step, gives a hint naming the
line it should have written (`45+7=52`). With probability `error_rate` per step its verdict is flipped: a right step
is called wrong with a hint whose result is off, a wrong step is called right. It writes `trace.info["teacher"]` in
the teacher hook's schema (docs/design.md), so the algorithm reads it as it reads a real teacher's block.

**Policy: a character-level GRU** over a fixed charset plus one template token per role; a message renders as
`[role] + characters` (the role token is the template scaffold: never sampled, as in a chat template). It samples
at a temperature and every logprob (sampling, trainer, hint prefill) is of the tempered distribution, as PRIME-RL's
trainer scales logits by the sampling temperature. An LLM reads a reviewer's hint out of the box; this policy has to
be taught to: the base policy (`hint_drill`) is trained on correct demonstrations with the right line as a hint just
before every step, until it copies hints; each seed's warm start then trains on demonstrations with one or two hinted
steps each (placed as the algorithm places them: a message just before the step, or a system message before the
episode), so that a hint-conditioned prefill knows better than the policy, which is what hint self-distillation
needs. `hint_reading` measures it.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

import torch
from torch import nn

from composer_prime.algorithm.config import DEFAULT_TEMPLATES

STEP_CHARS = 7
"""Sampled characters per step: `AA?D=RR`."""

ROLES = ("system", "user", "assistant", "tool")
CHARSET = string.digits + string.ascii_letters + " +-=:;.,'()?"
PAD = 0
ROLE_ID = {role: 1 + k for k, role in enumerate(ROLES)}
CHAR_ID = {c: 1 + len(ROLES) + k for k, c in enumerate(CHARSET)}
ID_CHAR = {v: k for k, v in CHAR_ID.items()}
VOCAB = 1 + len(ROLES) + len(CHARSET)


def render(role: str, text: str) -> list[int]:
    """Token ids of one message: its role's template token, then its characters."""
    return [ROLE_ID[role], *(CHAR_ID.get(c, CHAR_ID["?"]) for c in text)]


def decode(ids: list[int]) -> str:
    return "".join(ID_CHAR.get(i, "?") for i in ids)


# --- task --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    start: int
    ops: tuple[tuple[str, int], ...]

    def apply(self, value: int, k: int) -> int:
        op, d = self.ops[k]
        return (value + d if op == "+" else value - d) % 100

    def answer(self) -> int:
        value = self.start
        for k in range(len(self.ops)):
            value = self.apply(value, k)
        return value

    def prompt(self) -> str:
        op, d = self.ops[0]
        return f"start {self.start:02d} op {op}{d}"

    def tool_reply(self, k: int) -> str:
        """The tool's answer after step k."""
        if k + 1 == len(self.ops):
            return "done"
        op, d = self.ops[k + 1]
        return f"next {op}{d}"

    def line(self, value: int, k: int) -> str:
        """The right step k from `value`."""
        op, d = self.ops[k]
        return f"{value:02d}{op}{d}={self.apply(value, k):02d}"


def sample_problem(rng: random.Random, steps: int) -> Problem:
    return Problem(rng.randrange(100), tuple((rng.choice("+-"), rng.randrange(1, 10)) for _ in range(steps)))


def parse_result(line: str) -> int | None:
    """The result a step line wrote, or None when the line is not `AA?D=RR`."""
    if len(line) != STEP_CHARS or line[2] not in "+-" or line[4] != "=":
        return None
    left, result = line[:2], line[5:]
    if not (left.isdigit() and line[3].isdigit() and result.isdigit()):
        return None
    return int(result)


def verify(problem: Problem, lines: list[str]) -> float:
    """The exact verifier of the written program: 1.0 when every step's line is right given the previous step's
    written result (so the last result is the true final value), else 0.0.

    Checking only the last result would pass episodes whose wrong steps cancel out (`08+4=10`, `10-1=11` ends on
    the true 11): the policy tracks the true value internally, so at temperature 1 most of the warm start's passing
    samples were of that kind, and rewarding them trains wrong arithmetic into the written lines."""
    return float(all(v is None for v in judge(problem, lines)))


def judge(problem: Problem, lines: list[str]) -> list[str | None]:
    """Per step: None when the line is right given the previous step's written result, else the right line."""
    verdicts: list[str | None] = []
    value = problem.start
    for k, line in enumerate(lines):
        right = problem.line(value, k)
        verdicts.append(None if line == right else right)
        written = parse_result(line)
        value = written if written is not None else problem.apply(value, k)
    return verdicts


def teacher_block(
    problem: Problem, lines: list[str], nodes: list[int], error_rate: float, rng: random.Random
) -> tuple[dict, list[str]]:
    """`trace.info["teacher"]` for one episode (`nodes`: the trace node of each step), and the hints it gave."""
    steps, hints = [], []
    for node, line, right in zip(nodes, lines, judge(problem, lines), strict=True):
        wrong = right is not None
        if rng.random() < error_rate:
            wrong = not wrong
            if wrong:  # a right step called wrong: the "right" line the teacher names has an off result
                value = (parse_result(line) + rng.randrange(1, 10)) % 100
                right = f"{line[:5]}{value:02d}"
            else:
                right = None
        hint = right if wrong else None
        if hint is not None:
            hints.append(hint)
        steps.append({"node": node, "scores": {"rule": -1.0 if wrong else 1.0}, "hint": hint})
    return {"teachers": ["rule"], "steps": steps, "cost_usd": 0.0, "skipped": None}, hints


# --- policy ------------------------------------------------------------------------------------------------------


class Policy(nn.Module):
    def __init__(self, hidden: int, layers: int, embed: int = 32):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, embed)
        self.rnn = nn.GRU(embed, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, VOCAB)

    def forward(
        self, ids: torch.Tensor, state: torch.Tensor | None = None, temperature: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of the next token at `temperature` (logits / temperature, as PRIME-RL's trainer
        scales them by the sampling temperature), and the recurrent state."""
        out, state = self.rnn(self.embed(ids), state)
        return torch.log_softmax(self.head(out).float() / temperature, dim=-1), state

    def token_logprobs(self, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
        """logprob of each token given the ones before it, at `temperature`; position 0 (no context) gets 0.0."""
        logp, _ = self(ids[:, :-1], temperature=temperature)
        picked = logp.gather(2, ids[:, 1:, None])[..., 0]
        return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)


@dataclass
class Episode:
    """One sampled episode: its messages' token ids in order, which are sampled, and the sampled logprobs."""

    problem: Problem
    messages: list[tuple[str, list[int]]]
    """(role, token ids) per message."""
    lines: list[str]
    logprobs: list[list[float]]
    """Per step: the sampling logprob of each of its `STEP_CHARS` tokens."""


@torch.no_grad()
def rollout(
    policy: Policy,
    problems: list[Problem],
    greedy: bool,
    generator: torch.Generator,
    temperature: float = 1.0,
    hinted: bool = False,
) -> list[Episode]:
    """All problems in lockstep (they share one layout): prompt, then per step 7 sampled characters and the tool.
    Sampled at `temperature`; the episode's logprobs are of that tempered distribution. With `hinted`, a right hint
    (the step's right line given the previous written result) is a user message just before every step."""
    device = next(policy.parameters()).device
    steps = len(problems[0].ops)
    messages: list[list[tuple[str, list[int]]]] = [[("user", render("user", p.prompt()))] for p in problems]
    lines: list[list[str]] = [[] for _ in problems]
    logprobs: list[list[list[float]]] = [[] for _ in problems]
    values = [p.start for p in problems]

    def hint(i: int, k: int) -> list[int]:
        if not hinted:
            return []
        ids = render("user", HINT_TEMPLATE.format(detail=problems[i].line(values[i], k)))
        messages[i].append(("user", ids))
        return ids

    feed = torch.tensor([m[0][1] + hint(i, 0) + [ROLE_ID["assistant"]] for i, m in enumerate(messages)], device=device)
    state = None
    for k in range(steps):
        logp, state = policy(feed, state, temperature)
        last = logp[:, -1]
        chosen, chosen_lp = [], []
        for _ in range(STEP_CHARS):
            token = last.argmax(-1) if greedy else torch.multinomial(last.exp().cpu(), 1, generator=generator)[:, 0]
            token = token.to(device)
            chosen.append(token)
            chosen_lp.append(last.gather(1, token[:, None])[:, 0])
            logp, state = policy(token[:, None], state, temperature)
            last = logp[:, -1]
        sampled = torch.stack(chosen, 1).tolist()
        sampled_lp = torch.stack(chosen_lp, 1).tolist()
        tail = []
        for i, problem in enumerate(problems):
            messages[i].append(("assistant", [ROLE_ID["assistant"], *sampled[i]]))
            lines[i].append(decode(sampled[i]))
            logprobs[i].append(sampled_lp[i])
            written = parse_result(lines[i][-1])
            values[i] = written if written is not None else problem.apply(values[i], k)
            reply = render("tool", problem.tool_reply(k))
            messages[i].append(("tool", reply))
            tail.append([*reply, *(hint(i, k + 1) if k + 1 < steps else []), ROLE_ID["assistant"]])
        feed = torch.tensor(tail, device=device)
    return [Episode(p, m, li, lp) for p, m, li, lp in zip(problems, messages, lines, logprobs, strict=True)]


def accuracy(policy: Policy, problems: list[Problem], hinted: bool = False) -> float:
    """Greedy pass rate on `problems` (with `hinted`: a right hint before every step)."""
    episodes = rollout(policy, problems, greedy=True, generator=torch.Generator(), hinted=hinted)
    return sum(verify(e.problem, e.lines) for e in episodes) / len(episodes)


# --- warm start --------------------------------------------------------------------------------------------------

SYSTEM_SHARE = 0.25
"""Share of hinted demonstrations whose hint is a system message before the episode (the rest: before the step)."""
HINT_TEMPLATE = DEFAULT_TEMPLATES["teacher_hint"]
"""How the algorithm renders a teacher's hint (`HintConfig.template("teacher_hint")`); the demonstrations use it too."""


def demonstration(
    problem: Problem, rng: random.Random, hint_rate: float, all_hinted: bool = False, any_count: bool = False
) -> tuple[list[int], list[bool]]:
    """A correct episode's token ids and loss mask; with probability `hint_rate` one or two steps carry a hint
    (`any_count`: any number from one to every step), placed as a message just before the step or as a system
    message before the episode. With `all_hinted` every step carries one, just before it (the hint drill)."""
    value, right = problem.start, []
    for k in range(len(problem.ops)):
        right.append(problem.line(value, k))
        value = problem.apply(value, k)
    hinted: list[int] = []
    system = False
    if all_hinted:
        hinted = list(range(len(right)))
    elif rng.random() < hint_rate:
        count = rng.randint(1, len(right)) if any_count else rng.choice((1, 1, 2))
        hinted = rng.sample(range(len(right)), count)
        system = rng.random() < SYSTEM_SHARE
    ids: list[int] = []
    mask: list[bool] = []

    def add(tokens: list[int], sampled: bool) -> None:
        ids.extend(tokens)
        mask.extend([False] + [sampled] * (len(tokens) - 1))

    if system and hinted:
        add(render("system", HINT_TEMPLATE.format(detail="; ".join(right[k] for k in sorted(hinted)))), False)
    add(render("user", problem.prompt()), False)
    for k, line in enumerate(right):
        if k in hinted and not system:
            add(render("user", HINT_TEMPLATE.format(detail=line)), False)
        add(render("assistant", line), True)
        add(render("tool", problem.tool_reply(k)), False)
    return ids, mask


def pad(rows: list[list[int]], value: int, device: str) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [value] * (width - len(r)) for r in rows], device=device)


def supervised(
    policy: Policy,
    steps: int,
    seed: int,
    batch: int,
    lr: float,
    all_hinted: bool,
    hint_rate: float = 1.0,
    target: float | None = None,
    eval_problems: list[Problem] | None = None,
    check_every: int = 10,
    task_steps: int | None = None,
    clip: float | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    any_count: bool = False,
) -> tuple[float | None, int]:
    """AdamW steps on demonstrations (`demonstration`), for `steps` steps or until held-out greedy accuracy on
    `eval_problems` reaches `target` (checked every `check_every` steps), gradients clipped to norm `clip` when set.
    Returns (last accuracy or None, steps)."""
    device = next(policy.parameters()).device
    rng = random.Random(seed)
    length = task_steps or len(eval_problems[0].ops)
    optimizer = optimizer or torch.optim.AdamW(policy.parameters(), lr=lr)
    acc = accuracy(policy, eval_problems) if target is not None else None
    done = 0
    while done < steps and (target is None or acc < target):
        rows = [demonstration(sample_problem(rng, length), rng, hint_rate, all_hinted, any_count) for _ in range(batch)]
        ids = pad([r[0] for r in rows], PAD, device)
        mask = pad([r[1] for r in rows], False, device)
        loss = -(policy.token_logprobs(ids) * mask).sum() / mask.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(policy.parameters(), clip)
        optimizer.step()
        done += 1
        if target is not None and done % check_every == 0:
            acc = accuracy(policy, eval_problems)
    return acc, done


def hint_drill(policy: Policy, steps: int, task_steps: int, batch: int = 64, lr: float = 3e-3) -> None:
    """The base policy: `steps` supervised steps on demonstrations with a hint just before every step, so that the
    policy learns to read a hint in context. Without it a right hint helps little (warm starts with no drill: 73-77 %
    of steps right without a hint, 78-82 % after a right one); after 100 drill steps and the warm start's hinted
    demonstrations, 82-91 %. A longer drill (500 steps) reads hints better still but left warm starts that GRPO did
    not move in 80 steps (docs/evidence.md, probes). Seed-independent: every seed's warm start starts from it, as
    every seed of an LLM run starts from the same base model."""
    supervised(policy, steps, seed=-1, batch=batch, lr=lr, all_hinted=True, task_steps=task_steps)


def warm_start(
    policy: Policy,
    steps: int,
    seed: int,
    target: float,
    eval_problems: list[Problem],
    batch: int = 64,
    lr: float = 3e-3,
    hint_rate: float = 1.0,
    clip: float | None = None,
    any_count: bool = False,
) -> tuple[float, int]:
    """Supervised warm start on demonstrations, each with one or two hinted steps (`hint_rate`), until held-out
    accuracy reaches `target` (or `steps` steps). Returns (accuracy, steps taken)."""
    acc, done = supervised(
        policy, steps, seed, batch, lr, False, hint_rate, target, eval_problems, clip=clip, any_count=any_count
    )
    return float(acc), done


@torch.no_grad()
def hint_reading(policy: Policy, problems: list[Problem], rng: random.Random) -> dict[str, float]:
    """How well the policy reads a hint: per problem, one step k in a correct context (the right lines before it),
    its greedy line with no hint, after a right hint (the step's right line, placed as the algorithm places it: a
    user message just before the step) and after a wrong hint (the right line with an off result, as the teacher
    gives when it is wrong). Returns the share of steps written right in each case and the share copying the wrong
    hint; and the greedy pass rate of whole episodes without a hint and with a right hint before every step. A hint
    teacher is only a teacher when a right hint raises the share of right steps."""
    device = next(policy.parameters()).device
    cases: dict[str, list[bool]] = {"no_hint": [], "right_hint": [], "wrong_hint": [], "follows_wrong_hint": []}
    for problem in problems:
        k = rng.randrange(len(problem.ops))
        value, ids = problem.start, render("user", problem.prompt())
        for j in range(k):
            ids += render("assistant", problem.line(value, j)) + render("tool", problem.tool_reply(j))
            value = problem.apply(value, j)
        right = problem.line(value, k)
        wrong = f"{right[:5]}{(int(right[5:]) + rng.randrange(1, 10)) % 100:02d}"
        for case, hint in (("no_hint", None), ("right_hint", right), ("wrong_hint", wrong)):
            context = ids + (render("user", HINT_TEMPLATE.format(detail=hint)) if hint else []) + [ROLE_ID["assistant"]]
            logp, state = policy(torch.tensor([context], device=device))
            line = []
            for _ in range(STEP_CHARS):
                token = logp[0, -1].argmax()
                line.append(int(token))
                logp, state = policy(token.view(1, 1), state)
            cases[case].append(decode(line) == right)
            if hint == wrong:
                cases["follows_wrong_hint"].append(decode(line) == wrong)
    out = {case: sum(v) / len(v) for case, v in cases.items()}
    out["pass_no_hint"] = accuracy(policy, problems)
    out["pass_right_hints"] = accuracy(policy, problems, hinted=True)
    return out


def solution(problem: Problem) -> list[str]:
    """The right lines of every step (the privileged context of the OPSD-style arm)."""
    value, lines = problem.start, []
    for k in range(len(problem.ops)):
        lines.append(problem.line(value, k))
        value = problem.apply(value, k)
    return lines
