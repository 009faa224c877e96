"""One streaming chat request against an OpenAI-compatible server: the serve play's smoke test.

STDLIB ONLY — shipped into the serving container (ConfigMap, /opt/sparkrack/smoke_chat.py) and
run in the head pod, so it needs no route from the control machine to the cluster network.
Exit 0 when the stream delivered at least one content (or reasoning) token and ended with
``data: [DONE]``; otherwise exit 1 with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request


def stream_chat(
    url: str, model: str, prompt: str, max_tokens: int, timeout: float, key: str = ""
) -> dict[str, object]:
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "stream": True,
        }
    ).encode()
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/chat/completions",
        data=body,
        headers={
            "Content-Type": "application/json",
            **({"Authorization": f"Bearer {key}"} if key else {}),
        },
        method="POST",
    )
    start = time.monotonic()
    first: float | None = None
    chunks = 0
    text: list[str] = []
    done = False
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                done = True
                break
            event = json.loads(payload)
            for choice in event.get("choices", []):
                delta = choice.get("delta") or {}
                piece = delta.get("content") or delta.get("reasoning_content") or ""
                if piece:
                    chunks += 1
                    text.append(piece)
                    if first is None:
                        first = time.monotonic() - start
    return {
        "chunks": chunks,
        "done": done,
        "ttft_s": round(first, 3) if first is not None else None,
        "seconds": round(time.monotonic() - start, 3),
        "text": "".join(text)[:200],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="streaming chat smoke test")
    parser.add_argument("--url", default="", help="default: http://$<--host-env>:<--port>")
    parser.add_argument(
        "--host-env", default="POD_IP", help="variable holding the address the engine serves on"
    )
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument(
        "--api-key-env",
        default="",
        help="variable holding the engine key (its name, never a key); empty: send none",
    )
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", default="Reply with the single word: ready")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    url = args.url or f"http://{os.environ.get(args.host_env, '127.0.0.1')}:{args.port}"
    key = os.environ.get(args.api_key_env, "") if args.api_key_env else ""
    if args.api_key_env and not key:
        print(
            f"smoke: {args.api_key_env} is not set in this container (the deployment's key Secret)"
        )
        return 1
    try:
        result = stream_chat(url, args.model, args.prompt, args.max_tokens, args.timeout, key)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"smoke: request failed: {exc}")
        return 1
    print(json.dumps(result))
    if not result["chunks"]:
        print("smoke: the stream carried no token")
        return 1
    if not result["done"]:
        print("smoke: the stream ended without [DONE]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
