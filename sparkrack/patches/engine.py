"""Source patch engine for the serving container (STDLIB ONLY, self-contained).

This file is shipped verbatim into the serving pod (ConfigMap mounted at /opt/sparkrack) and runs
there before the server starts, where sparkrack itself is not installed: it must import nothing but
the standard library.

A patch edits Python source files of installed wheels (paths relative to a site-packages root).
For every (patch, target file) the engine reports exactly one outcome:

- APPLIED         the file was rewritten and now holds the replacement (verified after the write);
- ALREADY         the idempotence marker and the complete replacement are already in the file;
- NOT-APPLICABLE  the patch does not concern this pod (model architecture, server flags, package
                  not installed, package version outside the patch's range, or the fix is upstream);
- DRIFT           the patch should apply but cannot be applied safely (anchor missing or ambiguous,
                  file missing from an installed package, prerequisite absent, result does not
                  compile, write failed). The file is left untouched.
- WOULD-APPLY     (check mode only) the patch would be applied; nothing was written.

Writes are atomic (temporary file in the same directory + os.replace), keep a one-time ``.orig``
backup of the pristine file, and the new text must compile (py_compile) before it replaces the
original.
"""

from __future__ import annotations

import fnmatch
import os
import py_compile
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

APPLIED = "APPLIED"
ALREADY = "ALREADY"
NOT_APPLICABLE = "NOT-APPLICABLE"
DRIFT = "DRIFT"
WOULD_APPLY = "WOULD-APPLY"

_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")


# --------------------------------------------------------------------------------------------
# Versions (the subset of PEP 440 that wheel versions use: N(.N)*[{a|b|rc}N][.postN][.devN][+local])

_VERSION_RE = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc|alpha|beta|c)[-_.]?(?P<pren>\d*))?"
    r"(?:[-_.]?post[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+[a-z0-9.]+)?$",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2}

VersionKey = tuple[tuple[int, ...], tuple[int, ...], int, float]


def version_key(text: str) -> VersionKey:
    """Sort key of a version string; raises ValueError for something that is not a version."""
    m = _VERSION_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a version: {text!r}")
    release = tuple(int(p) for p in m.group("release").split("."))
    release = release + (0,) * (8 - len(release))
    pre, post, dev = m.group("pre"), m.group("post"), m.group("dev")
    if pre is not None:
        pre_key: tuple[int, ...] = (0, _PRE_RANK[pre.lower()], int(m.group("pren") or 0))
    elif dev is not None and post is None:
        pre_key = (-1,)  # X.devN sorts before X.aN
    else:
        pre_key = (1,)
    post_key = int(post or 0) if post is not None else -1
    dev_key: float = int(dev or 0) if dev is not None else float("inf")
    return (release, pre_key, post_key, dev_key)


def version_in(version: str, spec: str) -> bool:
    """True when ``version`` satisfies ``spec`` (comma-separated clauses: >=, >, <=, <, ==, !=)."""
    key = version_key(version)
    for clause in (c.strip() for c in spec.split(",")):
        if not clause:
            continue
        m = re.match(r"^(>=|<=|==|!=|>|<)\s*(\S+)$", clause)
        if not m:
            raise ValueError(f"bad version clause {clause!r} in {spec!r}")
        op, other = m.group(1), version_key(m.group(2))
        ok = {
            ">=": key >= other,
            "<=": key <= other,
            ">": key > other,
            "<": key < other,
            "==": key == other,
            "!=": key != other,
        }[op]
        if not ok:
            return False
    return True


def _norm_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_versions(roots: list[Path]) -> dict[str, tuple[str, Path]]:
    """Map normalised distribution name -> (version, root) from the *.dist-info / *.egg-info metadata."""
    found: dict[str, tuple[str, Path]] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for meta_dir in sorted(root.iterdir()):
            if meta_dir.suffix == ".dist-info":
                meta = meta_dir / "METADATA"
            elif meta_dir.suffix == ".egg-info":
                meta = meta_dir / "PKG-INFO" if meta_dir.is_dir() else meta_dir
            else:
                continue
            name = version = None
            try:
                with open(meta, encoding="utf-8", errors="replace") as fh:
                    for line in fh:
                        if not line.strip():
                            break  # end of the header block
                        if line.startswith("Name:"):
                            name = line.split(":", 1)[1].strip()
                        elif line.startswith("Version:"):
                            version = line.split(":", 1)[1].strip()
            except OSError:
                continue
            if name and version:
                found.setdefault(_norm_dist(name), (version, root))
    return found


