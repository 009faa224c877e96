#!/usr/bin/python
"""Ansible module: the objects of several kinds that carry a label, listed or removed in one run.

A ``kubernetes.core`` loop over kinds or objects costs one module run per item, each starting
Python, loading the client and discovering the API anew: about a second each. The serve play
lists fourteen kinds before every switch; the reset play removed some 130 objects one module run
at a time (131 s in the lab). This module does either with one client and one discovery. It runs
on the controller (localhost), where the Kubernetes client that ``kubernetes.core`` needs is
installed.

* ``state: listed`` returns the objects as a k8s_info loop over the kinds registers them
  (``results``, each with ``item`` the kind and ``resources`` the objects), so the filters that
  read a loop read it unchanged. A kind the API does not serve fails, naming it.
* ``state: absent`` removes them kind after kind, in the order given: every object of a kind is
  deleted in the foreground, and the next kind starts only once they are gone with their
  dependents. A kind the API does not serve holds nothing to remove. It returns the names only,
  never an object's body (a Secret's values stay out of the result and of ``-vvv``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sparkrack_k8s_labelled
short_description: List or remove the objects of several kinds that match a label selector
description:
  - For each kind in I(kinds), the objects that match I(label_selector), in I(namespace) or,
    without one, in every namespace (cluster-wide kinds whole).
  - C(listed) returns them; read-only.
  - C(absent) deletes them kind by kind, in the foreground, waiting until each kind's objects
    are gone before the next kind; in check mode it only names them.
options:
  kubeconfig: {description: Path of the kubeconfig., type: path, required: true}
  kinds:
    description: Kinds by their Kubernetes kind name, in the order to list or remove them; a
      kind is taken in every API group that serves it.
    type: list
    elements: str
    required: true
  namespace:
    description: The namespace; every namespace when omitted.
    type: str
  label_selector: {description: A label selector (C(key=value,...))., type: str, required: true}
  state:
    description: C(listed) or C(absent).
    type: str
    choices: [listed, absent]
    default: listed
  wait_sleep: {description: Seconds between two reads while waiting (absent)., type: int, default: 1}
  wait_timeout: {description: Seconds to wait for one kind's objects to go (absent)., type: int, default: 300}
"""

RETURN = r"""
results:
  description: C(listed) only. One entry per kind, in the order of I(kinds), as a k8s_info loop
    registers it.
  type: list
  elements: dict
  returned: when state is listed
  contains:
    item: {description: The kind., type: str}
    resources: {description: The objects, as the API lists them., type: list}
removed:
  description: C(absent) only. C(Kind/namespace/name) of each object removed (C(-) for no
    namespace), in the order removed; in check mode, the objects that would be.
  type: list
  elements: str
  returned: when state is absent
counts:
  description: "C(absent) only. C(Kind: number) for each kind with objects removed."
  type: list
  elements: str
  returned: when state is absent
"""

ARGUMENT_SPEC: dict[str, Any] = {
    "kubeconfig": {"type": "path", "required": True},
    "kinds": {"type": "list", "elements": "str", "required": True},
    "namespace": {"type": "str"},
    "label_selector": {"type": "str", "required": True},
    "state": {"type": "str", "choices": ["listed", "absent"], "default": "listed"},
    "wait_sleep": {"type": "int", "default": 1},
    "wait_timeout": {"type": "int", "default": 300},
}


def _resources(dynamic: Any, kind: str) -> list[Any]:
    """The API's preferred resource for ``kind`` in each group that serves one (none: [])."""
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    try:
        resources = dynamic.resources.search(kind=kind)
    except ResourceNotFoundError:
        resources = []
    return [r for r in resources if "/" not in r.name and r.preferred]


def _listed(module: AnsibleModule, resource: Any) -> list[dict[str, Any]]:
    namespace = module.params["namespace"] if resource.namespaced else None
    found = resource.get(namespace=namespace, label_selector=module.params["label_selector"])
    return [item for item in found.to_dict().get("items") or []]


def _name(kind: str, obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{kind}/{meta.get('namespace') or '-'}/{meta['name']}"


def _remove(module: AnsibleModule, resource: Any, kind: str) -> list[str]:
    """Delete the labelled objects of one kind in the foreground; return once they are gone."""
    from kubernetes.dynamic.exceptions import NotFoundError

    objects = _listed(module, resource)
    if module.check_mode or not objects:
        return [_name(kind, o) for o in objects]
    body = {"propagationPolicy": "Foreground"}
    for obj in objects:
        meta = obj["metadata"]
        with contextlib.suppress(NotFoundError):  # gone already, with an owner removed before it
            resource.delete(name=meta["name"], namespace=meta.get("namespace"), body=body)
    uids = {o["metadata"]["uid"] for o in objects}
    deadline = time.monotonic() + module.params["wait_timeout"]
    while True:
        left = [o for o in _listed(module, resource) if o["metadata"]["uid"] in uids]
        if not left:
            return [_name(kind, o) for o in objects]
        if time.monotonic() > deadline:
            module.fail_json(
                msg=f"still there after {module.params['wait_timeout']} s: "
                + ", ".join(_name(kind, o) for o in left)
            )
        time.sleep(module.params["wait_sleep"])


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        from kubernetes import config
        from kubernetes.client.exceptions import ApiException
        from kubernetes.dynamic import DynamicClient
    except ImportError as err:
        module.fail_json(msg=f"the Kubernetes client is not installed here ({err}); run make setup")
    absent = module.params["state"] == "absent"
    results: list[dict[str, Any]] = []
    removed: list[str] = []
    counts: list[str] = []
    try:
        api = config.new_client_from_config(module.params["kubeconfig"])  # type: ignore[no-untyped-call]
        dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]
        for kind in module.params["kinds"]:
            served = _resources(dynamic, kind)
            if not served and not absent:
                module.fail_json(msg=f"the API server serves no kind named {kind!r}")
            if not absent:
                found = [obj for resource in served for obj in _listed(module, resource)]
                results.append({"item": kind, "resources": found})
                continue
            gone = [name for resource in served for name in _remove(module, resource, kind)]
            removed += gone
            counts += [f"{kind}: {len(gone)}"] if gone else []
    except ApiException as err:
        module.fail_json(msg=f"the API server refused it: {err.status} {err.reason}")
    except Exception as err:  # noqa: BLE001 - a connection error, named with its kind
        module.fail_json(msg=f"could not reach the API server: {type(err).__name__}: {err}")
    if absent:
        module.exit_json(changed=bool(removed), removed=removed, counts=counts)
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
