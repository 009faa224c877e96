"""The answer canary: a few fixed questions whose answers a program can check.

A broken kernel can stream fluent-looking tokens fast; the repetition guard and the fingerprint
catch loops and uniform statistics, not wrong answers. The canary asks questions any working
instruction model answers right at temperature 0 — a sum, a line copied back, a JSON object
echoed — and judges each answer with a pattern, never with a model.

``sparkrack bench`` asks them at every concurrency level (a level with a wrong answer is
``WRONG-ANSWERS``); ``sparkrack watch --probe canary`` streams one of them as its probe.

Answers are judged on the message content; when a server puts everything into the reasoning
(a reasoning parser without its end marker), the reasoning is judged instead. Canary requests ask
for no thinking (``chat_template_kwargs.enable_thinking = false``; templates without the switch
ignore it), so a reasoning model answers within :data:`MAX_TOKENS`.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from sparkrack.bench.client import RequestSpec, StreamError, choice_texts, clip, decode_event
from sparkrack.bench.stats import FAILED, WRONG_ANSWERS, LevelResult

MAX_TOKENS = 256
"""Tokens a canary answer may take: a short answer stops long before; garbage runs to the end."""

Judge = Callable[[str], str | None]
"""An answer's text -> None when right, else why it is wrong (one line)."""


def _sum_judge(expected: int) -> Judge:
    def judge(text: str) -> str | None:
        numbers = re.findall(r"-?\d+", text.replace(",", ""))
        if not numbers:
            return "no number in the answer"
        if int(numbers[-1]) != expected:
            return f"the last number is {numbers[-1]}, not {expected}"
        return None

    return judge


def _copy_judge(line: str) -> Judge:
    want = " ".join(line.lower().split())

    def judge(text: str) -> str | None:
        if want in " ".join(text.lower().split()):
            return None
        return "the line does not come back as given"

    return judge


def _json_judge(obj: dict[str, Any]) -> Judge:
    def judge(text: str) -> str | None:
        decoder = json.JSONDecoder()
        for match in re.finditer(r"\{", text):
            try:
                found, _ = decoder.raw_decode(text, match.start())
            except ValueError:
                continue
            if found == obj:
                return None
        return "no JSON object equal to the one asked for"

    return judge


@dataclass(frozen=True)
class Question:
    id: str
    prompt: str
    expect: str
    """What a right answer holds, for the reader of a report."""
    judge: Judge = field(repr=False, compare=False)


_LINE = "violet harbor 4821 lantern"
_OBJECT = {"canary": "sparkrack", "n": 7}

QUESTIONS: tuple[Question, ...] = (
    Question(
        "sum",
        "What is 17 + 25? Reply with the number only.",
        "42",
        _sum_judge(42),
    ),
    Question(
        "copy",
        f"Repeat this line exactly and write nothing else: {_LINE}",
        _LINE,
        _copy_judge(_LINE),
    ),
    Question(
        "json",
        "Reply with this JSON object and nothing else: " + json.dumps(_OBJECT),
        json.dumps(_OBJECT),
        _json_judge(_OBJECT),
    ),
)


def question(index: int) -> Question:
    """The canary questions in turn (a watch loop asks one per probe)."""
    return QUESTIONS[index % len(QUESTIONS)]


def answer_text(content: str, reasoning: str) -> str:
    """The text an answer is judged on: the content, else the reasoning."""
    return content if content.strip() else reasoning


@dataclass
class Answer:
    question: str
    right: bool
    why: str | None = None
    """Why it is wrong (None when right)."""
    text: str = ""
    """The answer as judged, clipped (for the report)."""
    finish_reason: str | None = None


@dataclass
class CanaryResult:
    asked: int = 0
    right: int = 0
    wall_s: float = 0.0
    answers: list[Answer] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.asked > 0 and self.right == self.asked

    def reasons(self) -> list[str]:
        """One line per wrong answer (first of each question only)."""
        seen: dict[str, str] = {}
        for a in self.answers:
            if not a.right and a.question not in seen:
                seen[a.question] = f"canary {a.question}: {a.why}; answered {a.text!r}"
        return list(seen.values())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def judge(q: Question, content: str, reasoning: str = "") -> Answer:
    text = answer_text(content, reasoning)
    why = q.judge(text)
    return Answer(q.id, why is None, why, clip(text, 120))


def request_body(spec: RequestSpec, q: Question, max_tokens: int) -> dict[str, Any]:
    """A canary request: temperature 0, no thinking, not streamed."""
    return {
        "model": spec.model,
        "messages": [{"role": "user", "content": q.prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 0,
        "stream": False,
        "chat_template_kwargs": {"enable_thinking": False},
    }


async def ask(
    session: aiohttp.ClientSession, spec: RequestSpec, q: Question, max_tokens: int = MAX_TOKENS
) -> Answer:
    """Ask one question; never raises for what the server does (a failure is a wrong answer)."""
    timeout = aiohttp.ClientTimeout(
        total=spec.stall_timeout_s + spec.connect_timeout_s, sock_connect=spec.connect_timeout_s
    )
    try:
        async with session.post(
            spec.url + "/v1/chat/completions",
            json=request_body(spec, q, max_tokens),
            headers=spec.headers(),
            timeout=timeout,
            allow_redirects=False,
        ) as resp:
            raw = await resp.read()
            if resp.status != 200:
                text = clip(raw.decode("utf-8", "replace"), 120)
                return Answer(q.id, False, f"HTTP {resp.status}: {text}")
        obj = decode_event(raw)
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return Answer(q.id, False, "no choice in the answer")
        message = choices[0].get("message")
        if not isinstance(message, dict):
            return Answer(q.id, False, "no message in the answer")
        # The same reading of content/reasoning as a streamed delta.
        reasoning, content, _ = choice_texts({"choices": [{"delta": message}]})
        answer = judge(q, content, reasoning)
        finish = choices[0].get("finish_reason")
        answer.finish_reason = finish if isinstance(finish, str) else None
        return answer
    except StreamError as exc:
        return Answer(q.id, False, str(exc))
    except TimeoutError:
        return Answer(q.id, False, f"no answer within {timeout.total:g} s")
    except (aiohttp.ClientError, ValueError) as exc:
        return Answer(q.id, False, clip(f"{type(exc).__name__}: {exc}", 160))


async def ask_level(
    session: aiohttp.ClientSession, spec: RequestSpec, n: int, max_tokens: int = MAX_TOKENS
) -> CanaryResult:
    """Every question at least once, ``n`` at a time (a level's batch size): the questions in
    turn until ``max(n, len(QUESTIONS))`` were asked."""
    total = max(n, len(QUESTIONS))
    result = CanaryResult()
    t0 = time.perf_counter()
    for start in range(0, total, n):
        batch = [question(i) for i in range(start, min(start + n, total))]
        result.answers += await asyncio.gather(*(ask(session, spec, q, max_tokens) for q in batch))
    result.wall_s = time.perf_counter() - t0
    result.asked = len(result.answers)
    result.right = sum(a.right for a in result.answers)
    return result


def mark(level: LevelResult, result: CanaryResult) -> None:
    """Record the canary on ``level``. A wrong answer makes the level ``WRONG-ANSWERS`` unless
    it FAILED (no request succeeded): a checked answer is surer than the fingerprint's
    heuristics, whose reasons stay in ``garbage_reasons``."""
    level.canary = result.to_json()
    if result.passed:
        return
    level.notes += result.reasons()
    if level.status != FAILED:
        level.status = WRONG_ANSWERS
