# Two commands for a fresh machine: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# The CPU build of torch is installed pinned *first*; otherwise pip resolves the newest
# torch (with several GB of CUDA packages) for torch-geometric and opacus.
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.pyg-private-installed

.PHONY: install demo test sparse benchmarks clean

$(STAMP): setup.cfg setup.py pyproject.toml pyg_private/mechanisms/_first_pass_native.c pyg_private/mechanisms/_grid_step_native.c \
		pyg_private/utils/_csr_product_native.c pyg_private/utils/_graph_check_native.c
	$(PYTHON) -m venv $(VENV)
	$(PIP) install "torch==$(TORCH_VERSION)"
	$(PIP) install -e ".[test,plots]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest

# Optional: torch-scatter / torch-sparse compile from source (5-20 minutes).
sparse: $(STAMP)
	$(PIP) install --no-build-isolation -e ".[sparse]"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis pyg_private/mechanisms/*.so pyg_private/utils/*.so
