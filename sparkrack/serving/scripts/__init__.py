"""Scripts shipped verbatim into serving pods (ConfigMaps), standard library only.

* ``fetch_step.py`` with ``fetch_base.py``, ``fetch_daemon.py``, ``fetch_receive.py``,
  ``fetch_relay.py`` and ``fetch_push.py``: the fetch step of a model switch (download, copy over
  the fabric, wait);
* ``group_guard.py``: the exec probe that restarts a worker rank when its head restarted;
* ``smoke_chat.py``: one streaming chat request, the serve play's smoke test.

sparkrack itself is not installed in the pods: these files run alone there.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent


def text(name: str) -> str:
    """The script ``name`` exactly as it is shipped."""
    return (HERE / name).read_text(encoding="utf-8")
