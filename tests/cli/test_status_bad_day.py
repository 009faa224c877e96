"""``sparkrack status`` on a bad day: an absent, a refusing and a silent API.

Each ends in one line on stderr (no traceback), within a bound, with its documented exit code
(docs/reference/exit-codes.md: 4 no kubeconfig, 5 the API unusable). The APIs are stand-ins on loopback:
a port nothing listens on (the kernel refuses the connection), and a socket that accepts the
connection and never sends a byte (a hung API server). The kubeconfig is found where site.yml
writes it (``~/.kube/sparkrack.yaml``) when neither ``--kubeconfig`` nor ``$KUBECONFIG`` names one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkrack.cli.exitcodes import ExitCode

BOUND_S = 120
"""What "returns" means here: far above the request timeout, far below a hang (600 s+)."""
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}
users:
- name: u
  user: {{token: not-a-real-token}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A server that accepts every connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


def status(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    return subprocess.run(
        [sys.executable, "-m", "sparkrack", "status", "--namespace", "sparkrack", *args],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        env={**clean, "HOME": str(home), **(env or {})},
        check=False,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def kubeconfig(path: Path, port: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(KUBECONFIG.format(port=port))
    return path


def test_no_kubeconfig_is_one_line_exit_4(tmp_path: Path) -> None:
    done = status(tmp_path)
    line = one_line(done)
    assert done.returncode == ExitCode.NO_KUBECONFIG == 4
    assert line.startswith("status: no kubeconfig: looked in ")
    assert f"{tmp_path}/.kube/sparkrack.yaml, {tmp_path}/.kube/config" in line
    assert "fix: run site.yml (it writes ~/.kube/sparkrack.yaml)" in line


@pytest.mark.tools  # serves or probes HTTP on loopback
def test_a_refusing_api_found_where_site_yml_writes_the_kubeconfig(tmp_path: Path) -> None:
    port = free_port()
    kubeconfig(tmp_path / ".kube" / "sparkrack.yaml", port)
    done = status(tmp_path, "--request-timeout", "2")
    line = one_line(done)
    assert done.returncode == ExitCode.API_UNAVAILABLE == 5
    assert line.startswith(f"status: the API at https://127.0.0.1:{port} refused the connection")


@pytest.mark.tools  # serves or probes HTTP on loopback
def test_kubeconfig_env_comes_before_the_default(tmp_path: Path) -> None:
    """$KUBECONFIG names another server than ~/.kube/sparkrack.yaml: its is the one asked."""
    kubeconfig(tmp_path / ".kube" / "sparkrack.yaml", free_port())
    other = free_port()
    mine = kubeconfig(tmp_path / "mine.yaml", other)
    done = status(tmp_path, "--request-timeout", "2", env={"KUBECONFIG": str(mine)})
    assert f"https://127.0.0.1:{other} refused" in one_line(done)


@pytest.mark.tools  # serves or probes HTTP on loopback
def test_a_silent_api_is_one_line_exit_5_within_the_bound(tmp_path: Path, silent_port: int) -> None:
    config = kubeconfig(tmp_path / "k.yaml", silent_port)
    done = status(tmp_path, "--kubeconfig", str(config), "--request-timeout", "1")
    line = one_line(done)
    assert done.returncode == ExitCode.API_UNAVAILABLE
    assert line.startswith(
        f"status: the API at https://127.0.0.1:{silent_port} accepted the connection but did not "
        "answer within 1 s"
    )


def test_a_named_kubeconfig_that_is_absent_is_a_usage_error(tmp_path: Path) -> None:
    done = status(tmp_path, "--kubeconfig", str(tmp_path / "nope.yaml"))
    assert done.returncode == ExitCode.USAGE
    assert "--kubeconfig: is not a file" in one_line(done)
