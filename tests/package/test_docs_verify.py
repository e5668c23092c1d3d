"""docs/verify.md stays true to the code: every python block that a text block follows at once is
run as a script of its own (beside the page's `mymodel.py`), and what it prints must be that text.

Where a message names the user's file and line (`at v2.py:12 (ambiguous: ...)`), the file and line
are left out of the comparison: the page names the reader's file, the test its own.
"""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "verify.md"
FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


def blocks(text: str) -> list[tuple[int, str, str, str]]:
    """(line, language, body, what follows the block up to the next fence) of each fenced block."""
    found = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening or not opening.group(2):
            i += 1
            continue
        indent, language, start = opening.group(1), opening.group(2), i
        i += 1
        body = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):])
            i += 1
        gap = []
        j = i + 1
        while j < len(lines) and not FENCE.match(lines[j]):
            gap.append(lines[j])
            j += 1
        found.append((start + 1, language, "\n".join(body), "\n".join(gap)))
        i += 1
    return found


def pairs() -> list[tuple[int, str, str]]:
    """(line, python source, expected output) for each python block a text block follows at once."""
    found = blocks(DOC.read_text())
    out = []
    for (line, language, body, gap), following in zip(found, found[1:]):
        if language == "python" and following[1] == "text" and not gap.strip():
            out.append((line, body, following[2]))
    return out


def mymodel() -> str:
    text = DOC.read_text()
    start = text.index("Take this module, `mymodel.py`:")
    return text[start:].split("```python\n", 1)[1].split("```", 1)[0]


def normalise(text: str) -> str:
    """The page's outputs as any supported JAX prints them: file names and lines aside, and the
    memory traffic of the cost line (``13.9 MiB read and written``), which depends on the calls a
    JAX release wraps ops in (the walk fuses elementwise ops within a call, not across one: on
    JAX 0.12 the optax step of the page reads and writes 13.9 MiB, on 0.10 11.9 MiB), and the
    elementwise part of the FLOPs, which depends on the ops a release emits (JAX 0.9 counts 145.8
    MFLOP where 0.10 counts 145.6; the matmuls' share, in brackets, is compared): a model's
    figures, which docs/verify.md says move with JAX's equations."""
    text = re.sub(r"\b[\w.-]+\.py:\d+", "FILE:LINE", text.strip())
    text = re.sub(r"[\d.]+ [kMGTP]?FLOP \(", "N FLOP (", text)
    return re.sub(r"[\d.]+ [KMGT]?i?B read and written", "N read and written", text)


PAIRS = pairs()


def test_the_page_has_examples_to_run():
    assert len(PAIRS) >= 10


@pytest.mark.parametrize("line, source, expected", PAIRS, ids=[f"line-{p[0]}" for p in PAIRS])
def test_an_example_prints_what_the_page_shows(line, source, expected, tmp_path):
    (tmp_path / "mymodel.py").write_text(mymodel())
    script = tmp_path / "example.py"
    script.write_text(source + "\n")  # a file of its own: typeguard instruments it from its source
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    got = proc.stdout + (proc.stderr if proc.returncode else "")
    missing = re.search(r"ModuleNotFoundError: No module named '(optax|flax|equinox)'", got)
    if missing:
        pytest.skip(f"the example needs {missing.group(1)}, which is not installed")
    assert normalise(got) == normalise(expected), f"docs/verify.md line {line}:\n{got}"


def json_commands() -> list[tuple[int, str, str]]:
    """(line, command, the output shown) for each ``shardtypes ... --json`` block a text block
    follows at once (the output may end in ``...``: the page shows its head)."""
    found = blocks(DOC.read_text())
    out = []
    for (line, language, body, gap), following in zip(found, found[1:]):
        if language == "bash" and "--json" in body and following[1] == "text" and not gap.strip():
            out.append((line, body.replace("\\\n", " "), following[2]))
    return out


JSON_COMMANDS = json_commands()


def test_the_page_shows_plan_json_as_the_command_prints_it():
    """The first ``plan --json`` example, and each after it: sizes are numbers there."""
    assert any(" plan " in f" {command} " for _, command, _ in JSON_COMMANDS), JSON_COMMANDS
    first = next(shown for _, command, shown in JSON_COMMANDS if " plan " in f" {command} ")
    assert re.search(r'"shape": \[\s*\d+,', first) and '"50257"' not in first, first


@pytest.mark.parametrize("line, command, shown", JSON_COMMANDS, ids=[f"line-{c[0]}" for c in JSON_COMMANDS])
def test_a_json_command_prints_what_the_page_shows(line, command, shown, tmp_path):
    (tmp_path / "mymodel.py").write_text(mymodel())
    words = shlex.split(command)
    assert words[0] == "shardtypes", command
    proc = subprocess.run([sys.executable, "-m", "shardtypes", *words[1:]], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    head = shown.strip().removesuffix("...").rstrip()
    assert proc.stdout.startswith(head) if shown.strip().endswith("...") else proc.stdout.strip() == head, (
        f"docs/verify.md line {line}:\n{proc.stdout}{proc.stderr}")
