"""The plan in a terminal (issue 21, item 4): the memory bar and the largest arrays as text,
colour only on a terminal, and a progress line for slow verify runs."""

import io
import re
import time

import pytest

from shardtypes import f32, plan, pytree_dataclass
from shardtypes.tools.cli import main
from shardtypes.tools.html_parts import parse_capacity
from shardtypes.tools.terminal import plan_lines, progress, render

ESCAPE = "\x1b["


@pytree_dataclass
class State:
    w: f32[b"embed/d hidden/t"]
    adam_mu: f32[b"embed/d hidden/t"]
    batch: f32[b"batch/d embed"]
    bias: f32[b"hidden"]


SIZES = {"embed": 8192, "hidden": 28672, "batch": 1024}


@pytest.fixture(scope="module")
def report():
    return plan(State, {"d": 64, "t": 64}, SIZES)


def test_the_bar_stacks_each_group_against_the_capacity(report):
    text = render(plan_lines(report, parse_capacity("h100"), width=40), colour=False)
    head, legend, title, *rows = text.splitlines()
    bar = re.search(r"\[(.*)\]", head).group(1)
    assert len(bar) == 40 and bar.startswith("█") and "▓" in bar and "▒" in bar and bar.endswith("·")
    assert head.endswith("1.05 MiB of h100 (80.0 GiB): 0%")
    assert legend.split() == ["█", "parameters", "336", "KiB", "▓", "optimizer", "state", "224", "KiB",
                              "▒", "step", "arrays", "512", "KiB", "·", "free", "80.0", "GiB"]
    assert title == "largest arrays (of 4), per device:"
    assert [r.split()[0] for r in rows] == ["State.batch", "State.w", "State.adam_mu", "State.bias"]
    assert rows[0].endswith("48%  64 copies") and rows[-1].endswith("4096 copies")


def test_over_capacity_says_so_and_without_capacity_there_is_no_free_part(report):
    over = render(plan_lines(report, parse_capacity("1MiB")), colour=False).splitlines()[0]
    assert "!]" in over and over.endswith("of 1.00 MiB: 105%  (does not fit)")
    bare = render(plan_lines(report), colour=False).splitlines()
    assert "·" not in bare[0] and bare[0].endswith("]  1.05 MiB") and "free" not in bare[1]


def test_colour_is_rich_escapes_around_the_same_text(report):
    lines = plan_lines(report, parse_capacity("h100"))
    coloured = render(lines, colour=True)
    assert ESCAPE in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == render(lines, colour=False)


def test_bad_arguments_are_errors_naming_them(report):
    with pytest.raises(ValueError, match=r"plan_lines: width must be an int >= 8, got 3"):
        plan_lines(report, width=3)
    with pytest.raises(ValueError, match=r"plan_lines: top must be an int >= 0, got -1"):
        plan_lines(report, top=-1)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_a_line_only_after_the_delay_and_clears_it():
    stream = _Terminal()
    with progress("shardtypes verify: tracing", stream, delay=0.05, every=0.02):
        time.sleep(0.2)
    written = stream.getvalue()
    assert written.startswith("\rshardtypes verify: tracing (0 s)") and written.endswith("\r")
    assert written.rstrip("\r").endswith(" ")  # the last write blanks the line
    quick = _Terminal()
    with progress("shardtypes verify: tracing", quick, delay=5):
        pass
    assert quick.getvalue() == ""
    piped = io.StringIO()
    with progress("shardtypes verify: tracing", piped, delay=0):
        time.sleep(0.05)
    assert piped.getvalue() == ""


def test_the_cli_prints_the_bar_after_the_table_in_plain_text_when_piped(capsys, tmp_path, monkeypatch):
    (tmp_path / "model_for_terminal.py").write_text(
        "from shardtypes import f32, pytree_dataclass\n"
        "@pytree_dataclass\n"
        "class State:\n"
        "    w: f32[b'embed/d hidden/t']\n"
        "    adam_mu: f32[b'embed/d hidden/t']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    status = main(["plan", "model_for_terminal:State", "--mesh", "d=64,t=64", "--dims", "embed=8192,hidden=28672",
                   "--hbm", "h100"])
    out = capsys.readouterr().out
    assert status == 0
    assert ESCAPE not in out  # captured output is not a terminal
    assert re.search(r"^memory per device  \[█+▓+·+\]  448 KiB of h100 \(80\.0 GiB\): 0%$", out, re.M), out
    assert "largest arrays (of 2), per device:" in out


@pytest.mark.parametrize("argv_colour,env,coloured", [
    ([], {}, False),                                   # piped: plain
    ([], {"FORCE_COLOR": "1"}, True),                  # CI logs: FORCE_COLOR asks for colour
    ([], {"FORCE_COLOR": "0"}, False),
    ([], {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False),  # NO_COLOR wins
    (["--color", "always"], {"NO_COLOR": "1"}, True),  # the flag wins over both
    (["--color", "never"], {"FORCE_COLOR": "1"}, False),
    (["--color", "auto"], {}, False),
])
def test_plan_colour_follows_the_flag_then_no_color_then_force_color(capsys, tmp_path, monkeypatch, argv_colour, env,
                                                                     coloured):
    pytest.importorskip("rich")
    (tmp_path / "model_for_colour.py").write_text(
        "from shardtypes import f32, pytree_dataclass\n"
        "@pytree_dataclass\n"
        "class State:\n"
        "    w: f32[b'embed/d hidden/t']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("FORCE_COLOR", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    base = ["plan", "model_for_colour:State", "--mesh", "d=4,t=2", "--dims", "embed=8,hidden=16"]
    assert main(base + argv_colour) == 0
    assert (ESCAPE in capsys.readouterr().out) is coloured
    assert main(base + argv_colour + ["--json"]) == 0  # JSON stays plain JSON
    out = capsys.readouterr().out
    assert ESCAPE not in out and out.lstrip().startswith("{")


def test_a_colour_that_is_not_a_choice_is_an_error_naming_the_flag(capsys, tmp_path, monkeypatch):
    (tmp_path / "model_for_colour2.py").write_text("from shardtypes import f32\nW = f32[b'embed/d']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main(["plan", "model_for_colour2:W", "--mesh", "d=4", "--dims", "embed=8", "--color", "sometimes"])
    assert info.value.code == 2
    assert "argument --color: invalid choice: 'sometimes'" in capsys.readouterr().err
