#!/usr/bin/python
"""Ansible module: a role's config files and their folders in one call on the node.

``copy`` and ``template`` each cost two module runs per file on a node that already holds the
file (a checksum, then a pass of the ``file`` module over owner and mode); a role writing four
files costs eight. This module takes every file of a role with its content rendered on the
controller and compares, validates and writes them in one run. It runs on the node, so it uses
only the standard library and ``ansible.module_utils``.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sparkrack_files
short_description: Write several files and their folders in one module run
description:
  - Creates the listed folders, then writes each file whose content, owner, group or mode
    differs from the wanted one. A file is replaced atomically, after its optional validate
    command accepted the new content.
  - Supports check mode and diff mode.
options:
  directories:
    description: Folders created or corrected to root:root 0755 before any file is written.
    type: list
    elements: path
    default: []
  files:
    description: Files to write.
    type: list
    elements: dict
    default: []
    suboptions:
      dest: {description: Absolute path; its folder must exist or be listed., type: path, required: true}
      content:
        description: The whole text of the file. A task that writes a secret sets C(no_log).
        type: str
        required: true
      mode: {description: Octal mode as a string., type: str, required: true}
      owner: {description: Owner., type: str, default: root}
      group: {description: Group., type: str, default: root}
      validate:
        description: Command run on the new content before it replaces the file; C(%s) is its path.
        type: str
"""

RETURN = r"""
changed_paths:
  description: The folders and files that were (or, in check mode, would be) created or changed.
  type: list
  elements: str
  returned: always
"""

_DIRECTORY = {"mode": "0755", "owner": "root", "group": "root"}
_FILE = {
    "dest": {"type": "path", "required": True},
    # Not masked here: masking would also blank every diff. A task writing a secret sets no_log.
    "content": {"type": "str", "required": True},
    "mode": {"type": "str", "required": True},
    "owner": {"type": "str", "default": "root"},
    "group": {"type": "str", "default": "root"},
    "validate": {"type": "str"},
}
ARGUMENT_SPEC: dict[str, Any] = {
    "directories": {"type": "list", "elements": "path", "default": []},
    "files": {"type": "list", "elements": "dict", "default": [], "options": _FILE},
}


def _attributes(module: AnsibleModule, path: str, spec: dict[str, Any]) -> dict[str, Any]:
    wanted = {"path": path, "mode": spec["mode"], "owner": spec["owner"], "group": spec["group"]}
    attributes: dict[str, Any] = module.load_file_common_arguments(wanted)
    return attributes


def _settle(
    module: AnsibleModule,
    path: str,
    spec: dict[str, Any],
    diffs: list[dict[str, Any]],
    report: bool,
) -> bool:
    """Owner, group and mode of an existing path put right; True when one of them was wrong.
    The diff is reported unless the path already has a diff of its own."""
    diff: dict[str, Any] = {"before": {"path": path}, "after": {"path": path}}
    changed = bool(
        module.set_fs_attributes_if_different(_attributes(module, path, spec), False, diff)
    )
    if changed and report:
        diffs.append(diff)
    return changed


def _read(path: str) -> bytes | None:
    """The file's bytes; None when it is absent or a symlink, which is then replaced by the file
    rather than followed (as copy does), so owner and mode never land on a link's target."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:
        if os.path.islink(path):
            return None
        raise
    with os.fdopen(handle, "rb") as file:
        return file.read()


def _directory(module: AnsibleModule, path: str, diffs: list[dict[str, Any]]) -> bool:
    created = False
    if not os.path.isdir(path):
        if os.path.lexists(path):
            module.fail_json(msg=f"{path} exists and is not a folder; move it away and rerun")
        diffs.append(
            {
                "before": {"path": path, "state": "absent"},
                "after": {"path": path, "state": "directory"},
            }
        )
        created = True
        if module.check_mode:
            return True
        os.makedirs(path)
    return _settle(module, path, _DIRECTORY, diffs, report=not created) or created


def _validate(module: AnsibleModule, command: str, path: str, dest: str) -> None:
    if "%s" not in command:
        module.fail_json(
            msg=f"validate of {dest} must contain %s (the new file's path): {command!r}"
        )
    rc, out, err = module.run_command(command % path)
    if rc != 0:
        module.fail_json(
            msg=f"{dest}: validate refused the new content (exit {rc})", stdout=out, stderr=err
        )


def _file(module: AnsibleModule, spec: dict[str, Any], diffs: list[dict[str, Any]]) -> bool:
    dest = spec["dest"]
    folder = os.path.dirname(dest) or "."
    if os.path.isdir(dest):
        module.fail_json(msg=f"{dest} is a folder; a file was wanted")
    wanted = spec["content"].encode("utf-8")
    current = _read(dest)
    content_changed = current != wanted
    if content_changed:
        diffs.append(
            {
                "before_header": dest,
                "after_header": dest,
                "before": "" if current is None else current.decode("utf-8", "replace"),
                "after": spec["content"],
            }
        )
        if not module.check_mode:
            if not os.path.isdir(folder):
                module.fail_json(
                    msg=f"{dest}: its folder {folder} does not exist; list it under directories"
                )
            handle, staged = tempfile.mkstemp(prefix=".sparkrack.", dir=folder)
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(wanted)
                module.set_fs_attributes_if_different(_attributes(module, staged, spec), False)
                if spec["validate"]:
                    _validate(module, spec["validate"], staged, dest)
                # Staged in the same folder with its final owner and mode: the rename is atomic and
                # the file is never readable more widely than wanted, even for a moment.
                os.replace(staged, dest)
            finally:
                if os.path.lexists(staged):
                    os.unlink(staged)
    if module.check_mode and current is None:
        return True
    return _settle(module, dest, spec, diffs, report=not content_changed) or content_changed


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    paths = module.params["directories"] + [f["dest"] for f in module.params["files"]]
    relative = [path for path in paths if not os.path.isabs(path)]
    if relative:
        module.fail_json(msg=f"paths must be absolute: {', '.join(relative)}")
    diffs: list[dict[str, Any]] = []
    changed_paths = [d for d in module.params["directories"] if _directory(module, d, diffs)]
    changed_paths += [f["dest"] for f in module.params["files"] if _file(module, f, diffs)]
    result: dict[str, Any] = {"changed": bool(changed_paths), "changed_paths": changed_paths}
    if module._diff:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
