# The two commands of the README: `make run` starts the server, `make test` runs every test.
# Both install what they need first (Debian packages via apt-get, Python tools via pip).
SWIFT ?= swift
ARGS ?=

.PHONY: run test deps build release bench clean

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product taskserver

run: release
	$$($(SWIFT) build -c release --show-bin-path)/taskserver serve $(ARGS)

test: deps
	bash scripts/test.sh

bench: deps
	$(SWIFT) run -c release taskcore-bench
	$(SWIFT) run -c release taskgraph-bench

clean:
	rm -rf .build .build-*
