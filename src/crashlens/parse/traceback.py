"""Assemble tracebacks line by line: Python (with chains), rich boxes, IPython, faulthandler.

The assembler sees one rank's lines only (the caller demultiplexes first), keeps no more
than one traceback in memory, and never looks ahead: it is fed a line and says whether the
line belonged to the traceback. A line it does not take is an ordinary log line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import regex

from crashlens import lazyre
from crashlens.ingest.prefixes import MAX_MARGIN
from crashlens.model import (
    CUT_COMPILE_MESSAGE,
    CUT_IPYTHON_NAMED,
    CUT_TRACEBACK,
    ExceptionInfo,
    Frame,
)
from crashlens.provenance import is_user_path, launched_script

TB_HEADER = "Traceback (most recent call last):"
#: The shortest start of :data:`TB_HEADER` a log that ends there is read as cut inside it
#: ("Traceback" alone, or "Traceback (", may be prose).
CUT_HEADER_MIN = len("Traceback (most")
_CHAIN_MARKERS = (
    "The above exception was the direct cause of the following exception:",
    "During handling of the above exception, another exception occurred:",
)
#: Frames are indented by two spaces, except in web-pasted logs that lost their indentation.
_FRAME = lazyre.compile_regex(
    # (a paste through a CJK input method can turn the comma before "in" full-width)
    r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+)(?:[,\uff0c] ?in (?P<func>.+))?'
)
#: A frame line a paste kept although it lost the header above it.
_BARE_FRAME = lazyre.compile_regex(
    r'\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<func>.+)'
)
_FAULT_FRAME = lazyre.compile_regex(
    r'\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>.+)'
)
_RICH_FRAME = lazyre.compile_regex(r"│\s+(?P<file>[^\s│]+?):(?P<line>\d+) in (?P<func>[^\s│]+)")
#: IPython's header (``ValueError      Traceback (most recent call last)``), also as a paste that
#: ends in the middle of it: the type before the column of spaces says what was raised. Ray
#: names a remote task's exception after the one it wraps (``RayTaskError(PermissionError)``).
_IPY_HEADER = lazyre.compile_regex(
    r"(?P<type>[A-Za-z_][\w.]*(?:(?<=Error)\([A-Za-z_][\w.]*\))?)\s{2,}Traceback \(most re"
)
#: IPython's header broken after its padded type (a paste wrapped it): the type alone on its
#: line (padded or not), then ``Traceback (most recent call last)`` on the next line.
_TYPE_ENDINGS = ("Error", "Exception", "Interrupt", "Exit", "StopIteration")
_IPY_TYPE_ALONE = lazyre.compile_regex(
    rf"(?P<type>[A-Za-z_][\w.]*(?:{'|'.join(_TYPE_ENDINGS)}))\s*"
)
_IPY_FRAME = lazyre.compile_regex(
    # (JupyterLab copies a frame's file as a Markdown link: "File [<file>:<line>](<url>)")
    # (IPython 8 names the function with its parameters: "in start_processes(fn, args, ...)")
    r"(?:File \[?(?P<file>[^\s\[\]]+?):(?P<line>\d+)(?:, in (?P<func>[^\s(]+))?"
    r"|Cell In\[\d+\], line (?P<cline>\d+))"
)
#: IPython before 8 names a frame's file and function, then shows numbered source lines, the
#: failing one behind an arrow (``<ipython-input-3-1a2b> in train(self, files)``, then
#: ``---> 92         self._tokenizer.train(trainer, files)``); a paste may start at one.
_IPY_OLD_FRAME = lazyre.compile_regex(
    r"(?P<file><ipython-input-\d+-[0-9a-f]+>|(?:[A-Za-z]:)?[^\s:<>]*\.py)"
    r" in (?P<func><[^>]{1,40}>|[\w.]+)\(.*\)$"
)
_IPY_ARROW = lazyre.compile_regex(r"-+> ?(?P<line>\d+) ")
#: A line that starts as ``word:`` with a lower-case word and no module before it: Python
#: code (an annotated assignment, a dict's key), never an exception's type.
_SOURCE_NOT_TYPE = lazyre.compile_regex(r"[a-z_][a-z0-9_]*(?:\[[^\]\n]*\])?\s*:(?!:)")
#: VS Code's debugger names the exception first (``Exception has occurred: KeyError``), then
#: its message, then the frames, innermost last, as a traceback prints them.
_VSCODE_HEADER = lazyre.compile_regex(r"Exception has occurred: (?P<type>[A-Za-z_][\w.]*)\s*")
_EXC_LINE = lazyre.compile_regex(r"(?P<type>[A-Za-z_][\w.]*)(?::[ ]?(?P<msg>.*))?")
_RECORD_START = lazyre.compile_regex(
    r"\[?\d{4}-\d{2}-\d{2}[ T_]\d{2}:|\[?[IWEF]\d{3,4} \d{2}:\d{2}|"
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d{2}:|\[ *\d+\.\d{6}\]"
)
#: A record in logging's default format, without a timestamp (``logging.BASIC_FORMAT``,
#: ``%(levelname)s:%(name)s:%(message)s``): older torchrun's ``ERROR:torch.distributed.elastic.
#: multiprocessing.api:failed (exitcode: 1) ...`` right under its worker's exception line.
_BASIC_RECORD = lazyre.compile_regex(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[A-Za-z_][\w.]*:")
#: An NCCL debug line (``host:pid:tid [dev] NCCL INFO ...``): NCCL's own record, never the
#: continuation of a Python exception's message (it may sit among a traceback's frames, where
#: another process's output interleaves).
_NCCL_RECORD = lazyre.compile_regex(r"[\w\-.]+:\d+:\d+ \[\d+\] NCCL ")
#: A warning as Python's warnings module prints it (formatwarning: ``<file>:<lineno>:
#: <category>: <message>``): the warnings module's own record, never an exception's message.
_WARNING_RECORD = lazyre.compile_regex(r"\S{1,400}\.pyw?:\d+: [A-Z]\w{0,60}Warning: ")
#: Lines a rich, IPython or faulthandler block may take before it is closed regardless.
MAX_TB_LINES = 2000
MAX_TEXT_LINES = 400
#: Of a longer traceback, the text keeps this many first lines and the rest from its end.
TEXT_HEAD_LINES = 100
#: Frames kept of a deep traceback (a RecursionError): the outermost and the innermost ones.
MAX_FRAMES = 200
FRAMES_HEAD = 20
#: Longest source line kept for a frame.
MAX_CODE = 200
#: CPython 3.11+'s position markers under a source line (``~~~~^^^^``).
_MARKERS = lazyre.compile_regex(r"[~^\s]+")
MAX_MESSAGE_LINES = 60
#: Unindented non-exception lines tolerated inside a traceback's frames (interleaved output).
MAX_NOISE_LINES = 5


def looks_like_progress(text: str) -> bool:
    """Whether ``text`` is a tqdm bar (``train:  60%|██████    | 6/10 [00:00<00:00, 9it/s]``)."""
    return "%|" in text and text.rstrip().endswith("]")


#: What a traceback prints, wherever it is: its lines, and each exception's type, message and
#: frames (a retried error prints the same again; see :meth:`PartialTraceback.printed`).
Printed = tuple[tuple[str, ...], tuple[tuple[str, str, tuple[Frame, ...]], ...]]


def ends_message(text: str) -> bool:
    """Whether ``text``, after an exception's message line, starts something else: a log
    record, a progress bar, NCCL's own debug line, a Python warning (not another traceback:
    that starts one)."""
    return (
        looks_like_record(text)
        or looks_like_progress(text)
        or _NCCL_RECORD.match(text) is not None
        or _BASIC_RECORD.match(text) is not None
        or _WARNING_RECORD.match(text) is not None
    )


def looks_like_record(text: str) -> bool:
    """Whether ``text`` starts a new log record (it carries a timestamp), ending any message."""
    return _RECORD_START.match(text) is not None


@dataclass(slots=True)
class PartialTraceback:
    """A traceback being assembled; becomes a model Traceback when complete."""

    start_line: int
    exceptions: list[ExceptionInfo] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    line_count: int = 0
    exc_type: str | None = None
    exc_message: list[str] = field(default_factory=list)
    exc_line: int = 0
    #: The class a header named for an exception line the log does not show (IPython's).
    exc_named: str = ""
    noise: int = 0
    #: A line detector found something on one of its lines (the finding points at it).
    line_hits: bool = False
    #: The last line was a ``File ...`` line: the next indented one is its source line.
    code_next: bool = False
    #: Time of the header line (own or inferred), fixed when the traceback starts.
    stamp: tuple[float | None, bool] | None = None
    #: Further headers seen among the frames: other processes writing the same console.
    twins: int = 0
    #: The final exceptions of those other processes, as they were printed.
    twin_exceptions: list[ExceptionInfo] = field(default_factory=list)
    #: The traceback this one was printed together with (both processes died of theirs).
    twin_of: PartialTraceback | None = None
    #: Started at a frame line: the paste lost the ``Traceback ...`` header.
    headerless: bool = False
    #: The writer's line just before the traceback (``... failed, retrying``), if any.
    prelude: str = ""
    #: Whether its time is its own or the line right before it's (not a stamp from far above).
    timed_close: bool = False
    #: The header's indentation (a traceback pasted or logged inside an indented block): that
    #: many leading spaces are the block's margin, removed from its lines before they are read.
    margin: str = ""

    def printed(self) -> Printed:
        """What it prints, not where (see :data:`Printed`)."""
        return tuple(self.text), tuple((e.type, e.message, e.frames) for e in self.exceptions)

    def add_text(self, text: str) -> None:
        self.line_count += 1
        if len(self.text) < MAX_TEXT_LINES:
            self.text.append(text)
            return
        # Bounded: keep the head (where it started) and a sliding tail (how it ended).
        omitted = self.line_count - MAX_TEXT_LINES
        marker = f"... [{omitted} traceback line(s) omitted by crashlens] ..."
        if omitted == 1:
            self.text.insert(TEXT_HEAD_LINES, marker)
        else:
            self.text[TEXT_HEAD_LINES] = marker
        del self.text[TEXT_HEAD_LINES + 1]
        self.text.append(text)

    def add_frame(self, frame: Frame) -> None:
        if len(self.frames) >= MAX_FRAMES:
            del self.frames[FRAMES_HEAD]
        self.frames.append(frame)
        self.code_next = True

    def source_line(self, text: str) -> None:
        """An indented line among the frames: the last frame's source line when it follows
        its ``File ...`` line (not the ``^^^^`` markers under it)."""
        code = text.strip()
        if self.code_next and code and self.frames and not _MARKERS.fullmatch(code):
            self.frames[-1] = dataclasses.replace(self.frames[-1], code=code[:MAX_CODE])
        self.code_next = False

    def begin_exception(self, lineno: int, text: str) -> None:
        m = _EXC_LINE.fullmatch(text)
        if m and (m["msg"] is not None or "." in m["type"] or _exception_word(m["type"])):
            self.exc_type = m["type"]
            self.exc_message = [m["msg"] or ""]
        else:
            self.exc_type = ""
            self.exc_message = [text]
        self.exc_line = lineno

    def end_exception(self) -> None:
        if self.exc_type is None:
            return
        message = "\n".join(self.exc_message).strip()
        # only the first exception of a chain lost its header; a chained one printed its own
        head_lost = self.headerless and not self.exceptions
        self.exceptions.append(
            ExceptionInfo(
                self.exc_type, message, tuple(self.frames), self.exc_line, head_lost, self.exc_named
            )
        )
        self.exc_type = None
        self.exc_named = ""
        self.exc_message = []
        if not self.twins:
            self.frames = []

    def twin(self, lineno: int, text: str) -> None:
        """Another process's final exception line, printed among this traceback's."""
        m = _EXC_LINE.fullmatch(text)
        assert m is not None
        self.twin_exceptions.append(
            ExceptionInfo(m["type"], (m["msg"] or "").strip(), tuple(self.frames), lineno)
        )
        self.twins -= 1


def _compile_location(frames: list[Frame]) -> bool:
    """Whether the innermost frame is where the compiler stopped: ``File "x.py", line 27``
    with no function (only a compile error's report prints one)."""
    return bool(frames) and not frames[-1].function


def _compile_error(frames: list[Frame]) -> bool:
    """A compile error's location with its source line: what was raised is a SyntaxError."""
    return _compile_location(frames) and bool(frames[-1].code)


def _frame(m: regex.Match[str]) -> Frame:
    """A frame from a ``File "...", line N, in f`` match."""
    path = m["file"]
    func = (m["func"] or "").strip()
    if not func and m.string[m.end() :].strip():
        # text after the line number that is not ", in f": a function the paste garbled, not
        # a compile error's location (which ends at the number)
        func = "?"
    return Frame(path, int(m["line"]), func, is_user_path(path))


def _own_script(tb: PartialTraceback) -> None:
    """Mark the frames of the script the process was launched with as the user's code, where
    ever it lives (a job's ``train.py`` copied into ``site-packages`` is still the user's)."""
    if tb.headerless:
        return  # the frames shown may not start where the process did
    script = next(filter(None, (launched_script(e.frames) for e in reversed(tb.exceptions))), None)
    if script is None:
        return
    tb.exceptions = [
        dataclasses.replace(e, frames=tuple(_as_user(f, script) for f in e.frames))
        for e in tb.exceptions
    ]


def _as_user(frame: Frame, script: str) -> Frame:
    if frame.user_code or frame.file != script:
        return frame
    return dataclasses.replace(frame, user_code=True)


def _exception_like(text: str) -> bool:
    """Whether an unindented line can be the ``ExcType: message`` line ending a traceback."""
    m = _EXC_LINE.fullmatch(text)
    return m is not None and (
        m["msg"] is not None or _qualified_class(m["type"]) or _exception_word(m["type"])
    )


def _qualified_class(name: str) -> bool:
    """``queue.Empty``, ``torch.cuda.OutOfMemoryError``: a module-qualified class name; not a
    module path (``torch.multiprocessing.spawn``, where a paste cut the exception's name)."""
    module, _, last = name.rpartition(".")
    return bool(module) and last[:1].isupper()


_BARE_HINTS = ("Error", "Exception", "Interrupt", "Exit")
#: Exceptions raised with no message as a rule, printed as the bare class name on a line of
#: their own: CPython's allocator raises ``MemoryError`` so (PyErr_NoMemory).
_PRINTED_ALONE = frozenset({"MemoryError"})
#: Message lines a headerless exception may take (its own continuation, not the log after it).
BARE_MESSAGE_LINES = 8


#: The most spaces before an exception's final line standing alone that still read as a
#: margin (pip sets its child's output six in).
_MAX_EXCEPTION_MARGIN = 8


def _bare_exception(text: str) -> bool:
    """Whether an unindented line is an exception's final line standing on its own.

    Warnings are not exceptions here, and a plain ``Error: ...`` is too common in ordinary
    log text to count; a colon (or a dotted, module-qualified type) is required.
    """
    # a private module's type counts too (``_pickle.UnpicklingError``, ``_queue.Empty``)
    if not (text[:1].isalpha() or text[:1] == "_"):
        return False
    if not any(h in text for h in _BARE_HINTS) and not _qualified_head(text):
        return False
    m = _EXC_LINE.fullmatch(text)
    if m is None or m["type"] in ("Error", "Exception") or m["type"].endswith("Warning"):
        return False
    if m["msg"] is None and "." not in m["type"] and m["type"] not in _PRINTED_ALONE:
        # ``FileNotFoundError: `` with its message on the next lines is one (ultralytics does
        # that); a bare ``SomeError`` word with no colon is prose.
        return False
    name = m["type"].rsplit(".", 1)[-1]
    return _exception_word(name) or (
        m["msg"] is not None and _QUALIFIED_EXCEPTION.fullmatch(m["type"]) is not None
    )


def _another_exception(text: str) -> bool:
    """Whether a line after a headerless exception's is another Python exception's line, not
    its message going on: a class named as Python's are (``TypeError: ...``,
    ``subprocess.CalledProcessError: ...``); a library's own error code in a message
    (NCCL's ``ncclSystemError: ...`` under torch's ``RuntimeError``) is the message."""
    if not _bare_exception(text):
        return False
    m = _EXC_LINE.fullmatch(text)
    return m is not None and m["type"].rsplit(".", 1)[-1][:1].isupper()


#: A module-qualified exception class whose name says no "Error" (pyarrow's
#: ``pyarrow.lib.ArrowInvalid``, ``zipfile.BadZipFile``): lower-case modules, then a class
#: name of two capitalised words or more, as exception classes are named.
_QUALIFIED_EXCEPTION = lazyre.compile_regex(
    r"_?[a-z][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*\.[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+"
)


def _qualified_head(text: str) -> bool:
    """Whether ``text`` starts with a module-qualified class name and a colon (cheap)."""
    colon = text.find(": ", 0, 120)
    return colon > 0 and "." in text[:colon] and " " not in text[:colon]


#: Markdown a paste may wrap a whole line in: bold, code.
_EMPHASIS = ("**", "`")


def _unemphasised(text: str) -> str:
    """``text`` without the Markdown emphasis a paste wrapped the whole line in
    (``**ImportError: ...**``, `` `KeyError: 'x'` ``); the text itself otherwise."""
    for mark in _EMPHASIS:
        if len(text) > 2 * len(mark) and text.startswith(mark) and text.endswith(mark):
            return text[len(mark) : -len(mark)]
    return text


def _unmarked(text: str) -> str:
    """``text`` without the ``E   `` pytest puts before each line of a failure's exception
    (``E   ImportError: cannot import name ...``); the text itself otherwise."""
    if text.startswith("E   "):
        rest = text[4:].lstrip(" ")
        if rest[:1].isalpha() or rest[:1] == "_":
            return rest
    return text


def _exception_word(name: str) -> bool:
    return name.endswith(("Error", "Exception", "Exit", "Interrupt", "Warning")) or name in (
        "KeyboardInterrupt",
        "StopIteration",
    )


class State(Enum):
    """Where the assembler is in a traceback."""

    IDLE = "idle"  #: between tracebacks
    FRAMES = "frames"  #: ``File ...`` lines and their source lines
    MESSAGE = "message"  #: the exception's (multi-line) message
    EMBEDDED = "embedded"  #: a worker's ``Original Traceback`` inside the message
    AFTER_BLANK = "after_blank"  #: a blank line: a chained exception may follow
    CHAIN = "chain"  #: "The above exception was the direct cause..." seen
    RICH = "rich"  #: inside a rich traceback box
    IPYTHON = "ipython"  #: an IPython/Jupyter traceback
    FAULT = "fault"  #: a faulthandler dump
    VSCODE = "vscode"  #: VS Code's exception report: type, message, then frames


def _margin(indent: str) -> bool:
    """Whether a header indented by ``indent`` starts a traceback: at most one character (a
    console's stray space), or spaces up to ``MAX_MARGIN`` (the block it was pasted in)."""
    return len(indent) <= 1 or (len(indent) <= MAX_MARGIN and indent.strip(" ") == "")


class TracebackAssembler:
    """A state machine over one rank's lines; completed tracebacks pile up in ``done``."""

    def __init__(self) -> None:
        self.current: PartialTraceback | None = None
        self.state = State.IDLE
        self.ipython_type = ""
        #: IPython's padded type alone on a line, and its line number (:data:`_IPY_TYPE_ALONE`)
        self._type_alone: tuple[int, str] | None = None
        self.blank_run = 0
        #: The number of the last line offered (:meth:`feed`): lines after it were only skimmed.
        self.last_line = 0
        self.done: list[PartialTraceback] = []
        self._handlers: dict[State, Callable[[int, str], bool]] = {
            State.FRAMES: self._on_frames,
            State.MESSAGE: self._on_message,
            State.EMBEDDED: self._on_embedded,
            State.AFTER_BLANK: self._on_after_blank,
            State.CHAIN: self._on_chain,
            State.RICH: self._on_rich,
            State.IPYTHON: self._on_ipython,
            State.FAULT: self._on_fault,
            State.VSCODE: self._on_vscode,
        }

    def feed(self, lineno: int, text: str) -> bool:
        """Offer a line; returns True when the line belongs to a traceback."""
        self.last_line = lineno
        if self.current is None:
            return self._maybe_start(lineno, text)
        tb = self.current
        if tb.line_count >= MAX_TB_LINES and self.state not in (State.FRAMES, State.MESSAGE):
            self._finish()
            return self._maybe_start(lineno, text)
        if tb.margin and text.startswith(tb.margin):
            text = text[len(tb.margin) :]
        taken = self._handlers[self.state](lineno, text)
        if taken:
            tb.add_text(text)
            return True
        self._finish()
        return self._maybe_start(lineno, text)

    def cut_header(self, lineno: int, text: str) -> bool:
        """Take ``text``, a stream's last line, as a traceback's header the log was cut in
        (``Traceback (most recent call l``: the process or the paste stopped there), when
        nothing else is open; :meth:`close` then keeps it as a traceback cut before its
        exception line."""
        stripped = text.strip()
        if (
            self.current is not None
            or len(stripped) < CUT_HEADER_MIN
            or len(stripped) >= len(TB_HEADER)
            or not TB_HEADER.startswith(stripped)
        ):
            return False
        self._start(lineno, text, State.FRAMES)
        return True

    def close(self) -> None:
        """End of the stream: complete whatever is open.

        A traceback the log ends in, before its exception line (the process died while
        printing it, or a paste was cut), still ended that process's output: it is kept with
        a placeholder exception so it counts as the failure it shows.
        """
        tb = self.current
        if tb is None:
            return
        if self.state is State.FRAMES and tb.exc_type is None and _compile_error(tb.frames):
            # CPython shows where a compile error is as a frame without a function, its
            # source line and a caret: whatever the cut took, what was raised is a
            # SyntaxError (or its IndentationError / TabError)
            tb.exc_type = "SyntaxError"
            tb.exc_message = [CUT_COMPILE_MESSAGE]
            tb.exc_line = tb.start_line
        if self.state in (State.FRAMES, State.IPYTHON) and tb.exc_type is None:
            # Even a bare header (or one cut mid-frame: ``File "train.py", l``) is a process
            # that stopped while printing its traceback.
            shown = f" (last frame shown: {tb.frames[-1]})" if tb.frames else ""
            named = ""
            if self.state is State.IPYTHON and self.ipython_type and tb.line_count > 1:
                # IPython names the exception in its header: its class is known, not its
                # message (a paste cut inside the header itself says nothing yet)
                named = f"; {CUT_IPYTHON_NAMED} {self.ipython_type}"
                tb.exc_named = self.ipython_type
            tb.exc_type = CUT_TRACEBACK
            tb.exc_message = [
                f"the log ends inside a traceback, before its exception line{named}{shown}"
            ]
            tb.exc_line = tb.start_line
        self._finish()

    # -- starting -----------------------------------------------------------------------
    def _maybe_start(self, lineno: int, text: str) -> bool:
        stripped = text.lstrip()
        indent = text[: len(text) - len(stripped)]
        if stripped.startswith(TB_HEADER) and _margin(indent):
            self._start(lineno, text, State.FRAMES)
            assert self.current is not None
            self.current.margin = indent if len(indent) > 1 else ""
            return True
        if _BARE_FRAME.match(text):
            # The header was lost (a pasted excerpt): the frames still say it is a traceback.
            # Frames sit two spaces in from their block's margin, so a deeper first frame
            # says the whole block was indented (its exception line too).
            self._start(lineno, text, State.FRAMES)
            assert self.current is not None
            self.current.headerless = True
            if len(indent) >= 4 and _margin(indent[2:]):
                self.current.margin = indent[2:]
            self._on_frames(lineno, text[len(self.current.margin) :])
            return True
        if text.startswith("╭") and "Traceback" in text:
            self._start(lineno, text, State.RICH)
            return True
        if text.startswith("Fatal Python error: "):
            self._start(lineno, text, State.FAULT)
            assert self.current is not None
            self.current.exc_type = "Fatal Python error"
            self.current.exc_message = [text[len("Fatal Python error: ") :]]
            self.current.exc_line = lineno
            return True
        if stripped.startswith("Exception has occurred: "):
            m = _VSCODE_HEADER.fullmatch(stripped)
            if m:
                self._start(lineno, text, State.VSCODE)
                assert self.current is not None
                self.current.exc_type = m["type"]
                self.current.exc_message = []
                self.current.exc_line = lineno
                return True
        bare, margin = _unmarked(_unemphasised(text)), ""
        found = _bare_exception(bare)
        if not found and 0 < len(indent) <= _MAX_EXCEPTION_MARGIN:
            # the same line set in from a margin: a paste's, or a tool's that indents a
            # child's output (pip's "[N lines of output]" block, six spaces)
            bare, margin = stripped, indent
            found = _bare_exception(bare)
        if found:
            # A final ``Type: message`` line with no traceback above it (a shortened paste,
            # a launcher that printed only the error): an exception like any other.
            self._start(lineno, text, State.MESSAGE)
            assert self.current is not None
            self.current.headerless = True
            self.current.margin = margin
            self.current.begin_exception(lineno, bare)
            return True
        if "Traceback (most re" in text and self._ipython_header(lineno, text, stripped):
            return True
        if text.rstrip().endswith(_TYPE_ENDINGS) and (m := _IPY_TYPE_ALONE.fullmatch(text)):
            self._type_alone = (lineno, m["type"])
        if " in " in text and _IPY_OLD_FRAME.match(text):
            # an IPython traceback pasted from one of its frames on: its header (the type) is
            # lost, the exception line after the frames says it
            self._start(lineno, text, State.IPYTHON)
            self.ipython_type = ""
            assert self.current is not None
            self.current.headerless = True
            self._on_ipython(lineno, text)
            return True
        return False

    def _ipython_header(self, lineno: int, text: str, stripped: str) -> bool:
        """Start an IPython traceback at its header: on one line (``<Type>   Traceback (most
        recent call last)``), or on this line after its type alone on the line before (a
        paste wrapped the header there)."""
        m = _IPY_HEADER.match(text)
        if m is not None:
            exc_type = m["type"]
        else:
            alone = self._type_alone
            if alone is None or alone[0] != lineno - 1:
                return False
            if not stripped.startswith("Traceback (most recent call last)"):
                return False
            exc_type = alone[1]
        self._start(lineno, text, State.IPYTHON)
        self.ipython_type = exc_type
        return True

    def _start(self, lineno: int, text: str, state: State) -> None:
        self.current = PartialTraceback(start_line=lineno)
        self.current.add_text(text)
        self.state = state
        self.blank_run = 0

    def _finish(self) -> None:
        tb = self.current
        assert tb is not None
        tb.end_exception()
        if tb.exceptions:
            _own_script(tb)
            self.done.append(tb)
        for exc in tb.twin_exceptions:
            twin = PartialTraceback(start_line=tb.start_line, text=list(tb.text))
            twin.line_count = tb.line_count
            twin.exceptions.append(exc)
            twin.stamp = tb.stamp
            twin.twin_of = tb
            self.done.append(twin)
        self.current = None
        self.state = State.IDLE

    # -- states --------------------------------------------------------------------------
    def _on_frames(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        m = _FRAME.match(text)
        if m:
            tb.add_frame(_frame(m))
            tb.noise = 0
            return True
        if not text.strip() or text[0].isspace():
            tb.source_line(text)
            return True
        if text.startswith(TB_HEADER):
            # Another process began its traceback in the same console: frames now interleave.
            tb.twins += 1
            return True
        if looks_like_record(text):
            return False
        if tb.code_next and _compile_location(tb.frames) and not _exception_like(text):
            # a compile error's location always prints its source line next (here dedented)
            tb.source_line(text)
            return True
        if tb.code_next and _SOURCE_NOT_TYPE.match(text):
            # a frame's source line that lost its indentation (a paste that dedented the
            # block): ``out: Dataset = func(self)`` reads like ``Type: message``, but no
            # exception's type is a lower-case word without a module
            tb.source_line(text)
            return True
        if not _exception_like(text) and tb.noise < MAX_NOISE_LINES:
            # stdout interleaved into stderr's traceback (a combined console): not the end.
            tb.noise += 1
            return True
        tb.begin_exception(lineno, text)
        self.state = State.MESSAGE
        return True

    def _on_message(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        if not text.strip():
            self.state = State.AFTER_BLANK
            self.blank_run = 1
            return True
        if text.startswith("Original Traceback (most recent call last):"):
            tb.exc_message.append(text)
            tb.code_next = False  # (the worker's frames start here, not the main process's)
            self.state = State.EMBEDDED
            return True
        if text.strip() in _CHAIN_MARKERS:
            # a paste that dropped the blank lines around the chain's marker
            tb.end_exception()
            self.state = State.CHAIN
            return True
        if text.startswith(TB_HEADER) or ends_message(text):
            return False
        if tb.twins:
            # The other process's frames and final line, still to come after this one's.
            m = _FRAME.match(text)
            if m:
                tb.add_frame(_frame(m))
                return True
            if text[0].isspace():
                return True
            if _exception_like(text):
                tb.twin(lineno, text)
                return True
        bare = tb.headerless and not tb.frames
        if bare and _another_exception(text):
            # another exception's line standing alone right after this one (a paste of the
            # error lines only, a launcher's error after its child's): that one starts there
            return False
        limit = BARE_MESSAGE_LINES if bare else MAX_MESSAGE_LINES
        if len(tb.exc_message) >= limit:
            return False
        tb.exc_message.append(text)
        return True

    def _on_embedded(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        frame = _FRAME.match(text) is not None
        # A paste that lost the indentation still shows the worker's frames: a frame's line,
        # then its source line, stay in the worker's traceback until its exception's line.
        dedented = frame or (
            tb.code_next and (not _exception_like(text) or _SOURCE_NOT_TYPE.match(text))
        )
        if not text.strip() or text[0].isspace() or dedented:
            if len(tb.exc_message) < MAX_MESSAGE_LINES:
                tb.exc_message.append(text)
            tb.code_next = frame
            return True
        if looks_like_record(text):
            return False
        tb.exc_message.append(text)
        self.state = State.MESSAGE
        return True

    def _on_after_blank(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        stripped = text.strip()
        if not stripped:
            self.blank_run += 1
            return self.blank_run <= 2
        if stripped in _CHAIN_MARKERS:
            tb.end_exception()
            self.state = State.CHAIN
            return True
        return False

    def _on_chain(self, lineno: int, text: str) -> bool:
        stripped = text.strip()
        if not stripped:
            return True
        if stripped.startswith(TB_HEADER):
            self.state = State.FRAMES
            return True
        return False

    def _on_rich(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        if text.startswith("│"):
            m = _RICH_FRAME.match(text)
            if m:
                tb.add_frame(Frame(m["file"], int(m["line"]), m["func"], is_user_path(m["file"])))
            return True
        if text.startswith("╰"):
            self.state = State.FRAMES
            return True
        return False

    def _on_ipython(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        named = self.ipython_type
        if (
            text.startswith(named) and text[len(named) :][:1] in (":", "")
            if named
            else _exception_like(text)
        ):
            tb.begin_exception(lineno, text)
            self.state = State.MESSAGE
            return True
        m = _IPY_FRAME.match(text)
        if m:
            path = m["file"] or "<ipython-cell>"
            line = int(m["line"] or m["cline"])
            tb.add_frame(Frame(path, line, m["func"] or "<cell>", is_user_path(path)))
        elif m := _IPY_OLD_FRAME.match(text):
            tb.add_frame(Frame(m["file"], 0, m["func"], is_user_path(m["file"])))
        elif (m := _IPY_ARROW.match(text)) and tb.frames and not tb.frames[-1].line:
            tb.frames[-1] = dataclasses.replace(tb.frames[-1], line=int(m["line"]))
        return tb.line_count < MAX_TB_LINES

    def _on_vscode(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        m = _BARE_FRAME.match(text)
        if m:
            tb.add_frame(_frame(m))
            return True
        if not text.strip():
            return False
        if tb.frames:
            if text.startswith("    "):  # the last frame's source line
                tb.source_line(text)
                return True
            return False
        if len(tb.exc_message) < BARE_MESSAGE_LINES:
            tb.exc_message.append(text)
            return True
        return False

    def _on_fault(self, lineno: int, text: str) -> bool:
        tb = self.current
        assert tb is not None
        stripped = text.strip()
        if not stripped:
            return True
        if stripped.startswith(("Thread 0x", "Current thread 0x", "Extension modules:", "<")):
            return True
        m = _FAULT_FRAME.match(text)
        if m:
            path = m["file"]
            tb.add_frame(Frame(path, int(m["line"]), m["func"].strip(), is_user_path(path)))
            return True
        return False
