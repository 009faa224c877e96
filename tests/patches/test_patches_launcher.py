"""The serving-container launcher and the ``sparkrack patch`` CLI, on real wheels.

The launcher runs as a real subprocess from a flat directory holding exactly the ConfigMap files
(as mounted at /opt/sparkrack in the pod), with the command ``container_entrypoint`` renders, and
execs a real server stand-in (``python3 -c`` printing its argv and pid).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkrack.cli import main
from sparkrack.errors import SparkrackError
from sparkrack.patches import (
    CONFIGMAP_FILES,
    MOUNT_PATH,
    PATCH_IDS,
    PATCHES,
    configmap_files,
    container_entrypoint,
)

pytestmark = pytest.mark.tools  # real engine wheels

pytest_plugins = ("patch_fixtures",)
SitePackages = Callable[..., Path]  # the site_packages fixture (tests/patch_fixtures.py)

SGLANG = ("sglang", "0.5.12")
FLASHINFER = ("flashinfer-python", "0.6.11.post1")  # the pin of sglang 0.5.12
FI_MMA = "flashinfer/data/cutlass/python/CuTeDSL/cutlass/cute/nvgpu/tcgen05/mma.py"
FI_ARCH = "flashinfer/data/cutlass/python/CuTeDSL/cutlass/base_dsl/arch.py"
MOE = "sglang/srt/layers/moe/cutlass_moe.py"
SERVER_CODE = "import os, sys; print('SERVER', os.getpid(), sys.argv[1:])"
ARCH = "Qwen3_5MoeForConditionalGeneration"


@pytest.fixture
def site(site_packages: SitePackages) -> Path:
    sglang_files = sorted({t.path for p in PATCHES for t in p.targets if "sglang" in t.dists})
    return site_packages((*SGLANG, sglang_files), (*FLASHINFER, [FI_MMA, FI_ARCH]))


@pytest.fixture
def mount(tmp_path: Path) -> Path:
    """The ConfigMap as the pod sees it: one flat directory with the rendered files."""
    opt = tmp_path / "opt-sparkrack"
    opt.mkdir()
    for name, text in configmap_files().items():
        (opt / name).write_text(text)
    return opt


def _launch(mount: Path, site: Path, required: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the rendered command; ``args`` of the result carries the launcher's pid."""
    command = container_entrypoint(required, ARCH, mount=str(mount))
    assert command[0] == "python3"
    server = [sys.executable, "-c", SERVER_CODE, "--tp-size", "4", "--ep-size", "4"]
    env = {"PATH": os.environ["PATH"], "SPARKRACK_SITE_PACKAGES": str(site)}
    with subprocess.Popen(
        [sys.executable, *command[1:], *server],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=mount.parent,
    ) as proc:
        out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.pid, proc.returncode, out, err)


