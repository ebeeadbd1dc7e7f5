"""The resemble stage: a failure no rule names, compared with the known, labelled reports."""

from __future__ import annotations

import json
import random
from pathlib import Path

import jsonschema
import pytest

from conftest import FIXTURES, ROOT, benchmark
from crashlens import analyze
from crashlens.model import KnownReport
from crashlens.provenance import module_parts
from crashlens.render import render
from crashlens.render.schema import load_schema
from crashlens.resemble import BUNDLED, KnownReports, bundled, features

accuracy = benchmark("accuracy")
known_reports = benchmark("known_reports")

#: A real run (Python 3.11, `python -m base64 -d` on a text file): no frame of the user's, and
#: no rule names "binascii.Error: Incorrect padding".
BASE64 = ROOT / "rules" / "process" / "uncaught-exception" / "positive.log"


def _report(cls: str, n: int, *words: str) -> tuple[KnownReport, frozenset[str]]:
    return KnownReport(f"https://example.org/{cls}/{n}", cls, f"{cls} {n}"), frozenset(words)


@pytest.mark.parametrize(
    ("path", "parts"),
    [
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/base64.py", ("base64",)),
        ("<frozen runpy>", ("runpy",)),
        (
            "/opt/venv/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py",
            ("transformers", "models", "llama", "modeling_llama"),
        ),
        ("torch/distributed/distributed_c10d.py", ("torch", "distributed", "distributed_c10d")),
        ("/home/u/transformers/src/transformers/trainer.py", ("transformers", "trainer")),
        (r"C:\Users\x\Anaconda3\lib\site-packages\torch\nn\__init__.py", ("torch", "nn")),
        ("/home/user/project/train.py", ("train",)),
    ],
)
def test_a_frame_is_its_module_not_where_one_machine_keeps_it(
    path: str, parts: tuple[str, ...]
) -> None:
    assert module_parts(path) == parts


def test_a_failure_is_compared_by_its_exception_modules_functions_and_code() -> None:
    report = analyze([BASE64], parallel=False)
    words = features(report.tracebacks)
    assert {"T:Error", "w:incorrect", "w:padding", "p:base64", "p:runpy", "fn:decode"} <= words
    # the source lines the frames print: what the program was doing when it failed
    assert {"c:binascii", "c:a2b_base64", "c:func"} <= words
    # the interpreter's place on the machine that ran it says nothing of the failure
    assert not {"p:root", "p:versions", "p:3.11.7", "p:lib", "p:python3.11"} & words


def test_a_log_cut_inside_a_traceback_is_compared_by_what_the_log_shows(tmp_path: Path) -> None:
    # ymcui/Chinese-LLaMA-Alpaca#750 as posted (tune case): torchrun's own traceback, cut by
    # the thread's excerpt before any exception line
    cut = ROOT / "corpus" / "tune" / "ymcui-chinese-llama-alpaca-750" / "console.log"
    words = features(analyze([cut], parallel=False).tracebacks)
    assert {"p:torch", "p:distributed", "p:run", "fn:run", "c:elastic_launch"} <= words
    # the stand-in for the missing exception line is crashlens's wording, the same in every
    # cut log: none of its words is the failure's
    assert not [w for w in words if w.startswith(("T:", "w:"))]
    # unslothai/unsloth#3373 (verbatim): a class IPython's header named is the log's own word
    notebook = tmp_path / "console.log"
    notebook.write_text(
        "OutOfMemoryError                          Traceback (most recent call last)\n"
        "/tmp/ipykernel_36/773422404.py in <cell line: 0>()\n"
        "----> 1 trainer_stats = trainer.train()\n"
    )
    words = features(analyze([notebook], parallel=False).tracebacks)
    assert "T:OutOfMemoryError" in words
    assert not [w for w in words if w.startswith("w:")]
    # Megvii-BaseDetection/YOLOX#1537 as posted (tune case): cut before the compiler's
    # message, the caret frame still says a SyntaxError; what it said is not known
    compile_error = ROOT / "corpus" / "tune" / "megvii-basedetection-yolox-1537"
    words = features(analyze([compile_error], parallel=False).tracebacks)
    assert [w for w in words if w.startswith(("T:", "w:"))] == ["T:SyntaxError"]


