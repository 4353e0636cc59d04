# Two entry points, both from a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: setup demo test bench clean

$(BIN)/grader: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(BIN)/grader

setup: $(BIN)/grader
	@echo "grader is installed in $(VENV): run '. $(VENV)/bin/activate' once per shell, then 'grader --help' (or run $(BIN)/grader directly)"

demo: setup
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

test: setup
	$(BIN)/python -m pytest -q --durations=40

# ranx alone, not the whole bench extra: bench/metrics.py needs no torch.
bench: setup
	$(BIN)/python -m pip install --quiet 'ranx>=0.3.20'
	$(BIN)/python bench/metrics.py

clean:
	rm -rf $(VENV) out

# Docker images (as root; installs Docker and debootstrap when missing):
# grader-base, grader-runner, the BM25 example and the sandbox test images.
.PHONY: images wheelhouse
images: setup
	$(BIN)/grader images build

wheelhouse:
	bash images/wheelhouse.sh
