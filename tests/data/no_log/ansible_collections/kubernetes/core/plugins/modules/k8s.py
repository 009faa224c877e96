#!/usr/bin/python
"""Test stand-in for kubernetes.core.k8s: no cluster; a Secret is refused with its data in msg.

The real module echoes the object it could not apply in its error; this one does the same, so
a test can prove that a no_log task's failure message never reaches the output. With
STUB_K8S_SECRETS=accept in the environment, Secrets are applied like everything else.
"""

from __future__ import annotations

import os

from ansible.module_utils.basic import AnsibleModule

ARGS = {
    "kubeconfig": {"type": "raw"},
    "state": {"type": "str", "default": "present"},
    "apply": {"type": "bool", "default": False},
    "definition": {"type": "raw"},
    "kind": {"type": "str"},
    "namespace": {"type": "str"},
    "delete_all": {"type": "bool", "default": False},
    "label_selectors": {"type": "list", "elements": "str"},
    "wait": {"type": "bool", "default": False},
    "wait_timeout": {"type": "int", "default": 120},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True)
    definition = module.params["definition"] or {}
    refuse = os.environ.get("STUB_K8S_SECRETS") != "accept"
    if refuse and isinstance(definition, dict) and definition.get("kind") == "Secret":
        module.fail_json(msg=f"Failed to apply object: {definition!r}: Unauthorized")
    module.exit_json(changed=False, result=definition)


if __name__ == "__main__":
    main()
