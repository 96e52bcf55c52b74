# `make run`: set up everything, then serve rlide on embedded defaults (HTTP on loopback).
# `make test`: set up everything, then run the whole test suite.
.PHONY: setup run serve-stdio test lint bench
PORT ?= 8765

setup:
	@bash scripts/setup.sh

run: setup
	@.venv/bin/rlide serve --http --port $(PORT) --banner

serve-stdio: setup
	@.venv/bin/rlide serve

test: setup
	@bash scripts/test.sh

lint: setup
	.venv/bin/ruff check mcp_server training episodes envpool memory common tests benchmarks scripts examples
	.venv/bin/mypy

bench: setup
	.venv/bin/python benchmarks/mcp_overhead.py