# --------------------------------------------------------------------------------------------
# Declarations


@dataclass(frozen=True)
class Hunk:
    """Replace ``anchor`` (must occur exactly once, inside the patch scope) by ``replacement``.

    The replacement must contain the patch marker and must not contain the anchor verbatim.
    """

    anchor: str
    replacement: str


@dataclass(frozen=True)
class Target:
    """One candidate file, relative to a site-packages root, owned by a distribution."""

    path: str
    dists: tuple[str, ...]  # distribution names that ship the file; the first installed one decides
    versions: str = ""  # version range of that distribution the patch applies to ("" = any)
    requires: tuple[tuple[str, str], ...] = ()  # (file relative to the root, text it must contain)


@dataclass(frozen=True)
class FlagRule:
    """A condition on the server argv, e.g. ``--ep-size > 1``."""

    names: tuple[str, ...]  # every alias of the flag
    op: str  # "gt" (integer greater than) | "in" (value in the comma-separated list)
    value: str
    default: str  # the value when the flag is absent from the argv

    def describe(self) -> str:
        symbol = ">" if self.op == "gt" else "in"
        return f"{self.names[0]} {symbol} {self.value}"

    def holds(self, argv: list[str]) -> bool:
        current = flag_value(argv, self.names, self.default)
        if self.op == "gt":
            try:
                return int(current) > int(self.value)
            except ValueError:
                return False
        if self.op == "in":
            return current in [v.strip() for v in self.value.split(",")]
        raise ValueError(f"unknown flag operator {self.op!r}")


@dataclass(frozen=True)
class Patch:
    id: str
    description: str
    seed: str  # where the need for this patch is documented
    targets: tuple[Target, ...]
    hunks: tuple[Hunk, ...]
    scope: str = ""  # if set: anchors are searched only in the top-level block starting here
    upstream_fix: str = ""  # if set and found in scope while the anchor is absent: fixed upstream
    archs: tuple[str, ...] = ()  # fnmatch patterns on the model architecture class; () = any
    flags: tuple[FlagRule, ...] = ()  # all must hold for the patch to apply

    @property
    def marker(self) -> str:
        return f"[sparkrack-patch:{self.id}]"


@dataclass(frozen=True)
class Outcome:
    patch_id: str
    status: str
    target: str  # relative path ("" when the patch was decided before looking at files)
    detail: str
    package_missing: bool = False  # NOT-APPLICABLE because no owning distribution is installed

    def __str__(self) -> str:
        where = f" {self.target}" if self.target else ""
        return f"{self.status} {self.patch_id}{where}: {self.detail}"


@dataclass
class PatchReport:
    patch_id: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def status(self) -> str:
        statuses = [o.status for o in self.outcomes]
        for s in (DRIFT, APPLIED, WOULD_APPLY, ALREADY):
            if s in statuses:
                return s
        return NOT_APPLICABLE

    @property
    def packages_missing(self) -> bool:
        """True when every target was skipped because its distribution is not installed."""
        return bool(self.outcomes) and all(o.package_missing for o in self.outcomes)

    def line(self) -> str:
        parts = "; ".join(
            (f"{o.target}: {o.status}: {o.detail}" if o.target else o.detail) for o in self.outcomes
        )
        return f"[sparkrack-patch] {self.status:<14} {self.patch_id} — {parts}"


