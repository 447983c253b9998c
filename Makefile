# The two commands a new user runs (see README.md):
#   make demo   runs the demo: an MCP server under retries from all four layers,
#               the Collector naming the layer behind each duplicate
#   make test   runs every test (installs PostgreSQL and the Collector builder
#               when missing)
.PHONY: test demo bench collector

test:
	scripts/test.sh

demo:
	scripts/demo.sh

bench:
	scripts/bench.sh

collector:
	scripts/collector-build.sh
