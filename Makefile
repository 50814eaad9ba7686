# The two set-up commands of the README. Each creates .venv (Python 3.11+) on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test clean

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "envharness needs Python 3.11+; set PYTHON=/path/to/python3.11"'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/envrigger demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest

clean:
	rm -rf $(VENV) .pytest_cache
