"""The engine's stand-in for the lab's smoke request.

KWOK pods run no container, so the serve play cannot ask a head pod to call its engine. In the
lab (``spark_hardware: simulated``) the play runs this instead: sparkrack's own test server
(:mod:`sparkrack.bench.server`) answers as the deployment's served model name, and the smoke
client the head pod would run (:mod:`sparkrack.serving.scripts.smoke_chat`, the same file) sends the
same streaming request to it. Exit code and output are the smoke client's.

With ``--key-secret NAME --namespace NS`` (and ``--kubeconfig``) the stand-in reads the
deployment's engine key from its key Secret through the API, requires it exactly as the engine does
(401 on ``/v1/*`` without it; ``/health*`` and ``/metrics*`` open), and the smoke client sends it.
The key passes through the two processes' environment only: never a word of a command line, never
printed.
"""

from __future__ import annotations

import argparse
import base64
import os

from sparkrack import contract
from sparkrack.bench.server import spawn
from sparkrack.inputs.variable_table import SERVING_DEFAULTS
from sparkrack.serving.scripts import smoke_chat


def secret_key(name: str, namespace: str, kubeconfig: str | None) -> str:
    """The engine key of the deployment's key Secret, read through the API."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    secret = client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    return base64.b64decode((secret.data or {})[contract.ENGINE_KEY_KEY]).decode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkrack.bench.standin")
    parser.add_argument("--model", required=True, help="the deployment's served model name")
    parser.add_argument("--prompt", default="Reply with the single word: ready")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--key-secret", default=None, help="the deployment's key Secret")
    parser.add_argument("--namespace", default=SERVING_DEFAULTS["serving_namespace"])
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument(
        "--api-key-env",
        default=None,
        help="variable holding the key the smoke client sends (default: the Secret's key)",
    )
    args = parser.parse_args(argv)
    server = ["--serve-as", args.model, "--rate", "500"]
    client: list[str] = []
    if args.key_secret:
        key = secret_key(args.key_secret, args.namespace, args.kubeconfig)
        os.environ[contract.ENGINE_KEY_ENV] = key
        server += ["--api-key-env", contract.ENGINE_KEY_ENV]
        client = ["--api-key-env", args.api_key_env or contract.ENGINE_KEY_ENV]
    elif args.api_key_env:
        client = ["--api-key-env", args.api_key_env]
    with spawn(server) as url:
        keyed = "keyed" if args.key_secret else "unkeyed"
        print(f"stand-in engine: sparkrack bench-server ({keyed}) at {url} serving {args.model!r}")
        return smoke_chat.main(
            [
                "--url", url,
                "--model", args.model,
                "--prompt", args.prompt,
                "--max-tokens", str(args.max_tokens),
                "--timeout", str(args.timeout),
                *client,
            ]
        )  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
