# Both entry points set up everything on a fresh machine: a .venv, the pinned packages, the package.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# A hardened node never phones home, not even from the test suite.
export FLWR_TELEMETRY_ENABLED := 0
export FLWR_DISABLE_UPDATE_CHECK := 1
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1

.PHONY: install test demo lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(VENV)/bin/secure-fed run --out runs/demo

lint: $(STAMP)
	$(VENV)/bin/ruff check secure_fed tests benchmarks

clean:
	rm -rf runs .cache .pytest_cache
