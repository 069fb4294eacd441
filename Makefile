# Developer entry points. `make test` is what CI runs (.ci/run) and what the README promises.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# e.g. make fixtures SCENARIOS="false-full kv-full"; empty = all scenarios
SCENARIOS ?=

.PHONY: test test-fast golden vllm-venv fixtures demo-data e2e generate docs

# Everything: installs what is missing (scripts/bootstrap), then ruff, mypy --strict, unit and e2e tests.
test:
	scripts/test

# Everyday work: lint, types, unit and monitoring tests (promtool at 60 s only), one worker per core; no real vLLM.
test-fast:
	scripts/test --fast

# Rewrite the golden copies of our own /metrics per recorded scenario (review the diff before committing).
golden:
	$(PYTHON) -m tests.golden

# Every generated file of the monitoring bundle: dashboards, rules, promtool tests, PrometheusRule, Alertmanager
# inhibit rules, and their kustomize and Helm copies (tests/monitoring and tests/deploy fail when one is stale).
generate: docs
	$(PYTHON) -m grafana.generate

# The reference pages docs/reference/*.md (CLI flags, /metrics families, verdicts), generated from the argument parser,
# the collector and the verdict catalogue (tests/unit/test_docs_reference.py fails when one is stale).
docs:
	$(PYTHON) -m exporter.cli.docs

# Verdicts against the engine's own truth on every recorded timeline: tests/fixtures/SCORE.md (issues 11, 22).
# First the randomized sweep (issue 22): SWEEP_SEEDS drawn workloads on a production-shaped vLLM 0.32.0 with the
# engine-truth recorder (~1 min each after a ~1 min start, under the shared lock) into build/sweep/; SWEEP=0 skips it.
SWEEP ?= 1
SWEEP_SEEDS ?= 101 102 103 104
DEV_PYTHON = $$(scripts/bootstrap)/bin/python
.PHONY: score
score:
	if [ "$(SWEEP)" != 0 ]; then rm -rf build/sweep && flock /tmp/vllm-heavy.lock $(DEV_PYTHON) -m tests.e2e.production \
		--sweep $(SWEEP_SEEDS) --out build/sweep/vllm-0.32.0 || true; fi
	$(DEV_PYTHON) -m tests.truth --sweep build/sweep

# Production-shaped recordings with the engine's own truth (issue 22): tests/fixtures/vllm-X/prod-*/, one server per
# shape (~10 min for 0.32.0), under the shared lock. `make prod-fixtures VERSION=0.10.2 SCENARIOS="prod-kv"`.
VERSION ?= 0.32.0
.PHONY: prod-fixtures
prod-fixtures:
	flock /tmp/vllm-heavy.lock $(DEV_PYTHON) -m tests.e2e.production --version $(VERSION) $(SCENARIOS)

# Build (first time, ~3 min) or reuse the cached venv holding vLLM 0.32.0 CPU; prints its python.
vllm-venv:
	scripts/vllm-venv

# Re-record tests/fixtures/vllm-0.32.0/<scenario>/ from a real vLLM (~3 min for all), then the demo's copy.
fixtures: vllm-venv
	$(PYTHON) -m tests.e2e.record $(SCENARIOS)
	$(PYTHON) scripts/make-demo-data

# The embedded demo incident, cut from the recorded false-full scenario.
demo-data:
	$(PYTHON) scripts/make-demo-data

# Only the end-to-end tests against a real vLLM (two server start-ups, ~3 min).
e2e: vllm-venv
	$(PYTHON) -m pytest -m e2e tests/e2e

# Benchmarks of issue #7, not part of CI (~30 min; `make bench BENCH_QUICK=1` ~12 min): bench/RESULTS.md.
.PHONY: bench
bench:
	bench/install
	BENCH_QUICK=$(BENCH_QUICK) PYTHON=$(PYTHON) bench/run

# The vLLM version matrix (issue 13): record every scenario from older vLLM CPU releases into
# tests/fixtures/vllm-X/ and write tests/fixtures/SUPPORT.md; resumes where it stopped (~5 min and one
# venv install per release). `make matrix VERSIONS="0.10.2"` for one; KEEP=1 keeps the venvs.
VERSIONS ?=
.PHONY: matrix
matrix:
	scripts/matrix $(VERSIONS)
