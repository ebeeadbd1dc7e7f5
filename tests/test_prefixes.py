"""Launcher prefixes are stripped and remembered, and ambiguous styles are only used when sniffed."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashlens.ingest.prefixes import (
    NO_PREFIX,
    Prefix,
    PrefixStyle,
    nccl_origin,
    sniff_style,
    strip,
)


def test_torchrun_tee_and_excepthook_prefixes_stack() -> None:
    text, p = strip("[default1]:[rank5]: Traceback (most recent call last):", PrefixStyle())
    assert text == "Traceback (most recent call last):"
    assert (p.local_rank, p.rank) == (1, 5)


def test_rank_prefix_keeps_indentation_of_frames() -> None:
    text, p = strip('[rank3]:   File "train.py", line 3, in <module>', PrefixStyle())
    assert text == '  File "train.py", line 3, in <module>'
    assert p.rank == 3


def test_c10d_log_prefix_is_not_mistaken_for_a_role() -> None:
    text, p = strip("[rank0]:[E501 03:24:01.123456789 ProcessGroupNCCL.cpp:629] x", PrefixStyle())
    assert text.startswith("[E501 03:24:01")
    assert p.rank == 0


def test_openmpi_tag_output() -> None:
    text, p = strip("[1,3]<stderr>:RuntimeError: boom", PrefixStyle())
    assert (text, p.rank) == ("RuntimeError: boom", 3)


def test_srun_label_only_when_sniffed() -> None:
    head = ["0: step 1", "1: step 1", " 0: step 2", "1: step 2"]
    style = sniff_style(head)
    assert style.srun
    assert strip("3: hello", style) == ("hello", strip("3: hello", style)[1])
    assert strip("3: hello", style)[1].rank == 3
    plain = sniff_style(["step 1 loss 2", "12: not a label", "done"])
    assert not plain.srun
    assert strip("12: not a label", plain)[0] == "12: not a label"


def test_pdsh_host_prefix() -> None:
    style = sniff_style(["node-01: a", "node-02: b", "node-01: c"])
    assert style.pdsh
    text, p = strip("node-02: [rank6]: RuntimeError: x", style)
    assert (text, p.host, p.rank) == ("RuntimeError: x", "node-02", 6)


def test_nccl_origin() -> None:
    origin = nccl_origin("node-01:73342:73383 [2] NCCL INFO Using network IB")
    assert origin is not None
    assert (origin.host, origin.pid) == ("node-01", 73342)
    assert nccl_origin("plain line") is None


def test_stamped_console_strips_the_tools_timestamp_and_keeps_it() -> None:
    head = [
        "2024-05-01 03:14:00,101 2024-05-01 03:14:00,100 INFO train: step 1",
        "2024-05-01 03:14:00,200 Traceback (most recent call last):",
        '2024-05-01 03:14:00,200   File "train.py", line 3, in <module>',
        "2024-05-01 03:14:00,201 ValueError: boom",
    ]
    style = sniff_style(head)
    assert style.stamped
    text, p = strip(head[2], style)
    assert text == '  File "train.py", line 3, in <module>'
    assert p.stamp == "2024-05-01 03:14:00,200 "
    kube = strip("2024-05-01T03:14:00.123456789Z [rank3]: Traceback (most recent call last):",
                 sniff_style(["2024-05-01T03:14:00.1Z [rank3]: x"] * 3))  # fmt: skip
    assert kube[0] == "Traceback (most recent call last):" and kube[1].rank == 3


def test_a_container_stamped_paste_under_its_command_line_is_still_stamped() -> None:
    # allenai/rslearn_projects#10: `kubectl logs --timestamps` output, as pasted under a line
    # of the reporter's own; nanosecond UTC stamps are a tool's, so most lines are enough
    head = [
        "$ kubectl logs job/train --timestamps",
        "2024-09-05T19:41:11.257738912Z Error: mkl-service + Intel(R) MKL: MKL_THREADING_LAYER="
        "INTEL is incompatible with libgomp.so.1 library.",
        "2024-09-05T19:41:11.257764641Z \tTry to import numpy first or set the threading layer "
        "accordingly. Set MKL_SERVICE_FORCE_INTEL to force it.",
    ]
    style = sniff_style(head)
    assert style.stamped
    assert strip(head[1], style)[0].startswith("Error: mkl-service + Intel(R) MKL:")
    # a logging format's own stamps on most lines of a file are not a tool's
    logged = ["setup", *(f"2024-05-01 03:14:0{i},100 INFO step {i}" for i in range(2))]
    assert not sniff_style(logged).stamped


def test_a_ci_servers_bracketed_stamp_is_stripped_and_kept() -> None:
    # Project-MONAI/MONAI#4530: Jenkins' Timestamper puts "[<ISO time>] " before every line
    head = [
        "[2022-06-18T02:31:52.572Z] tests/test_integration_segmentation_3d.py",
        "[2022-06-18T02:31:53.944Z] Traceback (most recent call last):",
        '[2022-06-18T02:31:53.944Z]   File "t.py", line 21, in <module>',
        "[2022-06-18T02:31:53.944Z] AttributeError: module 'distutils' has no attribute 'version'",
    ]
    style = sniff_style(head)
    assert style.stamped
    text, p = strip(head[2], style)
    assert text == '  File "t.py", line 21, in <module>'
    assert p.stamp == "[2022-06-18T02:31:53.944Z] "
    # one stamped exception line in an unstamped paste is a tool's too
    bare = strip(head[3], sniff_style(["plain", "text"]))
    assert bare[0].startswith("AttributeError: module") and bare[1].stamp


def test_a_logging_format_in_brackets_is_not_a_tools_stamp() -> None:
    # DeepSpeed's own records put the time in brackets too, followed by the level
    head = [f"[2023-05-10 11:54:2{i},344] [INFO] [launch.py:1{i}:main] step {i}" for i in range(5)]
    style = sniff_style(head)
    assert not style.stamped
    assert strip(head[0], style)[0] == head[0]


def test_plain_logging_file_is_not_a_stamped_console() -> None:
    head = [f"2024-05-01 03:14:0{i},000 INFO train: step {i}" for i in range(5)]
    assert not sniff_style(head).stamped


def test_srun_task_id_is_the_rank_only_when_srun_started_each_rank() -> None:
    style = PrefixStyle(srun=True)
    # srun --label python train.py: one task per rank, the task id is the rank
    _, one = strip("3: Traceback (most recent call last):", style)
    assert (one.rank, one.local_rank) == (3, None)
    # srun --label torchrun --tee 3: one task (a launcher) per node, its workers' local ranks
    # follow; the task id names the node's agent, never a global rank
    text, per_node = strip("1: [default3]:Traceback (most recent call last):", style)
    assert text == "Traceback (most recent call last):"
    assert (per_node.rank, per_node.local_rank, per_node.host) == (None, 3, "srun-task-1")
    # ... unless the worker's own prefix names its global rank
    _, named = strip("1: [default3]:[rank11]: KeyError: 'labels'", style)
    assert (named.rank, named.local_rank) == (11, 3)


def test_an_srun_label_before_a_traceback_header_is_not_glued_text() -> None:
    from crashlens.parse.text import split_glued

    assert split_glued("0: [default3]:[rank3]: Traceback (most recent call last):") == (
        "0: [default3]:[rank3]: Traceback (most recent call last):",
    )
    bar = "train:  60%|######    | 6/10 [00:00<00:00, 9it/s]"
    assert split_glued(bar + "[rank2]: Traceback (most recent call last):") == (
        bar,
        "[rank2]: Traceback (most recent call last):",
    )


def test_nccl_device_index_is_not_a_rank() -> None:
    origin = nccl_origin("node-01:1234:1250 [3] NCCL INFO cudaDriverVersion 12040")
    assert origin is not None and origin.rank is None and origin.host == "node-01"


def test_a_module_qualified_exception_type_is_not_a_pdsh_host() -> None:
    # lucidrains/lightweight-gan#109 as posted: one line, whose dotted type ends in a colon.
    line = "PIL.UnidentifiedImageError: cannot identify image file '...\\\\Cat\\\\666.jpg'"
    assert not sniff_style([line]).pdsh
    assert strip(line, PrefixStyle(pdsh=True))[0] == line
    # a real pdsh prefix before such a line is still the host
    text, prefix = strip("node-01.cluster: torch.cuda.OutOfMemoryError: CUDA out of memory.",
                         PrefixStyle(pdsh=True))  # fmt: skip
    assert (text, prefix.host) == ("torch.cuda.OutOfMemoryError: CUDA out of memory.",
                                   "node-01.cluster")  # fmt: skip


def test_a_shells_own_report_under_a_stamp_makes_the_console_stamped() -> None:
    # divamgupta/deep-clustering-kingdra#2: a platform stamped every line, bash's included.
    head = [
        "2020-11-24 20:18:25.069 Epoch 5/5",
        "2020-11-24 20:18:25.069 - 24s - loss: 5.9945",
        "2020-11-24 20:22:28.106 /bin/bash: line 27: 318 Killed sh start.sh",
    ]
    style = sniff_style(head)
    assert style.stamped
    assert strip(head[2], style)[0] == "/bin/bash: line 27: 318 Killed sh start.sh"
    assert not sniff_style(head[:2]).stamped


def test_sparse_keys_equal_a_match_at_every_line() -> None:
    # A file whose lines carry prefixes only here and there gets its keys from one search for
    # prefixes; they must be what matching at every line gives, on every layout we have.
    from crashlens.ingest.prefixes import key_pattern

    root = Path(__file__).resolve().parents[1]
    checked = 0
    for path in sorted([*root.glob("fixtures/**/*.log"), *root.glob("corpus/*/*/*.log")]):
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            data += b"\n"
        lines = data.decode("utf-8", "replace").splitlines()[:200]
        style = sniff_style(lines)
        if style.srun or style.pdsh or style.labelled:
            continue  # a key is read at every line of these (PrefixKeys.every_line)
        keys = key_pattern(style)
        for block in (data, b"x\n" + data, data[data.find(b"\n") + 1 :] or b"\n"):
            first = keys._first.match(block, 0, len(block))
            dense = keys._rest.findall(block, 0, len(block) - 1)
            dense.insert(0, first.group(1) if first is not None else b"")
            assert keys.keys(block, 0, len(block)) == dense, path
            # keys() matches every line itself where most lines carry a prefix (a console).
            assert keys._sparse_keys(block, 0, len(block), first, None) == dense, path
            checked += 1
    assert checked > 500


def test_a_paste_indented_as_a_block_has_its_margin_removed() -> None:
    pasted = [
        "  2024-05-01 03:14:00,000 INFO train: step 2",
        "  Traceback (most recent call last):",
        '    File "/home/user/train.py", line 6, in <module>',
        "",
        "  RuntimeError: CUDA out of memory.",
    ]
    style = sniff_style(pasted)
    assert style.margin == "  "
    assert strip(pasted[2], style)[0] == '  File "/home/user/train.py", line 6, in <module>'
    assert strip("[rank1]: x", style) == ("x", strip("[rank1]: x", sniff_style(["a"]))[1])
    # one line at column 0, a single stray space, or a far indent: no margin
    assert sniff_style([*pasted, "RuntimeError: x"]).margin == ""
    assert sniff_style([" " + line.lstrip() for line in pasted if line]).margin == ""
    assert sniff_style([" " * 30 + line for line in pasted if line]).margin == ""


def test_container_log_stamps_are_a_tools_even_on_a_lone_line() -> None:
    # kubectl logs --timestamps / docker logs -t: RFC 3339 in nanoseconds, UTC
    lone = ["2024-05-01T03:14:00.123456789Z [node-01:61444] Signal: Segmentation fault (11)"]
    style = sniff_style(lone)
    assert style.stamped
    assert strip(lone[0], style)[0] == "[node-01:61444] Signal: Segmentation fault (11)"
    # a bare exception line under a stamp: Python prints it unstamped, so a tool stamped it
    assert sniff_style(["2024-05-01 03:14:00,200 ImportError: cannot import name 'x'"]).stamped
    # a program's own ISO stamps on its records are not stripped
    records = [f"2024-05-01T03:14:0{i}.123456+00:00 INFO step {i}" for i in range(5)]
    assert not sniff_style(records).stamped


def test_labels_before_an_indented_header_are_not_glued_text() -> None:
    from crashlens.parse.text import split_glued

    # facebookresearch/access#9's block indentation, under a launcher's label
    for line in (
        "[rank0]:               Traceback (most recent call last):",
        "0:               Traceback (most recent call last):",
        "stderr:   Traceback (most recent call last):",
    ):
        assert split_glued(line) == (line,)


def test_a_paste_with_doubled_line_breaks_is_read_without_them() -> None:
    doubled = ["Traceback (most recent call last):", "", '  File "t.py", line 1', "", "    f()"]
    doubled += ["", "E: x", ""]
    assert sniff_style(doubled).double_spaced
    # a log's own blank lines here and there, or too few lines to tell: not doubled
    assert not sniff_style(["a", "", "b", "c", "", "d", ""]).double_spaced
    assert not sniff_style(["a", "", "b", ""]).double_spaced
    # the log's own blank line, its break doubled too, is three blank lines
    assert sniff_style(
        ["step 1", "", "", "", "Traceback (most recent call last):", "", "E: x"]
    ).double_spaced
    assert not sniff_style(
        ["step 1", "", "", "Traceback (most recent call last):", "", "E: x"]
    ).double_spaced


def test_a_double_spaced_paste_keeps_the_logs_own_blank_lines(tmp_path: Path) -> None:
    # a blank line ends an exception's message; doubled, it is three blank lines, and the
    # second of them is the log's own
    from crashlens.api import analyze

    log = ["step 1", "Traceback (most recent call last):", '  File "t.py", line 1, in <module>']
    log += ["ValueError: bad config", "", "INFO shutting down: rank 3 exited", "x"]
    (tmp_path / "doubled.log").write_text("".join(line + "\n\n" for line in log))
    (tmp_path / "plain.log").write_text("".join(line + "\n" for line in log))
    messages = []
    for name in ("doubled.log", "plain.log"):
        report = analyze([tmp_path / name], parallel=False)
        messages.append([tb.final.message for tb in report.tracebacks])
    assert messages[0] == messages[1] == ["bad config"]


def test_the_fast_path_reads_prefixes_under_a_pasted_blocks_margin() -> None:
    from crashlens.ingest.prefixes import key_pattern

    block = b"  [rank0]: step 1\n  [rank1]: Traceback (most recent call last):\n  plain\n"
    style = sniff_style(block.decode().splitlines())
    assert style.margin == "  "
    keys = key_pattern(style)
    assert not keys.single(block, 0, len(block))
    assert keys.keys(block, 0, len(block)) == [b"[rank0]: ", b"[rank1]: ", b""]
    # each key names the writer strip() finds on the whole line
    assert strip(keys.keys(block, 0, len(block))[1].decode() + "x", style)[1].rank == 1


def test_a_stamp_before_an_exceptions_last_line_is_a_tools_in_any_file() -> None:
    # webdataset/webdataset#142 (verbatim): a collector stamped the lines it saw, but not the
    # continuation lines of the exception's message, so the file as a whole is not "stamped".
    lines = [
        '2022-01-23 02:08:36.029 raise ReadError("unexpected end of data")',
        "",
        '2022-01-23 02:08:36.029 tarfile.ReadError: ("unexpected end of data @ '
        "<_io.BufferedReader name='train-224-30/00000022.tar'>\", ",
        "<_io.BufferedReader name='train-224-30/00000022.tar'>, {'__url__': "
        "'train-224-30/00000022.tar', '__worker__': 'None', ",
        "'__rank__': '(18, 32)', '__nodeinfo__': \"('node-01', 276)\"})",
    ]
    style = sniff_style(lines)
    assert not style.stamped
    text, prefix = strip(lines[2], style)
    assert text.startswith('tarfile.ReadError: ("unexpected end of data @')
    assert prefix.stamp == "2022-01-23 02:08:36.029 "  # the time is kept
    # a logger's own record keeps its stamp: the level comes first
    record = "2022-01-23 02:08:36,029 ERROR tarfile.ReadError: unexpected end of data"
    assert strip(record, style) == (record, strip("", style)[1])


def test_a_progress_bars_padding_is_not_a_pasted_margin() -> None:
    # tqdm without a description right-aligns its percentage: "  7%|" (benchmarks' tqdm mix)
    bars = ["   0%|          | 1/5000 [01:00<10:00,  1.52it/s]\r   7%|          | 1/5000"] * 3
    assert sniff_style(bars).margin == ""
    # an indented paste keeps its margin even when a bar is among its lines
    paste = [
        "  7%|#   | 1/5000 [01:07<10:00,  1.52it/s]",
        "    Traceback (most recent call last):",
        '      File "train.py", line 1, in <module>',
        "    ValueError: x",
    ]
    assert sniff_style(paste).margin == "    "


def test_a_file_name_before_a_colon_is_not_a_pdsh_host() -> None:
    # Dao-AILab/flash-attention#931 (verbatim): the loader's error posted alone
    line = "flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"
    assert not sniff_style([line]).pdsh
    assert sniff_style(["node-01: step 1", "node-02: step 2", "gpu12.cluster: step 3"]).pdsh


def test_a_qualified_class_name_before_a_colon_is_not_a_pdsh_host() -> None:
    # zilliztech/VectorDBBench#199 (verbatim): pyarrow's type has no "Error" in its name
    line = (
        "pyarrow.lib.ArrowInvalid: Parquet magic bytes not found in footer. Either the file is "
        "corrupted or this is not a parquet file."
    )
    assert not sniff_style([line]).pdsh
    assert not sniff_style(["zipfile.BadZipFile: File is not a zip file"]).pdsh
    assert not sniff_style(["queue.Empty: "]).pdsh
    # hosts are lowercase (or all capitals): still hosts
    assert sniff_style(["gpu12.cluster: step 1", "NODE-01.LAB: step 2", "node-3: step 3"]).pdsh


def _regex_ids(keys: object, block: bytes) -> tuple[list[int], tuple[bytes, ...]]:
    from crashlens.ingest.prefixes import PrefixKeys

    assert isinstance(keys, PrefixKeys)
    found = keys.keys(block, 0, len(block), block.count(b"\n"))
    table = {key: i for i, key in enumerate(dict.fromkeys(found))}
    return [table[key] for key in found], tuple(table)


def test_a_consoles_keys_read_with_numpy_are_the_regexs(monkeypatch: pytest.MonkeyPatch) -> None:
    # The vectorised read of a combined console's "[name]:" keys gives the ids and the table
    # (in order of first appearance) that a regex match per line gives: on every fixture and
    # corpus log with bracketed prefixes, and on lines built to sit at its window's edges.
    import random
    from pathlib import Path

    from crashlens.ingest.prefixes import key_pattern
    from crashlens.parse import index

    monkeypatch.setattr(index, "DENSE_FALLBACK_SHARE", 1.0)  # never hand a block back
    root = Path(__file__).resolve().parents[1]
    checked = 0
    for path in sorted([*root.glob("fixtures/**/*.log"), *root.glob("corpus/*/*/*.log")]):
        data = path.read_bytes()
        if b"]:" not in data:
            continue
        data = data if data.endswith(b"\n") else data + b"\n"
        keys = key_pattern(sniff_style(data.decode("utf-8", "replace").splitlines()[:200]))
        if not keys.bracketed:
            continue
        found = index.dense_ids(data, keys)
        assert found is not None
        assert (list(found[0]), found[1]) == _regex_ids(keys, data), path
        checked += 1
    assert checked > 100
    pieces = [
        *(b"[rank%d]: " % i for i in range(12)),
        b"[rank1]:", b"[default3]:", b"[default0]:[rank0]: ", b"[pod/ns/x] ", b"[1,0]<stdout>:",
        b"[1,2]<stderr>: [rank1]: ", b"[W socket.cpp:601] ", b"[abcdefghijklmnopqrstuvwxyz]: ",
        b"[abcdefghijklmn]: ", b"[abcdefghijklm]: ", b"[abcdefghijkl]:", b"[]: ", b"[a:b]: ", b"[",
        b"", b"[x]", b"[x]:[y]: ", b"[_a]:", b"[9]: ", b"[p]: ", b"[pod]: ", b"\xc3\xa9[rank2]: ",
        b"[r\xc3\xa9]: ", b"[rank0]:[W x] ", b"[Rank 3]: ", b"[rank=3] ", b"[rank=12] ",
        b"[rank1]: [rank=1] ", b"[rank=x] ", b"[abcd=1] ",
    ]  # fmt: skip
    tails = [b"step 1 loss 2", b"", b"Traceback (most recent call last):", b"x: y", b"]: z"]
    rng = random.Random(7)
    keys = key_pattern(PrefixStyle())
    for _ in range(300):
        lines = [rng.choice(pieces) + rng.choice(tails) for _ in range(rng.randint(1, 300))]
        if rng.random() < 0.7:
            lines = [b"[rank%d]: " % rng.randint(0, 5) + line for line in lines]
        block = b"\n".join(lines) + b"\n"
        found = index.dense_ids(block, keys)
        assert found is not None
        assert (list(found[0]), found[1]) == _regex_ids(keys, block), lines
        # and the newline offsets the parser's process takes instead of scanning again
        assert list(found[2]) == [i for i, byte in enumerate(block) if byte == 10]


def test_a_console_is_told_from_its_head() -> None:
    from pathlib import Path

    from crashlens.parse import reads_as_console

    root = Path(__file__).resolve().parents[1]
    consoles = sorted(
        root.glob("fixtures/captured/rank_exception_cascade/tee-console-*/console.log")
    )
    assert consoles and all(reads_as_console(p) for p in consoles)
    assert not reads_as_console(root / "fixtures/captured/file_not_found/python/train.log")
    assert not reads_as_console(root / "does-not-exist.log")


def test_openmpi_tags_inside_a_line_are_dropped() -> None:
    # deepspeedai/DeepSpeed#1834 (verbatim): --tag-output tags each write, and Python writes
    # an exception's type and its message apart
    line = "[1,19]<stderr>:RuntimeError[1,19]<stderr>:: NCCL communicator was aborted on rank 19."
    text, p = strip(line, PrefixStyle())
    assert (text, p.rank) == ("RuntimeError: NCCL communicator was aborted on rank 19.", 19)
    # another process's tag is text, not this line's
    other = "[1,2]<stderr>:see [1,3]<stderr>: above"
    assert strip(other, PrefixStyle())[0] == "see [1,3]<stderr>: above"


def test_a_quoted_or_tab_indented_paste_has_that_margin() -> None:
    quoted = [
        "> Traceback (most recent call last):",
        '>   File "train.py", line 3, in <module>',
        ">",
        "> ValueError: x",
    ]
    style = sniff_style(quoted)
    assert style.margin == "> "
    assert strip('>   File "train.py", line 3, in <module>', style)[0].startswith("  File ")
    assert strip(">", style)[0] == ""  # the quote's empty line is an empty line
    tabbed = [
        "\tTraceback (most recent call last):",
        '\t  File "t.py", line 1, in f',
        "\tKeyError: 1",
    ]
    assert sniff_style(tabbed).margin == "\t"
    # a line of its own that starts with ">" does not make a quote of the file
    assert sniff_style(["step 1 loss 2.0", "> note", "step 2 loss 1.9"]).margin == ""


def test_determineds_rank_prefix_names_the_rank_on_both_paths() -> None:
    # determined-ai/determined harness/determined/launch/wrap_rank.py: f"[rank={rank}] {line}"
    from crashlens.ingest.prefixes import key_pattern

    text, prefix = strip("[rank=3] RuntimeError: no GPUs found!", PrefixStyle())
    assert (text, prefix.rank) == ("RuntimeError: no GPUs found!", 3)
    block = b"[rank=0] step 1\n[rank=1] Traceback (most recent call last):\nplain\n"
    keys = key_pattern(PrefixStyle())
    assert keys.keys(block, 0, len(block)) == [b"[rank=0] ", b"[rank=1] ", b""]
    assert strip(keys.keys(block, 0, len(block))[1].decode() + "x", PrefixStyle())[1].rank == 1


def test_a_stamped_blank_line_is_blank_once_its_trailing_space_is_gone() -> None:
    # Jenkins' Timestamper stamps an empty line too ("[<time>] "); feed() drops the trailing
    # blank, and the stamp alone must still read as a blank line, not a record that ends a
    # traceback before its exception line (open-mmlab/mmtracking#91 under such stamps)
    style = sniff_style(["[2022-06-18T02:31:53.944Z] Traceback (most recent call last):"] * 4)
    assert style.stamped
    text, prefix = strip("[2022-06-18T02:31:53.944Z]", style)
    assert text == "" and prefix.stamp == "[2022-06-18T02:31:53.944Z]"
    # a line that only starts with a date is not a stamp followed by nothing
    assert strip("2022-06-18T02:31:53Z3 items", style)[0] == "2022-06-18T02:31:53Z3 items"


def test_a_process_label_with_its_pid_names_the_writer() -> None:
    # skypilot-org/skypilot#5181 as posted: SkyPilot's per-node output, its rank and node;
    # Ray's actor label (hkust-nlp/simpleRL-reason#8 as posted) names a process, its ip a node
    root = Path(__file__).resolve().parents[1] / "corpus" / "tune"
    lines = (root / "skypilot-org-skypilot-5181" / "console.log").read_text().splitlines()
    style = sniff_style(lines)
    assert style.labelled and not style.srun and not style.pdsh
    assert strip(lines[1], style) == (
        "bash: torchrun: command not found",
        Prefix(rank=0, host="head", pid=1113),
    )
    assert strip(lines[3], style)[1] == Prefix(rank=1, host="worker1", pid=914)
    assert strip("(RayTrainWorker pid=66693, ip=10.0.0.3) step 1", style) == (
        "step 1",
        Prefix(host="10.0.0.3", pid=66693),
    )
    ray = (root / "hkust-nlp-simplerl-reason-8" / "console.log").read_text().splitlines()
    assert sniff_style(ray).labelled
    # a parenthesis that is not a process label stays text
    assert strip("(note) pid=3 was reused", style) == ("(note) pid=3 was reused", NO_PREFIX)
    assert not sniff_style(["(a) first", "(b) second", "plain"]).labelled


def test_a_labelled_console_names_its_ranks(tmp_path: Path) -> None:
    from crashlens import analyze

    log = Path(__file__).resolve().parents[1] / "corpus/tune/skypilot-org-skypilot-5181"
    report = analyze([log])
    assert report.primary is not None and report.primary.rule_id == "command-not-found"
    first = report.first_failure
    assert first is not None and (first.rank, first.host) == (0, "head")


def test_rays_deduplication_suffix_is_not_the_programs_text() -> None:
    # OpenRLHF/OpenRLHF#1050 as posted: Ray's driver prints a line its workers printed alike
    # with " [repeated 3x across cluster]" after it (the first time also with its notice)
    fixture = Path(__file__).resolve().parents[1] / "rules/memory/cuda-oom/ray-vllm.log"
    lines = [line for line in fixture.read_text().splitlines() if not line.startswith("#")]
    style = sniff_style(lines)
    assert style.labelled
    text, prefix = strip(lines[-1], style)
    assert text == "CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"
    assert prefix.pid == 226426
    notice = (
        "(WorkerDict pid=295845) after load model cls [repeated 3x across cluster] (Ray"
        " deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or"
        " see https://docs.ray.io/en/master/ray-observability/user-guides/configure-logging.html"
        "#log-deduplication for more options.)"
    )
    assert strip(notice, style)[0] == "after load model cls"
    # the same words inside a line, or in a log Ray did not write, are left as they are
    inside = "(WorkerDict pid=3) [repeated 3x across cluster] is what Ray adds"
    assert strip(inside, style)[0] == "[repeated 3x across cluster] is what Ray adds"
    plain = sniff_style(["step 1 [repeated 3x across cluster]"] * 4)
    assert strip("step 1 [repeated 3x across cluster]", plain)[0].endswith("across cluster]")


def test_a_remembered_tag_reads_as_its_regex_reads_it() -> None:
    # strip reads each "[role<n>]:" tag by its regex once and then looks it up: every tag,
    # at every position, near-misses and over-long ones included, reads as the regex does.
    import random

    from crashlens.ingest import prefixes

    rng = random.Random(3)
    alphabet = ["[", "]", ":", " ", "rank", "default", "1", "23", "x", "-", "_", "=", "\u00e9"]
    texts = [
        "[rank36]: x",
        "[default1]:[rank5]: y",
        "[rank1]:",
        "[rank1]: ",
        "[E501 12:00:00] z",
        "[" + "a" * 70 + "1]: far",
        "[" + "a" * 58 + "1]: near",
    ]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(4000)]
    for text in texts * 2:  # the second time from the memo
        for pos in range(len(text)):
            m = prefixes._BRACKET.match(text, pos)
            want = None if m is None else (m["role"], int(m["n"]), m.end())
            assert prefixes._bracket(text, pos) == want, (text, pos)


def test_stacked_tool_stamps_are_both_stripped_on_both_paths() -> None:
    # MONAI's Jenkins log (corpus tune/project-monai-monai-4530, "[<ISO>Z] " on every line) as
    # `kubectl logs --timestamps` would show it: a stamp over a stamp
    from crashlens.ingest.prefixes import key_pattern

    lines = [
        "2024-05-01T03:14:00.123456789Z [2022-06-18T02:31:53.944Z] Traceback (most recent call last):",
        '2024-05-01T03:14:00.123456789Z [2022-06-18T02:31:53.944Z]   File "tests/test_integration_segmentation_3d.py", line 21, in <module>',
        "2024-05-01T03:14:00.123456789Z [2022-06-18T02:31:53.944Z] AttributeError: module 'distutils' has no attribute 'version'",
        "2024-05-01T03:14:00.123456789Z [2022-06-18T02:31:53.944Z] [rank3]: step 1",
        "2024-05-01T03:14:00.123456789Z 2020-11-24 20:18:25.069 Epoch 5/5",
    ]  # fmt: skip
    style = sniff_style(lines)
    assert style.stamped
    texts = [strip(line, style) for line in lines]
    assert texts[0][0] == "Traceback (most recent call last):"
    assert texts[1][0].startswith('  File "tests/')
    assert texts[2][0].startswith("AttributeError: module 'distutils'")
    assert texts[3][0] == "step 1" and texts[3][1].rank == 3
    # a program's own logging time after the tool's stamp is the line's text
    assert texts[4][0] == "2020-11-24 20:18:25.069 Epoch 5/5"
    block = ("\n".join(lines) + "\n").encode()
    assert key_pattern(style).keys(block, 0, len(block))[3] == b"[rank3]: "


def test_a_test_harness_tee_label_is_stripped_on_both_paths() -> None:
    # accelerate's and transformers' testing utilities (execute_subprocess_async's tee):
    # print(label, line) with "stdout:" / "stderr:", the line's own indentation kept
    from crashlens.ingest.prefixes import key_pattern

    lines = [
        "stdout: **Initialization**",
        "stderr: [E ProcessGroupNCCL.cpp:821] [Rank 1] Watchdog caught collective operation timeout",
        "stderr: Traceback (most recent call last):",
        'stderr:   File "/home/user/test_script.py", line 3, in <module>',
        "stderr: [rank1]: RuntimeError: boom",
    ]
    style = sniff_style(lines)
    assert style.teed
    texts = [strip(line, style) for line in lines]
    assert texts[2][0] == "Traceback (most recent call last):"
    assert texts[3][0] == '  File "/home/user/test_script.py", line 3, in <module>'
    assert texts[4][0] == "RuntimeError: boom" and texts[4][1].rank == 1
    assert not sniff_style(["stdout: x", "plain", "plain", "plain"]).teed
    block = ("\n".join(lines) + "\n").encode()
    keys = key_pattern(style).keys(block, 0, len(block))
    assert keys[4] == b"[rank1]: " and keys[0] == keys[2] == b""
