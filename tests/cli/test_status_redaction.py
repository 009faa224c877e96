"""``sparkrack status`` shows text others wrote (the watchdog's last verdict, a fetch Job's reason
from its pod's termination message): a key planted in it appears in neither the text nor the
JSON output."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sparkrack import contract
from sparkrack.cli.status import row, show, snapshot
from sparkrack.watch.cluster import Cluster, DeploymentView

KEY = "sk-planted-" + "9" * 24
ADMIN = "adm-planted-" + "7" * 24
VERDICT = f"probe answered 500: server_args=ServerArgs(api_key='{KEY}', admin_api_key='{ADMIN}')"
REASON = f"rsync failed: Authorization: Bearer {KEY}"


def view() -> DeploymentView:
    head = SimpleNamespace(metadata=SimpleNamespace(annotations={}))
    state = SimpleNamespace(
        metadata=SimpleNamespace(annotations={contract.WATCHDOG_VERDICT_ANNOTATION: VERDICT})
    )
    pod = SimpleNamespace(
        metadata=SimpleNamespace(deletion_timestamp=None),
        status=SimpleNamespace(conditions=[], container_statuses=[]),
    )
    service = SimpleNamespace(spec=SimpleNamespace(selector={}))
    return DeploymentView("glm", [head], [pod], service, state)


class FakeCluster:
    """The two calls status makes per deployment, answering with the planted text."""

    namespace = "sparkrack"

    def deployment_names(self) -> list[str]:
        return ["glm"]

    def view(self, name: str) -> DeploymentView:
        return view()

    def fetch_jobs(self, name: str) -> list[dict[str, str]]:
        return [{"job": "glm-fetch", "state": "FAILED", "progress": REASON}]


@pytest.mark.parametrize("as_json", [False, True])
def test_a_planted_key_is_in_no_status_output(
    as_json: bool, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cluster = cast(Cluster, FakeCluster())
    show(snapshot(cluster, None), as_json)
    out = capsys.readouterr().out
    assert KEY not in out and ADMIN not in out
    assert "rsync failed" in out and "probe answered 500" in out  # the rest still reads
    # Negative control: the row status builds before redaction carries both keys, so the test
    # above can tell a redacted output from one that never held them.
    raw: dict[str, Any] = row(view(), None, FakeCluster().fetch_jobs("glm"))
    show([raw], as_json)
    unredacted = capsys.readouterr().out
    assert KEY in unredacted and ADMIN in unredacted
