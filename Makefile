# icetail developer entry points. `make help` lists them.
# Editable installs use setuptools' compat mode: a .pth path entry of the checkout, not its import
# hook (pyproject.toml, [tool.setuptools], says why).
VENV ?= .venv
VENV4 ?= .venv-spark4
PYTHON ?= python3
BIN := $(VENV)/bin
BIN4 := $(VENV4)/bin
STAMP := $(VENV)/.icetail-installed
STAMP4 := $(VENV4)/.icetail-installed
# The demo's venv is the install users get: pyspark 4 (the Spark 4 line's pins), icetail built as a
# wheel, not editable (compat mode prints setuptools' "transitional" warning; users never see it),
# its runtime dependencies and the postgres extra (a PostgreSQL mirror or store works from it), no
# dev extra. Rebuilt when the checkout's package files change, so the demo runs what is checked out.
DEMO_VENV ?= .venv-demo
BIN_DEMO := $(DEMO_VENV)/bin
DEMO_STAMP := $(DEMO_VENV)/.icetail-demo-installed
DEMO_SOURCES := $(shell find icetail monitor reader state -type f -not -path '*/__pycache__/*' 2>/dev/null)

.PHONY: help demo demo-spark4 test test-spark35 test-spark4 lint system-deps services wheel-smoke image image-smoke image-standin-base image-ci

help:
	@echo "make demo         - set up .venv-demo (icetail as users get it: pyspark 4, runtime dependencies) and run the demo"
	@echo "make demo-spark4  - the same as make demo (its old name: the demo venv is on pyspark 4)"
	@echo "make test         - the whole suite on both Spark lines at once (test-spark35 and test-spark4)"
	@echo "make test-spark35 - every test but the Spark 4 only ones (marker spark4), with the Java reference, on pyspark 3.5"
	@echo "make test-spark4  - every test that needs no Java reference, on the newest pyspark 4 (.venv-spark4)"
	@echo "make lint         - ruff and mypy"
	@echo "make wheel-smoke  - build the sdist and the wheel, install the wheel in a fresh venv, run icetail demo"
	@echo "make image        - build the container image icetail:VERSION (docker, else buildah; deploy/image/README.md)"
	@echo "make image-smoke  - run that image with podman: pip check, demo, run, serve, replicas, SIGTERM (uid 10001, read-only)"
	@echo "make image-ci     - what CI runs after the tests: the stand-in base if missing, make image, make image-smoke"
	@echo "make image-standin-base - TEST FIXTURE: a local stand-in for python:3.11-slim-bookworm (no Docker Hub here)"

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c requirements-dev.txt --config-settings editable_mode=compat -e '.[dev]'
	touch $(STAMP)

# The same pins as .venv except pyspark, which requirements-spark4.txt sets; plus the Spark Connect
# client (the [connect] extra: on pyspark 3.5 it would pin numpy < 2, so the 3.5 line goes without).
$(STAMP4): pyproject.toml requirements-dev.txt requirements-spark4.txt
	$(PYTHON) -m venv $(VENV4)
	$(BIN4)/pip install -q --upgrade pip
	grep -v '^pyspark==' requirements-dev.txt | cat - requirements-spark4.txt > $(VENV4)/constraints.txt
	$(BIN4)/pip install -q -c $(VENV4)/constraints.txt --config-settings editable_mode=compat -e '.[dev,connect]'
	touch $(STAMP4)

# The Java reference needs the SQLite JDBC driver; the scrape test needs a real Prometheus; the image
# is built and run with buildah, podman (runc where cgroups are hybrid) and a debootstrap'd stand-in base.
# apt waits up to 10 minutes for another dpkg to finish (DPkg::Lock::Timeout).
SYSTEM_PACKAGES := libxerial-sqlite-jdbc-java prometheus buildah podman runc debootstrap
system-deps:
	@if [ ! -e /usr/share/java/sqlite-jdbc.jar ] || ! command -v promtool buildah podman runc debootstrap >/dev/null; then \
		echo "installing Debian packages $(SYSTEM_PACKAGES)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq $(SYSTEM_PACKAGES) >/dev/null; \
	fi

# The RabbitMQ Streams sink's tests need RabbitMQ's stream protocol (port 5552): the broker is started
# if it is installed and down, its stream plugin enabled (idempotent), and the port waited for (30 s);
# nothing is done when the port answers already (the plugin CLI takes seconds).
# Without RabbitMQ installed nothing happens (those tests skip, saying why).
services:
	@if command -v rabbitmq-plugins >/dev/null \
		&& ! $(PYTHON) -c "import socket; socket.create_connection(('127.0.0.1', 5552), 1)" 2>/dev/null; then \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO rabbitmqctl -q status >/dev/null 2>&1 || $$SUDO rabbitmq-server -detached; \
		$$SUDO rabbitmq-plugins -q enable rabbitmq_stream >/dev/null; \
		for i in $$(seq 60); do \
			$(PYTHON) -c "import socket; socket.create_connection(('127.0.0.1', 5552), 1)" 2>/dev/null && exit 0; \
			sleep 0.5; \
		done; echo "RabbitMQ's stream port 127.0.0.1:5552 did not open in 30 s"; exit 1; \
	fi

