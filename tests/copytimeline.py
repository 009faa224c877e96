"""The serve play's timeline line of a copy, from a real push's output (its phase records are
what the fetch Job's termination message carries): shared by the copy-estimate tests."""

from __future__ import annotations

from sparkrack.serving.switch import timeline


def copy_lines(push_output: str, peer: str, predicted: float) -> list[str]:
    """The ``copy rail N`` lines the serve play prints for a fetch Job whose push printed
    ``push_output``, beside the estimate ``predicted``."""
    pod = {
        "metadata": {"name": "fetch", "labels": {"batch.kubernetes.io/job-name": "fetch"}},
        "status": {
            "containerStatuses": [
                {"name": "push", "state": {"terminated": {"message": push_output}}}
            ]
        },
    }
    facts = {
        "name": "copy",
        "fetch_job": "fetch",
        "copy_to": [peer],
        "predicted": [{"phase": "copy rail 0", "seconds": predicted}],
    }
    rows = timeline.rows(facts, [], [pod])
    return [ln for ln in timeline.table("copy", rows) if ln.lstrip().startswith("copy")]