def test_a_word_neither_class_has_seen_does_not_tip_one_against_the_other() -> None:
    # a class with many words and one with few; "w:rare" is only a third class's
    index = KnownReports(
        [
            _report("version_mismatch", 1, "p:transformers", "fn:forward", "c:model", "c:self"),
            _report("version_mismatch", 2, "p:transformers", "fn:generate", "c:output", "c:ids"),
            _report("version_mismatch", 3, "p:peft", "fn:merge", "c:lora", "c:weight"),
            _report("corrupt_data", 1, "p:datasets", "fn:map"),
            _report("disk_full", 1, "w:rare", "p:shutil"),
        ]
    )
    before = index.likelihoods({"p:transformers", "p:datasets"})
    after = index.likelihoods({"p:transformers", "p:datasets", "w:rare"})
    gap = before["version_mismatch"] - before["corrupt_data"]
    # smoothed toward all reports' words, the unseen word costs both classes the same; a
    # constant added to every count would cost the class with more words more
    assert after["version_mismatch"] - after["corrupt_data"] == pytest.approx(gap)
    assert after["disk_full"] - before["disk_full"] > after["corrupt_data"] - before["corrupt_data"]


def test_a_likelihood_is_the_same_whatever_order_the_words_come_in() -> None:
    # a failure's words are a set, whose order changes with the interpreter's string hashing;
    # summed in order, 60 log-likelihoods differ in their last bits between two orders of
    # these words, which can make or break a tie, or a class's share, from one run to the next
    rng = random.Random(7)
    words = [f"w:t{i}" for i in range(60)]
    index = KnownReports(
        [_report(c, k, *rng.sample(words, 25)) for k, c in enumerate(["a", "b", "c"] * 6)]
    )
    assert index.likelihoods(words) == index.likelihoods(list(reversed(words)))


def test_the_likely_class_holds_most_of_the_likelihood_and_cites_its_nearest_reports() -> None:
    index = KnownReports(
        [
            _report("version_mismatch", 1, "T:AttributeError", "w:attribute", "p:transformers"),
            _report("version_mismatch", 2, "T:AttributeError", "w:attribute", "p:peft"),
            _report("corrupt_data", 1, "T:ValueError", "w:json", "p:datasets"),
            _report("corrupt_data", 2, "T:ValueError", "w:json", "p:pandas"),
            _report("none", 1, "T:AttributeError", "p:transformers"),  # teaches nothing
        ]
    )
    assert len(index) == 4
    got = index.resemble(frozenset({"T:AttributeError", "p:transformers", "w:unheard"}))
    assert got is not None and got.cls == "version_mismatch" and got.share > 0.5
    assert [r.source for r in got.reports] == [
        "https://example.org/version_mismatch/1",  # shares the package as well
        "https://example.org/version_mismatch/2",
    ]
    assert index.resemble(frozenset({"w:unheard", "p:nowhere"})) is None
    # one word of each of two classes as common: neither is more likely than the other
    assert index.resemble(frozenset({"w:attribute", "w:json"})) is None
    assert index.without({"https://example.org/corrupt_data/1"}).per_class == {
        "version_mismatch": 2,
        "corrupt_data": 1,
    }


def test_the_likeliest_class_is_named_even_when_it_holds_under_half_the_likelihood() -> None:
    # three classes' reports all raised a KeyError; the fewer other words a class's reports
    # have, the likelier that word is in it, so version_mismatch leads without a majority
    index = KnownReports(
        [
            _report("version_mismatch", 1, "T:KeyError", "p:trl"),
            _report("user_code_error", 1, "T:KeyError", "p:trl", "p:datasets"),
            _report("corrupt_data", 1, "T:KeyError", "p:trl", "p:pandas", "p:numpy"),
        ]
    )
    got = index.resemble(frozenset({"T:KeyError"}))
    assert got is not None and got.cls == "version_mismatch"
    assert 1 / 3 < got.share < 0.5  # a plurality, stated as one
    even = KnownReports(
        [
            _report("version_mismatch", 1, "T:KeyError", "p:trl"),
            _report("user_code_error", 1, "T:KeyError", "p:datasets"),
            _report("corrupt_data", 1, "T:KeyError", "p:pandas"),
        ]
    )
    assert even.resemble(frozenset({"T:KeyError"})) is None  # a three-way tie names no class


