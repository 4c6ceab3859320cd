# The two commands of the README's first screen. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA := kraft-data
CONFIG := deploy/controller.properties

.PHONY: run run-migration test test-fast test-compiled compiled lint bench image dist clean kafka

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,test,dev]'
	$(PY) -m pyspark_kraft.editable   # Spark's data source lookup cannot see an editable install by itself
	touch $@

$(VENV)/.installed-run: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e .
	touch $@

run: $(VENV)/.installed-run
	test -f $(DATA)/meta.properties || $(VENV)/bin/kraftsim format -t "$$($(VENV)/bin/kraftsim random-uuid)" -c $(CONFIG)
	exec $(VENV)/bin/kraftsim controller $(CONFIG)

# The suite runs on WORKERS processes (pytest-xdist), each handed whole files, so that a file's
# module fixtures (a real Kafka, a ZooKeeper) start once. The files with a test marked `slow` go
# first, then the others, each group with the most tests first (tests/conftest.py; xdist's own
# order put the files of one long test last, and one worker ran them alone: 475 s against 432 s).
WORKERS ?= 2
XDIST := -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# Lint first: a red ruff or mypy fails CI as a red test does. Then the whole suite on pure
# Python, and again on the compiled build.
test: $(VENV)/.installed lint
	./.ci/install-system-deps
	$(PY) -m tests.kafka.provision --if-possible
	$(PY) -m pytest -q $(XDIST)
	$(MAKE) --no-print-directory test-compiled

# The optional mypyc build of the hot modules (kraftsim.COMPILED_MODULES; README "Compiled
# build"): a copy of the package in build/compiled/ with those modules compiled, never beside
# the sources (a .so next to its .py would shadow it in the pure install). Run it with
# PYTHONPATH=build/compiled. Without a C compiler (or Python's headers, or mypyc) the copy stays
# pure Python and one line says so.
compiled: $(VENV)/.installed
	./.ci/build-compiled $(PY) build/compiled

# The whole suite again on the compiled build, the tests that run a JVM (a real Kafka, marker
# `kafka`; Spark, tests/spark) included. `make test-compiled COMPILED_TESTS='-m "not kafka"
# --ignore=tests/spark'` leaves those out, for a quicker run. The pytest script, not `python -m`
# (which would put the checkout's pure sources first on sys.path); the conftest stops the run if
# the compiled modules are not the ones imported.
COMPILED_TESTS ?=
test-compiled: compiled
	@if [ -f build/compiled/.compiled ]; then \
	    echo 'the compiled build: pytest $(or $(COMPILED_TESTS),(the whole suite))'; \
	    KRAFTSIM_EXPECT_COMPILED=1 PYTHONPATH=build/compiled $(VENV)/bin/pytest -q -p no:cacheprovider \
	        --import-mode=append $(XDIST) $(COMPILED_TESTS); \
	else echo "kraftsim: no compiled build here; its tests ran on pure Python only"; fi

# Apache Kafka 3.9 for the tests, by its Maven coordinates (tests/kafka/pom.xml), into the
# git-ignored .cache/kafka-<version>/; a second run finds it there and does nothing.
kafka: $(VENV)/.installed
	./.ci/install-system-deps
	$(PY) -m tests.kafka.provision

# The ZooKeeper-to-KRaft migration rehearsed on real parts, printing each step: a real ZooKeeper
# (Debian's zookeeper), three real Kafka 3.9 brokers in ZooKeeper mode, kraftsim as the KRaft
# controller (tests/kafka/rehearsal.py). KEEP=1 keeps its directory (logs, data) afterwards.
run-migration: kafka
	$(PY) -m tests.kafka.rehearsal $(if $(KEEP),--keep)

test-fast: $(VENV)/.installed
	$(PY) -m pytest -q $(XDIST) -m "not slow"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy -p kraftsim -p pyspark_kraft

bench: $(VENV)/.installed
	$(PY) benchmarks/codec.py

# The container image, tagged with the one version (kraftsim/__init__.py) and latest.
VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' kraftsim/__init__.py)
image:
	docker build -t kraftsim:$(VERSION) -t kraftsim:latest .

# The sdist and the wheel, in dist/.
dist: $(VENV)/.installed
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .hypothesis build dist *.egg-info
