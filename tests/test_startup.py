"""Start-up: a small ``crashlens analyze`` imports only what its answer needs, and every shortcut
taken for it gives what the full path gives (no timings here: BENCHMARKS.md has them)."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import crashlens
from conftest import FIXTURES, ROOT
from crashlens import lazyre
from crashlens.cli.analysis import OPTIONS, TYPER_ONLY, parse_argv
from crashlens.rulebase import load as loader

#: Packages a plain-text ``analyze`` of a small job must not import.
HEAVY = (
    "pandas", "numpy", "markdown_it", "hyperscan", "re2", "torch", "typer", "click", "rich",
    "pydantic", "yaml", "pyarrow", "ray", "duckdb",
)  # fmt: skip

OOM = """[rank0]: Traceback (most recent call last):
[rank0]:   File "/home/alice/llm/train.py", line 188, in main
[rank0]:     loss.backward()
[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 5 has a total \
capacity of 79.15 GiB of which 1.23 GiB is free.
"""


def tiny_job(root: Path) -> Path:
    """A 1 KB job: one rank's steps, then a CUDA OOM traceback behind ``[rank0]:``."""
    job = root / "job"
    job.mkdir()
    steps = [f"2024-05-01 03:14:0{i},000 INFO train: step {i} loss 1.{i:03d}\n" for i in range(8)]
    (job / "rank_0.log").write_text("".join(steps) + OOM)
    return job


def run_analyze(job: Path, cache: Path, *args: str) -> dict[str, Any]:
    """``crashlens analyze`` in a fresh interpreter: its exit status, stdout, the modules it
    imported and how many of the failure signature's patterns it compiled."""
    code = (
        "import io, json, sys, contextlib\n"
        "from crashlens import lazyre\n"
        "from crashlens.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    status = main(['analyze', {str(job)!r}, *{list(args)!r}])\n"
        "from crashlens.signature import _NORMALISE\n"
        "compiled = sum(lazyre.is_compiled(p) for p, _ in _NORMALISE)\n"
        "print(json.dumps({'status': status, 'out': out.getvalue(), 'modules': sorted(sys.modules),"
        " 'signature_patterns': compiled}))\n"
    )
    env = {**os.environ, "CRASHLENS_CACHE_DIR": str(cache), "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(crashlens.__file__).parents[1]), str(ROOT)])
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


def heavy_imports(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules} & set(HEAVY))


def test_a_small_analyze_imports_no_heavy_package(tmp_path: Path) -> None:
    job, cache = tiny_job(tmp_path), tmp_path / "cache"
    first = run_analyze(job, cache)  # parses the rules (PyYAML) and fills the cache
    assert first["status"] == 1 and "cuda_oom" in first["out"]
    second = run_analyze(job, cache)
    assert second["out"] == first["out"]
    assert heavy_imports(second["modules"]) == []
    assert second["signature_patterns"] == 0  # a text report has no signature to normalise
    # the sub-commands' modules are not loaded either
    assert not {"crashlens.cli.commands", "crashlens.fleet", "crashlens.repro.cli"} & set(
        second["modules"]
    )


def test_json_and_verbose_outputs_stay_light_too(tmp_path: Path) -> None:
    job, cache = tiny_job(tmp_path), tmp_path / "cache"
    run_analyze(job, cache, "-q")
    for args in (["-f", "json"], ["--verbose"], ["--format=github"]):
        result = run_analyze(job, cache, *args)
        assert result["status"] == 1
        assert heavy_imports(result["modules"]) == [], args
        if args == ["-f", "json"]:  # the JSON report carries each cause's signature
            assert result["signature_patterns"] > 0


# --- the fast path's reader and the typer command agree -----------------------------------------


def test_the_readers_option_table_is_the_typer_commands() -> None:
    import typer.main

    from crashlens.cli import app

    command = typer.main.get_command(app).commands["analyze"]  # type: ignore[attr-defined]
    seen = set()
    for param in command.params:
        for flag in param.opts:
            if not flag.startswith("-"):
                continue
            seen.add(flag)
            if flag in TYPER_ONLY:
                continue
            name, kind = OPTIONS[flag]
            assert name == param.name, flag
            assert (kind == "flag") == bool(param.is_flag), flag
            assert (kind in ("strs", "paths")) == bool(param.multiple), flag
    assert set(OPTIONS) <= seen


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["job", "-h"],
        ["job", "--no-such-option"],
        ["job", "--repro"],
        ["job", "--skew", "node-01=soon"],
        ["job", "-fjson"],
        ["job", "-qv"],
        ["job", "--quiet=yes"],
        ["job", "--fail-on"],
        ["job", "--output", "--quiet"],
        ["job", "--fail-on", "high", "--fail-on", "low"],
    ],
)
def test_the_reader_leaves_what_it_does_not_know_to_typer(args: list[str]) -> None:
    assert parse_argv(args) is None


