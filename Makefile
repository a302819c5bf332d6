# Two commands on a fresh machine:
#   make run   set up .venv and run the main job on its embedded default
#   make test  set up .venv and run the whole test suite
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.reshuffle-installed

.PHONY: setup run test bench games flower clean

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/reshuffle simulate --attack sign-flip --malicious 0.2 --rule multi-krum --out outputs/simulate/main

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/reshuffle bench crypto

flower: $(STAMP)
	FLWR_HOME=$(CURDIR)/flower PATH=$(CURDIR)/$(BIN):$$PATH FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
		$(BIN)/flwr run . --stream

games: $(STAMP)
	$(BIN)/reshuffle games

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
