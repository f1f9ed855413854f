# bpfwall: build, test, lint, fuzz.
GO ?= go
FUZZTIME ?= 10s

.PHONY: build test test-short lint fuzz bench difftest install uninstall

build:
	$(GO) build -o bpfwall ./cmd/bpfwall

# The binary, its man pages and bash completion (which it writes) and the
# systemd units, whose /usr/local/bin becomes $(PREFIX)/bin. DESTDIR
# stages the tree for a package.
PREFIX ?= /usr/local
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
MAN8DIR = $(PREFIX)/share/man/man8
BASHCOMPDIR = $(PREFIX)/share/bash-completion/completions
UNITS = bpfwall.service bpfwall6.service
install: build
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MAN8DIR) $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(SYSTEMDUNITDIR)
	install -m 0755 bpfwall $(DESTDIR)$(PREFIX)/bin/bpfwall
	./bpfwall man --dir $(DESTDIR)$(MAN8DIR)
	chmod 0644 $(DESTDIR)$(MAN8DIR)/bpfwall.8 $(DESTDIR)$(MAN8DIR)/bpfwall-*.8
	./bpfwall completion bash >$(DESTDIR)$(BASHCOMPDIR)/bpfwall
	chmod 0644 $(DESTDIR)$(BASHCOMPDIR)/bpfwall
	for u in $(UNITS); do \
		sed 's|/usr/local/bin/|$(PREFIX)/bin/|g' dist/systemd/$$u >$(DESTDIR)$(SYSTEMDUNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$u || exit 1; \
	done

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/bpfwall $(DESTDIR)$(MAN8DIR)/bpfwall.8 $(DESTDIR)$(MAN8DIR)/bpfwall-*.8 \
		$(DESTDIR)$(BASHCOMPDIR)/bpfwall $(addprefix $(DESTDIR)$(SYSTEMDUNITDIR)/,$(UNITS))

# Kernel tests need root; under CI=true they run and never skip. Each
# package gets an explicit budget: the slowest (codegen) takes about six
# minutes on two cores.
TESTTIMEOUT ?= 20m
test:
	$(GO) vet ./...
	$(GO) test -count=1 -timeout $(TESTTIMEOUT) ./...

# The pure tests only, as any user, in well under a minute: kernel tests
# skip without root (outside CI).
test-short:
	$(GO) test -count=1 -short ./...

# go-check-sumtype: every type switch on a //sumtype:decl interface
# (ir.Match, ir.Action) names every kind, default or not, so that a new
# kind fails here and not at run time.
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	$(GO) run github.com/alecthomas/go-check-sumtype/cmd/go-check-sumtype@v0.4.0 -default-signifies-exhaustive=false ./...

# Each fuzz target runs for FUZZTIME.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./parser/iptables
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./parser/nft
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEval$$' -fuzztime $(FUZZTIME) ./ir
	$(GO) test -run '^$$' -fuzz '^FuzzKernelMatchesEval$$' -fuzztime $(FUZZTIME) ./codegen
	$(GO) test -run '^$$' -fuzz '^FuzzLine$$' -fuzztime $(FUZZTIME) ./nflog

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./parser/iptables ./ir

# Differential tests against the kernel's netfilter (root): SEEDS random
# rule sets per family and PROBES probes per rule set, and the real dumps;
# then SEEDS random rule sets over every chain, restored without -i into a
# router, both families, against iptables-legacy: TCP connections (19
# each), and PROBES raw segments per family, to, through and from the
# router. make test runs a bounded version of the same tests.
SEEDS ?= 200
PROBES ?= 500
difftest:
	DIFFTEST_SEEDS=$(SEEDS) DIFFTEST_PROBES=$(PROBES) $(GO) test -count=1 -timeout 60m -v \
		-run '^(TestRandom|TestRealDumps|TestHandWritten|TestRandomNFT|TestRealNFT|TestFragmentsNFT|TestReadKernelNFT)$$' ./internal/difftest
	BPFWALL_ROUTED_SEEDS=$(SEEDS) BPFWALL_ROUTED_PROBES=$(PROBES) $(GO) test -count=1 -timeout 60m -v -run '^(TestRoutedRandom|TestRoutedFrames|TestRoutedFramesAccelerated)$$' ./cmd/bpfwall
