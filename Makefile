# Two commands: `make run` (the embedded single-machine service) and `make test`.
# Both install what they need, idempotently, starting from a bare Debian machine with python3.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install system-deps services docker docker-engine docker-base-images \
	docker-images lint format bench clean

run: install
	$(BIN)/python -m worker.standalone

test: install system-deps services docker
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/pytest

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first, pinned: on these machines torch==2.13.0 is a CPU build on local disk, while a bare
# `torch` requirement would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0 numpy
	$(BIN)/pip install -q -e '.[server,trainer,dev]'
	touch $@

install: $(STAMP)

system-deps:
	@bash scripts/system-deps.sh

services:
	@bash scripts/services.sh

# The compose deployment test (tests/deploy/test_compose_stack.py) needs a Docker engine and base
# images; no registry is assumed: the Debian base is bootstrapped from the apt mirror, once.
docker: docker-engine docker-base-images

docker-engine: system-deps
	@bash scripts/docker-engine.sh

docker-base-images: docker-engine
	@bash scripts/docker-base-images.sh

# api, worker and trainer images (+ benchmarks/results/images.json); the test builds them too.
docker-images: docker-base-images
	@bash scripts/docker-images.sh

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy

format:
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install services
	$(BIN)/python -m benchmarks.api_load

clean:
	rm -rf .gpujobs .pytest_cache .ruff_cache
