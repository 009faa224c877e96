#!/usr/bin/python
"""Test stand-in for kubernetes.core.k8s_exec: the role needs it to resolve; no test reaches it."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kubeconfig": {"type": "raw"},
            "namespace": {"type": "raw"},
            "pod": {"type": "raw"},
            "command": {"type": "raw"},
        }
    )
    module.fail_json(msg="k8s_exec is not stubbed")


if __name__ == "__main__":
    main()
