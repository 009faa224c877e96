"""The engine's stand-in for the lab's smoke request.

KWOK pods run no container, so the serve play cannot ask a head pod to call its engine. In the
lab (``spark_hardware: simulated``) the play runs this instead: sparkrack's own test server
(:mod:`sparkrack.bench.server`) answers as the deployment's served model name, and the smoke
client the head pod would run (:mod:`sparkrack.serving.scripts.smoke_chat`, the same file) sends the
same streaming request to it. Exit code and output are the smoke client's.
"""

from __future__ import annotations

import argparse

from sparkrack.bench.server import spawn
from sparkrack.serving.scripts import smoke_chat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkrack.bench.standin")
    parser.add_argument("--model", required=True, help="the deployment's served model name")
    parser.add_argument("--prompt", default="Reply with the single word: ready")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    with spawn(["--serve-as", args.model, "--rate", "500"]) as url:
        print(f"stand-in engine: sparkrack bench-server at {url} serving {args.model!r}")
        return smoke_chat.main(
            [
                "--url", url,
                "--model", args.model,
                "--prompt", args.prompt,
                "--max-tokens", str(args.max_tokens),
                "--timeout", str(args.timeout),
            ]
        )  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
