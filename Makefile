# On a fresh machine:
#   make run   set up .venv and run the main job on its embedded default, into a new folder
#              outputs/simulate/<time> each time (OUT=DIR: into DIR; ARGS="...": more simulate options)
#   make test  set up .venv and run the test suite, the soak aside (a few minutes)
#   make soak  set up .venv and run the soak's tests on a real Flower deployment (4 to 8 minutes) and the
#              drop-in example's README commands in Flower's local simulation (4 to 7 minutes on a busy 2-core machine)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.reshuffle-installed

.PHONY: setup run test soak bench games flower clean

$(STAMP): pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	touch $(STAMP)

setup: $(STAMP)

OUT ?=
ARGS ?=
run: $(STAMP)
	$(BIN)/reshuffle simulate --attack sign-flip --malicious 0.2 --rule default $(if $(OUT),--out $(OUT)) $(ARGS)

# Two or more workers (pytest-xdist), each module in one worker so that module fixtures
# (the security games, for one) are computed once; the local simulations start in the
# background (tests/conftest.py). The tests marked `soak` are left to `make soak`.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadscope -m "not soak"

# The quick soak, the interrupted soaks and the drop-in README's commands (tests/test_flower_refusals.py),
# spread over two workers.
soak: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist load -m soak

bench: $(STAMP)
	$(BIN)/reshuffle bench crypto

# `flwr run` starts a local SuperLink (its own process group) and leaves it running;
# stop it afterwards unless it was already running before this target. The federation's
# size comes with the run (--federation-config); reshuffle.flower.app.local cleans Flower's output.
# The [k] keeps the pattern from matching this recipe's own shell.
LINK := flower-superlin[k] .*$(CURDIR)/flower/local-superlink/
flower: $(STAMP)
	@before=$$(pgrep -f -- "$(LINK)" || true); \
	FLWR_HOME=$(CURDIR)/flower PATH=$(CURDIR)/$(BIN):$$PATH FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
		$(BIN)/python -m reshuffle.flower.app.local $(BIN)/flwr run . --stream \
		--federation-config "num-supernodes=10 client-resources-num-cpus=1"; status=$$?; \
	if [ -n "$$before" ]; then \
		echo "make flower: the local SuperLink (pid $$before) was already running; left running"; \
	else \
		for pid in $$(pgrep -f -- "$(LINK)"); do kill -TERM -- -$$pid 2>/dev/null || kill -TERM $$pid; \
			echo "make flower: stopped the local SuperLink this run started (pid $$pid)"; done; \
	fi; exit $$status

games: $(STAMP)
	$(BIN)/reshuffle games

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
