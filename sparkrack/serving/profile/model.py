"""A serving profile as sparkrack reads it: one parsed model profile, defaults on access."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Profile:
    """A parsed profile. ``data`` is the YAML as written; accessors apply the defaults."""

    name: str
    path: Path
    data: dict[str, Any]

    @property
    def source(self) -> str:
        """The file as a refusal names it: relative to the working directory when it lies
        inside it (``model_profiles/<name>.yml``, the same on every checkout), else as given."""
        if self.path.is_absolute():
            try:
                return str(self.path.relative_to(Path.cwd()))
            except ValueError:
                pass
        return str(self.path)

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
    def transport(self) -> str:
        return str(self.data.get("transport", "roce"))

    @property
    def revision(self) -> str | None:
        """The pinned commit of the model repo, or None (the fetch step resolves ``main``)."""
        value = self.data.get("revision")
        return None if value is None else str(value)

    @property
    def patches(self) -> list[str]:
        return [str(p) for p in self.data.get("patches", [])]
