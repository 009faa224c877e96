"""Serving-container entrypoint: apply the SM121 patches, then exec the server (STDLIB ONLY).

    python3 -I /opt/sparkrack/launcher.py [--require ID]... [--model-arch CLASS]
        [--key-env VAR=FLAG]... -- SERVER ARGV...

``--key-env`` hands the value of VAR to the server as FLAG inside its interpreter
(:data:`KEY_BOOTSTRAP`), so that no key is in any argv the kernel shows.

Prints one line per catalog patch. A required patch in DRIFT, or one none of whose packages is
installed (wrong image, site-packages not found), stops the pod: a clear message on stderr, exit
code 3, the server is NOT started (Kubernetes shows the container as failed and the
message in its log). Any other outcome, including DRIFT of a patch the profile does not require
(a warning), ends in os.execvp of the server argv, which keeps the server as the container's
main process (signals, exit code).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

_HERE = os.path.dirname(os.path.abspath(__file__))
if not __package__ and _HERE not in sys.path:  # python3 -I leaves the script's dir off sys.path
    sys.path.insert(0, _HERE)

if __package__:  # imported from the sparkrack package
    from sparkrack.patches.catalog import PATCHES
    from sparkrack.patches.engine import DRIFT, default_roots, python_path, run_catalog
else:  # run as a script: the flat copy in the serving container (/opt/sparkrack)
    from catalog import PATCHES  # type: ignore[import-not-found,no-redef]
    from engine import (  # type: ignore[import-not-found,no-redef]
        DRIFT,
        default_roots,
        python_path,
        run_catalog,
    )

EXIT_REQUIRED_DRIFT = 3
EXIT_USAGE = 2

# Run by the server's interpreter in place of ``python3 -m MODULE``: each ``VAR=FLAG`` pair after
# the module becomes ``FLAG <value of VAR>`` in the module's sys.argv, and VAR leaves the
# interpreter's environment (the children it starts do not inherit it). The kernel's copy of
# the argv, world-readable in /proc/<pid>/cmdline, holds the variable's name only.
#
# The server prints its own arguments (SGLang logs ``server_args=ServerArgs(... api_key='...',
# admin_api_key='...')`` at start-up, in every release 0.5.10-0.5.13), and its worker processes
# set up their logging afresh, so no logging filter in this interpreter reaches all of them.
# The keys are taken out of the bytes instead: the server runs in a child whose stdout and
# stderr (inherited by every process it starts) are pipes, and this process, the container's
# main process, copies them to its own stdout and stderr with each key value replaced by
# ``***``. It hands the server the signals it gets, reaps the orphans the server leaves (it is
# PID 1 of the container), and exits with the server's exit status (128 + N for signal N).
KEY_BOOTSTRAP = """\
import os, runpy, select, signal, sys
module, rest = sys.argv[1], sys.argv[2:]
split = rest.index("--")
pairs, server = rest[:split], rest[split + 1 :]
keys = []
for pair in pairs:
    var, flag = pair.split("=", 1)
    value = os.environ.pop(var, "")
    if not value:
        sys.stderr.write(f"[sparkrack-key] FATAL: {var} is empty: the server would run without {flag}\\n")
        sys.exit(4)
    server += [flag, value]
    keys.append(value.encode())
pipes = [os.pipe(), os.pipe()]
sys.stdout.flush()
sys.stderr.flush()
child = os.fork()
if child == 0:
    for fd, (read, write) in zip((1, 2), pipes):
        os.dup2(write, fd)
        os.close(read)
        os.close(write)
    sys.argv = [module, *server]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.exit(0)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(sig, lambda sig, _frame: os.kill(child, sig))
keep = max((len(k) for k in keys), default=1) - 1
def clean(data):
    for key in keys:
        data = data.replace(key, b"***")
    return data
def emit(fd, data):
    while data:
        data = data[os.write(fd, data):]
out, held = {}, {}
for fd, (read, write) in zip((1, 2), pipes):
    os.close(write)
    out[read], held[read] = fd, b""
