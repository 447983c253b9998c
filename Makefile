# The two commands a new user runs (see README.md):
#   make demo   runs the demo: an MCP server under retries from all four layers,
#               the Collector naming the layer behind each duplicate; it ends
#               with the path of an HTML report
#   make demo-up  the same, then keeps the pipeline running with a Prometheus
#               scraping it (prints its URL and how to import the dashboards
#               into your Grafana) until Ctrl-C
#   make test   runs every test (installs PostgreSQL and the Collector builder
#               when missing)
#   make lint   gofmt, go vet and staticcheck over every module (installs
#               staticcheck when missing)
.PHONY: test lint demo demo-up dashboards-test bench collector

test:
	scripts/test.sh

lint:
	scripts/lint.sh

demo:
	scripts/demo.sh

demo-up:
	scripts/demo.sh -keep

dashboards-test:
	scripts/dashboards-test.sh

bench:
	scripts/bench.sh

collector:
	scripts/collector-build.sh