def _patch_lines(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        parts = line.split()
        if line.startswith("[sparkrack-patch] ") and len(parts) > 2 and parts[2] in PATCH_IDS:
            out[parts[2]] = parts[1]
    return out


def _server_line(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if ln.startswith("SERVER ")]
    assert len(lines) <= 1
    return lines[0] if lines else ""


def test_entrypoint_shape() -> None:
    cmd = container_entrypoint(["sglang-jit-arch-sm120f"], "NemotronHForCausalLM")
    assert cmd == [
        "python3",
        "-I",
        f"{MOUNT_PATH}/launcher.py",
        "--require",
        "sglang-jit-arch-sm120f",
        "--model-arch",
        "NemotronHForCausalLM",
        "--",
    ]
    assert set(configmap_files()) == set(CONFIGMAP_FILES)


def test_entrypoint_refuses_unknown_patch_id() -> None:
    with pytest.raises(SparkrackError) as err:
        container_entrypoint(["cutlass-dsl-sm121"], "X")
    text = str(err.value)
    assert "unknown patch id(s) cutlass-dsl-sm121" in text and "[patch-unknown-id]" in text


def test_configmap_files_import_only_the_standard_library() -> None:
    """The pod has no sparkrack: outside the `if __package__:` branch only stdlib may be imported."""
    allowed = set(sys.stdlib_module_names) | {"engine", "catalog", "__future__"}
    for name, text in configmap_files().items():
        tree = ast.parse(text)
        package_only: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "__package__":
                package_only |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in package_only:
                continue
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            for mod in mods:
                assert mod.split(".")[0] in allowed, f"{name} imports {mod}"


def test_launcher_applies_then_execs_the_server(mount: Path, site: Path) -> None:
    proc = _launch(mount, site, ["cutlass-dsl-sm121-admissible-archs", "sglang-jit-arch-sm120f"])
    assert proc.returncode == 0, proc.stderr
    assert _patch_lines(proc.stdout) == {
        "cutlass-dsl-sm121-admissible-archs": "APPLIED",
        "sglang-jit-arch-sm120f": "APPLIED",
        "sglang-cutlass-moe-fp4-ep": "APPLIED",
        "sglang-modelopt-ep-input-scale": "APPLIED",
        "sglang-moe-wna16-qzeros-ep": "APPLIED",
    }
    # the CuTe DSL wheel itself is not installed here: said so, not claimed as patched
    assert "nvidia-cutlass-dsl-libs-base / nvidia-cutlass-dsl not installed" in proc.stdout
    # exec, not a child: the server runs under the launcher's pid and gets the argv unchanged
    server = _server_line(proc.stdout)
    _, pid, argv = server.split(" ", 2)
    assert int(pid) == proc.args
    assert argv == "['--tp-size', '4', '--ep-size', '4']"
    assert proc.stdout.rstrip().endswith(server)
    for patch in PATCHES:
        for target in patch.targets:
            if (site / target.path).exists():
                assert patch.marker in (site / target.path).read_text()

    again = _launch(mount, site, ["cutlass-dsl-sm121-admissible-archs"])
    assert again.returncode == 0, again.stderr
    assert set(_patch_lines(again.stdout).values()) == {"ALREADY"}
    assert _server_line(again.stdout)


def _alter_moe_anchor(site: Path) -> bytes:
    path = site / MOE
    text = path.read_text()
    anchor = "    device = a.device\n    a_map = torch.empty("
    assert text.count(anchor) == 1
    path.write_text(
        text.replace(anchor, "    device = a.device  # upstream edit\n    a_map = torch.empty(")
    )
    return path.read_bytes()


def test_required_drift_stops_the_pod(mount: Path, site: Path) -> None:
    altered = _alter_moe_anchor(site)
    proc = _launch(mount, site, ["sglang-cutlass-moe-fp4-ep"])
    assert proc.returncode == 3
    assert _patch_lines(proc.stdout)["sglang-cutlass-moe-fp4-ep"] == "DRIFT"
    assert "FATAL: required patch(es) sglang-cutlass-moe-fp4-ep could not be applied" in proc.stderr
    assert "The server was NOT started" in proc.stderr
    assert _server_line(proc.stdout) == "", "the server must not run"
    assert (site / MOE).read_bytes() == altered


def test_non_required_drift_warns_and_execs(mount: Path, site: Path) -> None:
    altered = _alter_moe_anchor(site)
    proc = _launch(mount, site, ["sglang-jit-arch-sm120f"])
    assert proc.returncode == 0, proc.stderr
    assert _patch_lines(proc.stdout)["sglang-cutlass-moe-fp4-ep"] == "DRIFT"
    assert "WARNING: sglang-cutlass-moe-fp4-ep is in DRIFT but not required" in proc.stderr
    assert _server_line(proc.stdout)
    assert (site / MOE).read_bytes() == altered


def test_required_patch_with_nothing_installed_stops_the_pod(mount: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-site-packages"
    empty.mkdir()
    proc = _launch(mount, empty, ["sglang-jit-arch-sm120f"])
    assert proc.returncode == 3
    assert "sglang not installed" in proc.stdout
    assert "FATAL: required patch(es) sglang-jit-arch-sm120f" in proc.stderr
    assert _server_line(proc.stdout) == ""
    # not required: the same situation is reported and the server starts
    proc = _launch(mount, empty, [])
    assert proc.returncode == 0, proc.stderr
    assert set(_patch_lines(proc.stdout).values()) == {"NOT-APPLICABLE"}
    assert _server_line(proc.stdout)


def test_launcher_refuses_unknown_required_id(mount: Path, site: Path) -> None:
    env = {"PATH": os.environ["PATH"], "SPARKRACK_SITE_PACKAGES": str(site)}
    proc = subprocess.run(
        [sys.executable, "-I", str(mount / "launcher.py"), "--require", "nope", "--", "true"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown patch id(s) nope" in proc.stderr


# ---------------------------------------------------------------------------------------------
# sparkrack patch CLI


def test_cli_check_apply_again(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["patch", "--site-packages", str(site), "--arch", ARCH]
    ep = ["--", "--ep-size", "4"]
    before = (site / MOE).read_bytes()

    assert main([*base, "--check", *ep]) == 0
    out = capsys.readouterr().out
    assert set(_patch_lines(out).values()) == {"WOULD-APPLY"}
    assert (site / MOE).read_bytes() == before, "--check wrote"

    assert main([*base, "--apply", *ep]) == 0
    assert set(_patch_lines(capsys.readouterr().out).values()) == {"APPLIED"}
    assert (site / MOE).read_bytes() != before

    assert main([*base, "--apply", *ep]) == 0
    assert set(_patch_lines(capsys.readouterr().out).values()) == {"ALREADY"}


def test_cli_without_ep_and_on_drift(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["patch", "--site-packages", str(site), "--arch", ARCH]
    assert main([*base, "--check"]) == 0
    lines = _patch_lines(capsys.readouterr().out)
    assert lines["sglang-cutlass-moe-fp4-ep"] == "NOT-APPLICABLE"
    assert lines["sglang-jit-arch-sm120f"] == "WOULD-APPLY"
    _alter_moe_anchor(site)
    assert main([*base, "--check", "--", "--ep", "2"]) == 1
    assert _patch_lines(capsys.readouterr().out)["sglang-cutlass-moe-fp4-ep"] == "DRIFT"


def test_cli_list_and_bad_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["patch", "--list"]) == 0
    out = capsys.readouterr().out
    assert all(pid in out for pid in PATCH_IDS)
    assert main(["patch", "--site-packages", str(tmp_path / "absent"), "--check"]) == 2
    assert "--site-packages: not a directory" in capsys.readouterr().err


# A server module standing in for sglang.launch_server: what its process shows the world
# (/proc/<pid>/cmdline), what its interpreter got (sys.argv) and what a child would inherit.
KEYED_SERVER = """\
import json, os, sys
cmdline = open(f"/proc/{os.getpid()}/cmdline", "rb").read().decode().split("\\0")
seen = json.dumps({"cmdline": cmdline, "argv": sys.argv[1:],
                   "env": {k: v for k, v in os.environ.items() if k.startswith("SPK_")}})
open("seen.json", "w").write(seen)
print("KEYED", seen)
"""


def _keyed(tmp_path: Path, mount: Path, keys: dict[str, str], env: dict[str, str]) -> Any:
    (tmp_path / "fake_server.py").write_text(KEYED_SERVER)
    command = container_entrypoint([], ARCH, mount=str(mount))
    pairs = [w for var, flag in keys.items() for w in ("--key-env", f"{var}={flag}")]
    server = [sys.executable, "-m", "fake_server", "--tp-size", "4"]
    proc = subprocess.run(
        [sys.executable, *command[1:-1], *pairs, "--", *server],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), **env},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    seen = tmp_path / "seen.json"
    return proc, (json.loads(seen.read_text()) if seen.exists() else None)


def test_the_launcher_hands_keys_over_outside_every_argv(mount: Path, tmp_path: Path) -> None:
    """The key reaches the server's sys.argv as ``--api-key KEY`` but neither its
    /proc/<pid>/cmdline (world-readable) nor the environment its children inherit."""
    key, admin = "sk-planted-" + "a" * 24, "sk-admin-" + "b" * 24
    keys = {"SPK_KEY": "--api-key", "SPK_ADMIN": "--admin-api-key"}
    proc, seen = _keyed(tmp_path, mount, keys, {"SPK_KEY": key, "SPK_ADMIN": admin})
    assert proc.returncode == 0, proc.stderr
    assert seen["argv"] == ["--tp-size", "4", "--api-key", key, "--admin-api-key", admin]
    shown = " ".join(seen["cmdline"])
    assert key not in shown and admin not in shown
    assert "fake_server" in shown and "SPK_KEY=--api-key" in shown
    assert seen["env"] == {}
    # the stand-in printed its argv, keys included: the launcher's copy of its output masks them
    assert key not in proc.stdout + proc.stderr and admin not in proc.stdout + proc.stderr
    assert '"--api-key", "***", "--admin-api-key", "***"' in proc.stdout


def test_an_empty_key_stops_the_server(mount: Path, tmp_path: Path) -> None:
    """Negative control: a key variable that is empty (Secret key missing) does not start a
    server without its key."""
    proc, seen = _keyed(tmp_path, mount, {"SPK_KEY": "--api-key"}, {"SPK_KEY": ""})
    assert seen is None and proc.returncode == 4
    assert "SPK_KEY is empty" in proc.stderr


def test_without_the_handover_the_key_is_in_the_cmdline(mount: Path, tmp_path: Path) -> None:
    """Negative control: the key passed as an argv word (what Kubernetes makes of
    ``--api-key $(VAR)``) is in the world-readable cmdline, so the test above can tell."""
    key = "sk-planted-" + "c" * 24
    (tmp_path / "fake_server.py").write_text(KEYED_SERVER)
    proc = subprocess.run(
        [sys.executable, "-m", "fake_server", "--api-key", key],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    seen = json.loads(proc.stdout.split("KEYED ", 1)[1])
    assert key in seen["cmdline"]


# --- the keys SGLang logs at start-up ----------------------------------------------------------

SGLANG_RELEASES = ("0.5.10", "0.5.11", "0.5.12", "0.5.13")
ENGINE = "sglang/srt/entrypoints/engine.py"
SERVER_ARGS = "sglang/srt/server_args.py"
COMMON = "sglang/srt/utils/common.py"
LOGS_SERVER_ARGS = (
    "logger.info(f'server_args={server_args!r}')"  # engine.py, as ast.unparse shows it
)

# SGLang's own start-up logging, taken from the release's source: ServerArgs with the fields
# server_args.py declares, logging set up by the basicConfig call of configure_logger
# (utils/common.py), then the statement of entrypoints/engine.py that logs server_args, run on
# the logger of that module. A spawned worker (SGLang's scheduler sets its logging up afresh)
# logs it too, and the raw stderr file descriptor gets it.
SGLANG_LOGGING_SERVER = """\
import ast, dataclasses, logging, multiprocessing, os, sys

root = os.environ["SPK_SGLANG"]

def source(member):
    return ast.parse(open(os.path.join(root, member)).read())

def make_server_args(args):
    cls = next(n for n in ast.walk(source("{server_args}"))
               if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]
    ServerArgs = dataclasses.make_dataclass("ServerArgs", [(f, object, None) for f in fields])
    given = {{args[i][2:].replace("-", "_"): args[i + 1] for i in range(0, len(args), 2)}}
    return ServerArgs(**{{"log_level": "info", **given}})

def run(func, member, **names):
    wanted = ("{{server_args", "basicConfig")
    call = next(node for fn in ast.walk(source(member))
                if isinstance(fn, ast.FunctionDef) and fn.name == func
                for node in ast.walk(fn)
                if isinstance(node, ast.Expr) and any(w in ast.unparse(node) for w in wanted))
    exec(compile(ast.Module([call], []), member, "exec"), names)

def log(argv):
    server_args = make_server_args(argv)
    run("configure_logger", "{common}", logging=logging, server_args=server_args,
        format="[%(asctime)s] %(message)s")
    run("{logs_in}", "{engine}", logger=logging.getLogger("sglang.srt.entrypoints.engine"),
        server_args=server_args)

if __name__ == "__main__":
    log(sys.argv[1:])
    ctx = multiprocessing.get_context("spawn")
    worker = ctx.Process(target=log, args=(sys.argv[1:],))
    worker.start()
    worker.join()
    os.write(2, f"raw {{sys.argv[-1]}}\\n".encode())
"""


def _sglang_logging(wheel_files: Any, version: str, tmp_path: Path) -> tuple[Path, str]:
    """The release's files and the function of engine.py that logs ``server_args``."""
    root = wheel_files.extract("sglang", version, [ENGINE, SERVER_ARGS, COMMON])
    engine = ast.parse((root / ENGINE).read_text())
    logs_in = [
        fn.name
        for fn in ast.walk(engine)
        if isinstance(fn, ast.FunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Expr)
        and ast.unparse(node) == "logger.info(f'server_args={server_args!r}')"
    ]
    assert logs_in, f"sglang {version}: {ENGINE} no longer logs server_args"
    common = (root / COMMON).read_text()
    assert "force=True" in common.split("def configure_logger", 1)[1].split("\ndef ", 1)[0]
    (tmp_path / "sglang_logging.py").write_text(
        SGLANG_LOGGING_SERVER.format(
            server_args=SERVER_ARGS, common=COMMON, engine=ENGINE, logs_in=logs_in[0]
        )
    )
    return root, logs_in[0]


@pytest.mark.parametrize("version", SGLANG_RELEASES)
def test_sglangs_start_up_log_reaches_the_log_without_keys(
    wheel_files: Any, version: str, mount: Path, tmp_path: Path
) -> None:
    """SGLang's own start-up logging of each release, in the server and in a spawned worker,
    leaves the launcher with both keys masked and every other argument intact."""
    root, _ = _sglang_logging(wheel_files, version, tmp_path)
    key, admin = "sk-planted-" + "d" * 24, "sk-admin-" + "e" * 24
    command = container_entrypoint([], ARCH, mount=str(mount))
    keys = ["--key-env", "SPK_KEY=--api-key", "--key-env", "SPK_ADMIN=--admin-api-key"]
    server = [sys.executable, "-m", "sglang_logging", "--model-path", "org/model"]
    proc = subprocess.run(
        [sys.executable, *command[1:-1], *keys, "--", *server],
        capture_output=True,
        text=True,
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(tmp_path),
            "SPK_SGLANG": str(root),
            "SPK_KEY": key,
            "SPK_ADMIN": admin,
        },
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    logged = [ln for ln in proc.stderr.splitlines() if "server_args=ServerArgs(" in ln]
    assert len(logged) == 2, proc.stderr  # the server and its worker
    for line in logged:
        assert "model_path='org/model'" in line
        assert "api_key='***'" in line and "admin_api_key='***'" in line
    assert "raw ***" in proc.stderr
    assert key not in proc.stdout + proc.stderr and admin not in proc.stdout + proc.stderr


def test_without_the_launcher_sglang_logs_the_keys(wheel_files: Any, tmp_path: Path) -> None:
    """Negative control: the same start-up logging run with the keys as plain arguments prints
    both, so the test above can tell."""
    root, _ = _sglang_logging(wheel_files, SGLANG_RELEASES[-1], tmp_path)
    key, admin = "sk-planted-" + "f" * 24, "sk-admin-" + "g" * 24
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_logging", "--api-key", key, "--admin-api-key", admin],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "SPK_SGLANG": str(root)},
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"api_key='{key}'" in proc.stderr and f"admin_api_key='{admin}'" in proc.stderr


def test_the_launcher_passes_on_signals_and_the_exit_status(mount: Path, tmp_path: Path) -> None:
    """The launcher, the container's main process, hands SIGTERM to the server and exits with
    its status."""
    (tmp_path / "stopping.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    command = container_entrypoint([], ARCH, mount=str(mount))
    with subprocess.Popen(
        [
            sys.executable,
            *command[1:-1],
            "--key-env",
            "SPK_KEY=--api-key",
            "--",
            sys.executable,
            "-m",
            "stopping",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "SPK_KEY": "k" * 16},
        cwd=tmp_path,
    ) as proc:
        assert proc.stdout is not None
        while "ready" not in proc.stdout.readline():
            pass
        proc.terminate()
        assert proc.wait(timeout=30) == 7


def test_a_key_split_across_writes_of_a_long_line_is_masked(mount: Path, tmp_path: Path) -> None:
    """A key that arrives in two writes, inside a line longer than the launcher holds back for
    a newline, is masked all the same."""
    key = "sk-planted-" + "h" * 24
    (tmp_path / "long_line.py").write_text(
        "import os, sys, time\n"
        "key = sys.argv[-1]\n"
        "os.write(1, b'x' * 70000 + key[:9].encode())\n"
        "time.sleep(0.3)\n"
        "os.write(1, key[9:].encode() + b' end')\n"
    )
    command = container_entrypoint([], ARCH, mount=str(mount))
    proc = subprocess.run(
        [sys.executable, *command[1:-1], "--key-env", "SPK_KEY=--api-key", "--"]
        + [sys.executable, "-m", "long_line"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path), "SPK_KEY": key},
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("x" * 70000 + "*** end")