status = None
while out:
    ready = select.select(list(out), [], [], 1.0)[0]
    for read in ready:
        chunk = os.read(read, 65536)
        data = clean(held[read] + chunk)
        if not chunk:
            emit(out.pop(read), data)
            os.close(read)
            continue
        cut = data.rfind(b"\\n") + 1
        if not cut and len(data) > 65536:
            cut = len(data) - keep
        emit(out[read], data[:cut])
        held[read] = data[cut:]
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if pid == child:
            status = code
    if status is not None and not ready:
        break
for read, fd in out.items():
    emit(fd, clean(held[read]))
if status is None:
    status = os.waitpid(child, 0)[1]
code = os.waitstatus_to_exitcode(status)
sys.exit(128 - code if code < 0 else code)
"""


def keyed_argv(server: list[str], keys: Sequence[str]) -> list[str]:
    """The argv to exec: ``server`` itself without keys, else ``python -c KEY_BOOTSTRAP MODULE
    VAR=FLAG... -- ARGS`` for a ``PYTHON -m MODULE ARGS`` server (``keys``: ``VAR=FLAG``)."""
    if not keys:
        return server
    if len(server) < 3 or server[1] != "-m":
        raise ValueError(f"--key-env needs a 'PYTHON -m MODULE' server argv, not {server[:3]}")
    return [server[0], "-c", KEY_BOOTSTRAP, server[2], *keys, "--", *server[3:]]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        split = args.index("--")
        own, server = args[:split], args[split + 1 :]
    else:
        own, server = args, []
    parser = argparse.ArgumentParser(prog="sparkrack-launcher")
    parser.add_argument("--require", action="append", default=[], metavar="ID")
    parser.add_argument("--model-arch", default="")
    parser.add_argument("--key-env", action="append", default=[], metavar="VAR=FLAG")
    opts = parser.parse_args(own)
    required = [r for item in opts.require for r in item.split(",") if r]
    known = {p.id for p in PATCHES}
    unknown = [r for r in required if r not in known]
    if unknown:
        print(
            f"[sparkrack-patch] FATAL: the profile requires unknown patch id(s) {', '.join(unknown)}"
            f" — known: {', '.join(sorted(known))}. Fix the profile's patches list.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if not server:
        print("[sparkrack-patch] FATAL: no server command after '--'", file=sys.stderr)
        return EXIT_USAGE

    roots = default_roots()
    print(
        f"[sparkrack-patch] site-packages: {', '.join(str(r) for r in roots) or '(none found)'};"
        f" model architecture: {opts.model_arch or '(unknown)'};"
        f" required: {', '.join(required) or '(none)'}",
        flush=True,
    )
    reports = run_catalog(
        PATCHES,
        roots,
        model_arch=opts.model_arch,
        server_argv=server,
        write=True,
        shadows=python_path(),
    )
    fatal: list[str] = []
    for report in reports:
        print(report.line(), flush=True)
        if report.patch_id in required and report.packages_missing:
            # nothing to patch was found at all: wrong image or site-packages not discovered
            fatal.append(report.patch_id)
        elif report.status == DRIFT:
            if report.patch_id in required:
                fatal.append(report.patch_id)
            else:
                print(
                    f"[sparkrack-patch] WARNING: {report.patch_id} is in DRIFT but not required by"
                    " this profile; starting the server without it.",
                    file=sys.stderr,
                    flush=True,
                )
    if fatal:
        print(
            f"[sparkrack-patch] FATAL: required patch(es) {', '.join(fatal)} could not be applied"
            " (DRIFT: the installed code no longer matches the patch, or none of the packages"
            " it patches was found). The server was NOT started. Fix: use an image whose"
            " package versions the patch catalog covers, set SPARKRACK_SITE_PACKAGES if the"
            " packages live elsewhere, or update sparkrack/patches/catalog.py (see above).",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_REQUIRED_DRIFT
    try:
        argv = keyed_argv(server, opts.key_env)
    except ValueError as exc:
        print(f"[sparkrack-patch] FATAL: {exc}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"[sparkrack-patch] FATAL: cannot exec {server[0]}: {exc}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    sys.exit(main())
