"""The owner's guide (docs/guide/first-cluster.md) against the commands it documents.

Every ``console`` block of the page runs, in page order, in a fresh folder holding a copy of
``inventories/example``, as the page's conventions say:

* ``$ COMMAND`` is a command; the lines after it, up to the next ``$ ``, are lines its output
  must contain, in that order (stdout and stderr together, the folder's own path left out);
  ``…`` in a line stands for any text; ``[exit N]`` is its exit status (0 when absent).
* a ``yaml file=PATH [delete=K1,K2]`` block is an edit: its keys are set in PATH (created when
  absent), the ``delete`` keys removed.
* ``<!-- lab: STEP -->`` is a step the owner takes on the cluster, here replaced by a stand-in:
  ``site.yml``: the repository's real control plane (tests/kube_api.py), its admin kubeconfig
  at ``~/.kube/sparkrack.yaml``, where site.yml writes it, and the serve play's objects
  (``sparkrack render --what manifests``) created in it; no node runs their pods; ``rank.log``: a crashed rank's log, as
  ``kubectl logs --previous`` saves it: the captured SGLang log :data:`CAPTURED_RANK_LOG`.

``make image`` runs its real recipe (the checkout's wheel, the archive rewritten as OCI by
``sparkrack.serving.image_archive``) with ``docker`` replaced by tests/docker_standin.py,
named as such; its build folder and archive are placed in the test's folder.

No command may reach a host: a command whose program is not in :data:`ALLOWED` is refused before
it runs, HOME is the test's own folder, and every proxy variable points at a closed loopback
port. ``bash`` blocks (site.yml itself, the curl from a laptop) are shown, never run.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_api import KubeAPI

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "guide" / "first-cluster.md"
ALLOWED = frozenset({"cp", "mkdir", "mv", "chmod", "openssl", "export", "make", "sparkrack",
                     "ansible-vault"})  # fmt: skip
"""Programs the page may run: none of them opens a connection beyond loopback here."""
LAB_STEPS = frozenset({"site.yml", "rank.log"})
CAPTURED_RANK_LOG = ROOT / "tests" / "data" / "logs" / "mem-fraction-too-low.log"
_FENCE = re.compile(r"^```(\S*)(.*)$")
_EXIT = re.compile(r"^\[exit (\d+)\]$")
_LAB = re.compile(r"^<!-- lab: (\S+) -->$")


@dataclass
class Step:
    """One thing the page has the owner do, with the page's line it starts at."""

    line: int
    kind: str
    """``run`` (a command), ``edit`` (a yaml block on a file) or ``lab`` (a stand-in step)."""
    text: str
    expected: list[str] = field(default_factory=list)
    exit: int = 0
    path: str = ""
    delete: tuple[str, ...] = ()


def steps(page: str) -> list[Step]:
    """The page's steps, in order (the conventions of the module's docstring)."""
    found: list[Step] = []
    lines = page.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        lab = _LAB.match(lines[i].strip())
        if lab:
            found.append(Step(i + 1, "lab", lab[1]))
        if not fence or not fence[1]:
            i += 1
            continue
        lang, info = fence[1], dict(w.split("=", 1) for w in fence[2].split() if "=" in w)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        body = lines[i + 1 : end]
        if lang == "console":
            for n, text in enumerate(body, start=i + 2):
                if text.startswith("$ "):
                    found.append(Step(n, "run", text[2:]))
                elif not found or found[-1].kind != "run" or found[-1].line < i:
                    raise AssertionError(f"{PAGE.name}:{n}: output before any `$ ` command")
                elif code := _EXIT.match(text):
                    found[-1].exit = int(code[1])
                elif text.strip():
                    found[-1].expected.append(text)
        elif lang == "yaml" and "file" in info:
            delete = tuple(k for k in info.get("delete", "").split(",") if k)
            found.append(Step(i + 2, "edit", "\n".join(body), path=info["file"], delete=delete))
        i = end + 1
    return found


def _pattern(expected: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part) for part in expected.split("…")) + "$")


def mismatch(step: Step, code: int, output: str) -> str | None:
    """Why the command's exit status and output differ from what the page shows; None: they
    match (every shown line found, in order)."""
    if code != step.exit:
        return f"exit {code}, the page shows {step.exit}"
    got = output.splitlines()
    at = 0
    for expected in step.expected:
        pattern = _pattern(expected)
        hit = next((k for k in range(at, len(got)) if pattern.match(got[k])), None)
        if hit is None:
            return f"no line matches {expected!r} (after line {at} of the output)"
        at = hit + 1
    return None


