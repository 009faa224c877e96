"""Loading a serving profile: find it, parse it, check it against the schema."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

from sparkrack import safeyaml
from sparkrack.errors import Problem, SparkrackError
from sparkrack.profiles.images import IMAGES, ImageFacts
from sparkrack.profiles.schema import build_schema

PROFILE_DIR = Path(__file__).resolve().parent.parent.parent / "model_profiles"
SCHEMA_PATH = PROFILE_DIR / "schema.json"


@dataclass(frozen=True)
class Profile:
    """A parsed profile. ``data`` is the YAML as written; accessors apply the defaults."""

    name: str
    path: Path
    data: dict[str, Any]

    @property
    def source(self) -> str:
        return str(self.path)

    @property
    def engine(self) -> str:
        return str(self.data.get("engine", "sglang"))

    @property
    def model(self) -> str:
        return str(self.data["model"])

    @property
    def image(self) -> str:
        return str(self.data["image"])

    @property
    def architecture(self) -> str:
        return str(self.data["model_info"]["architecture"])

    @property
    def tp(self) -> int:
        return int(self.data["topology"]["tp"])

    @property
    def pp(self) -> int:
        return int(self.data["topology"].get("pp", 1))

    @property
    def ep(self) -> int:
        return int(self.data["topology"].get("ep", 1))

    @property
    def nodes(self) -> int:
        """SGLang processes (= Sparks) this profile needs: one per tp·pp rank."""
        return self.tp * self.pp

    @property
    def transport(self) -> str:
        return str(self.data.get("transport", "roce"))

    @property
    def patches(self) -> list[str]:
        return [str(p) for p in self.data.get("patches", [])]

    def image_facts(self) -> ImageFacts | None:
        return image_facts(self.data)


def image_facts(data: dict[str, Any]) -> ImageFacts | None:
    known = IMAGES.get(str(data.get("image", "")))
    if known is not None:
        return known
    info = data.get("image_info")
    if isinstance(info, dict) and "sglang" in info:
        return ImageFacts(
            sglang=str(info["sglang"]),
            cudnn=info.get("cudnn"),
            source="profile image_info",
            extras=tuple(info.get("extras", ())),
        )
    return None


@cache
def _validator() -> jsonschema.Draft202012Validator:
    def strict_integer(checker: Any, instance: object) -> bool:
        """An integer is an ``int`` as written: ``4.0`` and ``true`` are not (``--tp-size 4.0``)."""
        return isinstance(instance, int) and not isinstance(instance, bool)

    base = jsonschema.Draft202012Validator
    checker = base.TYPE_CHECKER.redefine("integer", strict_integer)
    strict = jsonschema.validators.extend(base, type_checker=checker)  # type: ignore[no-untyped-call]
    validator: jsonschema.Draft202012Validator = strict(build_schema())
    return validator


def schema_problems(data: Any, source: str) -> list[Problem]:
    """Schema violations, one Problem each, keyed by the dotted path of the offending key."""
    if not isinstance(data, dict):
        return [Problem(source, "(root)", "is not a mapping", "write key: value pairs", "schema")]
    problems: list[Problem] = []
    for err in sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.path))):
        path = ".".join(str(p) for p in err.absolute_path) or "(root)"
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            known = ", ".join(sorted(err.schema.get("properties", {})))
            for key in extra:
                where = f"{path}.{key}" if path != "(root)" else key
                close = difflib.get_close_matches(str(key), err.schema.get("properties", {}), 1)
                fix = f"did you mean {close[0]}?" if close else f"remove it; known keys: {known}"
                problems.append(Problem(source, where, "unknown key", fix, "schema"))
            continue
        if err.validator == "const" or (err.validator is False or err.schema is False):
            problems.append(
                Problem(source, path, "does not belong to this engine", "remove it", "schema")
            )
            continue
        fix = "see model_profiles/schema.json"
        if err.validator == "enum":
            fix = f"use one of: {', '.join(map(str, err.validator_value))}"
        elif err.validator == "required":
            fix = "add it"
        problems.append(Problem(source, path, err.message, fix, "schema"))
    return problems


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
                matches.append((candidate, str(data.get("engine", "sglang"))))
        if len(matches) > 1:
            # One model, several engines: the HF id means the multi-Spark (sglang) profile.
            matches = [m for m in matches if m[1] == "sglang"] or matches
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

    The seed-trap rules are applied by :func:`sparkrack.profiles.validate_profile`.
    """
    path = resolve(str(ref))
    data = _read(path)
    problems = schema_problems(data, str(path))
    if problems:
        raise SparkrackError(problems)
    return Profile(name=path.stem, path=path, data=data)


def list_profiles(directory: Path = PROFILE_DIR) -> list[Path]:
    return sorted(directory.glob("*.yml"))