def relative_path_problem(rel: str) -> str:
    """Why ``rel`` is not a plain path below a site-packages root ('' when it is)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or "\\" in rel or any(p in ("", ".", "..") for p in parts):
        return "must be a relative path inside site-packages (no '..', no leading '/')"
    return ""


def inside(root: Path, path: Path) -> bool:
    """True when ``path``, symlinks resolved, lies below ``root`` (symlinks resolved too)."""
    try:
        real_root, real = root.resolve(strict=True), path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return real_root in real.parents


def validate_catalog(patches: tuple[Patch, ...] | list[Patch]) -> list[str]:
    """Self-check of declarations; returns one message per mistake (empty = sound)."""
    errors: list[str] = []
    seen: set[str] = set()
    for p in patches:
        if not _ID_RE.match(p.id):
            errors.append(f"{p.id}: id must be lowercase letters, digits and dashes")
        if p.id in seen:
            errors.append(f"{p.id}: duplicate id")
        seen.add(p.id)
        if not p.targets:
            errors.append(f"{p.id}: no target")
        if not p.hunks:
            errors.append(f"{p.id}: no hunk")
        for i, h in enumerate(p.hunks):
            if not h.anchor:
                errors.append(f"{p.id}: hunk {i}: empty anchor")
            if p.marker not in h.replacement:
                errors.append(f"{p.id}: hunk {i}: replacement lacks the marker {p.marker}")
            if p.marker in h.anchor:
                errors.append(f"{p.id}: hunk {i}: anchor contains the marker")
        for t in p.targets:
            for rel in (t.path, *(r for r, _ in t.requires)):
                problem = relative_path_problem(rel)
                if problem:
                    errors.append(f"{p.id}: target {t.path}: {rel} {problem}")
            if not t.dists:
                errors.append(f"{p.id}: target {t.path}: no owning distribution")
            if t.versions:
                try:
                    version_in("0", t.versions)
                except ValueError as exc:
                    errors.append(f"{p.id}: target {t.path}: {exc}")
        for rule in p.flags:
            if rule.op not in ("gt", "in"):
                errors.append(f"{p.id}: flag rule {rule.names}: unknown operator {rule.op}")
    return errors


# --------------------------------------------------------------------------------------------
# Server argv


def flag_value(argv: list[str], names: tuple[str, ...], default: str) -> str:
    """Value of the last occurrence of any alias (``--name value`` or ``--name=value``)."""
    value = default
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1 :]
    return value


# --------------------------------------------------------------------------------------------
# Text operations


def _scope_bounds(text: str, scope: str) -> tuple[int, int] | None:
    """(start, end) of the top-level block whose header starts with ``scope``; None if absent.

    The block ends at the next line that starts in column 0 with code (not blank, not a comment,
    not the closing bracket of a multi-line signature).
    """
    if not scope:
        return 0, len(text)
    start = -1
    for m in re.finditer(re.escape(scope), text):
        if m.start() == 0 or text[m.start() - 1] == "\n":
            start = m.start()
            break
    if start < 0:
        return None
    nl = text.find("\n", start)
    if nl < 0:
        return start, len(text)
    end = re.compile(r"\n(?=[^\s#)\]}])").search(text, nl)
    return start, (end.start() + 1 if end else len(text))


def _plan(patch: Patch, text: str) -> tuple[str, str, str]:
    """Decide what to do with ``text``: (status, detail, new_text) with status in
    {ALREADY, WOULD_APPLY, NOT_APPLICABLE, DRIFT}; ``new_text`` is set for WOULD_APPLY only."""
    bounds = _scope_bounds(text, patch.scope)
    if bounds is None:
        return DRIFT, f"scope {patch.scope.strip()!r} not found", ""
    if patch.marker in text:
        for i, h in enumerate(patch.hunks):
            if text.count(h.replacement) != 1:
                return (
                    DRIFT,
                    f"marker {patch.marker} present but hunk {i + 1} of the patched text is not "
                    "intact (edited by hand or by another tool)",
                    "",
                )
        return ALREADY, "marker and patched text present, nothing written", ""
    new = text
    for i, h in enumerate(patch.hunks):
        start, end = _scope_bounds(new, patch.scope) or (0, 0)
        block = new[start:end]
        count = block.count(h.anchor)
        if count == 0:
            if patch.upstream_fix and patch.upstream_fix in block:
                return (
                    NOT_APPLICABLE,
                    f"fixed upstream ({patch.upstream_fix.strip()!r} already present)",
                    "",
                )
            where = f" in {patch.scope.strip()!r}" if patch.scope else ""
            return DRIFT, f"anchor of hunk {i + 1} not found{where} (upstream code changed)", ""
        if count > 1:
            return DRIFT, f"anchor of hunk {i + 1} matches {count} times (must be exactly 1)", ""
        new = new[:start] + block.replace(h.anchor, h.replacement, 1) + new[end:]
    if new == text:
        return DRIFT, "replacement leaves the file unchanged", ""
    return WOULD_APPLY, f"{len(patch.hunks)} hunk(s) would be applied", new


def _compiles(path: Path, display: str) -> str:
    """Empty string when ``path`` byte-compiles, else the compiler's message."""
    with tempfile.TemporaryDirectory(prefix="sparkrack-pyc-") as tmp:
        try:
            py_compile.compile(
                str(path), cfile=os.path.join(tmp, "x.pyc"), dfile=display, doraise=True
            )
        except py_compile.PyCompileError as exc:
            return str(exc.msg).strip().splitlines()[-1] if str(exc.msg).strip() else "error"
    return ""


