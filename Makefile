# The two commands of the README's first screen. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DATA := kraft-data
# `make run` runs the controller on CONFIG, with ARGS given to both `kraftsim format` and
# `kraftsim controller` (so the two agree on the data dir): --override K=V flags, e.g.
#   make run ARGS='--override listeners=CONTROLLER://127.0.0.1:9193 --override controller.quorum.voters=3000@127.0.0.1:9193'
#   make run CONFIG=my-server.properties
CONFIG ?= deploy/controller.properties
ARGS ?=

.PHONY: run run-migration run-road test test-fast test-compiled compiled lint bench image image-base dist clean kafka

$(VENV)/.installed: pyproject.toml
	@echo "kraftsim: installing kraftsim with its test, Spark and dev extras into $(VENV) (a few minutes the first time)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,test,dev]'
	$(PY) -m pyspark_kraft.editable   # Spark's data source lookup cannot see an editable install by itself
	touch $@

$(VENV)/.installed-run: pyproject.toml
	@echo "kraftsim: installing kraftsim and its dependencies into $(VENV) (about a minute the first time)"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e .
	touch $@

# The first run formats the data dir with a new cluster id; later runs find it formatted.
run: $(VENV)/.installed-run
	$(VENV)/bin/kraftsim format --ignore-formatted -t "$$($(VENV)/bin/kraftsim random-uuid)" -c $(CONFIG) $(ARGS)
	exec $(VENV)/bin/kraftsim controller $(CONFIG) $(ARGS)

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

# The optional mypyc build of the hot modules (kraftsim.COMPILED_MODULES; docs/deploy.md "Compiled
# build"): a copy of the package in build/compiled/ with those modules compiled, never beside
# the sources (a .so next to its .py would shadow it in the pure install). Run it with
# PYTHONPATH=build/compiled. Without a C compiler (or Python's headers, or mypyc) the copy stays
# pure Python and one line says so.
compiled: $(VENV)/.installed
	./.ci/build-compiled $(PY) build/compiled

# The suite again on the compiled build, the tests that run a JVM (a real Kafka, marker `kafka`;
# Spark, tests/spark) included, but for the end-to-end stories (marker `story`: real brokers
# through failovers, restarts and the road from ZooKeeper to Kafka 4.4, minutes each). They drive
# the compiled codec and replay through paths the differential tests already hold byte for byte
# to a real Kafka on this build, and running them twice would take the suite past its 30 minutes.
# `make test-compiled COMPILED_TESTS=` runs every test; `COMPILED_TESTS='-m "not kafka"
# --ignore=tests/spark'` leaves the JVMs out, for a quicker run. The pytest script, not `python -m`
# (which would put the checkout's pure sources first on sys.path); the conftest stops the run if
# the compiled modules are not the ones imported.
COMPILED_TESTS ?= -m "not story"
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

# The whole road: the rehearsal above, then kraftsim restarted as a Kafka $(TO) controller, the
# brokers rolled to Kafka $(TO) and metadata.version raised by that release's kafka-features, with a
# producer and a consumer running across every step; each step timed.
TO ?= 4.4
run-road: kafka
	$(PY) -m tests.kafka.provision --release $(TO)
	$(PY) -m tests.kafka.rehearsal --to $(TO) $(if $(KEEP),--keep)

test-fast: $(VENV)/.installed
	$(PY) -m pytest -q $(XDIST) -m "not slow"

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy -p kraftsim -p pyspark_kraft

bench: $(VENV)/.installed
	$(PY) benchmarks/codec.py

# The container image, tagged with the one version (kraftsim/__init__.py) and latest: by docker
# where a docker engine answers, else by podman (as root: tests/container_image.py builds with
# --isolation chroot, pip installing wheels this machine downloads). PYTHON_IMAGE=... builds on
# another base than the Dockerfile's python:3.11-slim-bookworm; where no container registry is
# reachable, `make image-base` makes one from Debian's packages (mmdebstrap), named
# localhost/kraftsim-base:bookworm, for `make image PYTHON_IMAGE=localhost/kraftsim-base:bookworm`.
VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' kraftsim/__init__.py)
PYTHON_IMAGE ?=
image:
	@if docker info >/dev/null 2>&1; then \
	    echo docker build -t kraftsim:$(VERSION) -t kraftsim:latest .; \
	    docker build $(if $(PYTHON_IMAGE),--build-arg PYTHON_IMAGE=$(PYTHON_IMAGE)) -t kraftsim:$(VERSION) -t kraftsim:latest .; \
	elif command -v podman >/dev/null 2>&1; then \
	    $(MAKE) --no-print-directory $(VENV)/.installed-run && \
	    echo "no docker engine: podman build -t kraftsim:$(VERSION) -t kraftsim:latest" && \
	    $(PY) -m tests.container_image build -t kraftsim:$(VERSION) -t kraftsim:latest $(if $(PYTHON_IMAGE),--base $(PYTHON_IMAGE)); \
	else echo "make image: neither a docker engine nor podman here (.ci/install-system-deps installs podman)" >&2; exit 1; fi

image-base: $(VENV)/.installed-run
	$(PY) -m tests.container_image base

# The sdist and the wheel, in dist/.
dist: $(VENV)/.installed
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .hypothesis build dist *.egg-info
