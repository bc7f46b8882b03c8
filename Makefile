# eks-distributed-training: every command a user or CI needs. Each target installs what it uses.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
CDK := node_modules/.bin/cdk
ENV ?= dev
JOB ?= cpu-ddp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CDK_FLAGS := --no-notices --no-version-reporting

# jsii prints a Node end-of-life banner on every run; it is noise here.
export JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION := 1
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: help install local test synth synth-all deploy diff destroy lint lock etcd bench clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(VENV)/.installed node_modules/.installed ## create .venv and node_modules (idempotent)

$(VENV)/.installed: requirements.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=/path/to/python3.11" >&2; exit 1; }
	@echo "Installing the pinned Python packages of requirements.txt into $(VENV) (aws-cdk-lib, cdk8s, torch CPU, transformers, moto, ...): a few minutes the first time, about 1 GB of downloads"
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found; install Node.js 18 or later (https://nodejs.org/en/download)" >&2; exit 1; }
	@echo "Installing the pinned AWS CDK CLI into node_modules (npm ci): under a minute"
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

etcd: ## install Debian's etcd-server when no etcd is on PATH (local runs and tests use it on loopback)
	@command -v etcd >/dev/null || echo "Installing Debian's etcd-server with apt-get (local runs rendezvous through it): under a minute"
	@command -v etcd >/dev/null || { $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends etcd-server >/dev/null; }
	@command -v etcd >/dev/null || { echo "error: etcd is not installed and apt-get could not install etcd-server" >&2; exit 1; }

local: install etcd ## synthesize the default environment offline, print its summary, run JOB (default cpu-ddp) locally
	@$(PY) -m ops local --job $(JOB) --check
	$(PY) -m ops synth-summary --env $(ENV)
	$(PY) -m ops local --job $(JOB)

# checkov in its own virtual environment: its dependencies would change packages requirements.txt pins.
# requirements-checkov.txt pins it and everything it needs.
CHECKOV_VENV := .venv-checkov
CHECKOV_VERSION := $(shell sed -n 's/^checkov==//p' requirements-checkov.txt)

$(CHECKOV_VENV)/.installed: requirements-checkov.txt
	@echo "Installing checkov $(CHECKOV_VERSION) into $(CHECKOV_VENV) (its own virtual environment): a few minutes the first time"
	[ -x $(CHECKOV_VENV)/bin/python ] || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-checkov.txt
	touch $@

test: install etcd $(CHECKOV_VENV)/.installed ## the whole suite, on two workers (each test module stays on one worker, so its synth runs once)
	$(PY) -m pytest -q -n 2 --dist loadfile

synth: install ## offline synth of ENV (default dev) into cdk.out/ and dist/ENV/, then its summary with the cost
	$(PY) -m ops synth-summary --env $(ENV)

# The environment's stacks: `ENV/*`, or the pipeline's stage `Pipeline/ENV/*` for an environment the
# pipeline deploys (python -m ops stacks). A failed lookup stops the recipe before cdk runs.
STACKS = stacks=$$($(PY) -m ops stacks --env $(ENV) $(1)) &&

deploy: install ## preflight, deploy ENV, schedule its capacity blocks; refused where the pipeline deploys ENV, unless FORCE=1; ABANDON_FSX=fs-... lets it replace that file system
	$(call STACKS,--deploy $(if $(FORCE),--force)) \
	$(PY) -m ops preflight --env $(ENV) $(if $(ABANDON_FSX),--abandon-file-system $(ABANDON_FSX)) && \
	$(CDK) deploy $(CDK_FLAGS) -c env=$(ENV) "$$stacks"
	$(PY) -m ops capacity-block schedule --env $(ENV) --if-any

destroy: install ## destroy ENV (prod keeps what removalPolicy retain says); checks the credentials first
	$(PY) -m ops whoami --env $(ENV)
	$(call STACKS) $(CDK) destroy $(CDK_FLAGS) -c env=$(ENV) "$$stacks"

diff: install ## what a deploy of ENV would change in its account (needs credentials for ENV's account)
	$(PY) -m ops whoami --env $(ENV)
	$(call STACKS) $(CDK) diff $(CDK_FLAGS) -c env=$(ENV) "$$stacks"

lint: synth $(CHECKOV_VENV)/.installed ## cfn-lint the templates, hadolint the Dockerfiles, checkov ENV's templates and dist/ YAML against checkov-accepted.yaml
	$(VENV)/bin/cfn-lint --non-zero-exit-code error --format parseable 'cdk.out/**/*.template.json'
	$(VENV)/bin/hadolint trainer/Dockerfile trainer/Dockerfile.cpu
	$(PY) -m ops.policy_scan --env $(ENV)

# pip-tools pins that resolve and hash trainer/requirements.txt; kept out of .venv (its pip would change).
LOCK_VENV := .venv-lock
LOCK_TOOLS := pip==25.3 pip-tools==7.5.2

lock: install ## regenerate the images' hash-pinned trainer/requirements.lock from trainer/requirements.txt (PyPI, minutes)
	@[ -x $(LOCK_VENV)/bin/pip-compile ] || { echo "Installing pip-tools into $(LOCK_VENV) (its own virtual environment)"; \
		$(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check $(LOCK_TOOLS); }
	$(PY) -m ops.lockfile --pip-compile $(LOCK_VENV)/bin/pip-compile

bench: install etcd ## run the CPU benchmarks and print their ratios
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean: ## remove build outputs (keeps .venv and node_modules)
	rm -rf cdk.out dist .local .pytest_cache

.PHONY: ops
ops: install ## the ops CLI, e.g. make ops ARGS="plan --env prod" (python -m ops --help lists the commands)
	$(PY) -m ops $(ARGS)
