# The two commands of the README: `make run` starts the server, `make test` runs every test.
# Both install what they need first (Debian packages via apt-get, Python tools via pip).
SWIFT ?= swift
ARGS ?=
PREFIX ?= /usr/local

.PHONY: run test deps build release install bench clean

deps:
	@bash scripts/install-deps.sh

build: deps
	$(SWIFT) build

release: deps
	$(SWIFT) build -c release --product taskserver

run: release
	$$($(SWIFT) build -c release --show-bin-path)/taskserver serve $(ARGS)

# The release binary, its manual page and its shell completions (bash, zsh, fish) under PREFIX.
install: release
	install -D -m 755 "$$($(SWIFT) build -c release --show-bin-path)/taskserver" "$(DESTDIR)$(PREFIX)/bin/taskserver"
	install -D -m 644 docs/man/taskserver.1 "$(DESTDIR)$(PREFIX)/share/man/man1/taskserver.1"
	mkdir -p "$(DESTDIR)$(PREFIX)/share/bash-completion/completions" "$(DESTDIR)$(PREFIX)/share/zsh/site-functions" \
		"$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d"
	"$(DESTDIR)$(PREFIX)/bin/taskserver" --generate-completion-script bash >"$(DESTDIR)$(PREFIX)/share/bash-completion/completions/taskserver"
	"$(DESTDIR)$(PREFIX)/bin/taskserver" --generate-completion-script zsh >"$(DESTDIR)$(PREFIX)/share/zsh/site-functions/_taskserver"
	"$(DESTDIR)$(PREFIX)/bin/taskserver" --generate-completion-script fish >"$(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/taskserver.fish"

test: deps
	bash scripts/test.sh

bench: deps
	$(SWIFT) run -c release taskcore-bench
	$(SWIFT) run -c release taskgraph-bench

clean:
	rm -rf .build .build-*
