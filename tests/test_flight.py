"""Flight Recorder dumps beside the logs: read safely, matched across ranks, named in the report.

The hangs under fixtures/flight/ are real torchrun runs (gloo, torch 2.13 on CPU) whose ranks
wrote their Flight Recorder dumps when the first collective failed (the repro scripts do what
ProcessGroupNCCL does on a timeout); tests/captures/flight_json/ holds real JSON dumps.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crashlens.api import analyze
from crashlens.ingest.flight import DumpRefused, looks_like_dump, read_dump
from crashlens.render import FORMATS, render

ROOT = Path(__file__).resolve().parents[1]
FLIGHT = ROOT / "fixtures" / "flight"
CASES = sorted(p.parent for p in FLIGHT.glob("*/*/expected.yaml"))
JSON_DUMPS = ROOT / "tests" / "captures" / "flight_json"


def _expected(case: Path) -> dict[str, object]:
    data = yaml.safe_load((case / "expected.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_the_captured_hangs_cover_each_way_a_rank_leaves_the_collectives() -> None:
    kinds = set()
    for case in CASES:
        report = analyze([case])
        assert report.flight is not None
        kinds |= {f.kind for f in report.flight.findings}
    assert len(CASES) >= 8
    assert {"not_joined", "mismatch", "no_dump"} <= kinds


@pytest.mark.parametrize("case", CASES, ids=[str(c.relative_to(FLIGHT)) for c in CASES])
def test_captured_hang_names_the_culprit_rank_and_the_collective(case: Path) -> None:
    expected = _expected(case)
    report = analyze([case])
    assert report.primary is not None
    assert report.primary.match.rule.cls == expected["top_class"]
    assert report.first_failure is not None
    assert report.first_failure.rank == expected["first_failure_rank"]
    assert report.flight is not None and report.flight.findings
    finding = report.flight.findings[0]
    assert expected["first_failure_rank"] in finding.culprits
    assert finding.waiting and expected["first_failure_rank"] not in finding.waiting
    # the hang is the job's failure: crashlens exits 1 for it
    assert report.failed


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_format_names_the_culprit_and_the_collective(fmt: str) -> None:
    case = FLIGHT / "collective_hang" / "tee-faultdesync-odd-rank1"
    report = analyze([case])
    out = render(report, fmt)
    if fmt == "junit":
        out = out.replace("&#x27;", "'")
    assert "rank 1" in out or '"rank": 1' in out
    assert "broadcast" in out
    assert "#4" in out or '"seq": 4' in out


def test_json_carries_the_matched_collectives() -> None:
    case = FLIGHT / "rank0_works_alone" / "tee"
    data = json.loads(render(analyze([case]), "json"))
    fr = data["flight_recorder"]
    assert [d["rank"] for d in fr["dumps"]] == [0, 1]
    assert {d["format"] for d in fr["dumps"]} == {"pickle"}
    (finding,) = fr["findings"]
    assert finding["kind"] == "not_joined"
    assert finding["culprits"] == [0] and finding["waiting"] == [1]
    assert finding["op"] == "barrier" and finding["seq"] == 1
    last = {c["rank"]: c["op"] for c in fr["last_calls"]}
    assert last[1] == "barrier"


def test_a_job_without_dumps_has_no_flight_record_in_json() -> None:
    case = ROOT / "fixtures" / "captured" / "gloo_hang"
    some = sorted(case.glob("*/expected.yaml"))[0].parent
    data = json.loads(render(analyze([some]), "json"))
    assert data["flight_recorder"] is None


def test_html_marks_the_stuck_collective_per_rank() -> None:
    case = FLIGHT / "collective_hang" / "tee-faultdesync-odd-rank2"
    html = render(analyze([case]), "html")
    assert "Collectives (Flight Recorder)" in html
    assert "<tr class='culprit'><td class='n'>2</td>" in html
    assert html.count("<tr class='waiting'>") == 3
    assert "Flight Recorder: last entered broadcast #4" in html


def test_a_rank_without_a_dump_is_named_and_lowers_nothing_else() -> None:
    case = FLIGHT / "collective_hang" / "tee-faultraise-odd-rank3"
    report = analyze([case])
    assert report.flight is not None
    assert report.flight.missing == (3,)
    assert any("no Flight Recorder dump for rank(s) 3" in n for n in report.notes)
    # the rank's own exception, in its own log, is the cause; the dumps agree it is rank 3
    assert report.primary is not None and report.primary.rule_id == "user-code-error"
    assert report.first_failure is not None and report.first_failure.rank == 3


def test_dumps_decide_where_the_logs_point_at_the_wrong_rank() -> None:
    """gloo's first rank to time out closes its sockets: the others print "Connection closed
    by peer", which names the wrong rank; the dumps say who never joined."""
    case = FLIGHT / "collective_hang" / "tee-faultdesync-odd-rank2"
    console = (case / "console.log").read_text(encoding="utf-8")
    assert "Connection closed by peer" in console or "Timed out waiting" in console
    without = analyze([case / "console.log"])
    with_dumps = analyze([case])
    assert with_dumps.first_failure is not None and with_dumps.first_failure.rank == 2
    assert without.primary is None or without.primary.rule_id != "flight-recorder-mismatch"


