"""The receiving side's rsync daemon (STDLIB ONLY): its configuration (write-only modules, each
chrooted, one user, the pusher's addresses only), the names of its modules and of the files a
push exchanges through them, and the check of pushed symlinks (``unmunge``).

Shipped verbatim beside ``fetch_step.py`` (the entry point); ``fetch_receive.py`` runs the daemon,
``fetch_push.py`` and ``fetch_relay.py`` write into its modules.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

if __package__:  # imported as sparkrack.serving.scripts.* (the renderer and the tests)
    from . import fetch_base as common
else:  # run in a pod: the switch ConfigMap's files sit side by side
    import fetch_base as common  # type: ignore[import-not-found, no-redef]


TRANSFER_UID = 65532
"""The unprivileged uid (and gid) the daemon's transfers run as, chrooted into their module.
The HF cache is a hostPath the kubelet creates root-owned, and the engine images (and the
download in them) run as root; the receiver, root only for ``chroot`` and ``chown``, gives this
uid the one model's folder and the shared blob store, nothing else, before it serves."""
MODULE_MODEL = "model"
MODULE_SHARED = "shared"
MODULE_META = "meta"
MODULE_STATUS = "status"
MUNGED = "/rsyncd-munged/"
REFUSED = (
    "delete", "delete-before", "delete-during", "delete-delay", "delete-after",
    "delete-excluded", "delete-missing-args", "remove-source-files", "force",
    "D", "devices", "specials", "copy-devices", "write-devices", "owner", "group", "perms",
    "chown", "chmod", "executability", "acls", "xattrs", "super", "fake-super",
    "inplace", "append", "append-verify", "link-dest", "copy-dest", "compare-dest",
    "backup", "backup-dir", "suffix", "temp-dir",
)  # fmt: skip
"""Everything a pusher never needs: deleting, device nodes and specials, ownership, modes,
writing into files in place, and any option naming a second directory on the receiver."""


def rsyncd_config(
    modules: dict[str, Path],
    status: Path,
    secrets: Path,
    log: Path,
    allow: str | Sequence[str],
    uid: int,
) -> str:
    """rsyncd.conf: write-only modules (the model's folder, the shared blob store, the push's
    manifest), a read-only status module (the verdict), each chrooted, one user, the pushing
    Spark's addresses only (one per rail)."""
    hosts = allow if isinstance(allow, str) else " ".join(allow)
    common_lines = [
        "use chroot = yes",
        # A pushed symlink is stored as /rsyncd-munged/<target>: dead until the receiver has
        # checked that it stays inside the model's folder or the shared store (unmunge()).
        "munge symlinks = yes",
        "numeric ids = yes",
        f"uid = {uid}",
        f"gid = {uid}",
        f"auth users = {common.RSYNC_USER}",
        f"secrets file = {secrets}",
        "strict modes = yes",
        f"hosts allow = {hosts}",
        "hosts deny = *",
        "reverse lookup = no",
        "list = no",
        # Setuid/setgid and world-write bits never land, whatever a client sends.
        "incoming chmod = Du-s,Dg-s,Do-w,Fu-s,Fg-s,Fo-w,Fa-x",
        f"refuse options = {' '.join(REFUSED)}",
    ]
    lines = [
        f"log file = {log}",
        # One "recv <path> <length>" line per file, in the order files complete.
        "transfer logging = yes",
        "log format = %o %m %n %l",
        "timeout = 600",
        "max connections = 16",
        f"lock file = {log.with_suffix('.lock')}",
    ]
    for name, path in modules.items():
        lines += [
            f"[{name}]",
            f"path = {path}",
            "read only = no",
            "write only = yes",
            *common_lines,
        ]
    lines += [f"[{MODULE_STATUS}]", f"path = {status}", "read only = yes", *common_lines, ""]
    return "\n".join(lines)


def unmunge(cache: Path, repo: str) -> list[str]:
    """Turn the pushed (munged) symlinks of the model's folder into real ones where their target
    stays inside the model's folder or the shared store; remove the others. Symlinks in the
    shared store are removed (its entries are files). Returns what was removed and why."""
    base = cache / common.repo_folder(repo)
    store = cache / common.SHARED_STORE
    inside = (base.resolve(), store.resolve())

    def within(path: Path) -> bool:
        return any(path == r or r in path.parents for r in inside)

    removed: list[str] = []
    kept: list[Path] = []
    for root, stay in ((base, True), (store, False)):
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            for name in filenames + dirnames:
                link = Path(dirpath, name)
                if not link.is_symlink():
                    continue
                target = os.readlink(link)
                plain = target[len(MUNGED) :] if target.startswith(MUNGED) else target
                lexical = Path(os.path.normpath(link.parent.resolve() / plain))
                if stay and not os.path.isabs(plain) and within(lexical):
                    if plain != target:
                        tmp = link.with_name(f".{link.name}.unmunge")
                        tmp.unlink(missing_ok=True)
                        os.symlink(plain, tmp)
                        os.replace(tmp, link)
                    kept.append(link)
                else:
                    link.unlink()
                    removed.append(f"{link.relative_to(cache)} -> {plain}")
    # Then, every link made real: where it ends (through the others) must stay inside too.
    for link in kept:
        end = link.resolve()
        if not within(end):
            link.unlink()
            removed.append(f"{link.relative_to(cache)} -> {end}")
    return removed


def own(paths: list[Path], uid: int) -> None:
    """Give the transfer uid the module directories and what is already in them."""
    for top in paths:
        os.chown(top, uid, uid, follow_symlinks=False)
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def present_bytes(cache: Path, repo: str) -> int:
    """Bytes of the model already on this node: its folder and the shared blobs it links."""
    base = cache / common.repo_folder(repo)
    total = common.tree_bytes(base)
    blobs = base / "blobs"
    if blobs.is_dir():
        for entry in blobs.iterdir():
            if entry.is_symlink() and entry.is_file():
                total += entry.stat().st_size
    return total


ROUND_FILE = "round"
MANIFEST_FILE = "manifest.json"
VERDICT_FILE = "verdict.json"
