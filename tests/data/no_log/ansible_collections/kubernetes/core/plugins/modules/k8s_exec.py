#!/usr/bin/python
"""Test stand-in for kubernetes.core.k8s_exec: resolves at parse time; the tests never reach it."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    module = AnsibleModule(argument_spec={}, check_invalid_arguments=False)
    module.fail_json(msg="k8s_exec is not stubbed")


if __name__ == "__main__":
    main()
