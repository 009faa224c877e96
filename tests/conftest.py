"""Fixtures shared by the test suite."""

# kube_api: a real Kubernetes control plane on loopback (tests/kube_api.py).
pytest_plugins = ["kube_api"]
