# Two entry points (see README): `make demo` runs the main job, `make test` the tests.
# Both create .venv from pyproject.toml first; nothing is installed by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt torch 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,plot,optuna,lightning,transformers,accelerate]' 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -c "import autotune, torch, optuna, skopt, networkx, sqlite_utils"
	touch $(STAMP)

setup: $(STAMP)

# As root (network namespaces): DDP vs autotune.session on an emulated 4+4-host cluster at
# 300mbit, one table at the end (~3 min). Otherwise it says why and trains a small GPT on
# loopback under `autotune launch`. See autotune/demo.py.
demo: $(STAMP)
	$(BIN)/python -m autotune.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