class Owner:
    """The owner's folder and shell: a copy of inventories/example, its own HOME, the checkout's
    environment on PATH and the docker stand-in before it."""

    def __init__(self, work: Path, kube: KubeAPI | None) -> None:
        self.work = work
        self.kube = kube
        self.created: list[dict[str, Any]] = []
        (work / "inventories").mkdir(parents=True)
        shutil.copytree(ROOT / "inventories" / "example", work / "inventories" / "example")
        home = work / "home"
        home.mkdir()
        shim = work / "standin-bin"
        shim.mkdir()
        docker = shim / "docker"
        standin = ROOT / "tests" / "docker_standin.py"
        docker.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{standin}" "$@"\n')
        docker.chmod(0o755)
        closed = "http://127.0.0.1:9"
        self.env = {
            "HOME": str(home),
            "PATH": f"{shim}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "SPARKRACK_CACHE_DIR": str(work / "cache"),
            "SPARKRACK_DOCKER_STANDIN": str(work / "standin-state"),
            "http_proxy": closed,
            "https_proxy": closed,
            "HTTP_PROXY": closed,
            "HTTPS_PROXY": closed,
            "no_proxy": "127.0.0.1,localhost",
            "NO_PROXY": "127.0.0.1,localhost",
        }

    def argv(self, command: str) -> list[str]:
        """The command as bash runs it here; refused unless its program is in ALLOWED."""
        words = shlex.split(command)
        if not words or words[0] not in ALLOWED:
            raise AssertionError(f"{command!r}: not a command the guide's test may run")
        if words == ["make", "image"]:
            build = self.work / "build"
            return ["make", "-s", "-C", str(ROOT), "image", f"IMAGE_CONTEXT={build}/image",
                    f"IMAGE_ARCHIVE={build}/sparkrack-image.tar"]  # fmt: skip
        return ["bash", "-c", command]

    def run(self, step: Step) -> tuple[int, str]:
        if step.kind == "edit":
            self.edit(step)
            return 0, ""
        if step.kind == "lab":
            assert step.text in LAB_STEPS, step.text
            if step.text == "rank.log":
                shutil.copy(CAPTURED_RANK_LOG, self.work / "rank.log")
                return 0, ""
            assert self.kube is not None
            kube_dir = Path(self.env["HOME"]) / ".kube"
            kube_dir.mkdir(exist_ok=True)
            shutil.copy(self.kube.kubeconfig, kube_dir / "sparkrack.yaml")
            self.apply_rendered()
            return 0, ""
        argv = self.argv(step.text)
        if step.text.startswith("export "):
            name, _, value = step.text.removeprefix("export ").partition("=")
            self.env[name] = value.replace("~", self.env["HOME"], 1)
            return 0, ""
        done = subprocess.run(
            argv,
            cwd=self.work,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=600,
            check=False,
        )
        return done.returncode, done.stdout.replace(f"{self.work}/", "")

    def apply_rendered(self) -> None:
        """The serve play's objects, as ``sparkrack render --what manifests`` prints them for the
        owner's inventory, created in the control plane (no node runs their pods)."""
        from kubernetes.dynamic import DynamicClient
        from kubernetes.dynamic.exceptions import ConflictError

        assert self.kube is not None
        done = subprocess.run(
            ["bash", "-c", "sparkrack render -i inventories/mine --what manifests"],
            cwd=self.work, env=self.env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        api = DynamicClient(self.kube.client())
        for obj in yaml.safe_load_all(done.stdout):
            if not obj:
                continue
            resource = api.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            try:
                resource.create(body=obj, namespace=obj["metadata"].get("namespace"))
            except ConflictError:
                if obj["kind"] != "Namespace":
                    raise
            self.created.append(obj)

    def remove_created(self) -> None:
        """Delete what :meth:`apply_rendered` created, pods of its StatefulSets included: the
        session's control plane is shared, and a pending rank of the owner's inventory would
        take the GPU of a node a later test registers under the same name."""
        from kubernetes import client
        from kubernetes.dynamic import DynamicClient
        from kubernetes.dynamic.exceptions import NotFoundError

        if self.kube is None or not self.created:
            return
        api = self.kube.client()
        dyn = DynamicClient(api)
        for obj in reversed(self.created):
            resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            with contextlib.suppress(NotFoundError):
                resource.delete(
                    name=obj["metadata"]["name"],
                    namespace=obj["metadata"].get("namespace"),
                    body={"propagationPolicy": "Background"},
                )
        core = client.CoreV1Api(api)
        for ns in {
            o["metadata"]["namespace"] for o in self.created if "namespace" in o["metadata"]
        }:
            with contextlib.suppress(client.ApiException):
                core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)

    def edit(self, step: Step) -> None:
        path = self.work / step.path
        data = yaml.safe_load(path.read_text()) if path.exists() else {}
        data.update(yaml.safe_load(step.text))
        for key in step.delete:
            assert key in data, f"{step.path}: the page deletes {key}, which it does not hold"
            del data[key]
        path.write_text("---\n" + yaml.safe_dump(data, sort_keys=False))


