"""Loading a serving profile: find it, parse it, check it against the schema."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from sparkrack.errors import Problem, SparkrackError
from sparkrack.inputs import forms, imageref, safeyaml
from sparkrack.serving.engines import DEFAULT_ENGINE, ENGINES, Engine
from sparkrack.serving.profile.knobs import PATTERN_WORDS, REFUSED_KEYWORD
from sparkrack.serving.profile.model import Profile
from sparkrack.serving.profile.schema import build_schema


def _profile_dir() -> Path:
    """``model_profiles/`` of the checkout: beside the package when it runs from the source
    tree (``pip install -e``), else in the working directory (``pip install .`` on a Spark,
    run from the checkout whose playbooks it drives)."""
    beside = Path(__file__).resolve().parents[3] / "model_profiles"
    return beside if beside.is_dir() else Path.cwd() / "model_profiles"


PROFILE_DIR = _profile_dir()
SCHEMA_PATH = PROFILE_DIR / "schema.json"


def _validator() -> jsonschema.Draft202012Validator:
    """The validator of the schema the engine table makes now (one per table)."""
    return _validator_of(tuple(ENGINES.items()))


@cache
def _validator_of(engines: tuple[tuple[str, Engine], ...]) -> jsonschema.Draft202012Validator:
    """Built once per engine table (``engines``, its rows, is the cache key)."""

    def strict_integer(checker: Any, instance: object) -> bool:
        """An integer is an ``int`` as written: ``4.0`` and ``true`` are not (``--tp-size 4.0``)."""
        return isinstance(instance, int) and not isinstance(instance, bool)

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", strict_integer)
    strict = jsonschema.validators.extend(base, type_checker=checker)  # type: ignore[no-untyped-call]
    formats = jsonschema.FormatChecker(formats=())
    formats.checks("image-reference")(lambda value: imageref.problem(value) is None)
    validator: jsonschema.Draft202012Validator = strict(build_schema(), format_checker=formats)
    return validator


def schema_problems(data: Any, source: str) -> list[Problem]:
    """Schema violations, one Problem each, keyed by the dotted path of the offending key and
    said in words (the accepted form, "quote it" for a value YAML typed), never a regex."""
    if not isinstance(data, dict):
        return [Problem(source, "(root)", "is not a mapping", "write key: value pairs", "schema")]
    problems: list[Problem] = []
    for err in sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.path))):
        path = ".".join(str(p) for p in err.absolute_path) or "(root)"
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            refused = err.schema.get(REFUSED_KEYWORD, {})
            for key in extra:
                where = f"{path}.{key}" if path != "(root)" else str(key)
                if key in refused:
                    why = f"is not for a profile to set: it {refused[key]}"
                    problems.append(Problem(source, where, why, "remove it", "schema"))
                    continue
                fix = forms.unknown_key_fix(key, err.schema.get("properties", {}))
                problems.append(Problem(source, where, "unknown key", fix, "schema"))
            continue
        if err.validator == "const" or (err.validator is False or err.schema is False):
            problems.append(
                Problem(source, path, "does not belong to this engine", "remove it", "schema")
            )
            continue
        message, fix = forms.schema_problem(err, PATTERN_WORDS)
        problems.append(Problem(source, path, message, fix, "schema"))
    return problems


def spans_sparks(data: dict[str, Any]) -> bool:
    """The profile's engine runs one rank per Spark (an unknown engine: no)."""
    eng = ENGINES.get(str(data.get("engine", DEFAULT_ENGINE)))
    return eng is not None and eng.uses_fabric


def _candidates(ref: str) -> list[Path]:
    path = Path(ref)
    if path.suffix in (".yml", ".yaml") or path.exists():
        return [path]
    found = [PROFILE_DIR / f"{ref}.yml"]
    if "/" in ref:
        matches = []
        for candidate in sorted(PROFILE_DIR.glob("*.yml")):
            data = _read(candidate)
            if isinstance(data, dict) and str(data.get("model", "")).lower() == ref.lower():
                matches.append((candidate, data))
        if len(matches) > 1:
            # One model, several engines: the HF id means the profile that spans the Sparks.
            matches = [m for m in matches if spans_sparks(m[1])] or matches
        if len(matches) > 1:
            raise SparkrackError(
                Problem(
                    ref,
                    "profile",
                    f"model id matches {len(matches)} profiles",
                    f"name one of: {', '.join(m[0].stem for m in matches)}",
                    "profile-not-found",
                )
            )
        found = [m[0] for m in matches] + found
    return found


def _read(path: Path) -> Any:
    return safeyaml.load_file(path)


def resolve(ref: str) -> Path:
    """A profile reference (path, file stem, or HF model id) -> its file."""
    for candidate in _candidates(ref):
        if candidate.is_file():
            return candidate
    names = ", ".join(p.stem for p in list_profiles())
    raise SparkrackError(
        Problem(
            ref,
            "profile",
            "no such profile (not a file, a name in model_profiles/, or a model id)",
            f"use one of: {names}",
            "profile-not-found",
        )
    )


def load_profile(ref: str | Path) -> Profile:
    """Load and schema-check a profile; raise :class:`SparkrackError` when the schema refuses it.

    The seed-trap rules are applied by :func:`sparkrack.serving.validate_profile`.
    """
    path = resolve(str(ref))
    data = _read(path)
    problems = schema_problems(data, str(path))
    if problems:
        raise SparkrackError(problems)
    return Profile(name=path.stem, path=path, data=data)


def list_profiles(directory: Path = PROFILE_DIR) -> list[Path]:
    return sorted(directory.glob("*.yml"))
