# Two entry points a newcomer needs (see README): `make demo` and `make test`.
# Everything else here is what those two stand on.
PY      := .venv/bin/python
TORCH   := torch==2.13.0
DEMO    := demo
STAMP   := .venv/.installed

.PHONY: demo test test-fast lint docs format system-deps venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q --no-compile -e '.[ops,cloud,dev]'
	touch $(STAMP)

## The main job on the local target: synthetic data -> train -> evaluate -> report + cost plan.
demo: $(STAMP)
	$(PY) -m trainer synth --out $(DEMO)/data --cases 24 --windows-per-case 400 --seed 0 --force
	$(PY) -m trainer train --data $(DEMO)/data --run-dir $(DEMO)/run --epochs 4 --batch-size 256 --seed 0
	$(PY) -m trainer evaluate --data $(DEMO)/data --checkpoint $(DEMO)/run/checkpoints/best.pt --split test > $(DEMO)/run/test_metrics.json
	.venv/bin/fab plan --milestone M1 --epochs 100 > $(DEMO)/cost_plan.txt
	.venv/bin/fab plan --milestone M1 --epochs 100 --json > $(DEMO)/cost_plan.json
	@echo; cat $(DEMO)/run/report.md; echo; cat $(DEMO)/cost_plan.txt

## The whole test suite, integration tests against real servers included.
test: $(STAMP) system-deps lint docs
	$(PY) -m pytest -m 'e2e or not e2e'

test-fast: $(STAMP) lint docs
	$(PY) -m pytest

lint: $(STAMP)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

## The docs site (docs/, mkdocs.yml) into build/site; --strict: a broken link or
## anchor, or a page missing from the nav, fails. MkDocs' banner about its 2.0 is noise.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict

format: $(STAMP)
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

system-deps:
	bash tests/system-deps.sh
