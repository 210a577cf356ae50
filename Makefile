# Streaming Proxy Lab. Two commands matter: `make lab` and `make test`.
# Every target bootstraps .venv on first use, so a fresh clone needs nothing else.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(wildcard notebooks/*.ipynb)
PYTEST_NBVAL := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg -p no:cacheprovider

.PHONY: help lab test lint typecheck unit nbval grade student bench bench-quick doctor clean

help:
	@echo "make lab      JupyterLab on notebooks/ (127.0.0.1, token auth on)"
	@echo "make test     lint, type check, unit + integration tests, nbval over the notebooks"
	@echo "make grade SUBMISSION=path/to/proxy.py   grade one learner's proxy"
	@echo "make student  learner copies of the notebooks in student/"
	@echo "make bench    benchmarks, ~14 min (make bench-quick: ~1 min); results in bench/results/"
	@echo "make doctor   diagnose this machine's setup"

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ip=127.0.0.1 --no-browser --allow-root

test: lint typecheck unit nbval

lint: $(STAMP)
	$(BIN)/ruff check labkit mock_upstream tests bench
	$(BIN)/ruff format --check labkit mock_upstream tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest tests

nbval: $(STAMP)
ifneq ($(NOTEBOOKS),)
	$(BIN)/pytest $(PYTEST_NBVAL) $(NOTEBOOKS)
else
	@echo "nbval: no notebooks yet"
endif

grade: $(STAMP)
	$(BIN)/labkit grade $(SUBMISSION)

student: $(STAMP)
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
