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

.PHONY: image setup scan-setup scan lint yamllint ansible-lint syntax python-lint controlplane controlplane-beside api-after-tools docker-after-tools docker-beside docker-serial fast tools api docker unit mutants install-check test lab lab-down molecule

# Every pip install here and in the tests' cached environments passes --no-compile: Python writes
# the bytecode of a module when it is first imported, and compiling every module of ansible's
# collections, torch or checkov up front costs CPU that nothing uses
# (docs/dev/measurements/cold-installs.json).
setup: $(STAMP)
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

# checkov in its own venv (its pins conflict with pytest's), every package pinned.
SCAN_VENV := .venv-scan
SCAN_STAMP := $(SCAN_VENV)/.installed-$(shell sha256sum lab/scan-requirements.txt | cut -c1-12)
export SPARKRACK_CHECKOV := $(CURDIR)/$(SCAN_VENV)/bin/checkov

scan-setup: $(SCAN_STAMP)
$(SCAN_STAMP): lab/scan-requirements.txt
	python3 -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/pip install -q --disable-pip-version-check --no-compile --no-deps -r lab/scan-requirements.txt
	rm -f $(SCAN_VENV)/.installed-* && touch $@

# Every manifest sparkrack renders (inventories, profiles, add-ons, gateway, monitoring) through
# checkov; an accepted finding is skipped on its object with its reason (sparkrack/k8s/scanner.py).
scan: setup scan-setup
	$(BIN)/python lab/scan.py

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

lint: yamllint ansible-lint syntax python-lint scan

# The lab's Kubernetes control plane (lab/controlplane.py): built from Go modules when its inputs
# changed (a no-op otherwise), once per make run; `make api` and the lab reuse the binaries.
controlplane: setup
	$(BIN)/python lab/controlplane.py build

# The same build at nice 19, beside the tools and docker tiers (`make unit`): it takes the CPU
# they leave idle and yields it to their tests. Its output is printed once it is done.
CONTROLPLANE_LOG := .cache/controlplane/build.log
controlplane-beside: setup
	@mkdir -p $(dir $(CONTROLPLANE_LOG))
	@nice -n 19 $(BIN)/python lab/controlplane.py build > $(CONTROLPLANE_LOG) 2>&1; \
	  status=$$?; cat $(CONTROLPLANE_LOG); exit $$status

# The test tiers (tests/conftest.py marks them; docs/dev/testing.md). JOBS pytest-xdist workers
# run a tier's independent tests side by side (--dist loadgroup keeps an xdist_group on one
# worker); then the tier's `serial` tests, which bound wall or CPU time, run alone. pytest's
# status 5 (no test selected) is no failure there.
JOBS ?= 2
PYTEST := pytest -q -p no:cacheprovider
XDIST := -n $(JOBS) --dist loadgroup
define tier
$(2) $(PYTEST) $(XDIST) -m "$(1) and not serial" tests
$(2) $(PYTEST) -p no:xdist -m "$(1) and serial" tests || [ $$? -eq 5 ]
endef

# Pure Python: no API, no Docker, no Go build. A developer's first check.
fast: setup
	$(call tier,fast,)

# Real tools on this machine: ansible-playbook, rsync daemons on loopback, network namespaces,
# checkov, promtool, engine wheels and LiteLLM from PyPI (cached under .cache/). A skip is a
# failure here: a missing rsync or network namespaces cannot pass unseen.
tools: setup scan-setup
	$(call tier,tools,SPARKRACK_REQUIRE_TOOLS=1)

# The real control plane on loopback, one worker: two control planes and their KWOK on two cores
# miss the readiness bounds of the watchdog tests. A skip is a failure here.
api: setup controlplane
	SPARKRACK_REQUIRE_API=1 $(PYTEST) -p no:xdist -m api tests

# Lab containers; every test holds the lab lock, so one worker. A skip is a failure here. Its
# serial tests time a copy against the planner's estimate, so they run after the rest, and in
# `make unit` after the api tier as well: alone on the machine.
DOCKER_TIER := SPARKRACK_REQUIRE_DOCKER=1 $(PYTEST) -p no:xdist
docker: docker-beside
	$(MAKE) docker-serial

docker-beside: setup
	$(DOCKER_TIER) -m "docker and not serial" tests

docker-serial: setup
	$(DOCKER_TIER) -m "docker and serial" tests

