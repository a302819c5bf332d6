"""The README's examples run as written, so the front page cannot drift from the code.

A fenced block right after a ``<!-- test -->`` line is run, in document order, in
one temporary folder:

- ``bash``: with ``bash -e``; ``reshuffle`` on PATH is the command line of this
  checkout under the running interpreter (what ``make`` installs in ``.venv``);
- ``python`` whose first line is ``# NAME.py``: written to that file;
- any other ``python``: executed in-process, in that folder.

One cheap override keeps this within seconds: every ``reshuffle simulate`` gets
``--rounds 1 --quiet`` appended (the last value of an option wins).

The block after ``<!-- test: flower -->`` holds the drop-in's client and server
lines (split at ``# server_app.py``); they run a real Flower round through
Re-Shuffle over the in-process grid, and must match ``examples/flower-dropin/``.

Every other block is checked too: each ``reshuffle ...`` line parses with the CLI's
own parser and each ``make X`` names a Makefile target, in the README and in
``docs/usage.md``, whose TOML examples must be valid configurations. Every
relative link points at a file of the repository.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SIMULATE_OVERRIDES = ["--rounds", "1", "--quiet"]
PROCESS_WORDS = re.compile(r"\bissues? ?#?\d|\bstop \d|\bticket|\btask \d|\bTODO\b|\bFIXME\b", re.IGNORECASE)


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # of the opening fence, 1-based
    tag: str | None  # "test", "test: flower", or None


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, each with the HTML comment right before it."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, tag = i, None
        if i > 0 and (c := re.match(r"^<!--\s*(.*?)\s*-->\s*$", lines[i - 1])):
            tag = c.group(1)
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"README.md:{start + 1}: unclosed code block")
        out.append(Block(m.group(1), "\n".join(body) + "\n", start + 1, tag))
        i += 1
    return out


def commands(code: str) -> list[list[str]]:
    """The shell words of each command in a bash block: continuations joined, comments and env assignments dropped."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words.pop(0)
        if words:
            out.append(words)
    return out


def with_overrides(code: str) -> str:
    lines = code.replace("\\\n", " ").splitlines()
    return "\n".join(
        line + " " + " ".join(SIMULATE_OVERRIDES) if re.search(r"(^|\s)reshuffle simulate(\s|$)", line) else line
        for line in lines
    ) + "\n"


BLOCKS = blocks(README.read_text(encoding="utf-8"))


def test_blocks_parse_fences_tags_and_line_numbers():
    text = "intro\n<!-- test -->\n```bash\necho a\n```\n\n```python\nx = 1\n```\n<!--  test: flower  -->\n```\ny\n```\n"
    assert blocks(text) == [Block("bash", "echo a\n", 3, "test"), Block("python", "x = 1\n", 7, None),
                            Block("", "y\n", 11, "test: flower")]
    with pytest.raises(ValueError, match="unclosed"):
        blocks("```bash\necho a\n")


def test_commands_and_overrides_read_shell_lines_as_the_shell_does():
    code = "A=1 B=2 reshuffle simulate --rule x \\\n  --out 'o d'  # comment\n\nmake run\n"
    assert commands(code) == [["reshuffle", "simulate", "--rule", "x", "--out", "o d"], ["make", "run"]]
    assert with_overrides("X=. reshuffle simulate --rounds 5\nreshuffle games\n") == (
        "X=. reshuffle simulate --rounds 5 --rounds 1 --quiet\nreshuffle games\n")


def test_the_readme_has_runnable_examples_of_each_kind():
    tagged = [(b.lang, b.tag) for b in BLOCKS if b.tag]
    assert ("bash", "test") in tagged and ("python", "test") in tagged
    assert tagged.count(("python", "test: flower")) == 1


@pytest.fixture
def reshuffle_on_path(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``reshuffle`` is this checkout's CLI under this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "reshuffle"
    boot = f"import sys; sys.path.insert(1, {str(ROOT)!r}); from reshuffle.cli import main; sys.exit(main(sys.argv[1:]))"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c {shlex.quote(boot)} \"$@\"\n")
    shim.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), env.get("PATH", "")])
    env.setdefault("OMP_NUM_THREADS", "1")
    env["MPLBACKEND"] = "Agg"
    return env


