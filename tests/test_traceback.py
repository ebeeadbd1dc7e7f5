"""Traceback assembly: chains, embedded worker tracebacks, interleaved ranks, truncation."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT, benchmark
from crashlens import analyze
from crashlens.model import user_frame
from crashlens.parse.text import split_glued
from crashlens.parse.traceback import TracebackAssembler


def assemble(text: str) -> TracebackAssembler:
    asm = TracebackAssembler()
    for i, line in enumerate(text.splitlines(), 1):
        asm.feed(i, line)
    asm.close()
    return asm


CHAINED = """\
Traceback (most recent call last):
  File "/site-packages/torch/utils/data/dataloader.py", line 1251, in _try_get_data
    data = self._data_queue.get(timeout=timeout)
RuntimeError: DataLoader worker (pid 4971) is killed by signal: Killed.

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/home/u/train.py", line 40, in <module>
    for batch in loader:
RuntimeError: DataLoader worker (pid(s) 4971) exited unexpectedly
2024-05-01 03:14:00,000 INFO next record
"""


def test_chained_exceptions_form_one_traceback() -> None:
    asm = assemble(CHAINED)
    assert len(asm.done) == 1
    tb = asm.done[0]
    types = [(e.type, e.lineno) for e in tb.exceptions]
    assert types == [("RuntimeError", 4), ("RuntimeError", 11)]
    assert "killed by signal" in tb.exceptions[0].message
    assert tb.exceptions[1].frames[0].user_code
    assert not tb.exceptions[0].frames[0].user_code


def test_during_handling_chain() -> None:
    text = CHAINED.replace(
        "The above exception was the direct cause of the following exception:",
        "During handling of the above exception, another exception occurred:",
    )
    assert len(assemble(text).done[0].exceptions) == 2


def test_a_chain_marker_without_its_blank_lines_still_chains() -> None:
    # a paste (or a log shipper) that dropped the blank lines around the marker
    text = "\n".join(x for x in CHAINED.splitlines() if x.strip())
    (tb,) = assemble(text).done
    assert [e.type for e in tb.exceptions] == ["RuntimeError", "RuntimeError"]
    assert not any("direct cause" in e.message for e in tb.exceptions)


def test_an_exception_line_after_a_bare_one_is_another_exception() -> None:
    # huggingface/diffusers#9664 as posted: accelerate's error, then the script's own
    done = assemble(
        "subprocess.CalledProcessError: Command ... returned non-zero exit status 1.\n"
        "TypeError: LoraConfig.__init__() got an unexpected keyword argument 'use_dora'\n"
    ).done
    assert [tb.exceptions[-1].type for tb in done] == ["subprocess.CalledProcessError", "TypeError"]
    # a library's error code on the next line is the message going on (NCCL's, under torch's;
    # as a corpus thread shows them)
    (tb,) = assemble(
        "RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:839, unhandled "
        "system error, NCCL version 2.8.3\n"
        "ncclSystemError: System call (socket, malloc, munmap, etc) failed.\n"
    ).done
    assert "ncclSystemError" in tb.exceptions[-1].message


def test_embedded_worker_traceback_stays_in_the_message() -> None:
    text = """\
Traceback (most recent call last):
  File "/home/u/train.py", line 9, in <module>
    batch = next(it)
json.decoder.JSONDecodeError: Caught JSONDecodeError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/site-packages/torch/utils/data/_utils/worker.py", line 349, in _worker_loop
    data = fetcher.fetch(index)
json.decoder.JSONDecodeError: Expecting ',' delimiter: line 1 column 19 (char 18)

