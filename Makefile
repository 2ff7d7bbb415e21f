# Two commands: `make demo` and `make test`. Everything they need is installed here.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck docs bench bench-quick clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip uv

$(STAMP): pyproject.toml | $(PY)
	$(UV) pip install --quiet --python $(PY) -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m astore._demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks docs/examples
	$(VENV)/bin/ruff format --check src tests benchmarks docs/examples

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict src

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir build/site

test: lint typecheck docs
	$(VENV)/bin/pytest -q -p no:cacheprovider

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache

# Benchmarks (not tests): astore against its peers on moto and s3rver; rewrites
# docs/benchmarks.md. Makes benchmarks/.peers and installs s3rver on first use.
bench: $(STAMP)
	$(PY) benchmarks/run.py

bench-quick: $(STAMP)
	$(PY) benchmarks/run.py --quick
