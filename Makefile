# icetail developer entry points. `make help` lists them.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.icetail-installed

.PHONY: help demo test test-quick lint system-deps

help:
	@echo "make demo   - set up .venv and run the demo pipeline on the embedded defaults"
	@echo "make test   - set up .venv (+ test system packages) and run the whole test suite"
	@echo "make lint   - ruff and mypy"

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c requirements-dev.txt -e '.[dev]'
	touch $(STAMP)

# The Java reference needs the SQLite JDBC driver; the scrape test needs a real Prometheus.
system-deps:
	@if [ ! -e /usr/share/java/sqlite-jdbc.jar ] || ! command -v promtool >/dev/null; then \
		echo "installing Debian packages libxerial-sqlite-jdbc-java prometheus"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq libxerial-sqlite-jdbc-java prometheus >/dev/null; \
	fi

demo: $(STAMP)
	$(BIN)/icetail demo

test: $(STAMP) system-deps
	$(BIN)/pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