def test_the_reader_takes_the_usual_command_lines() -> None:
    got = parse_argv(["a", "-f", "json", "--output=r.json", "-q", "--skew", "n1=+2s", "--", "-b"])
    assert got == {
        "paths": ["a", "-b"],
        "fmts": ["json"],
        "outputs": [Path("r.json")],
        "quiet": True,
        "skew": ["n1=+2s"],
    }
    assert parse_argv(["-", "--fail-on", "high"]) == {"paths": ["-"], "fail_on": "high"}


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["-q"],
        ["-f", "json"],
        ["--format", "markdown", "--verbose"],
        ["-f", "junit", "--exit-zero"],
        ["--fail-on", "critical"],
        ["--fail-on", "nonsense"],
        ["-f", "nonsense"],
        ["-f", "json", "-f", "html"],
        ["--skew", "node-01=+2s"],
    ],
)
def test_main_and_the_typer_command_give_the_same_answer(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from crashlens.cli import app, main

    job = str(FIXTURES / "gpu" / "cuda_oom_single")
    assert parse_argv([job, *args]) is not None  # main takes the fast path
    status = main(["analyze", job, *args])
    fast = capsys.readouterr()
    result = CliRunner().invoke(app, ["analyze", job, *args])
    assert status == result.exit_code
    assert fast.out == result.stdout
    assert fast.err == result.stderr


def test_a_closed_stdout_ends_both_paths_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that went away (``| head``): exit 1 and no "internal error", as typer does."""
    import errno
    import io

    from crashlens.cli import app, main

    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    job = str(FIXTURES / "gpu" / "cuda_oom_single")
    for run in (lambda: main(["analyze", job]),
                lambda: app(args=["analyze", job], standalone_mode=False)):  # fmt: skip
        monkeypatch.setattr(sys, "stdout", Closed())
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        with pytest.raises(SystemExit) as exited:
            run()
        assert exited.value.code == 1
        sys.stdout.flush()  # quiet from then on


def test_help_and_every_sub_command_still_answer(capsys: pytest.CaptureFixture[str]) -> None:
    from crashlens.cli import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("analyze", "triage", "repro", "rules", "run", "watch", "schema"):
        assert command in out
    assert main(["analyze", "--help"]) == 0
    assert "PATH..." in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert crashlens.__version__ in capsys.readouterr().out
    assert main(["rules", "list", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)


# --- lazyre ----------------------------------------------------------------------------------


def test_a_lazy_pattern_compiles_on_first_use_and_behaves_like_its_engine() -> None:
    source = r"(?P<key>\w+)=(?P<value>\d+)"
    lazy = lazyre.compile(source, re.IGNORECASE)
    assert not lazyre.is_compiled(lazy)
    real = re.compile(source, re.IGNORECASE)
    text = "a=1, B=22; c=x d=333"
    assert lazy.search(text).groupdict() == real.search(text).groupdict()  # type: ignore[union-attr]
    assert lazyre.is_compiled(lazy)
    assert [m.span() for m in lazy.finditer(text)] == [m.span() for m in real.finditer(text)]
    assert lazy.findall(text) == real.findall(text)
    assert lazy.sub(r"\g<value>", text) == real.sub(r"\g<value>", text)
    assert lazy.split(text) == real.split(text)
    assert lazy.match("x") is None and lazy.fullmatch("k=9") is not None
    assert (lazy.pattern, lazy.flags, lazy.groupindex) == (
        real.pattern,
        real.flags,
        real.groupindex,
    )
    # bytes patterns, and the regex module's syntax
    assert lazyre.compile(rb"\d+").findall(b"a1b22") == [b"1", b"22"]
    possessive = lazyre.compile_regex(r"(?<word>a++)b")
    assert possessive.search("xaab")["word"] == regex.search(r"(?<word>a++)b", "xaab")["word"]


def test_a_lazy_pattern_pickles_as_its_source_and_is_immutable() -> None:
    lazy = lazyre.compile_regex(r"rank (\d+)")
    lazy.search("rank 3")
    again = pickle.loads(pickle.dumps(lazy))
    assert again == lazy and not lazyre.is_compiled(again)
    assert again.search("rank 7")[1] == "7"
    with pytest.raises(AttributeError):
        lazy.search = None  # type: ignore[method-assign]
    with pytest.raises(re.error):
        lazyre.compile("(").match("x")  # a bad pattern fails where it is used


# --- the rules cache ----------------------------------------------------------------------------


def _rule_fields(rules: Any) -> list[tuple[Any, ...]]:
    import dataclasses

    out = []
    for rule in rules.rules:
        detectors = tuple(
            (d.name, d.pattern.pattern, d.pattern.flags, d.literals, d.scope, d.sources,
             d.ignore_case, d.origin, d.flight)
            for d in rule.detectors
        )  # fmt: skip
        rest = tuple(
            getattr(rule, f.name) for f in dataclasses.fields(rule) if f.name != "detectors"
        )
        out.append((detectors, rest))
    return out


def test_cached_rules_are_the_same_rule_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CRASHLENS_CACHE_DIR", "off")
    fresh = loader.load_rules()
    monkeypatch.setenv("CRASHLENS_CACHE_DIR", str(tmp_path))
    written = loader.load_rules()
    (cache,) = tmp_path.glob("rules-*.json")
    held = json.loads(cache.read_text())
    assert set(held) == {"files", "literals"} and "versions.yaml" in held["files"]
    assert held["literals"]  # each regex's literals, computed once
    read = loader.load_rules()
    assert _rule_fields(read) == _rule_fields(written) == _rule_fields(fresh)
    assert read.versions == fresh.versions
    assert (read.duplicates, read.skipped) == (fresh.duplicates, fresh.skipped)


# --- the scanner's bytes.find path, the list-based demultiplexer, the simple Markdown reader ------


def test_small_blocks_are_scanned_by_find_with_the_engines_lines() -> None:
    from crashlens.parse import STRUCTURAL_TRIGGERS, LineMatcher
    from crashlens.parse.scan import TriggerScanner, available_backends, iter_blocks

    matcher = LineMatcher(loader.load_rules())
    literals = ([*matcher.by_literal, *STRUCTURAL_TRIGGERS], matcher.by_literal_ci)
    engines = [TriggerScanner(*literals, backend=b) for b in available_backends()]
    checked = 0
    for path in sorted(FIXTURES.rglob("*.log"))[:200]:
        for block in iter_blocks(path.open("rb")):
            for piece in (block, block.upper(), block[:4096]):
                scanner = TriggerScanner(*literals)  # a fresh one finds before compiling
                assert [e.line_starts(piece) for e in engines] == [
                    scanner.line_starts(piece)
                ] * len(engines)
                checked += 1
    assert checked > 100
    small = TriggerScanner(["CUDA out of memory"], ["killed process"])
    assert small.line_starts(b"a\nOut of memory: KILLED PROCESS 1\nCUDA out of memory\n") == [2, 34]
    assert not small._compiled
    small.line_starts(b"x\n" * 20_000)  # a big block compiles the engine
    assert small._compiled


@pytest.mark.parametrize("style", ["rank", "default", "srun", "mpi", "kubectl"])
def test_small_blocks_demultiplex_on_lists_as_big_ones_on_numpy(
    tmp_path: Path, style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashlens.parse import keyed
    from crashlens.session import SequentialRunner, Session

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from generate import console

    path = console(tmp_path / "console.log", 8, 0.25, style, retries=2, oom_rank=5)

    def report() -> str:
        session = Session.configured(runner=SequentialRunner()).read_paths([path])
        return json.dumps(session.finish().to_dict(), sort_keys=True, default=str)

    monkeypatch.setattr(keyed, "SMALL_LINES", 0)
    on_numpy = report()
    monkeypatch.setattr(keyed, "SMALL_LINES", 10**9)
    assert report() == on_numpy
    assert '"cuda-oom"' in on_numpy


def _parsed_plain(markdown: str) -> str:
    from crashlens.render import remedy

    return "\n".join(
        remedy._blocks(remedy.tree(markdown), remedy._plain_inline, bullet="-")
    ).strip()


def test_the_simple_markdown_reader_matches_the_parser_on_every_rule() -> None:
    from crashlens.render.remedy import simple_plain

    taken = 0
    for rule in loader.load_rules().rules:
        simple = simple_plain(rule.remediation)
        if simple is not None:
            assert simple == _parsed_plain(rule.remediation), rule.id
            taken += 1
    assert taken > 20
    oom = next(r for r in loader.load_rules().rules if r.id == "cuda-oom")
    assert simple_plain(oom.remediation) is not None


_MARKDOWNISH = st.lists(
    st.sampled_from(
        [
            *"ab1_ `*\\&<>[]()#-+=~.:!\n\t\u00a0",
            *("1. ", "2. ", "10. ", "\n\n", "\n   ", "    "),
            *("`x`", "` y `", "a_b", "x  \n", "{gpu}", "é"),
        ]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(_MARKDOWNISH)
def test_the_simple_markdown_reader_never_disagrees_with_the_parser(markdown: str) -> None:
    from crashlens.render.remedy import simple_plain

    simple = simple_plain(markdown)
    if simple is not None:
        assert simple == _parsed_plain(markdown)


@pytest.mark.parametrize(
    "markdown",
    [
        "Do this:\n1. one `a_b` two\n   more\n2. three\n\nThen `  x  ` and `` ` `` done.",
        "para\n2. not an item",
        "1. a\n\n   second paragraph",
        "x  \ny",
        "1. a\n\n\n3. b\nlazy line",
        "    code",
        "a\n    b",
        "_a_ and snake_case",
        "1) other delimiter",
        "1. # heading in an item",
        "\n1. > quote in an item",
    ],
)
def test_the_simple_markdown_reader_on_edge_cases(markdown: str) -> None:
    from crashlens.render.remedy import simple_plain, to_plain

    simple = simple_plain(markdown)
    assert simple is None or simple == _parsed_plain(markdown)
    assert to_plain(markdown) == _parsed_plain(markdown)
