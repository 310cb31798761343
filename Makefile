# The two commands of the README. Both set up what is missing first (idempotent).
.PHONY: setup test demo lint typecheck bench clean-demo

NOX := .venv/bin/nox
export PATH := $(CURDIR)/.venv/bin:$(PATH)

setup:
	@scripts/setup-host.sh

test: setup
	$(NOX) -s lint typecheck tests

demo: setup
	@scripts/demo.sh

lint: setup
	$(NOX) -s lint

typecheck: setup
	$(NOX) -s typecheck

bench: setup
	$(NOX) -s bench

clean-demo:
	@scripts/demo.sh --stop