def test_an_index_reads_back_what_it_wrote(tmp_path: Path) -> None:
    entries = [_report("cuda_oom", 1, "T:OutOfMemoryError", "w:cuda"), _report("none", 2, "w:x")]
    path = tmp_path / "known.json"
    path.write_text(KnownReports.dump(entries, {"uncaught-exception": (3, 4)}), encoding="utf-8")
    back = KnownReports.load(path)
    assert [(e.report, e.words) for e in back.entries] == [entries[0]]
    assert back.records == {"uncaught-exception": (3, 4)}
    got = back.resemble(frozenset({"w:cuda"}), "uncaught-exception")
    assert got is not None and got.record == (3, 4)
    assert back.without({"x"}).records == back.records


def test_a_real_report_no_rule_names_takes_the_class_of_the_threads_it_resembles() -> None:
    # ms-swift#1702 as posted (a tune case): the tail of a traceback, a KeyError raised in the
    # framework's DPO preprocessing; no rule names it, its thread's fix was a newer ms-swift
    case = next(c for c in accuracy.load_cases() if c.id == "modelscope-ms-swift-1702")
    report = accuracy.analyze_case(case, accuracy.load_rules())
    top = report.primary
    assert top is not None and top.rule_id == "exception-callers-not-shown"
    assert top.resemblance is not None and top.cls == case.cause == "version_mismatch"
    assert top.class_label == "likely version_mismatch"
    tune = {c.source for c in accuracy.load_cases(parts=("tune",))}
    cited = [r.source for r in top.resemblance.reports]
    assert cited and case.source not in cited and set(cited) <= tune
    assert all(r.cls == "version_mismatch" for r in top.resemblance.reports)
    assert report.verdict.startswith(
        "Uncaught exception whose callers are not in the log (likely version_mismatch"
    )
    # what the guess is worth, measured on held-out tune reports, is said beside it
    right, of = bundled().records["exception-callers-not-shown"]
    assert top.resemblance.record == (right, of) and 0 < right < of
    assert f"such a guess was right for {right} of {of} held-out reports" in render(report, "text")


def test_a_real_report_whose_likeliest_class_holds_no_majority_is_still_named() -> None:
    # Every tune report the bundled index answers without a majority (which ones depends on the
    # index, rebuilt as the corpus grows; there are always some): its likeliest class is named,
    # as a plurality ("possibly"), however good its fallback's record
    rules = accuracy.load_rules()
    pluralities = 0
    for case in accuracy.load_cases():
        if case.part != "tune":
            continue
        report = accuracy.analyze_case(case, rules)
        top = report.primary
        if top is None or top.resemblance is None or top.resemblance.share > 0.5:
            continue
        pluralities += 1
        assert case.source not in {r.source for r in top.resemblance.reports}
        assert top.cls == top.resemblance.cls != top.match.rule.cls
        assert top.class_label == f"possibly {top.cls}"
        assert f"(possibly {top.cls})" in report.verdict
    assert pluralities >= 1


def test_a_launchers_teardown_that_says_how_not_why_takes_the_class_it_resembles() -> None:
    # DeepSpeed#4571 as posted (a tune case): with ZeRO CPU offload the launcher reports its
    # only rank killed and prints nothing of why; the thread's commenters confirm host memory
    # ran out. Without the rule written from it only the teardown is left, and the threads it
    # resembles say what such teardowns were.
    leave_case_out = benchmark("leave_case_out")
    case = next(c for c in accuracy.load_cases() if c.id == "deepspeedai-deepspeed-4571")
    rules = accuracy.load_rules()
    [(_, report, off)] = list(leave_case_out.reports([case], rules))
    assert off, "a rule cites the case, so this measures the rest of the rule base"
    top = report.primary
    assert top is not None and top.rule_id == "launcher-teardown"
    assert rules.by_id["launcher-teardown"].cls == "scheduler_kill"
    assert top.resemblance is not None and top.cls == case.cause == "host_oom"
    assert case.source not in {r.source for r in top.resemblance.reports}
    assert all(r.cls == "host_oom" for r in top.resemblance.reports)