2024-05-01 03:14:00,000 INFO after
"""
    tb = assemble(text).done[0]
    assert len(tb.exceptions) == 1
    exc = tb.exceptions[0]
    assert exc.type == "json.decoder.JSONDecodeError"
    assert "Expecting ',' delimiter" in exc.message


def test_truncated_traceback_is_still_reported() -> None:
    # A log cut off in the middle of the exception message (the job was killed mid-write).
    text = 'Traceback (most recent call last):\n  File "a.py", line 1, in f\n    x()\nValueError: bad va'
    tb = assemble(text).done
    assert tb and (tb[0].exceptions[0].type, tb[0].exceptions[0].message) == (
        "ValueError",
        "bad va",
    )


def test_header_interrupted_by_a_record_yields_nothing() -> None:
    text = 'Traceback (most recent call last):\n  File "a.py", line 1, in f\n'
    assert assemble(text + "2024-05-01 03:14:00,000 INFO next record\n").done == []


def test_traceback_the_log_ends_in_still_counts() -> None:
    # A process that died while printing its traceback (or a paste cut inside it).
    done = assemble('Traceback (most recent call last):\n  File "a.py", line 1, in f').done
    assert [e.type for e in done[0].exceptions] == ["IncompleteTraceback"]
    assert done[0].exceptions[0].frames[0].file == "a.py"


def test_multiline_message_ends_at_next_record() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "t.py", line 1, in f\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "2024-05-01 03:14:00,000 INFO unrelated\n"
    )
    exc = assemble(text).done[0].exceptions[0]
    assert "CUDA_LAUNCH_BLOCKING" in exc.message
    assert "unrelated" not in exc.message


def test_rich_and_ipython_and_faulthandler() -> None:
    rich = (
        "╭───── Traceback (most recent call last) ─────╮\n"
        "│ /home/u/train.py:12 in main                 │\n"
        "╰─────────────────────────────────────────────╯\n"
        "ValueError: bad config\n"
    )
    tb = assemble(rich).done[0]
    assert tb.exceptions[0].type == "ValueError"
    assert tb.exceptions[0].frames[0].file == "/home/u/train.py"
    ipy = (
        "---------------------------------------------------------------------------\n"
        "ZeroDivisionError                         Traceback (most recent call last)\n"
        "Cell In[1], line 1\n"
        "----> 1 1/0\n"
        "\n"
        "ZeroDivisionError: division by zero\n"
    )
    assert assemble(ipy).done[0].exceptions[0].message == "division by zero"
    fault = (
        "Fatal Python error: Segmentation fault\n"
        "\n"
        "Current thread 0x00007f2d (most recent call first):\n"
        '  File "/home/u/data.py", line 44 in _worker\n'
        "\n"
        "Extension modules: numpy.core._multiarray_umath (total: 1)\n"
        "2024-05-01 03:14:00,000 INFO after\n"
    )
    tb = assemble(fault).done[0]
    assert tb.exceptions[0].type == "Fatal Python error"
    assert tb.exceptions[0].frames[0].function == "_worker"


def test_stdout_interleaved_into_the_frames_is_not_the_exception() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "crash.py", line 8, in <module>\n'
        "stdout line 2\n"
        "    check(3)\n"
        '  File "crash.py", line 7, in check\n'
        '    raise ValueError(f"label index 11")\n'
        "ValueError: label index 11\n"
    )
    exc = assemble(text).done[0].exceptions[-1]
    assert (exc.type, exc.message) == ("ValueError", "label index 11")
    assert exc.lineno == 7


def test_each_frame_keeps_its_source_line_not_the_position_markers() -> None:
    # CPython 3.11's layout (captured): a source line, then ^^^^ / ~~~~ markers under it.
    asm = assemble(
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 12, in <module>\n'
        "    total = weights[key] * 2\n"
        "            ~~~~~~~^^^^^\n"
        '  File "/home/u/train.py", line 7, in helper\n'
        "KeyError: 'lr'\n"
    )
    (tb,) = asm.done
    frames = tb.exceptions[-1].frames
    assert frames[0].code == "total = weights[key] * 2"
    assert frames[1].code == ""  # a frame printed without its source line


def test_a_traceback_the_log_starts_inside_has_unseen_callers() -> None:
    from crashlens.model import exception_origin

    # simplescaling/s1#39 as posted: the header and the outer frames are not in the paste
    tail = (
        '  File "/env/lib/python3.11/site-packages/trl/trainer/sft_trainer.py", line 513, in tokenize\n'
        "    element[dataset_text_field] if formatting_func is None else formatting_func(element),\n"
        '  File "/env/lib/python3.11/site-packages/datasets/formatting/formatting.py", line 277, in __getitem__\n'
        "    value = self.data[key]\n"
        "KeyError: 'text'\n"
    )
    (cut,) = assemble(tail).done
    assert cut.exceptions[-1].head_lost and exception_origin(cut.exceptions[-1]) == "unseen"
    (whole,) = assemble("Traceback (most recent call last):\n" + tail).done
    assert not whole.exceptions[-1].head_lost
    assert exception_origin(whole.exceptions[-1]) == "library"
    # a chained exception printed its own header: only the first of a chain lost it
    (chain,) = assemble(tail + "\nDuring handling of the above exception, another exception occurred:\n\n"
                        "Traceback (most recent call last):\n" + tail).done  # fmt: skip
    assert [e.head_lost for e in chain.exceptions] == [True, False]


def test_a_traceback_pasted_inside_an_indented_block_keeps_its_exception() -> None:
    # facebookresearch/access#9 as posted: every line of the traceback carries the block's
    # indentation, so its exception line is indented too.
    text = """\
              Traceback (most recent call last):
              File "scripts/train.py", line 8, in <module>
              from access.fairseq.main import fairseq_train_and_evaluate
              ModuleNotFoundError: No module named 'access'
