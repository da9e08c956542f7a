# Two entry points a newcomer needs (see README): `make demo` and `make test`.
# Everything else here is what those two stand on. The demo gets only what it runs (the
# trainer, torch for the CPU, `fab plan`); `make test` adds the Pulumi SDKs, the test
# tools and the docs toolchain (together ~1.9 GB).
PY         := .venv/bin/python
TORCH      := torch==2.13.0
DEMO       := demo
DEMO_RUN   := $(DEMO)/runs/cpu-demo
DEMO_STAMP := .venv/.demo-installed
STAMP      := .venv/.installed

.PHONY: demo test test-fast lint docs docs-serve format system-deps venv offerings prices

venv: $(STAMP)

# Debian and Ubuntu ship Python's venv module (ensurepip) as a package of its own.
$(DEMO_STAMP): pyproject.toml
	@python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "make: python3 is $$(python3 --version 2>&1); this project needs 3.10 or newer" >&2; exit 1; }
	@python3 -c 'import ensurepip, venv' 2>/dev/null || { echo "make: python3 cannot make a venv (no ensurepip); on Debian/Ubuntu: sudo apt-get install python3-venv" >&2; exit 1; }
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q --no-compile -e '.[ops]'
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(PY) -m pip install -q --no-compile -e '.[ops,cloud,dev]'
	touch $(STAMP)

## The main job on the local target: synthetic data -> train -> evaluate -> report + cost plan.
## The cost plan: cost_plan.txt the 100-column table (`fab plan --wide`: every column, `--explain`: the notes),
## cost_plan.json every field.
demo: $(DEMO_STAMP)
	$(PY) -m trainer synth --out $(DEMO)/data --cases 24 --windows-per-case 400 --seed 0 --force
	$(PY) -m trainer train --data $(DEMO)/data --run-dir $(DEMO_RUN) --epochs 4 --batch-size 256 --seed 0
	$(PY) -m trainer evaluate --data $(DEMO)/data --checkpoint $(DEMO_RUN)/checkpoints/best.pt --split test > $(DEMO_RUN)/test_metrics.json
	.venv/bin/fab plan --milestone M1 --epochs 100 > $(DEMO)/cost_plan.txt
	.venv/bin/fab plan --milestone M1 --epochs 100 --json > $(DEMO)/cost_plan.json
	@echo; cat $(DEMO_RUN)/report.md; echo
	@.venv/bin/fab plan --milestone M1 --epochs 100

## The whole test suite, integration tests against real servers included. The venv and
## the servers install side by side: both wait on downloads more than on the CPU. The
## tests run in one process a core (at most 4): one process alone kept one core of two
## busy, the rest of its time spent waiting on servers and subprocesses.
test:
	$(MAKE) --jobs=2 --output-sync=target $(STAMP) system-deps
	$(MAKE) lint docs
	$(PY) -m pytest -m 'e2e or not e2e' --durations=30 --numprocesses=auto --maxprocesses=4 --dist=loadgroup

test-fast: $(STAMP) lint docs
	$(PY) -m pytest

lint: $(STAMP)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

## The docs site (docs/, mkdocs.yml) into build/site; --strict: a broken link or
## anchor, or a page missing from the nav, fails. MkDocs' banner about its 2.0 is noise.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

## The same site at http://127.0.0.1:8000, rebuilt as you edit (MkDocs comes with `make venv`).
docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs serve

format: $(STAMP)
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

## Which regions sell which size (stack/offerings.json), from the clouds' references:
## AWS from the installed cfn-lint, Azure from the Retail Prices API (needs the internet).
offerings: $(STAMP)
	$(PY) -m stack.refresh_offerings

## The price snapshot `fab plan` and `hourlyPriceUsd` read (stack/prices.json), from the
## clouds' price APIs and dated today: Azure's Retail Prices API (public) and AWS's Price
## List API plus EC2 spot price history (your AWS credentials). Offline it fails in one
## line and leaves the snapshot as it was; CLOUD=azure (or aws) refreshes one cloud.
## What `make demo` installs is enough (boto3 comes with the trainer): not the ~1.9 GB
## of Pulumi SDKs and test tools.
prices: $(DEMO_STAMP)
	@$(PY) -m ops.plan.refresh_prices --cloud $(or $(CLOUD),all)

system-deps:
	bash tests/system-deps.sh
