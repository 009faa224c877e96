#!/usr/bin/python
"""Ansible module: the objects of several kinds that carry a label, listed in one module run.

A ``kubernetes.core.k8s_info`` loop over kinds costs one module run per kind, each starting
Python, loading the client and discovering the API anew; the serve play lists fourteen kinds
before every switch. This module lists them all with one client and one discovery, and returns
them as such a loop registers them (``results``, each with ``item`` the kind and ``resources``
the objects), so the filters that read a loop read it unchanged. It runs on the controller
(localhost), where the Kubernetes client that ``kubernetes.core`` needs is installed.
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sparkrack_k8s_list
short_description: List the objects of several kinds that match a label selector, in one run
description:
  - Lists, for each kind in I(kinds), the objects that match I(label_selector), in
    I(namespace) or, without one, in every namespace (cluster-wide kinds are listed whole).
  - Read-only; supports check mode.
options:
  kubeconfig: {description: Path of the kubeconfig., type: path, required: true}
  kinds:
    description: Kinds to list, by their Kubernetes kind name, in the order to return them.
    type: list
    elements: str
    required: true
  namespace:
    description: The namespace to list; every namespace when omitted.
    type: str
  label_selector: {description: A label selector (C(key=value,...))., type: str, required: true}
"""

RETURN = r"""
results:
  description: One entry per kind, in the order of I(kinds), as a k8s_info loop registers it.
  type: list
  elements: dict
  returned: always
  contains:
    item: {description: The kind., type: str}
    resources: {description: The objects, as the API lists them., type: list}
"""

ARGUMENT_SPEC: dict[str, Any] = {
    "kubeconfig": {"type": "path", "required": True},
    "kinds": {"type": "list", "elements": "str", "required": True},
    "namespace": {"type": "str"},
    "label_selector": {"type": "str", "required": True},
}


def _listed(module: AnsibleModule, dynamic: Any, kind: str) -> list[dict[str, Any]]:
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    try:
        resources = dynamic.resources.search(kind=kind)
    except ResourceNotFoundError:
        resources = []
    served = [r for r in resources if "/" not in r.name and r.preferred]
    if not served:
        module.fail_json(msg=f"the API server serves no kind named {kind!r}")
    resource = served[0]
    namespace = module.params["namespace"] if resource.namespaced else None
    found = resource.get(namespace=namespace, label_selector=module.params["label_selector"])
    return [item for item in found.to_dict().get("items") or []]


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        from kubernetes import config
        from kubernetes.client.exceptions import ApiException
        from kubernetes.dynamic import DynamicClient
    except ImportError as err:
        module.fail_json(msg=f"the Kubernetes client is not installed here ({err}); run make setup")
    try:
        api = config.new_client_from_config(module.params["kubeconfig"])  # type: ignore[no-untyped-call]
        dynamic = DynamicClient(api)  # type: ignore[no-untyped-call]
        results = [
            {"item": kind, "resources": _listed(module, dynamic, kind)}
            for kind in module.params["kinds"]
        ]
    except ApiException as err:
        module.fail_json(msg=f"the API server refused the listing: {err.status} {err.reason}")
    except Exception as err:  # noqa: BLE001 - a connection error, named with its kind
        module.fail_json(msg=f"could not list from the API server: {type(err).__name__}: {err}")
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
