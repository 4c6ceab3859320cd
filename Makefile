# The two commands of the README's first screen. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA := kraft-data
CONFIG := deploy/controller.properties

.PHONY: run test test-fast lint bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev]'
	touch $@

$(VENV)/.installed-run: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e .
	touch $@

run: $(VENV)/.installed-run
	test -f $(DATA)/meta.properties || $(VENV)/bin/kraftsim format -t "$$($(VENV)/bin/kraftsim random-uuid)" -c $(CONFIG)
	exec $(VENV)/bin/kraftsim controller $(CONFIG)

test: $(VENV)/.installed
	./.ci/install-system-deps
	$(PY) -m pytest -q

test-fast: $(VENV)/.installed
	$(PY) -m pytest -q -m "not slow"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy rpc metadata controller

bench: $(VENV)/.installed
	$(PY) benchmarks/codec.py

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .hypothesis