# The four tiers. Neither tools nor docker needs the control plane, so it builds beside the tools
# tier. Once both are done, the api and docker tiers run side by side: each leaves the 2 cores
# mostly idle (alone, 34 % and 26 % busy), while the tools tier keeps them full, which is why the
# api tier never runs beside it. -O prints each tier's output in one piece when it is done. The
# docker tier's serial tests run last, alone.
unit: fast
	$(MAKE) -j2 -O api-after-tools docker-after-tools
	$(MAKE) docker-serial

api-after-tools: controlplane-beside tools
	$(MAKE) api

docker-after-tools: tools
	$(MAKE) docker-beside

# The mutation check (tests/mutants.py): each listed mutation, applied to a copy of this checkout,
# must make its named test fail. Run by hand; the fast tier checks that every mutation still
# applies (tests/test_mutations_apply.py, docs/dev/testing.md).
mutants: setup
	$(BIN)/python tests/mutants.py

# `pip install .` on fresh venvs (every Python 3.11+ found), then the CLI and a syntax check.
install-check:
	.ci/install-check

# Container lab (lab/lab.py). Everything that touches Docker serializes on one lock.
LAB_LOCK := flock /tmp/sparkrack-lab.lock

lab: setup
	$(LAB_LOCK) $(BIN)/python lab/lab.py lab

# The sparkrack image (image/Containerfile) from this checkout: its wheel, no PyPI. CONTAINER is
# docker or buildah (whichever is found first). The result is IMAGE_ARCHIVE, an OCI archive whose
# manifest digest is printed: name it in the inventory's serving_image_archive, and the serve
# play imports it into every node's containerd. Its registry name (.invalid) never resolves, so
# no node ever pulls a stranger's image of that name.
CONTAINER ?= $(shell command -v docker || command -v buildah)
IMAGE ?= sparkrack.invalid/sparkrack:$(shell $(BIN)/python -c 'import importlib.metadata as m; print(m.version("sparkrack"))')
IMAGE_CONTEXT := build/image
# The base image (image/Containerfile's BASE); empty: the Containerfile's own.
IMAGE_BASE ?=
IMAGE_BUILD_ARGS := $(if $(IMAGE_BASE),--build-arg BASE=$(IMAGE_BASE))
IMAGE_ARCHIVE := build/sparkrack-image.tar

image: setup
	rm -rf $(IMAGE_CONTEXT) && mkdir -p $(IMAGE_CONTEXT)
	$(BIN)/python -m pip wheel -q --no-deps --no-build-isolation -w $(IMAGE_CONTEXT) .
	cp image/Containerfile image/packages.txt $(IMAGE_CONTEXT)/
	@test -n "$(CONTAINER)" || { echo "make image: neither docker nor buildah found"; exit 2; }
	case "$(CONTAINER)" in \
	  *buildah) $(CONTAINER) bud $(IMAGE_BUILD_ARGS) -f $(IMAGE_CONTEXT)/Containerfile -t $(IMAGE) $(IMAGE_CONTEXT) && \
	    $(CONTAINER) push $(IMAGE) docker-archive:$(IMAGE_CONTEXT)/docker.tar:$(IMAGE) ;; \
	  *) $(CONTAINER) build $(IMAGE_BUILD_ARGS) -f $(IMAGE_CONTEXT)/Containerfile -t $(IMAGE) $(IMAGE_CONTEXT) && \
	    $(CONTAINER) save -o $(IMAGE_CONTEXT)/docker.tar $(IMAGE) ;; esac
	$(BIN)/python -m sparkrack.serving.image_archive $(IMAGE_CONTEXT)/docker.tar $(IMAGE_ARCHIVE) $(IMAGE)
	@echo "wrote $(IMAGE_ARCHIVE): set serving_image_archive to its path"

lab-down: setup
	$(LAB_LOCK) $(BIN)/python lab/lab.py down

# The default scenario around `make lab` itself: molecule destroys any lab, checks the syntax and
# creates the 5 nodes (same container names as `make lab`); then `make lab`, exactly as the
# README's first command, converges that lab, reruns it (changed=0) and prints the summary; then
# molecule runs site.yml --check on it, its testinfra verify, and destroy.
molecule: setup
	$(LAB_LOCK) $(BIN)/python lab/lab.py molecule before
	$(MAKE) lab
	$(LAB_LOCK) $(BIN)/python lab/lab.py molecule after

test: lint unit install-check molecule
