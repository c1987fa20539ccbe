# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PY := .venv/bin/python
PIP := .venv/bin/pip
VENV_STAMP := .venv/.installed

.PHONY: setup demo test lint results prompts clean-venv browser-deps screenshots bench-peers bench-peers-wall bench-speed lab

setup: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	@# CPU wheel of torch where none is installed (a plain `torch` pulls a multi-GB CUDA build).
	@$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "torch==2.13.0"
	$(PIP) install -q -e ".[dev]"
	@touch $(VENV_STAMP)

demo: setup
	.venv/bin/treegraft-lab demo

# The workbench: JupyterLab on notebooks/ with this environment's kernel, on 127.0.0.1 only, with a token (it prints
# the address). PORT=9000 for another port; Ctrl+C stops it.
lab: setup
	.venv/bin/treegraft-lab lab --port $(or $(PORT),8888)

# Debian's chromium for tests/test_browser.py (Playwright drives it; no browser download).
browser-deps:
	@test -x /usr/bin/chromium || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium)

# The tests, notebook kernels included, start from an empty cache (a fresh TREEGRAFT_LAB_CACHE, removed after):
# the target is converted and every profile measured as on a machine that never ran the project. Only the
# target's PyPI wheel is kept between runs (in WHEELS), and used only if its sha256 matches. The device check's steps
# run inside pytest, in one process (tests/test_device_check.py; results in test-artifacts/device-check).
WHEELS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/treegraft_lab/wheels
test: setup browser-deps
	.venv/bin/ruff check treegraft_lab tests scripts notebooks
	.venv/bin/lint-imports
	@cache=$$(mktemp -d "$${TMPDIR:-/tmp}/treegraft-test-cache.XXXXXX"); trap 'rm -rf "$$cache"' EXIT; \
	echo "make test: empty cache $$cache; target wheel kept in $(WHEELS)"; \
	export TREEGRAFT_LAB_CACHE="$$cache" TREEGRAFT_LAB_WHEELS="$(WHEELS)"; unset TREEGRAFT_PROFILE_CACHE; \
	$(PY) -m pytest -q -x --durations=15

# The README's workbench screenshots and the gallery's (docs/gallery.md, one per notebook), taken by the browser test
# from the real notebooks (SMOKE=1).
screenshots: setup browser-deps
	rm -rf test-artifacts/browser/readme test-artifacts/browser/gallery
	$(PY) -m pytest -q tests/test_browser.py -k "twin or notebook_shows"
	@mkdir -p docs/img/gallery
	cp test-artifacts/browser/readme/*.png docs/img/
	cp test-artifacts/browser/gallery/*.png docs/img/gallery/

# The peer tables (Token Recycling, suffix decoding, the switching rules, each small
# drafter): modelled on a100-paper (any machine, about an hour on 2 cores), and this machine's wall
# clock (run it on an otherwise idle machine).
bench-peers: setup
	CLOCK=a100-paper scripts/bench_peers.sh
	.venv/bin/treegraft-lab report --peers a100-paper

# The README's results table: the speed default beside the peers on this machine's wall clock, on the
# validation and the eval prompts (about 35 min on 2 cores; run it on an otherwise idle machine), then the pages.
bench-speed: setup
	for split in validation eval; do \
	  .venv/bin/treegraft-lab bench --pair smollm2-pocket --dtype float32 --prompts treegraft-suite --split $$split \
	    --limit-per-category 2 --max-new-tokens 64 --budget 63 --growth lookup --prune value --repeats 3 \
	    --methods ar,hf-pld,recycling,suffix,small,adaptive --out data/bench/smollm2-pocket-wall-$$split || exit 1; \
	done
	.venv/bin/treegraft-lab report

bench-peers-wall: setup
	CLOCK=wall scripts/bench_peers.sh
	.venv/bin/treegraft-lab report --peers wall

# docs/results.md and the README's results table, written from the committed data (tests/test_results_page.py checks both).
results: setup
	.venv/bin/treegraft-lab report

lint: setup
	.venv/bin/ruff check treegraft_lab tests scripts notebooks

prompts: setup
	$(PY) scripts/build_prompts.py
	$(PY) scripts/build_validation.py