def _atomic_write(path: Path, text: str, mode: int) -> Path:
    """Write ``text`` to a temporary sibling of ``path`` and return it (not yet renamed)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".sparkrack-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def apply_to_file(patch: Patch, path: Path, display: str, *, write: bool) -> tuple[str, str]:
    """Apply ``patch`` to one file. Returns (status, detail)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        return DRIFT, f"cannot read: {exc}"
    status, detail, new = _plan(patch, text)
    if status != WOULD_APPLY or not write:
        return status, detail
    mode = path.stat().st_mode & 0o7777
    try:
        tmp = _atomic_write(path, new, mode)
    except OSError as exc:
        return DRIFT, f"cannot write next to the target: {exc}"
    error = _compiles(tmp, display)
    if error:
        tmp.unlink()
        return DRIFT, f"patched text does not compile ({error}); file left untouched"
    try:
        backup = path.with_name(path.name + ".orig")
        if not backup.exists():
            bak_tmp = _atomic_write(backup, text, mode)
            os.replace(bak_tmp, backup)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp.exists():
            tmp.unlink()
        return DRIFT, f"cannot replace the file: {exc}"
    with open(path, encoding="utf-8", newline="") as fh:
        written = fh.read()
    if written != new:  # pragma: no cover - only on a concurrent writer
        return DRIFT, "file content after the write is not the patched text"
    return APPLIED, f"{len(patch.hunks)} hunk(s) applied, backup {backup.name}"


# --------------------------------------------------------------------------------------------
# Running a catalog


def _find(roots: list[Path], rel: str) -> tuple[Path, Path] | None:
    for root in roots:
        candidate = root / rel
        if candidate.is_file():
            return root, candidate
    return None


