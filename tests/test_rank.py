"""Ranking helpers: remediation placeholders."""

from __future__ import annotations

from pathlib import Path

from crashlens.remediation import fill


def test_fill_drops_asides_with_unknown_values_and_marks_other_unknowns() -> None:
    template = "Halve the batch (from {batch} to {half}) on GPU {gpu}; precision {precision}."
    assert fill(template, {"batch": "8", "half": "4", "gpu": "3", "precision": "bf16"}) == (
        "Halve the batch (from 8 to 4) on GPU 3; precision bf16."
    )
    assert fill(template, {"gpu": "3"}) == "Halve the batch on GPU 3."


def test_fill_reflows_items_and_drops_the_clauses_it_cannot_fill() -> None:
    # rules/memory/kernel-oom-kill.yaml as the rule base words it, wrapped in the YAML
    template = (
        "In order:\n1. Lower per-node memory: num_workers {num_workers} -> {half_workers}, "
        "datasets num_proc\n   {num_proc} -> {half_num_proc}, smaller prefetch_factor; avoid "
        "copying large objects into\n   workers.\n2. Request more memory for {job}.\n"
    )
    assert fill(template, {"num_workers": "8", "half_workers": "4"}) == (
        "In order:\n1. Lower per-node memory: num_workers 8 -> 4, smaller prefetch_factor; "
        "avoid copying large objects into workers."
    )
    assert "(unknown)" not in fill(template, {})


def test_fill_leaves_malformed_templates_and_plain_parentheses_alone() -> None:
    assert fill("use {medium: Memory} (see docs)", {}) == "use {medium: Memory} (see docs)"
    assert fill("raise the limit (ulimit -n)", {}) == "raise the limit (ulimit -n)"


def test_reserved_fields_are_typed_once_and_never_guessed() -> None:
    from crashlens.model import Evidence, Hit, Roles

    roles = Roles.of(
        {"pid": "4971", "pids": "4971, 4972", "tasks": "3", "uptime_s": "12.5", "exitcode": "-9",
         "last_completed": "15416", "waits_on": "zero", "local_rank": "x1"}
    )  # fmt: skip
    assert roles.pids == (4971, 4972) and roles.pid == 4971
    assert (roles.rank, roles.exitcode, roles.uptime_s, roles.last_completed) == (
        3,
        -9,
        12.5,
        15416,
    )
    assert roles.waits_on is None and roles.local_rank is None  # unparsable: left out
    hit = Hit("r", "d", Evidence("f", 1, None, None, None, False, "t"), {"pid": "7"})
    assert hit.roles.pid == 7  # a hit types its fields when it is made


def test_fill_makes_values_from_the_logs_data_not_markup() -> None:
    from markdown_it import MarkdownIt

    hostile = "*bold* [x](javascript:alert(1)) <script> <!channel> `tick`"
    filled = fill("An uncaught {exc}: {message}. Retry.", {"exc": "KeyError", "message": hostile})
    # a plain value stays prose; one with markup characters is a code span around all of it
    assert filled == f"An uncaught KeyError: `` {hostile} ``. Retry."
    inline = MarkdownIt("commonmark").parseInline(filled)[0].children or []
    assert [t.type for t in inline] == ["text", "code_inline", "text"]
    assert inline[1].content == hostile
    # inside the template's own code span the value goes in raw, the span widened if needed
    assert fill("run `nc -zv {host} {port}`", {"host": "n1", "port": "29500"}) == (
        "run `nc -zv n1 29500`"
    )
    assert fill("failed: `{assertion}`.", {"assertion": "a ` b"}) == "failed: ``a ` b``."
    assert fill("`{{k: v}}` for {n}", {"n": "8"}) == "`{k: v}` for 8"


def test_user_frame_names_the_users_code_in_the_remediation() -> None:
    from conftest import FIXTURES
    from crashlens import analyze

    report = analyze([FIXTURES / "repro/corrupt_jsonl"])
    ff = report.first_failure
    # a DataLoader worker's "Original Traceback" inside the re-raised message says where
    assert ff is not None and ff.frame is not None
    assert (ff.frame.function, ff.frame.line) == ("__getitem__", 37)
    assert ff.frame.file.endswith("/corrupt_jsonl.py")
    user = analyze([FIXTURES / "repro/user_code_error"]).primary
    assert user is not None and user.user_frame is not None
    assert f"the last frame of yours on the stack is `{user.user_frame}`" in user.remediation
    assert "innermost user frame" not in user.remediation


def test_fill_leaves_whole_sentences_when_clauses_go() -> None:
    # the "or" that joined a dropped clause goes, the rest starts with a capital
    assert fill("Lower {x}; or use less of it.", {}) == "Use less of it."
    # an aside is one clause: its commas do not split it
    assert (
        fill("Find the rank that did not arrive (hung, slow, or dead), then fix {what}.", {})
        == "Find the rank that did not arrive (hung, slow, or dead)."
    )
    # a dropped aside leaves no space before what followed it
    text = "Kill the stale process holding it\n(`ss -ltnp | grep {port}`), or pick another port."
    assert fill(text, {}) == "Kill the stale process holding it, or pick another port."
    # each sentence of a paragraph keeps its own start
    assert fill("Rank {rank} ran it: the ranks differ. Fix it.", {}) == "The ranks differ. Fix it."


