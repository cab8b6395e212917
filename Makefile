# Two entry points: `make run` (the quickstart sweep + report) and `make test`.
# Each creates .venv and installs the pinned dependencies by itself.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
# The compiled emulator core is part of the install: a change to its source builds it again.
CORE_SOURCES := setup.py emulator/_timing_core.pyx emulator/_functional_core.pyx emulator/_functional_kernels.h emulator/_timing_sets.h
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-nodeps.txt pyproject.toml $(CORE_SOURCES) | sha256sum | cut -c1-16)
DB ?= records.db

.PHONY: run test install clean

install: $(STAMP)

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml $(CORE_SOURCES)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-nodeps.txt
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	rm -f $(VENV)/.installed-* && touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/dse sweep experiments/quickstart.toml --db $(DB)
	$(VENV)/bin/dse report quickstart --db $(DB) --out reports

# One pytest worker per core; a test file stays on one worker, so its module fixtures are built once.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n auto --dist loadfile

clean:
	rm -rf $(VENV) reports build *.egg-info emulator/_timing_core.cpp emulator/_functional_core.cpp emulator/_*_core.*.so
