# aieflow: the two set-up commands on a fresh machine are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test sysdeps lint bench fuzz clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is the CPU build these machines install; the 'torch' extra accepts it.
	$(PY) -m pip install -q -e ".[test,torch]" torch==2.13.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/run_examples.py --out out/examples

# The headless-browser tests (tests/test_html_report.py) open the HTML reports in Debian's
# chromium: installed here when it is missing and make runs as root; otherwise they skip, naming it.
sysdeps:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y chromium || (apt-get update && apt-get install -y chromium) \
	      || echo "note: could not install chromium; the browser tests will skip"; \
	  else \
	    echo "note: chromium is not installed (apt-get install chromium, as root); the browser tests will skip"; \
	  fi; \
	fi

test: $(STAMP) sysdeps
	$(PY) -m ruff check src tests benchmarks examples
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/compile_and_emulate.py
	$(PY) benchmarks/verify_time.py --markdown
	$(PY) benchmarks/validate.py
	$(PY) benchmarks/perf_speed.py
	$(PY) benchmarks/scaling.py --plot docs/img/scaling.svg
	$(PY) benchmarks/mixer.py
	$(PY) benchmarks/placement.py
	$(PY) benchmarks/gru_latency.py

# the fuzzing suite's long profile (tests/fuzz_models.py; results in docs/security.md)
fuzz: $(STAMP)
	$(PY) benchmarks/fuzz.py --cases 10000

clean:
	rm -rf out .pytest_cache .ruff_cache
