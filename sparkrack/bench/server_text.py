"""What the test server says (:mod:`sparkrack.bench.server`): the token texts of each mode
(:func:`token_stream`: grammatical sentences, a loop, word salad, a single repeated token) and
the answers of its tiny deterministic model (:func:`solve`: a sum, a repeated line, an echoed
JSON object, right or plausibly wrong).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator

_DET = ["the", "a", "every", "this", "our", "each"]
_ADJ = ["quick", "stable", "remote", "careful", "bounded", "shared", "silent", "modern", "sparse"]
_NOUN = [
    "scheduler",
    "packet",
    "kernel",
    "cluster",
    "protocol",
    "ledger",
    "cache",
    "replica",
    "engineer",
    "network",
    "expert",
    "token",
    "request",
    "graph",
]
_VERB = ["routes", "checks", "stores", "sends", "measures", "repairs", "orders", "accepts"]
_PREP = ["to", "from", "with", "under", "over", "into", "for", "across"]
_SALAD = [
    "quantum",
    "banana",
    "lattice",
    "purple",
    "ledger",
    "orbit",
    "velvet",
    "cipher",
    "gravel",
    "monsoon",
    "turbine",
    "sonnet",
    "glacier",
    "pepper",
    "retire",
]
_SALAD_MARKERS = ["self-correct", "stop rambling", "retire retire", "thinking thinking"]
_SUM = re.compile(r"What is (-?\d+) \+ (-?\d+)\?")
_COPY = re.compile(r"Repeat this line exactly and write nothing else: (.+)$")
_ECHO = re.compile(r"Reply with this JSON object and nothing else: (\{.*\})$")


def solve(prompt: str, wrong: bool = False) -> str | None:
    """The answer to a question the server can work out (None: not such a question).

    ``wrong``: a fluent answer with the wrong content (the sum off by one, the line's words
    reversed, the object's values replaced)."""
    if m := _SUM.search(prompt):
        return str(int(m.group(1)) + int(m.group(2)) + (1 if wrong else 0))
    if m := _COPY.search(prompt):
        words = m.group(1).split()
        return " ".join(reversed(words) if wrong else words)
    if m := _ECHO.search(prompt):
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            return None
        if not isinstance(obj, dict):
            return None
        return json.dumps({k: "?" for k in obj} if wrong else obj)
    return None


_LOOP = "Therefore the answer repeats because the answer repeats because"


def _sentence(rng: random.Random) -> list[str]:
    words = [
        rng.choice(_DET).capitalize(),
        rng.choice(_ADJ),
        rng.choice(_NOUN),
        rng.choice(_VERB),
        rng.choice(_DET),
        rng.choice(_NOUN),
        rng.choice(_PREP),
        rng.choice(_DET),
        rng.choice(_ADJ),
        rng.choice(_NOUN) + ".",
    ]
    if rng.random() < 0.5:
        words[-1] = words[-1][:-1]
        words += ["and", "it", rng.choice(_VERB), "the", rng.choice(_NOUN) + "."]
    return words


def token_stream(mode: str, seed: int) -> Iterator[str]:
    """Endless sequence of token texts (each one token: a word with its leading space)."""
    rng = random.Random(seed)
    if mode == "uniform":
        while True:
            yield "!"
    if mode == "word-salad":
        while True:
            if rng.random() < 0.08:
                for word in rng.choice(_SALAD_MARKERS).split():
                    yield " " + word
            else:
                yield " " + rng.choice(_SALAD)
    count = 0
    loop = _LOOP.split()
    while True:
        if mode == "repetition" and count > 40:
            for word in loop:
                yield " " + word
            continue
        for word in _sentence(rng):
            count += 1
            yield " " + word