def test_tagged_examples_run_in_order(tmp_path: Path, reshuffle_on_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    ran = 0
    for b in BLOCKS:
        if b.tag != "test":
            continue
        where = f"README.md:{b.line}"
        if b.lang == "bash":
            r = subprocess.run(["bash", "-e", "-c", with_overrides(b.code)], cwd=work, env=reshuffle_on_path,
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, f"{where} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        elif b.lang == "python" and (name := re.match(r"^# (\w+\.py)\s*$", b.code.splitlines()[0])):
            (work / name.group(1)).write_text(b.code)
        elif b.lang == "python":
            exec(compile(b.code, where, "exec"), {"__name__": "__readme__"})
        else:
            pytest.fail(f"{where}: a tagged block must be bash or python, got {b.lang!r}")
        ran += 1
    assert ran >= 4


def test_the_flower_lines_run_a_round_and_match_the_example():
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp.strategy import FedAvg

    from reshuffle.flower import reserved
    from reshuffle.flower.app.loopback import LoopbackGrid

    (block,) = [b for b in BLOCKS if b.tag == "test: flower"]
    client, server = re.split(r"(?m)^# server_app\.py.*$", block.code)
    # Prepare: the README's client lines, then the app's own handlers (node p answers W + p).
    ns: dict = {"ClientApp": ClientApp}
    exec(compile(client, f"README.md:{block.line}", "exec"), ns)
    app = ns["app"]

    @app.train()
    def train(msg, ctx):
        p = int(ctx.node_config["partition-id"])
        arrays = [a + p for a in msg.content["arrays"].to_numpy_ndarrays()]
        return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord({"num-examples": 10 + p})}),
                       reply_to=msg)

    @app.evaluate()
    def evaluate(msg, ctx):
        return Message(RecordDict({"metrics": MetricRecord({"num-examples": 1})}), reply_to=msg)

    grid = LoopbackGrid(app, 5)  # one stable anonymity group of 5, the default
    ns = {"strategy": FedAvg(), "grid": grid, "arrays": ArrayRecord([np.zeros(5, np.float32), np.zeros((2, 3), np.float32)]),
          "num_rounds": 2}
    # Execute: the README's server line
    exec(compile(server, f"README.md:{block.line}", "exec"), ns)
    # Assert: protocol phases went out, nothing failed, and FedAvg got the raw replies:
    # (0·10 + 1·11 + 2·12 + 3·13 + 4·14) / 60 added per round.
    phases = [m for m in grid.sent if reserved.RECORD in m.content
              and m.content[reserved.RECORD]["stage"] == reserved.STAGE_PROTOCOL]
    assert phases and grid.errors == []
    for a in ns["result"].arrays.to_numpy_ndarrays():
        np.testing.assert_allclose(a, 2 * 130 / 60, rtol=1e-6)
    # The same lines are the change examples/flower-dropin makes to a plain Flower app.
    example = ROOT / "examples" / "flower-dropin" / "dropin"
    client_src = (example / "client_app.py").read_text()
    server_src = (example / "server_app.py").read_text()
    for line in client.splitlines():
        if line.strip() and not line.startswith("#"):
            assert line in client_src, f"{line!r} is not in {example / 'client_app.py'}"
    assert "from reshuffle.flower import ReshuffleGrid" in server and "from reshuffle.flower import ReshuffleGrid" in server_src
    assert "grid=ReshuffleGrid(grid)" in server and "grid=ReshuffleGrid(grid)" in server_src


@pytest.mark.parametrize("doc", ["README.md", "docs/usage.md"])
def test_every_command_parses(doc):
    from reshuffle.cli import build_parser

    targets = set(re.findall(r"(?m)^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text()))
    checked = 0
    for b in blocks((ROOT / doc).read_text(encoding="utf-8")):
        if b.lang not in ("bash", "sh"):
            continue
        for words in commands(b.code):
            where = f"{doc}:{b.line}: {' '.join(words)}"
            if words[0] == "reshuffle":
                try:
                    build_parser().parse_args(words[1:])
                except SystemExit:
                    pytest.fail(f"{where}: the CLI refuses it")
            elif words[0] == "make":
                assert set(words[1:]) <= targets, f"{where}: no such Makefile target"
            checked += 1
    assert checked >= 3


def test_the_configuration_examples_are_valid():
    from reshuffle.sim import from_mapping

    tables = [b for b in blocks((ROOT / "docs" / "usage.md").read_text(encoding="utf-8")) if b.lang == "toml"]
    assert tables
    for b in tables:
        from_mapping(tomllib.loads(b.code), source=f"docs/usage.md:{b.line}")


@pytest.mark.parametrize("doc", ["README.md", "docs/usage.md"])
def test_relative_links_point_at_files(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    links = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"^[a-z]+:", t)]
    missing = [t for t in links if not (ROOT / doc).parent.joinpath(t.split("#")[0]).exists()]
    assert links and not missing, missing


@pytest.mark.parametrize("doc", ["README.md", "docs/usage.md"])
def test_no_internal_process_words(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    hits = [f"{doc}:{i}: {line}" for i, line in enumerate(text.splitlines(), 1) if PROCESS_WORDS.search(line)]
    assert not hits, hits


def _experiments_run():
    import importlib.util

    spec = importlib.util.spec_from_file_location("experiments_run", ROOT / "experiments" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_overhead_figures_are_generated_and_still_measure_this_protocol():
    # The README's overhead sentence is written from docs/results.md's table (experiments/run.py --docs),
    # never typed; the table's bytes per participant are what a round of this protocol sends and receives.
    import reshuffle

    run = _experiments_run()
    table = run.docs_overhead_table(ROOT / "docs" / "results.md")
    readme = README.read_text()
    begin, end = run.README_FIGURES
    assert readme.split(begin, 1)[1].split(end, 1)[0] == run.readme_overhead(table)
    row = [c.strip() for c in table[2].strip("|").split("|")]
    assert row[0] == "10" and row[-1].endswith(" MB")
    # A happy-path round among 10 participants at LeNet-5 size (δ = 61,706), seeded
    ups = [np.random.default_rng(i).normal(0, 0.1, 61_706).astype(np.float32) for i in range(10)]
    r = reshuffle.shuffle(ups, seed=1)
    measured = sum(s["participant_bytes_sent"] + s["participant_bytes_received"] for s in r.stats.values())
    assert abs(float(row[-1][:-3]) * 1e6 - measured) / measured < 0.02, (row[-1], measured)
