#!/usr/bin/python
"""Ansible module: each deployment's key Secret, made once, and a copy of its engine key beside
the gateway, in one run; no key ever stands in its result.

Each deployment's key Secret holds two random keys (the engine key and the admin key). It is
created once and never replaced: the gateway and the ranks keep reading the same keys. A plain
create leaves no last-applied annotation. The gateway and the watchdogs run in another namespace
and send the engine key, so a copy of that key alone goes there by server-side apply (the admin
key stays with the engine's head).

A ``kubernetes.core`` loop does this in one module run per deployment and step (look, create,
read, copy: about a second each), and its registered results carry the keys. This module does it
with one client and returns names only. It runs on the controller (localhost), where the
Kubernetes client that ``kubernetes.core`` needs is installed.
"""

from __future__ import annotations

import base64
import secrets
import string
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sparkrack_key_secrets
short_description: Create the missing key Secrets and copy each engine key to a second namespace
description:
  - For each deployment, its key Secret in I(namespace) is created with two random keys when it
    is missing, and never replaced when it is there.
  - A Secret that holds the engine key alone, under the same name and labels, is server-side
    applied in I(copy_namespace).
  - Check mode creates and applies nothing; it names what would change.
  - The result names Secrets only; no key stands in it.
options:
  kubeconfig: {description: Path of the kubeconfig., type: path, required: true}
  namespace: {description: The namespace of the key Secrets., type: str, required: true}
  copy_namespace: {description: The namespace of the engine-key copies., type: str, required: true}
  deployments:
    description: The render's deployments; each one's C(key_secret) (the Secret's name) and
      C(secret_labels) (its labels) are read, the rest is ignored.
    type: list
    elements: dict
    required: true
  engine_key: {description: The data key of the engine key., type: str, required: true}
  admin_key: {description: The data key of the admin key., type: str, required: true}
  field_manager: {description: The field manager of the server-side apply., type: str, required: true}
"""

RETURN = r"""
created:
  description: C(namespace/name) of each key Secret created (in check mode, that would be).
  type: list
  elements: str
  returned: always
copied:
  description: C(namespace/name) of each engine-key copy written or changed (in check mode, that
    would be).
  type: list
  elements: str
  returned: always
"""

ARGUMENT_SPEC: dict[str, Any] = {
    "kubeconfig": {"type": "path", "required": True},
    "namespace": {"type": "str", "required": True},
    "copy_namespace": {"type": "str", "required": True},
    "deployments": {"type": "list", "elements": "dict", "required": True},
    "engine_key": {"type": "str", "required": True, "no_log": False},
    "admin_key": {"type": "str", "required": True, "no_log": False},
    "field_manager": {"type": "str", "required": True},
}

KEY_LENGTH = 48
"""Characters of each random key, letters and digits (about 285 bits)."""
_ALPHABET = string.ascii_letters + string.digits


def _new_key() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(KEY_LENGTH))


def _read(core: Any, name: str, namespace: str) -> Any | None:
    """The Secret, or None when there is none of that name."""
    from kubernetes.client.exceptions import ApiException

    try:
        return core.read_namespaced_secret(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
    except ImportError as err:
        module.fail_json(msg=f"the Kubernetes client is not installed here ({err}); run make setup")
    p = module.params
    namespace, copies = p["namespace"], p["copy_namespace"]
    created: list[str] = []
    copied: list[str] = []
    where = "reaching the API server"
    engine: str | None = None
    try:
        api = config.new_client_from_config(p["kubeconfig"])  # type: ignore[no-untyped-call]
        core: Any = client.CoreV1Api(api)
        for deployment in p["deployments"]:
            name, labels = str(deployment["key_secret"]), dict(deployment["secret_labels"])
            where = f"reading Secret {namespace}/{name}"
            found = _read(core, name, namespace)
            engine = None
            if found is None:
                created.append(f"{namespace}/{name}")
                if not module.check_mode:
                    engine = _new_key()
                    where = f"creating Secret {namespace}/{name}"
                    body = {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "type": "Opaque",
                        "metadata": {"name": name, "namespace": namespace, "labels": labels},
                        "stringData": {p["engine_key"]: engine, p["admin_key"]: _new_key()},
                    }
                    core.create_namespaced_secret(namespace, body)
            else:
                missing = [
                    k for k in (p["engine_key"], p["admin_key"]) if k not in (found.data or {})
                ]
                if missing:
                    module.fail_json(
                        msg=f"Secret {namespace}/{name} holds no {' or '.join(missing)} key: it "
                        "is not a key Secret sparkrack made. Delete it, then re-run to create new "
                        "keys."
                    )
                engine = base64.b64decode(found.data[p["engine_key"]]).decode()
            where = f"copying the engine key to Secret {copies}/{name}"
            before = _read(core, name, copies)
            if engine is None:  # check mode, a Secret still to create
                copied.append(f"{copies}/{name}")
                continue
            value = base64.b64encode(engine.encode()).decode()
            if module.check_mode:
                same = (
                    before is not None
                    and (before.data or {}) == {p["engine_key"]: value}
                    and labels.items() <= (before.metadata.labels or {}).items()
                )
                copied += [] if same else [f"{copies}/{name}"]
                continue
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": {"name": name, "namespace": copies, "labels": labels},
                "data": {p["engine_key"]: value},
            }
            after = core.patch_namespaced_secret(
                name,
                copies,
                body,
                field_manager=p["field_manager"],
                force=True,
                _content_type="application/apply-patch+yaml",
            )
            if (
                before is None
                or before.metadata.resource_version != after.metadata.resource_version
            ):
                copied.append(f"{copies}/{name}")
    except ApiException as err:
        # The status and reason only: an error's body may echo what was sent.
        module.fail_json(msg=f"{where}: the API server answered {err.status} {err.reason}")
    except Exception as err:  # noqa: BLE001 - a connection error, named with the step
        # Its text only while no key is in hand: past that, the type alone.
        said = f"{type(err).__name__}: {err}" if engine is None else type(err).__name__
        module.fail_json(msg=f"{where}: {said}")
    module.exit_json(changed=bool(created or copied), created=created, copied=copied)


if __name__ == "__main__":
    main()
