#!/usr/bin/python
"""Ansible module: give a user a cache tree that untrusted containers write, following no link.

The HF cache on a Spark is written by engine containers that run as root in their own view of
it. A recursive ``file`` task (``follow`` on by default) changes the owner and mode of whatever
a planted symlink points at, anywhere on the host. This module walks the tree by directory file
descriptors (``os.fwalk``: a directory swapped for a link mid-walk is not entered), opens every
other entry with ``O_PATH | O_NOFOLLOW`` (no open side effect, a link is the link itself) and
changes only directories and regular files through that descriptor. Links, device nodes, FIFOs
and sockets keep their owner, mode and target. It runs on the node: standard library and
``ansible.module_utils`` only.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sparkrack_cache_owner
short_description: Own a directory tree as one user, following no symlink
description:
  - Creates the folder if absent, then gives it and every folder and regular file under it
    the owner, group and mode u=rwX,g=rX,o=rX (set-id and sticky bits cleared). Symlinks,
    device nodes, FIFOs and sockets are left as they are, and no symlink is followed.
  - Supports check mode.
options:
  path: {description: The tree's root (absolute; itself no symlink)., type: path, required: true}
  owner: {description: Numeric user id., type: int, required: true}
  group: {description: Numeric group id., type: int, required: true}
"""

RETURN = r"""
changed_count:
  description: Folders and files whose owner, group or mode were (or would be) changed.
  type: int
  returned: always
skipped_count:
  description: Entries left alone (symlinks, devices, FIFOs, sockets).
  type: int
  returned: always
"""

ARGUMENT_SPEC: dict[str, Any] = {
    "path": {"type": "path", "required": True},
    "owner": {"type": "int", "required": True},
    "group": {"type": "int", "required": True},
}


def wanted_mode(st_mode: int) -> int:
    """u=rwX,g=rX,o=rX: 0755 for a folder or a file with any execute bit, else 0644."""
    if stat.S_ISDIR(st_mode) or st_mode & 0o111:
        return 0o755
    return 0o644


def _settle(fd: int, via: str, uid: int, gid: int, check: bool) -> bool:
    """Owner, group and mode of the inode behind ``fd``, changed through ``via`` (a path that
    names that inode and no other). Returns whether anything differed."""
    st = os.fstat(fd)
    mode = wanted_mode(st.st_mode)
    differs = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) != (uid, gid, mode)
    if differs and not check:
        os.chown(via, uid, gid)
        os.chmod(via, mode)
    return differs


def own_tree(root: str, uid: int, gid: int, check: bool = False) -> tuple[int, int]:
    """(changed, skipped) after giving ``root``'s folders and regular files to ``uid:gid``."""
    if os.path.islink(root) or not os.path.isdir(root):
        raise NotADirectoryError(f"{root} is not a folder (or is a symlink)")
    changed = skipped = 0
    for _dir, _dirs, files, dirfd in os.fwalk(root, follow_symlinks=False):
        # fwalk opened this folder itself, checking it is the folder it listed: no link.
        changed += _settle(dirfd, f"/proc/self/fd/{dirfd}", uid, gid, check)
        for name in files:
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dirfd)
            except FileNotFoundError:
                continue
            try:
                kind = os.fstat(fd).st_mode
                if not stat.S_ISREG(kind):
                    skipped += 1
                    continue
                # An O_PATH descriptor allows no fchown: its /proc link names the inode itself.
                changed += _settle(fd, f"/proc/self/fd/{fd}", uid, gid, check)
            finally:
                os.close(fd)
    return changed, skipped


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    path, uid, gid = module.params["path"], module.params["owner"], module.params["group"]
    created = False
    if not os.path.lexists(path):
        created = True
        if not module.check_mode:
            os.makedirs(path, mode=0o755)
    elif os.path.islink(path) or not os.path.isdir(path):
        module.fail_json(msg=f"{path} is not a folder (or is a symlink); move it away and rerun")
    if module.check_mode and created:
        module.exit_json(changed=True, changed_count=1, skipped_count=0)
    changed, skipped = own_tree(path, uid, gid, module.check_mode)
    module.exit_json(changed=created or changed > 0, changed_count=changed, skipped_count=skipped)


if __name__ == "__main__":
    main()