# setuptools builds the wheel in build/ and keeps what it copied there: a module deleted from the
# checkout would go into the wheel, so its build folders are emptied first.
$(DEMO_STAMP): pyproject.toml requirements-dev.txt requirements-spark4.txt $(DEMO_SOURCES)
	test -x $(BIN_DEMO)/pip || { $(PYTHON) -m venv $(DEMO_VENV) && $(BIN_DEMO)/pip install -q --upgrade pip; }
	grep -v '^pyspark==' requirements-dev.txt | cat - requirements-spark4.txt > $(DEMO_VENV)/constraints.txt
	rm -rf build/lib build/bdist.*
	$(BIN_DEMO)/pip install -q -c $(DEMO_VENV)/constraints.txt '.[postgres]'
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN_DEMO)/icetail demo

# the old name, from when the demo ran on pyspark 3.5 and the data source needed a second venv
demo-spark4: demo

# Both lines at once: a line spends most of its time waiting on JVM starts, child processes and
# services, so the two overlap well on two cores (tests/conftest.py: `once` tests run on one line).
# Each line writes its own log, printed whole once both are done; either failing fails the target.
test: $(STAMP) $(STAMP4) system-deps services
	@rm -rf .test-logs && mkdir -p .test-logs
	@echo "running the Spark 3.5 and Spark 4 lines at once (logs in .test-logs/)"
	@( $(BIN)/pytest -q -p no:cacheprovider --durations=30 -m "not spark4" --basetemp=/tmp/icetail-tests-spark35 \
		> .test-logs/spark35.log 2>&1; echo $$? > .test-logs/spark35.rc ) & \
	( $(BIN4)/pytest -q -p no:cacheprovider --durations=30 -m "not java" --basetemp=/tmp/icetail-tests-spark4 \
		> .test-logs/spark4.log 2>&1; echo $$? > .test-logs/spark4.rc ) & \
	wait
	@echo "===== Spark 3.5 line (make test-spark35) ====="; cat .test-logs/spark35.log
	@echo "===== Spark 4 line (make test-spark4) ====="; cat .test-logs/spark4.log
	@test "$$(cat .test-logs/spark35.rc)" = 0 && test "$$(cat .test-logs/spark4.rc)" = 0

# Tests marked spark4 need Spark 4: the Python data source API, a Spark Connect server from pip.
test-spark35: $(STAMP) system-deps services
	$(BIN)/pytest -q -m "not spark4"

# The Java reference (iceberg-spark-runtime-3.5) cannot load on Spark 4: its tests run on 3.5 only.
test-spark4: $(STAMP4) system-deps services
	$(BIN4)/pytest -q -m "not java"

# What a user gets: the sdist and the wheel built from a clean tree, the wheel checked to hold every
# module at its mapped path (reader/x.py as icetail/reader/x.py), the wheel installed alone in a
# fresh venv with the pyspark pip resolves for users (the Spark 4 line's pins; no checkout on the
# path), `icetail --version` and `icetail demo` run there.
wheel-smoke:
	rm -rf dist .wheel-smoke
	$(PYTHON) -m venv .wheel-smoke
	.wheel-smoke/bin/pip install -q --upgrade pip build
	.wheel-smoke/bin/python -m build -q --outdir dist . > /dev/null
	.wheel-smoke/bin/python -m tests.support.layout dist/icetail-*.whl
	grep -v '^pyspark==' requirements-dev.txt | cat - requirements-spark4.txt > .wheel-smoke/constraints.txt
	.wheel-smoke/bin/pip install -q -c .wheel-smoke/constraints.txt dist/icetail-*.whl
	.wheel-smoke/bin/python -c "import icetail, pyspark; print('icetail', icetail.__version__, 'on pyspark', pyspark.__version__)"
	cd "$$(mktemp -d)" && $(CURDIR)/.wheel-smoke/bin/icetail --version \
		&& $(CURDIR)/.wheel-smoke/bin/icetail demo > demo.log 2>&1 || { tail -40 demo.log; exit 1; }
	@echo "wheel smoke test passed: $$(ls dist)"

# mypy runs on a view of the package as installed (.ci/typecheck: it cannot follow package-dir)
lint: $(STAMP)
	$(BIN)/ruff check .
	PYTHON=$(CURDIR)/$(BIN)/python .ci/typecheck

# The container image (deploy/image/README.md). Not part of `make test`: a build takes minutes of
# CPU. IMAGE, BASE_IMAGE, BUILDER, PULL pass through to deploy/image/build.sh.
IMAGE ?= icetail:$(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image:
	IMAGE=$(IMAGE) deploy/image/build.sh $(IMAGE)

# Runs the built image with podman (as root): see deploy/image/smoke.py for what it checks.
image-smoke: $(STAMP4)
	IMAGE=$(IMAGE) $(BIN4)/python deploy/image/smoke.py

# A test fixture only: debootstrap's bookworm with Debian's Python 3.11, tagged as the official
# base, for machines that cannot pull it. Then: make image PULL=never && make image-smoke
image-standin-base:
	deploy/image/standin-base.sh

# What CI runs after the tests (.ci/run): the image built on the stand-in base (made once per machine:
# no Docker Hub here) and run by the smoke test. Its time goes into .ci/run's budget (60 minutes here).
image-ci: system-deps
	@buildah --storage-driver vfs inspect --type image python:3.11-slim-bookworm >/dev/null 2>&1 \
		|| $(MAKE) image-standin-base
	$(MAKE) image PULL=never
	$(MAKE) image-smoke
	@# vfs keeps a whole copy per layer (~10 GB a build): earlier builds' untagged images go
	-buildah --storage-driver vfs rmi --prune >/dev/null
