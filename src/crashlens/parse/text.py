"""Text as users' logs hold it: colour codes, and two lines glued into one.

A progress bar redraws itself with ``\\r`` and no newline, so whatever is printed next (a
traceback, the shell's ``Killed``) lands on the bar's line; terminals and rich handlers put ANSI
colour codes around words. Both are undone here, before a line is parsed.
"""

from __future__ import annotations

from crashlens import lazyre

_TB_GLUE = "Traceback (most recent call last):"
#: faulthandler's header (a native crash), glued to a bar just as a traceback's can be.
_FAULT_GLUE = "Fatal Python error: "
_SIGNAL_ENDS = ("Killed", "fault", "dumped)", "Bus error", "Aborted")
#: Launcher prefixes that can sit between glued text and a traceback header.
_GLUED_PREFIX = lazyre.compile(r"(?:\[(?:rank|default)\d+\]:[ ]?)+ *$")
#: What may stand before those and is a launcher's label, not glued text: a tool's timestamp
#: (bare, or in brackets as Jenkins writes it), srun --label's task id, pdsh's host, Open MPI's
#: tag, kubectl's pod.
_LABELS_ONLY = lazyre.compile(
    r"(?:\[?\d{4}-\d\d-\d\d[ T]\S+ )?"
    r"(?: *\d{1,5}: |[A-Za-z][\w\-.]*: |\[\d+,\d+\]<std(?:out|err|diag)>:[ ]?|\[pod/[^\]\s]+\] )*"
    r" *"  # and the indentation of a header pasted as a block
)


#: A shell's report of a signal death printed right after a progress bar (no newline between).
_GLUED_SIGNAL = lazyre.compile(
    r"(?<=[\]|])(?:Killed|Segmentation fault|Bus error|Aborted)(?: \(core dumped\))?\s*$"
)


def glue_point(raw: str) -> int:
    """Where a traceback (or faulthandler) header glued to earlier text (a tqdm bar, no
    newline) begins; 0: none.

    The header keeps the launcher prefix right before it (``...it/s][rank2]: Traceback``), so
    the traceback lands in its rank's stream. Headers quoted inside a message (DataLoader's
    ``Original Traceback``, torchelastic's ``traceback : Traceback``) are not glued text.
    """
    at = raw.find(_TB_GLUE)
    if at < 0:
        at = raw.find(_FAULT_GLUE)
    if at < 0:
        m = _GLUED_SIGNAL.search(raw)
        return m.start() if m else 0
    before = raw[:at]
    if at <= 1 or not before.strip():
        return 0
    if before.rstrip().endswith(("Original", "traceback :", "traceback:")):
        return 0
    m = _GLUED_PREFIX.search(before)
    cut = m.start() if m else at
    if _LABELS_ONLY.fullmatch(before[:cut].lstrip(" ")):  # labels of an indented paste too
        return 0
    return cut if before[:cut].strip() else 0


def split_glued(raw: str) -> tuple[str, ...]:
    """``raw`` as the lines it really is: ``...2.41s/it]Traceback (most ...`` is two, and a
    traceback whose line breaks a paste turned into runs of blanks is all its lines."""
    if _TB_GLUE in raw or _FAULT_GLUE in raw or raw.endswith(_SIGNAL_ENDS):
        if _FLAT_START.search(raw):
            return unflatten(raw)
        cut = glue_point(raw)
        if cut:
            return raw[:cut], raw[cut:]
    return (raw,)


#: A traceback flattened onto one line (a web form that dropped the line breaks and kept the
#: indentation): ``Traceback (most recent call last):   File "t.py", line 3, in <module> ...``.
_FLAT_START = lazyre.compile(r'Traceback \(most recent call last\):\s{2,}File "')
#: How an exception's line starts: its (qualified) type and the colon; a C module's
#: lower-case ``error`` / ``timeout`` too (``struct.error: unpack_from requires ...``).
_EXCEPTION_TYPE = r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Interrupt|Exit)"
_EXCEPTION_START = rf"(?:{_EXCEPTION_TYPE}|(?:[A-Za-z_]\w*\.)+(?:error|timeout))\b: "
#: The last frame's source line with the exception's bare type after it, nothing more
#: (``... out=out) MemoryError``): an exception printed without a message.
_FLAT_BARE_END = lazyre.compile_regex(rf"(?P<code>.*\S)\s+(?P<type>{_EXCEPTION_TYPE})\s*")
_FLAT_CUTS = lazyre.compile_regex(
    # (the exception's line and the next header had no indentation: one blank is enough)
    r"\s+(?=Traceback \(most recent call last\):)"
    r'|\s{2,}(?=File "[^"\n]{1,500}", line \d+)'
    r'|(?<=, line \d{1,7}, in [^\s"]{1,200})\s{2,}'
    rf"|\s+(?={_EXCEPTION_START})"
)
#: An exception's line after a frame that printed no source line (a frozen or compiled
#: module's).
_FLAT_EXCEPTION = lazyre.compile(_EXCEPTION_START)


def unflatten(raw: str) -> tuple[str, ...]:
    """The lines of a flattened traceback, frames and source lines indented as Python prints
    them; what came before its header (glued text) is a line of its own."""
    at = raw.find(_TB_GLUE)
    head = raw[:at].rstrip()
    pieces = [p for p in _FLAT_CUTS.split(raw[at:]) if p]
    out: list[str] = [head] if head else []
    code_next = False
    for piece in pieces:
        if piece.startswith('File "'):
            out.append("  " + piece)
            code_next = True
        elif code_next and not _FLAT_EXCEPTION.match(piece):
            bare = _FLAT_BARE_END.fullmatch(piece) if piece is pieces[-1] else None
            out.extend(("    " + bare["code"], bare["type"]) if bare else ("    " + piece,))
            code_next = False
        else:
            out.append(piece)
            code_next = False
    return tuple(out)
