#!/usr/bin/python
"""Test stand-in for kubernetes.core.k8s_log: every pod has the same two log lines."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule

ARGS = {
    "kubeconfig": {"type": "raw"},
    "namespace": {"type": "str"},
    "name": {"type": "str"},
    "tail_lines": {"type": "int"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True)
    lines = [f"{module.params['name']}: starting", f"{module.params['name']}: waiting"]
    module.exit_json(changed=False, log="\n".join(lines), log_lines=lines)


if __name__ == "__main__":
    main()