"""
    (tb,) = assemble(text).done
    assert [(e.type, e.lineno) for e in tb.exceptions] == [("ModuleNotFoundError", 4)]
    assert tb.exceptions[0].message == "No module named 'access'"
    assert [(f.file, f.line) for f in tb.exceptions[0].frames] == [("scripts/train.py", 8)]


def test_the_margin_is_the_headers_own_and_a_far_indented_header_is_quoted_text() -> None:
    # CPython's traceback shifted right by four spaces, as a formatter that indents a record's
    # continuation lines prints it; the next record ends it.
    shifted = """\
    Traceback (most recent call last):
      File "/home/user/train.py", line 6, in <module>
        labels = batch["labels"]
                 ~~~~~^^^^^^^^^^
    KeyError: 'labels'
2024-05-01 03:14:00,000 INFO next record
"""
    (tb,) = assemble(shifted).done
    assert (tb.exceptions[-1].type, tb.exceptions[-1].message) == ("KeyError", "'labels'")
    assert tb.exceptions[-1].frames[0].code == 'labels = batch["labels"]'
    # Deeper than any paste's margin: text quoting a traceback, not one that ended a process.
    quoted = "\n".join(" " * 30 + line for line in shifted.splitlines()[:5])
    assert all(t.start_line != 1 for t in assemble(quoted).done)


def test_a_headerless_paste_indented_as_a_block_keeps_its_exception() -> None:
    # haotian-liu/LLaVA#79 as posted: the header is cut off and every line carries two more
    # spaces, so the frames sit four in and the exception line two.
    text = """\
    File "/mnt/data/experiment/LLaVA/llava/train/train.py", line 567, in train
      trainer.train()
    File "/env/lib/python3.9/site-packages/transformers/trainer.py", line 1469, in _wrap_model
      self.model = model = FSDP(
  TypeError: __init__() got an unexpected keyword argument 'forward_prefetch'
"""
    (tb,) = assemble(text).done
    exc = tb.exceptions[-1]
    assert (exc.type, exc.lineno) == ("TypeError", 5)
    assert exc.message == "__init__() got an unexpected keyword argument 'forward_prefetch'"
    assert [f.code for f in exc.frames] == ["trainer.train()", "self.model = model = FSDP("]
    # frames at the usual two spaces: nothing is taken as a margin
    (plain,) = assemble("\n".join(line[2:] for line in text.splitlines())).done
    assert plain.exceptions[-1].type == "TypeError" and plain.exceptions[-1].lineno == 5


def test_an_ipython_header_cut_where_the_paste_ends_still_opens_a_traceback() -> None:
    # facebookresearch/detectron2#2861 (verbatim): the notebook output stops mid-header
    asm = TracebackAssembler()
    assert asm.feed(1, "ProcessRaisedException                    Traceback (most re")
    assert asm.current is not None and asm.ipython_type == "ProcessRaisedException"
    # a line that only mentions the words is not a header
    other = TracebackAssembler()
    assert not other.feed(1, "see the Traceback (most recent call last) above")
    assert other.current is None


def test_a_logging_record_without_a_timestamp_ends_the_message() -> None:
    # meta-llama/llama#415 (verbatim): older torchrun logs in logging's default format right
    # under the worker's exception line
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/llama/llama/generation.py", line 80, in build\n'
        "    assert model_parallel_size == len(\n"
        "AssertionError: Loading a checkpoint for MP=2 but world size is 1\n"
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 "
        "(pid: 2219637) of binary: /usr/bin/python3\n"
    )
    exc = assemble(text).done[0].exceptions[-1]
    assert exc.message == "Loading a checkpoint for MP=2 but world size is 1"


def test_an_ipython_8_frame_names_its_function_without_the_parameters() -> None:
    # huggingface/accelerate#2216 as posted: IPython 8 prints each function's signature
    text = (
        "ProcessRaisedException                    Traceback (most recent call last)\n"
        "File ~/Projects/llmtest1/lib/python3.10/site-packages/torch/multiprocessing/spawn.py:"
        "202, in start_processes(fn, args, nprocs, join, daemon, start_method)\n"
        "    201 # Loop on join until it returns True or raises an exception.\n"
    )
    exc = assemble(text).done[0].exceptions[-1]
    assert [(f.line, f.function) for f in exc.frames] == [(202, "start_processes")]


def test_an_ipython_traceback_cut_after_its_frames_keeps_the_headers_type() -> None:
    # unslothai/unsloth#3373 (verbatim): the notebook's paste stops inside the frames
    text = (
        "OutOfMemoryError                          Traceback (most recent call last)\n"
        "/tmp/ipykernel_36/773422404.py in <cell line: 0>()\n"
        "----> 1 trainer_stats = trainer.train()\n"
    )
    exc = assemble(text).done[0].exceptions[-1]
    # still a cut (what was raised is not known enough to blame anyone's code), named
    assert exc.type == "IncompleteTraceback"
    assert "IPython's header names it OutOfMemoryError" in exc.message
    assert exc.named == "OutOfMemoryError"  # what the resemble stage reads, not the message
    # cut inside the header itself: nothing is known yet (detectron2#2861)
    cut = assemble("ProcessRaisedException                    Traceback (most re").done[0]
    assert "header names it" not in cut.exceptions[-1].message
    assert cut.exceptions[-1].named == ""


def test_a_module_path_cut_where_the_exception_name_began_is_not_an_exception() -> None:
    # fatescript/CenterNet-better#45 (verbatim): the paste stops inside spawn's
    # "torch.multiprocessing.spawn.ProcessRaisedException: ..." line
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/user/anaconda3/envs/STR/lib/python3.7/site-packages/torch/multiprocessing'
        '/spawn.py", line 150, in join\n'
        "    raise ProcessRaisedException(msg, error_index, failed_process.pid)\n"
        "torch.multiprocessing.spawn\n"
    )
    assert assemble(text).done[0].exceptions[-1].type == "IncompleteTraceback"
    # a module-qualified class with no message still ends one
    done = assemble(text.replace("torch.multiprocessing.spawn\n", "queue.Empty\n")).done[0]
    assert done.exceptions[-1].type == "queue.Empty"


def test_a_traceback_flattened_onto_one_line_is_read_as_its_lines(tmp_path: Path) -> None:
    # huggingface/diffusers#8477 (verbatim, corpus case tune/huggingface-diffusers-8477): two
    # ranks' tracebacks pasted with every line break turned into blanks
    from crashlens import analyze
    from crashlens.parse.text import split_glued

    case = Path(__file__).parents[1] / "corpus/tune/huggingface-diffusers-8477"
    raw = (case / "console.log").read_text().rstrip("\n")
    lines = split_glued(raw)
    assert lines[:3] == (
        "Traceback (most recent call last):",
        '  File "/kaggle/working/train_cm_ct_unconditional.py", line 1438, in <module>',
        "    main(args)",
    )
    final = "AttributeError: 'DistributedDataParallel' object has no attribute 'config'"
    assert lines.count("Traceback (most recent call last):") == 2 and final in lines
    report = analyze([case])
    assert report.primary is not None and report.primary.rule_id == "ddp-wrapper-attribute"
    # a header glued to a progress bar, with nothing after it, is still two lines
    bar = "100%|##########| 3/3 [00:01<00:00,  2.41it/s]"
    assert split_glued(bar + "Traceback (most recent call last):") == (
        bar,
        "Traceback (most recent call last):",
    )


def test_a_flattened_traceback_whose_last_frame_printed_no_source_line() -> None:
    # hiyouga/LLaMA-Factory#3960's traceback (verbatim) flattened as benchmarks/metamorphic.py's
    # `flattened` does: a console script's frame has no source line before the exception
    from crashlens.parse.text import split_glued

    raw = (
        "Traceback (most recent call last):   File "
        '"E:\\LLaMA-Factory\\venv\\Scripts\\llamafactory-cli.exe\\__main__.py", line 4, in <module>'
        " ModuleNotFoundError: No module named 'llmtuner.cli'"
    )
    assert split_glued(raw) == (
        "Traceback (most recent call last):",
        '  File "E:\\LLaMA-Factory\\venv\\Scripts\\llamafactory-cli.exe\\__main__.py", line 4, '
        "in <module>",
        "ModuleNotFoundError: No module named 'llmtuner.cli'",
    )


def test_vs_codes_exception_report_is_a_traceback_named_first() -> None:
    # midasklr/yolov5prune#113 as posted: VS Code's debugger names the exception and its
    # message first, then the frames
    asm = assemble(
        "Exception has occurred: ModuleNotFoundError\n"
        "No module named 'tensorboard'\n"
        '  File "D:\\Python\\yolov5prune-v5.0\\train.py", line 21, in <module>\n'
        "    from torch.utils.tensorboard import SummaryWriter\n"
        "Epoch 0: loss 1.2\n"
    )
    (tb,) = asm.done
    (exc,) = tb.exceptions
    assert (exc.type, exc.message, exc.lineno) == (
        "ModuleNotFoundError",
        "No module named 'tensorboard'",
        1,
    )
    (frame,) = exc.frames
    assert frame.line == 21 and frame.user_code
    assert frame.code == "from torch.utils.tensorboard import SummaryWriter"
    # the line after the frames is not part of it
    assert "Epoch 0" not in "\n".join(tb.text)
    # prose that only mentions the words is not a report
    assert assemble("The docs say: Exception has occurred: see the log\n").done == []


def test_an_ipython_traceback_pasted_from_its_frames_on_is_one() -> None:
    # huggingface/tokenizers#282 as posted (validation case, marked seen): IPython 7's frames,
    # no header; the exception line after them says what was raised
    log = Path(__file__).resolve().parents[1] / "corpus/validation/huggingface-tokenizers-282"
    (tb,) = assemble((log / "console.log").read_text()).done
    (exc,) = tb.exceptions
    assert (exc.type, exc.message) == ("Exception", "stream did not contain valid UTF-8")
    assert [(f.file, f.line, f.function) for f in exc.frames][-1] == (
        "<ipython-input-78-66e6ec31bd7b>",
        92,
        "train",
    )
    # a notebook's cell frame: its function's name holds blanks (unslothai/unsloth#3373)
    cell = assemble("/tmp/ipykernel_36/773422404.py in <cell line: 0>()\nKeyError: 'x'\n")
    assert [f.function for f in cell.done[0].exceptions[-1].frames] == ["<cell line: 0>"]
    # prose that names a file and a function is not a frame
    assert assemble("see train.py in main for details\n").done == []


def test_a_qualified_exception_without_error_in_its_name_stands_alone() -> None:
    # rom1504/img2dataset#183 as posted: pyarrow's exception line, the schema after it
    (tb,) = assemble(
        "pyarrow.lib.ArrowInvalid: No match for FieldRef.Name(NSFW) in URL: string\n"
        "TEXT: string\nWIDTH: int32\n"
    ).done
    assert tb.exceptions[-1].type == "pyarrow.lib.ArrowInvalid"
    # a config dump's dotted keys are not exceptions
    assert assemble("model.Name: bert-base\nlogging.INFO: on\ntrain.py: done\n").done == []


def test_pytests_failure_marker_before_an_exception_line_is_not_the_exceptions() -> None:
    # huggingface/sentence-transformers#3001 as posted: a test run's import error under pytest
    (tb,) = assemble(
        "/usr/local/lib/python3.11/site-packages/sentence_transformers/SentenceTransformer.py:12: "
        "in <module>\n"
        "    from huggingface_hub import HfApi, HfFolder, Repository, hf_hub_url, cached_download\n"
        "E   ImportError: cannot import name 'cached_download' from 'huggingface_hub' "
        "(/usr/local/lib/python3.11/site-packages/huggingface_hub/__init__.py)\n"
    ).done
    assert tb.exceptions[-1].type == "ImportError"
    assert tb.exceptions[-1].message.startswith("cannot import name 'cached_download'")


def test_a_dedented_source_line_is_not_read_as_the_exception() -> None:
    # huggingface/datasets#2591 as posted, every line's indentation stripped (a form that
    # dedents a paste): `out: Union["Dataset", "DatasetDict"] = func(self, *args, **kwargs)`
    # reads like "Type: message" but is the source line of the frame above it
    log = Path(__file__).resolve().parents[1] / "corpus/tune/huggingface-datasets-2591/console.log"
    text = log.read_text()
    assert 'out: Union["Dataset", "DatasetDict"]' in text
    (whole,) = assemble(text).done
    dedented = assemble("\n".join(line.lstrip() for line in text.splitlines())).done
    assert [tb.exceptions[-1].type for tb in dedented] == [whole.exceptions[-1].type]
    assert len(dedented[0].exceptions[-1].frames) == len(whole.exceptions[-1].frames)
    # a frame's own source line in place is still one, and an exception after a frozen frame
    # (no source line) still ends the traceback
    (tb,) = assemble(
        "Traceback (most recent call last):\n"
        '  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import\n'
        "ModuleNotFoundError: No module named 'x'\n"
    ).done
    assert tb.exceptions[-1].type == "ModuleNotFoundError"


def test_an_exception_line_set_in_from_a_margin_stands_alone() -> None:
    # bigcode-project/bigcode-evaluation-harness#265 as posted: pip sets the output of the
    # build it ran six spaces in, its exception line too; opendrivelab/UniAD#13: one space
    text = """\
oargspec = inspect.getargspec
           ^^^^^^^^^^^^^^^^^^
      AttributeError: module 'inspect' has no attribute 'getargspec'. Did you mean: 'getargs'?
"""
    (tb,) = assemble(text).done
    exc = tb.exceptions[-1]
    assert (exc.type, exc.lineno) == ("AttributeError", 3)
    assert exc.message.startswith("module 'inspect' has no attribute 'getargspec'")
    (one,) = assemble(" FileNotFoundError: img file does not exist: data/x.jpg\n").done
    assert one.exceptions[-1].type == "FileNotFoundError"
    # set in deeper than a margin, or a warning, it is text
    assert not assemble("            KeyError: 'x'\n").done
    assert not assemble("      UserWarning: the default will change\n").done


def test_an_ipython_header_broken_after_its_type_still_names_it() -> None:
    # OpenGVLab/InternVideo#102 as posted (JupyterLab): the padded type, then the rest of the
    # header on the next line; frames copied as Markdown links; cut before the last line
    text = """\
ModuleNotFoundError{pad}
Traceback (most recent call last)
Cell In[1], line 11
---> 11 from utils import (retrieve_text,

File [~/demo/utils.py:17](http://127.0.0.1:8888/lab/tree/demo/utils.py#line=16)
---> 17 from models.backbones.internvideo2 import pretrain_internvideo2_1b_patch14_224
""".format(pad=" " * 23)
    (tb,) = assemble(text).done
    exc = tb.exceptions[-1]
    assert (
        exc.message[0:1] == "t" and "IPython's header names it ModuleNotFoundError" in exc.message
    )
    assert "last frame shown: ~/demo/utils.py:17" in exc.message
    # the type alone, then a line that is no header: nothing
    assert not assemble("ModuleNotFoundError\nsome other line\n").done


def test_a_python_warning_after_the_exception_line_is_not_its_message() -> None:
    # warnings.formatwarning's "<file>:<lineno>: <Category>: <message>" is the warnings
    # module's own record (here printed by a data worker right after a handled round)
    text = """\
Traceback (most recent call last):
  File "/srv/train/data/remote.py", line 88, in fetch_shard
    return session.get(url, timeout=30).content
ConnectionResetError: [Errno 104] Connection reset by peer
/opt/conda/lib/python3.10/site-packages/torch/utils/checkpoint.py:91: UserWarning: None of the inputs have requires_grad=True. Gradients will be None
  warnings.warn(
"""
    (tb,) = assemble(text).done
    assert tb.exceptions[-1].message == "[Errno 104] Connection reset by peer"
    # a message's own second line is still its own
    (two,) = assemble("ValueError: bad row 12\n  expected 3 columns\n").done
    assert two.exceptions[-1].message == "bad row 12\n  expected 3 columns"


def _flattened(lines: list[str]) -> str:
    """The log's first traceback as benchmarks/metamorphic.py's ``flattened`` writes it: its
    header, indented lines and exception line joined with blanks."""
    flat = benchmark("metamorphic").FILE_TRANSFORMS["flattened"](lines)
    return str(next(x for x in flat if x.startswith("Traceback (most recent call")))


def test_a_flattened_traceback_ending_in_a_bare_or_lower_case_type() -> None:
    # pytorch/vision#1446 (a MemoryError printed without a message) and RjDuan/AdvDrop#5 (a C
    # module's lower-case ``struct.error``), verbatim corpus logs with their line breaks
    # turned into blanks
    for case, final in [
        ("pytorch-vision-1446", "MemoryError"),
        ("rjduan-advdrop-5", "struct.error"),
    ]:
        log = ROOT / "corpus/tune" / case / "console.log"
        read = split_glued(_flattened(log.read_text().splitlines()))
        assert read[-1].split(":")[0] == final, read[-2:]
        assert read[-2].startswith("    ") and not read[-2].rstrip().endswith(final)


def test_a_dedented_paste_keeps_a_workers_frames_and_a_compile_errors_source(
    tmp_path: Path,
) -> None:
    # Pastes that lost every line's indentation (benchmarks/metamorphic.py's `dedent`):
    # WongKinYiu/yolov9#212 as posted (corpus case tune/wongkinyiu-yolov9-212: a DataLoader
    # worker's IndexError in the user's augmentation code), and a real run importing a config
    # with a syntax error (tests/captures/syntax_error_config.log), cut before its exception line.
    worker = tmp_path / "worker" / "console.log"
    worker.parent.mkdir()
    text = (ROOT / "corpus/tune/wongkinyiu-yolov9-212/console.log").read_text()
    worker.write_text("".join(x.lstrip() for x in text.splitlines(True)))
    report = analyze([worker.parent])
    frame = user_frame(report.tracebacks[0])
    assert frame is not None and (Path(frame.file).name, frame.function) == (
        "augmentations.py",
        "copy_paste",
    )
    assert report.primary is not None and report.primary.rule_id == "user-code-error"

    compiled = tmp_path / "compiled" / "train.log"
    compiled.parent.mkdir()
    lines = (ROOT / "tests/captures/syntax_error_config.log").read_text().splitlines(True)
    compiled.write_text("".join(x.lstrip() for x in lines[:-1]))
    report = analyze([compiled.parent])
    assert report.tracebacks[-1].final.type == "SyntaxError"
    assert report.primary is not None and report.primary.rule_id == "syntax-error"


def test_a_frame_with_a_full_width_comma_names_its_function_and_no_compile_error() -> None:
    # lm-sys/FastChat#390 as posted (corpus case tune/lm-sys-fastchat-390: a screenshot's text
    # with full-width commas, its frames dedented, the paste cut inside torchrun's traceback):
    # "line 762， in main" is a call's frame, not a compile error's location
    case = ROOT / "corpus/tune/lm-sys-fastchat-390"
    report = analyze([case])
    final = report.tracebacks[-1].final
    assert final.type != "SyntaxError"
    assert [(f.line, f.function) for f in final.frames if f.line == 762] == [(762, "main")]


def test_a_memory_error_alone_on_its_line_is_the_exception() -> None:
    # nerogar/OneTrainer#835 as posted (corpus case tune/nerogar-onetrainer-835): CPython
    # raises MemoryError without a message and prints the bare name; other bare words are prose
    posted = (ROOT / "corpus/tune/nerogar-onetrainer-835/console.log").read_text(encoding="utf-8")
    first = posted.splitlines()[0]
    assert first == "MemoryError"
    done = assemble(first + "\n").done
    assert [(tb.exceptions[-1].type, tb.exceptions[-1].lineno) for tb in done] == [
        ("MemoryError", 1)
    ]
    assert assemble("ValueError\nKeyboardError\n").done == []
