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
# chromium, and tests/test_hw_project.py compiles and links the generated XRT hosts against Debian's
# libxrt-dev: both installed here when missing and make runs as root; otherwise those tests skip,
# naming the package.
sysdeps:
	@if [ ! -f /usr/include/xrt/xrt/xrt_device.h ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y libxrt-dev || (apt-get update && apt-get install -y libxrt-dev) \
	      || echo "note: could not install libxrt-dev; the XRT host compile tests will skip"; \
	  else \
	    echo "note: libxrt-dev is not installed (apt-get install libxrt-dev, as root); the XRT host compile tests will skip"; \
	  fi; \
	fi
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
	$(PY) -m pytest -n auto --dist loadscope --no-loadscope-reorder

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
