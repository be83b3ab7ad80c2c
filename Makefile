# Two commands do all the set-up on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: chromium demo test test-all test-schema test-reliability lint bench bench-locomo bench-locomo-ablations bench-latency bench-ingest bench-concurrency bench-gating bench-load bench-proxy bench-ui screenshots clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The browser for the web inspector's end-to-end tests (Playwright drives Debian's Chromium;
# `playwright install` cannot download its own here). Installed once, as root or with sudo.
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	elif sudo -n true 2>/dev/null; then sudo apt-get update -q && sudo apt-get install -y -q chromium; \
	else echo "engrain: Chromium is missing and this user cannot install it (run as root: apt-get install -y chromium); the browser tests will be skipped"; fi

chromium: $(CHROMIUM)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# TEST_WORKERS=2 runs the suite on two pytest-xdist processes, each test file whole on one
# of them so its module fixtures start once. Off by default: in another order than the
# alphabetical one, test_aio.py and reliability/test_shared_engine.py find an event loop a
# module before them left running (docs/testing.md). What the default run covers and
# leaves to test-all: docs/testing.md.
TEST_WORKERS ?= 0
PYTEST_WORKERS := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: $(STAMP) $(CHROMIUM) lint
	$(BIN)/python -m pytest -m "not slow and not reliability" -q $(PYTEST_WORKERS)

test-all: $(STAMP) $(CHROMIUM)
	$(BIN)/python -m pytest -m "not reliability" -q $(PYTEST_WORKERS)

# A long schemathesis run against a live server (every check and phase, 200 examples per
# operation, a new seed each run; a few minutes on 2 cores): tests/test_server_schema.py.
test-schema: $(STAMP)
	ENGRAIN_SCHEMA_EXAMPLES=$${ENGRAIN_SCHEMA_EXAMPLES:-200} $(BIN)/python -m pytest tests/test_server_schema.py -q --timeout 3600

# Long reliability runs (tests/reliability, ~20 min on 2 cores): kill -9 loops, 8 writer +
# 4 reader processes, threads and AsyncEngine tasks sharing an engine, lost-update races and
# look-alike users, on SQLite and PostgreSQL; each prints its counts.
test-reliability: $(STAMP)
	$(BIN)/python -m pytest tests/reliability -m reliability -s -q

# mypy's cache outside the clone, so a fresh clone on the same machine (CI's) checks only
# what changed: strict from cold is ~45 s of CPU, warm ~1 s. mypy rechecks any module whose
# source hash, dependencies or options differ, so an old cache cannot hide an error.
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/engrain-mypy

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

bench: bench-ingest bench-latency bench-locomo

bench-ingest: $(STAMP)
	$(BIN)/python bench/ingest_throughput.py --out bench/results/ingest.json

bench-latency: $(STAMP)
	$(BIN)/python bench/latency.py --out bench/results/latency.json

bench-concurrency: $(STAMP)
	$(BIN)/python bench/concurrency.py --out bench/results/concurrency.json

# engrain serve as a subprocess on loopback: 4 users x 10,000 memories, one client on
# POST /v1/context, then 16 concurrent clients (mixed context/recall/remember), 60 s each,
# on SQLite and on a private PostgreSQL (~6 min in all).
bench-load: $(STAMP)
	$(BIN)/python bench/load.py --backends sqlite,postgres --out bench/results/load.json

# The OpenAI-compatible proxy's added latency: one user with 10,000 memories, a fake
# upstream in its own process, direct vs through engrain (~3 min).
bench-proxy: $(STAMP)
	$(BIN)/python bench/proxy.py --out bench/results/proxy.json

bench-locomo: $(STAMP)
	$(BIN)/python bench/locomo.py --data ../shared/data/locomo/locomo_dev.json --out bench/results/locomo.json

# The project's own labelled gating evaluation (bench/gating/: eleven sets over twelve projects,
# labelled and trivial messages, a tune and a held split each), every scoring profile, real MiniLM.
bench-gating: $(STAMP)
	$(BIN)/python bench/gating.py --sets main,pulse,sensor,quill,strata,harbor,brightfall,meridian,kestrel,anvil,wrench --out bench/results/gating.json

# The web inspector's page timings at 100,000 memories (engrain serve on loopback, ~5 min).
bench-ui: $(STAMP)
	$(BIN)/python bench/ui.py --out bench/results/ui.json

# The inspector's screenshots in docs/img/ (a demo store, Playwright with Debian's Chromium).
screenshots: $(STAMP) $(CHROMIUM)
	$(BIN)/python bench/screenshots.py

bench-locomo-ablations: $(STAMP)
	$(BIN)/python bench/locomo.py --data ../shared/data/locomo/locomo_dev.json --ablations --out bench/results/locomo-ablations.json

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
