# Two commands on a fresh machine: `make run` (install what is missing, run the default recipe end to end) and
# `make test` (same install, then the test suite). Both are idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PACKAGES := espeak-ng flite sox
RECIPE ?= recipes/digits

.PHONY: run test test-slow lint format install system-packages bench clean-recipe

run: install
	@start=$$(date +%s); $(RECIPE)/run.sh; echo "recipe wall time: $$(( $$(date +%s) - start )) s"

# the tests in PYTEST_JOBS processes (pytest-xdist; a test file stays in one process, so its fixtures run once; 0:
# one process): most tests keep one core busy; on a 2-core machine two processes took the suite from 19.6 to 11-14 min
PYTEST_JOBS ?= 2
test: install
	$(PY) -m pytest -q --durations=25 -m "not slow" -n $(PYTEST_JOBS) --dist loadfile tests

# the slow tier (run it yourself; CI runs `make test`): tests marked slow (-rs: each skip's reason, e.g. the SLURM
# tests where no cluster can start), then every benchmark's --quick run
test-slow: install
	$(PY) -m pytest -q -rs --durations=25 -m slow tests; rc=$$?; [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc
	$(MAKE) bench

# ruff, configured in pyproject.toml: lint, and the formatting check (`make format` applies it); then the messages
# of the commits after tools/check_commits.py's base: subjects of at most 72 characters (CONTRIBUTING.md)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/check_commits.py

format: install
	$(VENV)/bin/ruff format .

install: system-packages $(STAMP)

# Debian packages for the synthetic corpus (TTS) and audio tools; installed only when a command is missing.
system-packages:
	@missing=""; for c in espeak-ng flite sox; do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	fi

# The virtual environment with pinned requirements (torch pinned to the CPU build 2.13.0). uv (pinned in
# requirements.txt) installs them, downloading and unpacking in parallel, from the sources pip is configured with
# (tools/uv_args.py: pip's indexes and the --find-links folder holding torch's CPU wheel); INSTALLER=pip, or uv
# failing, installs with pip instead. uv compiles no bytecode (pip compiled all 13,000 modules, half its time);
# tools/compile_imports.py compiles those the project imports, so that no recipe step, a process of its own, compiles
# them again (every step would under PYTHONDONTWRITEBYTECODE=1). `uv pip check` (or `pip check`) then confirms that
# every package's requirements are met.
INSTALLER ?= uv
PIP := $(PY) -m pip install -q --disable-pip-version-check
UV := $(VENV)/bin/uv pip install -q --python $(PY)
CHECK = if [ $$by = uv ]; then $(VENV)/bin/uv pip check -q --python $(PY); else $(PY) -m pip check; fi
$(STAMP): requirements.txt pyproject.toml tools/uv_args.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@start=$$(date +%s); by=$(INSTALLER); \
	if [ $$by = uv ] && $(PIP) -q "$$(grep -m1 '^uv==' requirements.txt)" && sources=$$($(PY) tools/uv_args.py) \
	  && mapfile -t sources <<< "$$sources" && $(UV) "$${sources[@]}" -r requirements.txt \
	  && $(UV) --no-build-isolation --no-deps -e . && $(PY) tools/compile_imports.py; then :; \
	else \
	  [ $$by != uv ] || echo "uv failed (above): installing with pip instead"; by=pip; \
	  $(PIP) -r requirements.txt && $(PIP) --no-build-isolation --no-deps -e .; \
	fi && { check=$$($(CHECK)) || { echo "$$check" >&2; false; }; } && \
	echo "python packages installed in $$(( $$(date +%s) - start )) s ($$by)"
	@touch $@

bench: install
	for b in bench/*.py; do $(PY) $$b --quick || exit 1; done

clean-recipe:
	rm -rf $(RECIPE)/data $(RECIPE)/exp
