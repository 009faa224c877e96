"""A new owner's first evening: a fresh copy of inventories/example through ``sparkrack check``,
one mistake at a time, as the README's steps lead them.

The example as shipped names placeholder images and no gateway key; each is refused with the
file, the key and the fix, and so is the vault layout that hides ``group_vars/all.yml``. With
every value set right, ``check`` passes: what the preflight play runs before any node changes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hostile_inventory_corpus import PASSWORD, vault_text

from sparkrack.cli import main
from sparkrack.inputs.inventory import VAULT_ENV

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "0123456789abcdef" * 4
FETCH = f"ghcr.io/owner/sparkrack:1.0@{DIGEST}"
WATCHDOG = f"ghcr.io/owner/sparkrack:1.0@{DIGEST}"


class Owner:
    """The owner's copy of the example and the ``check`` they run after each edit."""

    def __init__(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.inv = tmp_path / "mine"
        shutil.copytree(ROOT / "inventories" / "example", self.inv)
        self.capsys = capsys
        self.fresh = False

    @property
    def all_yml(self) -> Path:
        return self.inv / "group_vars" / "all.yml"

    def set(self, **values: object) -> None:
        data = yaml.safe_load(self.all_yml.read_text())
        data.update(values)
        self.all_yml.write_text("---\n" + yaml.safe_dump(data, sort_keys=False))

    def check(self) -> tuple[int, list[str]]:
        """``sparkrack check`` as the owner runs it. In this process while only the content of
        the inventory's files changes; a fresh process (``fresh``) once files appear or move:
        ansible-core remembers, per process, which group_vars files it found for a folder."""
        if not self.fresh:
            code = main(["check", "-i", str(self.inv), "--no-engine-check"])
            captured = self.capsys.readouterr()
            return code, (captured.out + captured.err).splitlines()
        done = subprocess.run(
            [sys.executable, "-m", "sparkrack", "check", "-i", str(self.inv), "--no-engine-check"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        return done.returncode, (done.stdout + done.stderr).splitlines()

    def problems(self) -> list[str]:
        code, lines = self.check()
        assert code == 1, lines
        assert lines[-1].startswith("check: REFUSED"), lines
        return [line for line in lines if " — fix: " in line and not line.startswith("warning")]


@pytest.fixture
def owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Owner:
    monkeypatch.setenv("SPARKRACK_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.delenv(VAULT_ENV, raising=False)
    (tmp_path / "vault-pass").write_text(PASSWORD)
    return Owner(tmp_path, capsys)


def test_a_new_owner_fixes_one_refusal_at_a_time_until_check_passes(
    owner: Owner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1. The example as shipped: the placeholder images and the missing key, each refused.
    found = owner.problems()
    all_yml = str(owner.all_yml)
    assert len(found) == 3, found
    fetch, watchdog, key = found
    for line, name in ((fetch, "fetch"), (watchdog, "watchdog")):
        assert line.startswith(f"{all_yml}: serving_{name}_image: registry.example.com/"), line
        assert "reserved placeholder domain" in line and "pinned by digest" in line
        assert line.endswith("[image-unreachable]")
    assert key.startswith(f"{owner.inv}/group_vars/all.yml: vault_gateway_key: is not set")
    assert "fix: create group_vars/all/vault.yml with `ansible-vault create`" in key

    # 2. A typo in the tag: the letter O for the digit zero.
    owner.set(serving_fetch_image="ghcr.io/owner/sparkrack/fetch:1.O")
    fetch = owner.problems()[0]
    assert fetch.startswith(f"{all_yml}: serving_fetch_image: ghcr.io/owner/sparkrack/fetch:1.O ")
    assert "letter O where a digit belongs (did you mean 1.0?)" in fetch

    # 3. Images set right: only the key is left.
    owner.set(serving_fetch_image=FETCH, serving_watchdog_image=WATCHDOG)
    (only,) = owner.problems()
    assert ": vault_gateway_key: is not set" in only

    # 4. The key in a vault file next to all.yml: Ansible would ignore all.yml; check says so
    # and stops there, instead of a list of misleading missing variables. From here on the
    # inventory's files change (a folder appears, all.yml moves), not only their content.
    owner.fresh = True
    monkeypatch.setenv(VAULT_ENV, str(tmp_path / "vault-pass"))
    folder = owner.inv / "group_vars" / "all"
    folder.mkdir()
    (folder / "vault.yml").write_text(vault_text("vault_gateway_key: a-long-random-key\n"))
    (layout,) = owner.problems()
    assert layout == (
        f"{all_yml}: (layout): is never read: Ansible reads group_vars/all/ for all and ignores "
        "all.yml, so every variable in it is missing — fix: move all.yml into all/ (e.g. "
        "all/main.yml) and keep only the folder: Ansible reads every file in group_vars/all/ "
        "[inventory-layout]"
    )

    # 5. The fix the refusal names: check passes, the key reported as encrypted.
    owner.all_yml.rename(folder / "main.yml")
    code, lines = owner.check()
    assert code == 0, "\n".join(lines)
    assert lines[-1].startswith("check: OK, 1 deployment(s)"), lines
    assert "secrets: vault_hf_token not set; vault_gateway_key set (ansible-vault)" in lines
    assert not [line for line in lines if "example.com" in line]


@pytest.mark.parametrize(
    ("image", "why"),
    [
        ("registry.example.com/sparkrack/fetch:1.0", "registry.example.com"),
        ("example.org/fetch:1", "example.org"),
        ("registry.invalid:5000/fetch:1", "registry.invalid"),
        ("registry.example/fetch:1", "registry.example"),
        ("mirror.test/fetch:1", "mirror.test"),
        ("ghcr.io/owner/fetch:2.O.1", "did you mean 2.0.1"),
        ("ghcr.io/owner/fetch:v1.O-rc1", "did you mean v1.0"),
    ],
)
def test_images_no_node_can_pull_are_refused(owner: Owner, image: str, why: str) -> None:
    owner.set(serving_fetch_image=image, serving_watchdog_image=WATCHDOG)
    found = [line for line in owner.problems() if ": serving_fetch_image: " in line]
    assert len(found) == 1 and why in found[0], found


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/owner/fetch:1.0",
        "localhost/sparkrack-fetch:lab",
        "notexample.com/fetch:1.0",
        "ghcr.io/owner/fetch:solo",
        "ghcr.io/owner/fetch:O",
        "docker.io/library/rsync:1.10",
    ],
)
def test_images_a_node_can_pull_are_not_refused(owner: Owner, image: str) -> None:
    """Negative control of the rule: near misses stay allowed."""
    owner.set(serving_fetch_image=image, serving_watchdog_image=WATCHDOG)
    found = [line for line in owner.problems() if "image-unreachable" in line]
    assert found == []


def test_the_image_archive_passes_check_and_a_named_placeholder_still_does_not(
    owner: Owner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serving_image_archive`` (``make image``'s output): the nodes import it, so its
    ``sparkrack.invalid/…@sha256:…`` reference is not refused as a registry no node reaches.
    A placeholder image the inventory still names takes precedence over the archive, and is
    refused as before."""
    sys.path.insert(0, str(ROOT / "tests" / "serving"))
    from test_image_archive import _docker_save

    from sparkrack.serving.image_archive import to_oci

    archive = tmp_path / "sparkrack-image.tar"
    made = to_oci(_docker_save(tmp_path / "d.tar"), archive, "sparkrack.invalid/sparkrack:0.1.0")
    monkeypatch.setenv(VAULT_ENV, str(tmp_path / "vault-pass"))
    folder = owner.inv / "group_vars" / "all"
    folder.mkdir()
    (folder / "vault.yml").write_text(vault_text("vault_gateway_key: a-long-random-key\n"))
    owner.all_yml.rename(folder / "main.yml")
    main_yml = folder / "main.yml"
    data = yaml.safe_load(main_yml.read_text())
    data["serving_image_archive"] = str(archive)
    main_yml.write_text(yaml.safe_dump(data))
    # The placeholders still named: they take precedence and are refused.
    found = owner.problems()
    assert [line.split(": ")[1] for line in found] == [
        "serving_fetch_image",
        "serving_watchdog_image",
    ], found
    del data["serving_fetch_image"], data["serving_watchdog_image"]
    main_yml.write_text(yaml.safe_dump(data))
    code, lines = owner.check()
    assert code == 0, "\n".join(lines)
    assert f"image weight copy: {made.reference} (digest)" in lines
    assert f"image stall watchdog: {made.reference} (digest)" in lines
