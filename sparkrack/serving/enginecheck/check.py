"""Every rank's rendered command, run through the real upstream engine's parser and start-up checks.

For each profile and each of its ranks, the engine renders argv and environment exactly as the
pods get them; :mod:`sparkrack.serving.enginecheck.upstream` hands them to the argument parser and the
start-up checks of the upstream release the image corresponds to (the wheel from PyPI, cached),
and reports what that code raises. An engine whose release is not on PyPI checks the argv against
a table made from its source (``Engine.table_problems``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sparkrack.errors import Problem
from sparkrack.serving.context import ServingContext, context_from_inventory
from sparkrack.serving.enginecheck import upstream as enginecheck
from sparkrack.serving.engines import Engine, engine_of
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.resolution import Resolution, resolve

RULE = "engine-check"
RULE_ENV = "engine-env-unknown"
RULE_EXTRA = "extra-args-owned"
CONFIG_DESTS = frozenset({"config"})
"""Parser destinations that read settings from a file (SGLang's and vLLM's ``--config``)."""


@dataclass(frozen=True)
class Row:
    """One line of the result table: profile x rank x engine release."""

    profile: str
    rank: int
    engine: str
    version: str
    ok: bool
    error: str
    unknown_env: tuple[str, ...]
    disagrees: tuple[tuple[str, str, str], ...] = ()
    """(field, what the engine built, what sparkrack's plan of the ranks says), where they
    differ (:meth:`~sparkrack.serving.engines.base.Engine.rank_facts`)."""


def invocations(res: Resolution) -> list[tuple[int, enginecheck.Invocation]]:
    """(rank, what the engine's parser sees) for every rank of a resolved profile."""
    profile, eng = res.profile, res.engine
    return [
        (
            rank.rank,
            enginecheck.Invocation(
                label=f"{profile.name} rank {rank.rank}",
                argv=tuple(res.argv(rank)[len(eng.entry) :]),
                env=res.env(rank),
                model=profile.model,
                model_info=dict(profile.data.get("model_info") or {}),
            ),
        )
        for rank in res.ranks
    ]


def check_profiles(
    profiles: Sequence[Profile], ctx: ServingContext, *, offline: bool = False
) -> list[Row]:
    """The result table for ``profiles`` rendered in ``ctx``, one row per profile x rank."""
    return check_resolved([resolve(profile, ctx) for profile in profiles], offline=offline)


def check_resolved(resolved: Sequence[Resolution], *, offline: bool = False) -> list[Row]:
    rows: list[Row] = []
    batches: dict[tuple[str, str], list[tuple[Profile, int, enginecheck.Invocation]]] = defaultdict(
        list
    )
    planned: dict[tuple[str, int], dict[str, str]] = {}
    for res in resolved:
        profile, eng = res.profile, res.engine
        version = eng.upstream_version(profile) or "unknown"
        for rank, inv in invocations(res):
            if eng.upstream is None:
                errors = eng.table_problems(inv.argv, profile)
                rows.append(
                    Row(profile.name, rank, eng.name, version, not errors, "; ".join(errors), ())
                )
            else:
                batches[(eng.upstream, version)].append((profile, rank, inv))
                planned[(profile.name, rank)] = eng.rank_facts(res.ctx, res.ranks[rank])
    for (dist, version), items in sorted(batches.items()):
        verdicts = enginecheck.run_upstream(
            dist, version, [inv for _p, _r, inv in items], offline=offline
        )
        for (profile, rank, _inv), verdict in zip(items, verdicts, strict=True):
            built = dict(verdict.facts)
            plan = planned[(profile.name, rank)]
            disagrees = tuple(
                (name, built[name], want)
                for name, want in sorted(plan.items())
                if name in built and built[name] != want
            )
            rows.append(
                Row(
                    profile.name,
                    rank,
                    dist,
                    version,
                    verdict.ok and not disagrees,
                    verdict.error,
                    tuple(verdict.unknown_env),
                    disagrees,
                )
            )
    return rows


def problems_of(rows: Sequence[Row], sources: dict[str, str]) -> list[Problem]:
    """Refusals for the rows that failed, naming the profile file."""
    out: list[Problem] = []
    for row in rows:
        source = sources.get(row.profile, row.profile)
        for name, built, want in row.disagrees:
            out.append(
                Problem(
                    source,
                    f"rank {row.rank} {name}",
                    f"{row.engine} {row.version} builds {name} = {built} from rank {row.rank}'s "
                    f"command, but the deployment's ranks are planned with {want}: the ranks "
                    "would not meet as one launch",
                    f"render every rank from one profile and inventory (sparkrack render "
                    f"{row.profile} --rank {row.rank} --what command shows the command)",
                    RULE,
                )
            )
        if not row.ok and not row.disagrees:
            out.append(
                Problem(
                    source,
                    f"rank {row.rank}",
                    f"{row.engine} {row.version} refuses the rendered command: {row.error}",
                    "change the profile key the message names (sparkrack render "
                    f"{row.profile} --rank {row.rank} --what command shows the command)",
                    RULE,
                )
            )
        for name in row.unknown_env:
            out.append(
                Problem(
                    source,
                    f"env {name}",
                    f"{row.engine} {row.version} does not know {name}: it is silently ignored",
                    "remove it, or pin an image whose release still reads it",
                    RULE_ENV,
                )
            )
    return out


def extra_args_problems(
    profile: Profile, engine: Engine | None = None, *, offline: bool = False
) -> list[Problem]:
    """``extra_args`` resolved by the real parser of the profile's engine release (``engine``:
    the caller resolved it): refused when an option lands on a destination a table flag owns,
    loads a config file, or is unknown."""
    eng = engine or engine_of(profile.data)
    extra = [str(w) for w in profile.data.get("extra_args") or []]
    version = eng.upstream_version(profile)
    if not extra or eng.upstream is None or version is None:
        return []
    out = []
    # A config-file option is refused before the parser sees it: vLLM's parser would read the file.
    config = [w for w in extra if w.startswith("-") and eng.is_config_option(w)]
    for word in config:
        flag = word.split("=", 1)[0]
        message = f"{flag} loads settings from a file, past the profile"
        out.append(Problem(profile.source, "extra_args", message, "remove it", RULE_EXTRA))
    extra = [w for w in extra if w not in config]
    owners = eng.owned_flags()
    # One parser process resolves the table's flags and the extra words together (every owner
    # flag is an option word, so the first len(owners) answers are the owners').
    both = enginecheck.option_dests(eng.upstream, version, [*owners, *extra], offline=offline)
    resolved, given = both[: len(owners)], both[len(owners) :]
    owned = {dest: owners[flag] for flag, dest in resolved if dest is not None}
    for word, dest in given:
        flag = word.split("=", 1)[0]
        if dest is None:
            message, fix = f"{flag} is not an option of {eng.name} {version}", "remove it"
        elif dest in CONFIG_DESTS:
            message, fix = f"{flag} loads settings from a file, past the profile", "remove it"
        elif dest in owned:
            message = f"{flag} is {eng.name} {version}'s {dest}, which {owned[dest]} sets"
            fix = f"set {owned[dest]} instead" if "." in owned[dest] else "remove it"
        else:
            continue
        out.append(Problem(profile.source, "extra_args", message, fix, RULE_EXTRA))
    return out


def engine_check(
    profiles: Sequence[Profile], inventory: str, *, offline: bool = False
) -> list[Problem]:
    """``sparkrack validate --engine-check``: problems of every rank of ``profiles``."""
    ctx = context_from_inventory(inventory)
    resolved = [resolve(profile, ctx) for profile in profiles]
    extra = [
        p for res in resolved for p in extra_args_problems(res.profile, res.engine, offline=offline)
    ]
    if extra:
        return extra
    rows = check_resolved(resolved, offline=offline)
    for row in rows:
        verdict = "ok" if row.ok else "FAIL"
        print(f"engine-check {row.profile} rank {row.rank}: {row.engine} {row.version} {verdict}")
    return problems_of(rows, {p.name: p.source for p in profiles})
