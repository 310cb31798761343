# The two commands of the README. Both set up what is missing first (idempotent).
.PHONY: setup test demo seeds lint typecheck bench clean-demo clean-seeds cluster cluster-stop

NOX := .venv/bin/nox
export PATH := $(CURDIR)/.venv/bin:$(CURDIR)/.tools/bin:$(PATH)

setup:
	@scripts/setup-host.sh

test: setup
	$(NOX) -s lint typecheck tests

demo: setup
	@scripts/demo.sh

# The field reports' plans on replica bases (m3-cu13's carries the real CUDA torch, 5.5 GB).
seeds: setup
	@scripts/seeds.sh

lint: setup
	$(NOX) -s lint

typecheck: setup
	$(NOX) -s typecheck

bench: setup
	$(NOX) -s bench

clean-demo:
	@scripts/demo.sh --stop

clean-seeds:
	@scripts/seeds.sh --stop

# A single-node Kubernetes on loopback (tests/support/cluster.py), kept until Ctrl-C or
# `make cluster-stop`; it prints the KUBECONFIG to use. docs/development.md says more.
cluster: setup
	.venv/bin/python -m tests.support.cluster --dir .cluster

cluster-stop:
	@if [ -f .cluster/pid ]; then kill "$$(cat .cluster/pid)"; else echo "no cluster runs from .cluster"; fi