@dataclass(frozen=True)
class Ran:
    step: Step
    code: int
    output: str


@pytest.fixture(scope="module")
def ran(kube_api: KubeAPI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Ran]]:
    owner = Owner(tmp_path_factory.mktemp("owner"), kube_api)
    results = []
    for step in steps(PAGE.read_text()):
        code, output = owner.run(step)
        results.append(Ran(step, code, output))
    try:
        yield results
    finally:
        owner.remove_created()


def test_every_documented_command_prints_what_the_page_shows(ran: list[Ran]) -> None:
    wrong = [
        f"{PAGE.name}:{r.step.line}: $ {r.step.text}: {why}\n{r.output}"
        for r in ran
        if r.step.kind == "run" and (why := mismatch(r.step, r.code, r.output))
    ]
    assert not wrong, "\n\n".join(wrong)


def test_the_page_walks_the_owner_through_every_step() -> None:
    """Image, check (refused, then passing), the LAN endpoint, status before and after
    site.yml, the outage, and the way to the troubleshooting page."""
    page = PAGE.read_text()
    found = steps(page)
    commands = [s.text for s in found if s.kind == "run"]
    assert "make image" in commands
    checks = [s for s in found if s.text == "sparkrack check -i inventories/mine"]
    assert [s.exit for s in checks] == [1, 0, 0]
    assert any("--what manifests" in c for c in commands)
    status = [s for s in found if s.text.startswith("sparkrack status")]
    assert [s.exit for s in status] == [4, 1]
    lab = [i for i, s in enumerate(found) if s.kind == "lab"]
    assert lab and found.index(status[0]) < lab[0] < found.index(status[1])
    assert any(c.startswith("sparkrack plan") for c in commands)
    assert "sparkrack diagnose rank.log" in commands
    assert "(troubleshooting.md)" in page
    assert (ROOT / "docs" / "guide" / "troubleshooting.md").is_file()
    # Every `$ ` line of a console block is a step: none is skipped by the parser.
    assert len(commands) == page.count("\n$ ")


@pytest.mark.parametrize(
    ("stale", "fresh"),
    [
        ("down 92 s (old", "down 90 s (old"),
        ("check: REFUSED, 3 problem(s)", "check: REFUSED, 2 problem(s)"),
        ("ranks 0/4 ready", "ranks 4/4 ready"),
        ("    nodePort: 30400\n", "    nodePort: 30401\n"),
        ("[exit 4]", "[exit 2]"),
        ("wrote build/sparkrack-image.tar", "wrote build/image.tar"),
        ("[profile key: sglang.mem_fraction_static]", "[profile key: sglang.mem_fraction]"),
    ],
)
def test_a_stale_line_on_the_page_fails(ran: list[Ran], stale: str, fresh: str) -> None:
    """Negative control: one planted stale line, and the comparison with the same runs fails."""
    page = PAGE.read_text()
    assert page.count(stale) == 1, stale
    planted = steps(page.replace(stale, fresh))
    assert [s.text for s in planted] == [r.step.text for r in ran]
    failures = [
        s.line
        for s, r in zip(planted, ran, strict=True)
        if s.kind == "run" and mismatch(s, r.code, r.output)
    ]
    assert len(failures) == 1, failures


@pytest.mark.parametrize(
    "command",
    [
        "ansible-playbook site.yml -i inventories/mine",
        "curl http://192.168.1.10:30400/v1/models",
        "ssh spark1 true",
        "kubectl get pods",
    ],
)
def test_a_command_that_could_reach_a_host_is_refused(tmp_path: Path, command: str) -> None:
    owner = Owner(tmp_path, None)
    with pytest.raises(AssertionError, match="not a command the guide's test may run"):
        owner.run(Step(1, "run", command))
