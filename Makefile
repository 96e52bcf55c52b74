# `make run`: set up everything, then serve rlide on embedded defaults (HTTP on loopback).
# `make test`: set up everything, then run the whole test suite.
.PHONY: setup run serve-stdio test lint bench seccomp-kernels
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
	.venv/bin/ruff check mcp_server envpool memory training tests benchmarks
	.venv/bin/mypy

bench: setup
	.venv/bin/python benchmarks/mcp_overhead.py

# Optional, root: qemu, cross compilers and two pinned kernels, then the seccomp filters of
# aarch64 and riscv64 run in those kernels (docs/sandbox.md, "The seccomp filters in real kernels").
seccomp-kernels: setup
	@bash scripts/setup_seccomp_kernels.sh
	.venv/bin/pytest -q tests/envpool/test_seccomp_kernels.py
