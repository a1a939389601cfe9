# Fuzzing with Go's native fuzzer (included from the Makefile: `include fuzz.mk`).
#
#   make fuzz                      every target for FUZZTIME each (default 20s)
#   make fuzz FUZZTIME=5m          longer runs
#   make fuzz FUZZFLAGS=-parallel=2
#   make fuzz-seeds                only the checked-in seed corpora, as plain tests
#
# A failure writes the crashing input to <pkg>/testdata/fuzz/<FuzzName>/;
# keep it: plain `go test` then runs it as a regression test.
GO ?= go
FUZZTIME ?= 20s
FUZZFLAGS ?=

.PHONY: fuzz fuzz-seeds

fuzz: ## run every fuzz target for FUZZTIME each
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=$(FUZZTIME) $(FUZZFLAGS) ./jsonrpc
	$(GO) test -run='^$$' -fuzz='^FuzzIsJSONObject$$' -fuzztime=$(FUZZTIME) $(FUZZFLAGS) ./jsonrpc
	$(GO) test -run='^$$' -fuzz='^FuzzCheck$$' -fuzztime=$(FUZZTIME) $(FUZZFLAGS) ./strictjson
	$(GO) test -run='^$$' -fuzz='^FuzzVerify$$' -fuzztime=$(FUZZTIME) $(FUZZFLAGS) ./grants
	$(GO) test -run='^$$' -fuzz='^FuzzVerifySigned$$' -fuzztime=$(FUZZTIME) $(FUZZFLAGS) ./grants
	$(GO) test -run='^$$' -fuzz='^FuzzClassifyRoute$$' -fuzztime=$(FUZZTIME) $(FUZZFLAGS) ./gate
	$(GO) test -run='^$$' -fuzz='^FuzzMissionMetadata$$' -fuzztime=$(FUZZTIME) $(FUZZFLAGS) ./gate

fuzz-seeds: ## run the fuzz seed corpora as regular tests
	$(GO) test -count=1 -run='^Fuzz' ./jsonrpc ./strictjson ./grants ./gate