def test_json_dumps_from_torch_are_read() -> None:
    report = analyze([JSON_DUMPS])
    assert report.flight is not None
    assert [d.format for d in report.flight.dumps] == ["json", "json"]
    (finding,) = report.flight.findings
    assert (finding.kind, finding.culprits, finding.waiting) == ("not_joined", (1,), (0,))
    assert finding.culprit_last == (2, "all_reduce")
    assert report.primary is not None and report.primary.rule_id == "flight-recorder-not-joined"


def test_an_unknown_format_version_is_a_note(tmp_path: Path) -> None:
    for src in JSON_DUMPS.glob("*.json"):
        data = json.loads(src.read_text(encoding="utf-8"))
        data["version"] = "3.1"
        (tmp_path / src.name).write_text(json.dumps(data), encoding="utf-8")
    report = analyze([tmp_path])
    assert any("format 3.1 is newer than" in n for n in report.notes)
    assert report.flight is not None and report.flight.findings


class _Boom:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, ("touch pwned",))


def test_a_dump_naming_a_python_object_is_refused_and_never_run(tmp_path: Path) -> None:
    evil = tmp_path / "comm_lib_trace_rank_0"
    evil.write_bytes(pickle.dumps({"version": "2.10", "entries": [_Boom()]}))
    assert looks_like_dump(evil.read_bytes()[:64])
    with pytest.raises(DumpRefused, match=r"names a Python object \(\w+\.system\)"):
        read_dump(evil, evil.name)
    shutil.copy(FLIGHT / "rank0_works_alone" / "tee" / "console.log", tmp_path / "console.log")
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        report = analyze([tmp_path])
    finally:
        os.chdir(cwd)
    assert not (tmp_path / "pwned").exists()
    refused = [f for f in report.inputs if f.path.endswith("comm_lib_trace_rank_0")]
    assert refused and refused[0].skipped and "names a Python object" in refused[0].skipped
    assert report.primary is not None  # the rest of the job is still analysed


def test_a_truncated_or_foreign_pickle_is_a_one_line_skip(tmp_path: Path) -> None:
    real = FLIGHT / "rank0_works_alone" / "tee" / "flight_recorder" / "comm_lib_trace_rank_1"
    (tmp_path / "comm_lib_trace_rank_1").write_bytes(real.read_bytes()[:200])
    (tmp_path / "cache_7").write_bytes(pickle.dumps({"weights": [1, 2, 3]}))
    with pytest.raises(DumpRefused, match="not a readable"):
        read_dump(tmp_path / "comm_lib_trace_rank_1", "comm_lib_trace_rank_1")
    with pytest.raises(DumpRefused, match="no 'entries'"):
        read_dump(tmp_path / "cache_7", "cache_7")


def test_pickle_and_json_dumps_of_one_run_read_alike() -> None:
    dump = read_dump(
        FLIGHT / "rank0_works_alone" / "tee" / "flight_recorder" / "comm_lib_trace_rank_1",
        "comm_lib_trace_rank_1",
    )
    assert dump.format == "pickle" and dump.version == "2.10" and dump.rank == 1
    call = dump.calls[-1]
    assert (call.op, call.backend, call.group, call.group_desc) == (
        "barrier", "gloo", "0", "default_pg",
    )  # fmt: skip
    # the pickle carries the stack of each call; the user's frame is the script's
    assert call.user_frame is not None and call.user_frame.file.endswith("train.py")
    json_dump = read_dump(JSON_DUMPS / "comm_lib_trace_rank_0.json", "comm_lib_trace_rank_0.json")
    assert json_dump.format == "json" and json_dump.calls[0].user_frame is None
    assert json_dump.groups == (("", "", (0, 1)),)


UPSTREAM_CULPRIT = re.compile(r"Culprit rank (\d+); Error type: ")
UPSTREAM_MISSING = re.compile(r"missing ranks: \{([\d, ]+)\}")


