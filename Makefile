# Two entry points (see README): `make demo` runs the main job, `make test` the tests.
# Both create .venv from pyproject.toml first; nothing is installed by hand.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench clean postgres

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c constraints.txt torch 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,plot,optuna,postgresql,lightning,transformers,accelerate]' 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/python -c "import autotune, torch, optuna, skopt, networkx, sqlite_utils, sqlalchemy, psycopg"
	touch $(STAMP)

setup: $(STAMP)

# As root (network namespaces): DDP vs autotune.session on an emulated 4+4-host cluster at
# 300mbit, one table at the end (~3 min). Otherwise it says why and trains a small GPT on
# loopback under `autotune launch`. See autotune/demo.py.
demo: $(STAMP)
	$(BIN)/python -m autotune.demo

# The store's tests run on a throwaway PostgreSQL server too (tests/postgres_server.py):
# Debian's package, installed here when missing and we may (root with apt-get); otherwise
# those tests skip and say why.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null || \
	      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends postgresql >/dev/null; }; } || \
	  echo "no PostgreSQL server installed: the store's PostgreSQL tests will skip"; }

test: $(STAMP) postgres
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