def test_every_bundled_remediation_degrades_to_sentences() -> None:
    """Rendered with every subset of its values unknown, no bundled rule's advice is empty or
    has a paragraph that starts mid-sentence where the fully known rendering does not
    (``rules lint``'s CL103); and the check finds such a template."""
    from crashlens.rulebase import load_rules
    from crashlens.ruletest import remediation_fragments
    from crashlens.ruletypes import Rule

    problems = [(r.id, p) for r in load_rules().rules for p in remediation_fragments(r)]
    assert problems == []
    rule = load_rules().by_id["cuda-oom"]
    broken = Rule(**{**{f: getattr(rule, f) for f in rule.__dataclass_fields__},
                     "remediation": "{size} could not be allocated; or {hint}."})  # fmt: skip
    assert list(remediation_fragments(broken))


def test_causes_that_explain_each_other_get_a_root_whatever_else_the_job_shows() -> None:
    # A real run (fixtures/captured/dataloader_worker_segfault/python-fd-race): a DataLoader
    # worker segfaults while the main process takes a batch's file descriptor from it. The
    # worker's death and the fd-sharing failure explain each other; a third finding that
    # nothing explains (the main process's lost print) used to leave that pair without a
    # root, and the later finding, "too many open files", ranked first.
    from pathlib import Path

    from crashlens import analyze

    capture = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
    report = analyze([capture / "dataloader_worker_segfault" / "python-fd-race"])
    assert report.primary is not None
    assert report.primary.rule_id == "dataloader-worker-killed"
    assert "too-many-open-files" in {e.rule_id for e in report.primary.explains}
    assert "too-many-open-files" not in {c.rule_id for c in report.causes}
    assert "exception-print-lost" in {c.rule_id for c in report.causes}


def test_a_rule_reading_a_cut_folds_into_the_finding_printed_before_the_cut() -> None:
    # THUDM/ChatGLM-6B#1196 as posted (corpus case tune/zai-org-chatglm-6b-1196): datasets'
    # JSON loader fails on a bad record ("Extra data"), then the paste repeats the traceback and
    # is cut inside it. json-parse-cut-off reads the cut copy; the whole error printed before
    # it is the finding, and the cut copy is one of its symptoms, as the cut fallback would be.
    from conftest import ROOT
    from crashlens import analyze

    case = ROOT / "corpus/tune/zai-org-chatglm-6b-1196"
    report = analyze([case])
    assert [c.rule_id for c in report.causes] == ["corrupt-json-sample"]
    assert report.primary is not None
    assert "json-parse-cut-off" in {e.rule_id for e in report.primary.explains}


def test_a_launcher_teardown_is_not_the_first_failure_when_the_cause_names_its_rank() -> None:
    # OptimalScale/LMFlow#855 as posted (validation case optimalscale-lmflow-855, marked seen):
    # the paste starts inside rank 1's traceback ("[rank1]: RuntimeError: CUDA error: invalid
    # device ordinal", no timestamp), then DeepSpeed's launcher kills the workers at a
    # timestamp. The teardown is what the cause brought about; its line names no rank, the
    # cause's does, so rank 1 failed first.
    from conftest import ROOT
    from crashlens import analyze

    report = analyze([ROOT / "corpus/validation/optimalscale-lmflow-855"])
    assert report.primary is not None and report.primary.rule_id == "invalid-device-ordinal"
    first = report.first_failure
    assert first is not None and first.rank == 1
    assert "invalid device ordinal" in first.text


def test_the_last_words_fallback_never_outranks_what_a_rule_names(tmp_path: Path) -> None:
    # huggingface/lerobot#923 as posted (corpus case tune/huggingface-lerobot-923): pip's build
    # failure, then apptainer's "FATAL:" as the job's last line. The rule that names the build
    # failure is the diagnosis; the last line's generic reading stays a lesser finding.
    from conftest import ROOT
    from crashlens import analyze

    report = analyze([ROOT / "corpus/tune/huggingface-lerobot-923"])
    ids = [c.rule_id for c in report.causes]
    assert ids[0] == "pip-build-failed"
    assert "error-last-words" in ids[1:]
    # the same last line alone: nothing else names it, and the job is not "No failure found"
    last = (ROOT / "corpus/tune/huggingface-lerobot-923/console.log").read_text().splitlines()[-1]
    log = tmp_path / "console.log"
    log.write_text(last + "\n")
    alone = analyze([log])
    assert alone.primary is not None and alone.primary.rule_id == "error-last-words"
    assert alone.primary.kind == "symptom"