def _upstream(case: Path, tmp: Path) -> str:
    """PyTorch's own analyzer on a copy of the case's dumps. gloo records its default group in
    ``pg_config`` under an empty name while the entries name it "0"; the copy gives the group
    the name its entries use, which that analyzer needs to pair them (nothing else changes)."""
    for src in (case / "flight_recorder").iterdir():
        data = pickle.loads(src.read_bytes())  # our own captured fixture, not user input
        (cfg,) = data["pg_config"].values()
        data["pg_config"] = {"0": {**cfg, "name": "0", "desc": "default_pg"}}
        (tmp / src.name).write_bytes(pickle.dumps(data))
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(tmp),
         "--allow-incomplete-ranks"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return run.stdout + run.stderr


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if (c / "flight_recorder").is_dir()],
    ids=[str(c.relative_to(FLIGHT)) for c in CASES if (c / "flight_recorder").is_dir()],
)
def test_same_culprit_as_pytorchs_own_analyzer(case: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed.flight_recorder.fr_trace")
    report = analyze([case])
    assert report.flight is not None and report.flight.findings
    finding = report.flight.findings[0]
    if finding.kind == "no_dump":
        pytest.skip("a rank left no dump: PyTorch's analyzer cannot decide without it")
    said = _upstream(case, tmp_path)
    if finding.kind == "not_joined":
        missing = UPSTREAM_MISSING.search(said)
        assert missing is not None, said[-2000:]
        assert {int(r) for r in missing.group(1).split(",")} == set(finding.culprits)
        return
    culprits = {int(r) for r in UPSTREAM_CULPRIT.findall(said.split("Not all ranks")[0])}
    if culprits == set(finding.culprits):
        return
    # PyTorch's analyzer takes the first dump it lists as right ("we assume the current rank
    # is not the source of the error", flight_recorder/components/utils.py): when that dump is
    # the odd rank's, it names every other rank. crashlens counts the ranks instead.
    assert culprits == set(finding.waiting), said[-2000:]


def test_missing_dumps_lower_the_confidence_and_are_named(tmp_path: Path) -> None:
    case = FLIGHT / "collective_hang" / "tee-faultdesync-odd-rank2"
    shutil.copytree(case, tmp_path / "job")
    (tmp_path / "job" / "flight_recorder" / "comm_lib_trace_rank_0").unlink()
    full, partial = analyze([case]), analyze([tmp_path / "job"])
    assert full.primary is not None and partial.primary is not None
    assert partial.primary.rule_id == full.primary.rule_id == "flight-recorder-mismatch"
    assert partial.first_failure is not None and partial.first_failure.rank == 2
    assert partial.primary.confidence < full.primary.confidence
    assert any("no Flight Recorder dump for rank(s) 0" in n for n in partial.notes)


def test_the_cli_exits_1_with_the_hang_as_the_cause() -> None:
    case = FLIGHT / "gloo_hang" / "tee-hang-rank1"
    run = subprocess.run(
        [sys.executable, "-m", "crashlens", "analyze", "--format", "json", str(case)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 1, run.stderr
    data = json.loads(run.stdout)
    assert data["causes"][0]["rule"] == "flight-recorder-not-joined"
    assert data["first_failure"]["rank"] == 1
    assert "rank 1 never entered all_reduce #4" in data["causes"][0]["evidence"][0]["text"]


def test_a_dump_cut_off_when_its_rank_was_killed_is_skipped_with_a_note() -> None:
    """torchrun killed the stalled rank as it began its dump: an empty ``.tmp`` is left."""
    case = FLIGHT / "gloo_hang" / "tee-hang-rank2"
    partial = case / "flight_recorder" / "comm_lib_trace_rank_2.tmp"
    assert partial.is_file() and partial.stat().st_size == 0
    report = analyze([case])
    (record,) = [f for f in report.inputs if f.path.endswith("comm_lib_trace_rank_2.tmp")]
    assert record.note == "empty file"
    assert report.flight is not None and report.flight.missing == (2,)
    assert report.first_failure is not None and report.first_failure.rank == 2


def test_notes_about_many_files_for_one_reason_are_one_line() -> None:
    """A torchrun --log-dir tree has an empty stdout.log per rank: one note, not one per file."""
    report = analyze([FLIGHT / "collective_hang" / "tee-faultdesync-odd-rank2"])
    empty = [n for n in report.notes if "empty file" in n]
    assert len(empty) == 1 and empty[0].startswith("4 files: empty file (")
    assert empty[0].endswith(" and 2 more)")