def run_patch(
    patch: Patch,
    roots: list[Path],
    *,
    model_arch: str,
    server_argv: list[str],
    write: bool,
    versions: dict[str, tuple[str, Path]] | None = None,
    shadows: list[Path] | tuple[Path, ...] = (),
) -> PatchReport:
    """Run one patch on the files below ``roots`` and nowhere else.

    ``shadows``: directories the server imports before ``roots`` (PYTHONPATH). They are never
    written; a target file found there is DRIFT, since the server would load it unpatched.
    """
    report = PatchReport(patch.id)
    if patch.archs and not any(fnmatch.fnmatchcase(model_arch, a) for a in patch.archs):
        report.outcomes.append(
            Outcome(
                patch.id,
                NOT_APPLICABLE,
                "",
                f"model architecture {model_arch or '(unknown)'} not in {', '.join(patch.archs)}",
            )
        )
        return report
    for rule in patch.flags:
        if not rule.holds(server_argv):
            current = flag_value(server_argv, rule.names, rule.default)
            report.outcomes.append(
                Outcome(
                    patch.id,
                    NOT_APPLICABLE,
                    "",
                    f"server flag {rule.names[0]}={current} (applies when {rule.describe()})",
                )
            )
            return report
    if versions is None:
        versions = installed_versions(roots)
    for target in patch.targets:
        dist = next((d for d in target.dists if _norm_dist(d) in versions), None)
        if dist is None:
            report.outcomes.append(
                Outcome(
                    patch.id,
                    NOT_APPLICABLE,
                    target.path,
                    f"{' / '.join(target.dists)} not installed",
                    package_missing=True,
                )
            )
            continue
        version, root = versions[_norm_dist(dist)]
        try:
            in_range = not target.versions or version_in(version, target.versions)
        except ValueError as exc:
            report.outcomes.append(Outcome(patch.id, DRIFT, target.path, f"{dist}: {exc}"))
            continue
        if not in_range:
            report.outcomes.append(
                Outcome(
                    patch.id,
                    NOT_APPLICABLE,
                    target.path,
                    f"{dist} {version} outside {target.versions}",
                )
            )
            continue
        escape = relative_path_problem(target.path) or next(
            (f"{rel} {why}" for rel, _ in target.requires if (why := relative_path_problem(rel))),
            "",
        )
        if escape:
            report.outcomes.append(Outcome(patch.id, DRIFT, target.path, f"refused: {escape}"))
            continue
        shadow = next((s / target.path for s in shadows if (s / target.path).is_file()), None)
        if shadow is not None and not any(inside(r, shadow) for r in roots):
            report.outcomes.append(
                Outcome(
                    patch.id,
                    DRIFT,
                    target.path,
                    f"{shadow} (PYTHONPATH) shadows the installed file and lies outside the"
                    " site-packages roots; not patched, the server would load it unpatched",
                )
            )
            continue
        found = _find([root, *roots], target.path)
        if found is None:
            report.outcomes.append(
                Outcome(
                    patch.id,
                    DRIFT,
                    target.path,
                    f"{dist} {version} is installed but the file is missing (package layout changed)",
                )
            )
            continue
        found_root, path = found
        if not inside(found_root, path):
            report.outcomes.append(
                Outcome(
                    patch.id,
                    DRIFT,
                    target.path,
                    f"refused: {path} resolves to {path.resolve()}, outside {found_root}",
                )
            )
            continue
        missing = [
            f"{rel} lacks {needle!r}"
            for rel, needle in target.requires
            if not _file_contains(path.parents[target.path.count("/")] / rel, needle)
        ]
        if missing:
            report.outcomes.append(
                Outcome(patch.id, DRIFT, target.path, "prerequisite missing: " + "; ".join(missing))
            )
            continue
        status, detail = apply_to_file(patch, path, target.path, write=write)
        report.outcomes.append(
            Outcome(patch.id, status, target.path, f"{dist} {version}: {detail}")
        )
    return report


def _file_contains(path: Path, needle: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return needle in fh.read()
    except OSError:
        return False


def run_catalog(
    patches: tuple[Patch, ...] | list[Patch],
    roots: list[Path],
    *,
    model_arch: str,
    server_argv: list[str],
    write: bool,
    shadows: list[Path] | tuple[Path, ...] = (),
) -> list[PatchReport]:
    """Every patch on ``roots`` (see :func:`run_patch`); nothing outside them is written."""
    versions = installed_versions(roots)
    return [
        run_patch(
            p,
            roots,
            model_arch=model_arch,
            server_argv=server_argv,
            write=write,
            versions=versions,
            shadows=shadows,
        )
        for p in patches
    ]


def python_path() -> list[Path]:
    """PYTHONPATH entries: the launcher runs with -I, the server it execs imports them first."""
    return [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def expand_roots(site_dirs: list[Path]) -> list[Path]:
    """``site_dirs`` plus the source checkouts their *.pth files name (editable installs, e.g.
    ``pip install -e sglang/python``): the interpreter's own layout. Used for the interpreter's
    site-packages only; directories given explicitly are taken as they are."""
    extra: list[Path] = []
    for d in site_dirs:
        if not d.is_dir():
            continue
        for pth in sorted(d.glob("*.pth")):
            try:
                lines = pth.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                continue
            extra.extend(Path(ln.strip()) for ln in lines if ln.startswith("/"))
    roots: list[Path] = []
    for d in [*site_dirs, *extra]:
        if d.is_dir() and d not in roots:
            roots.append(d)
    return roots


def default_roots() -> list[Path]:
    """SPARKRACK_SITE_PACKAGES (os.pathsep list) as given, else the site-packages of the running
    interpreter expanded by ``expand_roots``."""
    env = os.environ.get("SPARKRACK_SITE_PACKAGES", "")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p and Path(p).is_dir()]
    import site
    import sysconfig

    dirs: list[str] = list(getattr(site, "getsitepackages", list)())
    paths = sysconfig.get_paths()
    dirs.extend([paths.get("purelib", ""), paths.get("platlib", "")])
    return expand_roots([Path(d) for d in dirs if d])
