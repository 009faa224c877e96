#!/usr/bin/python
"""Test stand-in for kubernetes.core.k8s_info: always fails, so a deploy stops at its first wait."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kubeconfig": {"type": "raw"},
            "kind": {"type": "raw"},
            "namespace": {"type": "raw"},
            "label_selectors": {"type": "raw"},
        }
    )
    module.fail_json(msg="k8s_info is not stubbed")


if __name__ == "__main__":
    main()
