# Two entry points (see README): `make demo` runs the main job, `make test` the tests.
# Both create .venv from pyproject.toml first; nothing is installed by hand.
# pip installs torch (constrained: the CPU build that lies on this disk; uv does not look
# there) and uv; uv installs the project and the rest, in parallel (16 s against pip's 30 s
# from a cold cache), pip where uv fails. Nothing is compiled at install (pip would compile
# all 16,000 files of the venv, one at a time): the check that the packages import writes
# the bytecode of what the project's processes import (about 4,400 files), and the first
# process that imports any other module writes its. make demo/test/check run with
# PYTHONDONTWRITEBYTECODE unset: where it is set, a module without bytecode is compiled
# again by every process that imports it.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS := dev,plot,optuna,postgresql,lightning,transformers,accelerate
# what the project's processes import, in two processes at once (the frameworks apart)
IMPORTS := import autotune, torch._dynamo, optuna, skopt, sklearn.gaussian_process, networkx, \
	sqlite_utils, sqlalchemy, psycopg, matplotlib.pyplot, click, rich, pytest, xdist
FRAMEWORKS := import lightning, transformers, accelerate

.PHONY: setup demo test check bench clean postgres chromium

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile -c constraints.txt torch uv 2>&1 | grep -v "is ignored: it is neither" || true
	$(BIN)/uv pip install -q --python $(BIN)/python -c constraints.txt -e '.[$(EXTRAS)]' || \
	  $(BIN)/pip install -q --no-compile -c constraints.txt -e '.[$(EXTRAS)]' 2>&1 | grep -v "is ignored: it is neither" || true
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "$(FRAMEWORKS)" & frameworks=$$!; \
	  env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -c "$(IMPORTS)" && wait $$frameworks
	touch $(STAMP)

setup: $(STAMP)

# As root (network namespaces): DDP vs autotune.session on an emulated 4+4-host cluster at
# 300mbit, one table at the end (~3 min). Otherwise it says why and trains a small GPT on
# loopback under `autotune launch`. See autotune/demo.py.
demo: $(STAMP)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m autotune.demo

# $(call apt_install,CHECK,PACKAGE,WHAT SKIPS WITHOUT IT): Debian's PACKAGE, installed
# unless the shell CHECK finds it, where we may (root with apt-get); otherwise it says so.
define apt_install
	@$(1) || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(2) >/dev/null || \
	      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $(2) >/dev/null; }; } || \
	  echo "no $(2) installed: $(3) will skip"; }
endef

# The store's tests run on a throwaway PostgreSQL server too (tests/postgres_server.py):
# Debian's package (apt_install above).
postgres:
	$(call apt_install,ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null,postgresql,the store's PostgreSQL tests)

# Headless Chromium for the HTML report's browser test.
chromium:
	$(call apt_install,command -v chromium >/dev/null || command -v chromium-browser >/dev/null,chromium,the HTML report's browser test)

# The whole suite (docs/testing.md), in two parts: everything that may share the machine,
# three test processes at once on two cores (pytest-xdist, a file's tests together so its
# shared world starts once; tests/conftest.py groups them: many tests wait on timeouts,
# links and other processes, and a third test process fills those waits: 429 s against
# 505 s at two); then what must run alone (timing).
# Bytecode is compiled once first: hundreds of rank processes import autotune and the
# tests' helpers, and where PYTHONDONTWRITEBYTECODE is set each would compile them anew
# (about a second a process); cached .pyc files are read whatever it says. pytest itself
# runs with it unset: it caches the test modules it rewrites (for its assertions) only
# where bytecode may be written, and without that cache every test process rewrites all
# of them at collection (about 4 CPU-s a process).
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q
COMPILE := $(BIN)/python -m compileall -q autotune tests examples >/dev/null
# the files that mark tests serial: the serial part collects only these (4 s less)
SERIAL_FILES = $(shell grep -rl --include='test_*.py' 'mark\.serial' tests)
test: $(STAMP) postgres chromium
	$(COMPILE)
	$(PYTEST) -n 3 --dist loadgroup --no-loadscope-reorder -m "not serial" --durations=20
	$(PYTEST) -m serial --durations=10 $(SERIAL_FILES)

# The quick tier, while working: unit tests and one real-process smoke per package,
# in parallel (under 3 minutes). Not a replacement for `make test` before a commit.
check: $(STAMP)
	$(COMPILE)
	$(PYTEST) -n 2 --dist loadgroup --no-loadscope-reorder -m "not slow and not serial"

clean:
	rm -rf $(VENV) build *.egg-info