def test_an_exception_raised_in_the_users_own_code_stays_theirs() -> None:
    # a real torchrun run whose training step raises in the script itself
    report = analyze([FIXTURES / "captured" / "user_code_error"], parallel=False)
    top = report.primary
    assert top is not None and top.rule_id == "user-code-error"
    assert top.resemblance is None and top.cls == "user_code_error"


def test_the_bundled_index_is_current_and_holds_no_validation_report() -> None:
    assert BUNDLED.read_text(encoding="utf-8") == known_reports.build()
    validation = {c.source for c in accuracy.load_cases(parts=("validation",))}
    tune = {c.source for c in accuracy.load_cases(parts=("tune",))}
    sources = {e.report.source for e in bundled().entries}
    assert len(sources) > 500 and sources <= tune and not sources & validation


def test_what_a_report_resembles_is_shown_as_data_in_every_format() -> None:
    hostile = "<script>alert(1)</script> *bold* <!channel> ]]> `tick`"
    index = KnownReports(
        [
            (KnownReport("https://example.org/t/1", "corrupt_data", hostile),
             frozenset({"T:Error", "w:padding", "p:base64"})),
            (KnownReport("javascript:alert(1)", "corrupt_data", "b"), frozenset({"w:padding"})),
            (KnownReport("https://example.org/t/3", "cuda_oom", "c"), frozenset({"w:cuda"})),
        ],
        {"uncaught-exception": (3, 5)},
    )  # fmt: skip
    report = analyze([BASE64], known_reports=index, parallel=False)
    top = report.primary
    assert top is not None and top.resemblance is not None and top.cls == "corrupt_data"
    html = render(report, "html")
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert 'href="javascript:' not in html and 'href="https://example.org/t/1"' in html
    assert "Resembles known reports of corrupt_data" in html
    markdown = render(report, "markdown")
    assert (
        "**Resembles** known reports of corrupt\\_data (such a guess was right for 3 of 5"
        in markdown
    )
    assert "<script>" not in markdown.replace("`<script>", "")
    assert "likely corrupt_data" in render(report, "text")
    doc = json.loads(render(report, "json"))
    jsonschema.Draft202012Validator(load_schema()).validate(doc)
    assert doc["causes"][0]["class"] == "corrupt_data"
    assert doc["causes"][0]["resemblance"]["reports"][0]["exception"] == hostile
    assert doc["causes"][0]["resemblance"]["record"] == {"right": 3, "of": 5}
    assert "right for 3 of 5 held-out reports" in html


def test_a_new_index_is_a_new_diagnosis_for_the_fleets_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashlens import resemble
    from crashlens.fleet.worker import rules_hash

    rules = accuracy.load_rules()
    before = rules_hash(rules)
    index = tmp_path / "known_reports.json"
    index.write_text(KnownReports.dump([_report("cuda_oom", 1, "w:cuda")]), encoding="utf-8")
    monkeypatch.setattr(resemble, "BUNDLED", index)
    assert rules_hash(rules) != before


def test_a_guess_right_less_often_than_not_is_stated_as_possible() -> None:
    # a real run SIGKILLed while printing its traceback: the log ends inside it
    cut = ROOT / "rules" / "process" / "traceback-cut-off" / "positive.log"
    words = frozenset({"p:cut", "fn:inner", "c:depth"})
    entries = [_report("cuda_oom", 1, *words), _report("cuda_oom", 2, *words)]
    # (and a guess too few held-out reports measured, or none, is only possible too)
    for record, label in (
        ((2, 5), "possibly cuda_oom"),
        ((3, 5), "likely cuda_oom"),
        ((2, 3), "possibly cuda_oom"),
        (None, "possibly cuda_oom"),
    ):
        records = {} if record is None else {"traceback-cut-off": record}
        index = KnownReports(entries, records)
        top = analyze([cut], known_reports=index, parallel=False).primary
        assert top is not None and top.rule_id == "traceback-cut-off"
        assert top.resemblance is not None and top.class_label == label
