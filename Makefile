# sparkrack — every target runs inside .venv (created by `make setup`).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR := 0

PLAYBOOKS := site.yml $(wildcard playbooks/*.yml)

.PHONY: setup lint yamllint ansible-lint syntax python-lint controlplane unit install-check test lab lab-down molecule

setup: $(STAMP)
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

yamllint: setup
	yamllint --strict .

ansible-lint: setup
	ansible-lint --offline --profile production

syntax: setup
	@for pb in $(PLAYBOOKS); do \
	  echo "syntax-check $$pb"; \
	  ansible-playbook --syntax-check -i inventories/lab $$pb >/dev/null; \
	  ansible-playbook --syntax-check -i inventories/example $$pb >/dev/null; \
	done

python-lint: setup
	ruff check sparkrack filter_plugins tests lab molecule
	ruff format --check sparkrack filter_plugins tests lab molecule
	mypy

lint: yamllint ansible-lint syntax python-lint

# The lab's Kubernetes control plane (lab/controlplane.py): built from Go modules when its inputs
# changed; the unit tests that need a real API start it on loopback and must not skip here.
controlplane: setup
	$(BIN)/python lab/controlplane.py build

unit: setup controlplane
	SPARKRACK_REQUIRE_API=1 pytest -q tests

# `pip install .` on fresh venvs (every Python 3.11+ found), then the CLI and a syntax check.
install-check:
	.ci/install-check

# Container lab (lab/lab.py). Everything that touches Docker serializes on one lock.
LAB_LOCK := flock /tmp/sparkrack-lab.lock

lab: setup
	$(LAB_LOCK) $(BIN)/python lab/lab.py lab

lab-down: setup
	$(LAB_LOCK) $(BIN)/python lab/lab.py down

# molecule test of the default scenario: the 5-node lab (same container names as `make lab`, so a
# running lab is replaced) converged with site.yml, idempotence, testinfra verify, destroy.
molecule: setup
	$(LAB_LOCK) $(BIN)/python lab/lab.py molecule

test: lint unit install-check molecule
