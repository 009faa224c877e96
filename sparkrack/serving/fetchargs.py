"""The fetch step's command line, as the manifests spell it.

STAND-IN: ``sparkrack/serving/fetchplan.py`` owns the fetch step's script path, marker path and
argv once it lands; then this module's two functions are replaced by its functions and this file
goes. Until then this is the one place that spells the fetch step's subcommands
(``download``, ``receive``, ``push``, ``wait``, ``memwait``).

Without a pinned revision every subcommand gets ``--revision main``: the download resolves
``main`` at fetch time, the marker ``<cache>/.sparkrack/models--<org>--<name>@main.done`` records
the commit it resolved, and a switch back to the model finds the marker and downloads nothing.
"""

from __future__ import annotations

from sparkrack import contract

FETCH_SCRIPT = f"{contract.SWITCH_MOUNT}/{contract.FETCH_FILE}"
"""The fetch step inside every pod that runs it (the switch ConfigMap's mount)."""
UNPINNED = "main"
"""The revision the fetch step resolves when a profile pins none."""


def marker_path(cache: str, repo: str, revision: str | None) -> str:
    """The completion marker of (model, revision) in a Hugging Face hub cache directory."""
    folder = "models--" + repo.replace("/", "--")
    return f"{cache}/.sparkrack/{folder}@{revision or UNPINNED}.done"


def fetch_argv(subcommand: str, **options: str | int | float) -> list[str]:
    """``python3 <script> SUBCOMMAND --option value ...``, options in the order given
    (``need_bytes=`` -> ``--need-bytes``)."""
    words = ["python3", FETCH_SCRIPT, subcommand]
    for key, value in options.items():
        words += [f"--{key.replace('_', '-')}", str(value)]
    return words
