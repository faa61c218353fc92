"""A spec's text before it is parsed: reading a file safely (size, kind, encoding) and refusing a
statement too long for the parser."""
from __future__ import annotations

from pathlib import Path

from tessel_dsl.errors import Diagnostic, Location, SpecError
from tessel_dsl.limits import MAX_SPEC_BYTES, MAX_STATEMENT_CHARS


class Unreadable(Exception):
    """A spec file that cannot or must not be read; the message never quotes its content."""


def read_spec_text(path, *, include: bool = False) -> str:
    """The text of a spec file: a regular file of at most MAX_SPEC_BYTES, UTF-8. An include must
    also be named ``*.tsl`` (after following links), so `include` cannot be pointed at a device,
    a pipe or another kind of file whose first line a syntax error would print."""
    import os
    import stat

    p = Path(path)
    try:
        if include and (p.suffix != ".tsl" or Path(os.path.realpath(p)).suffix != ".tsl"):
            raise Unreadable("only .tsl spec files can be included")
        st = os.stat(p)
        # An include must be a regular file; the spec named on the command line may also be a
        # pipe (`<(...)`), read only up to the size limit below.
        if not stat.S_ISREG(st.st_mode) and (include or stat.S_ISDIR(st.st_mode)):
            raise Unreadable("not a regular file")
        if st.st_size > MAX_SPEC_BYTES:
            raise Unreadable(f"larger than {MAX_SPEC_BYTES >> 20} MiB")
        with open(p, "rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as e:
        raise Unreadable(e.strerror or type(e).__name__) from None
    except ValueError:  # a NUL byte in the path
        raise Unreadable("the path contains a NUL byte") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise Unreadable(f"larger than {MAX_SPEC_BYTES >> 20} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8 text (byte {e.start})") from None


def check_statement_length(text: str, file: str) -> None:
    """Refuse a statement longer than MAX_STATEMENT_CHARS before the parser sees it (its cost grows
    faster than linearly with one statement's length). Lines inside brackets join one statement."""
    import re

    if len(text) > MAX_SPEC_BYTES:
        raise SpecError([Diagnostic("too-large", f"spec text is larger than {MAX_SPEC_BYTES >> 20} MiB",
                                    Location(file, 1, 1))])
    depth, start = 0, 0
    for m in re.finditer(r'[()\[\]{}\n]|#[^\n]*|"[^"\n]*"', text):
        c = m.group()
        if m.start() - start > MAX_STATEMENT_CHARS:
            first = text.count("\n", 0, start) + 1
            raise SpecError([Diagnostic("too-large", f"a statement longer than {MAX_STATEMENT_CHARS} characters "
                                        "(split it up, or use a loop)", Location(file, first, 1))])
        if c == "\n":
            if depth == 0:
                start = m.end()
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(0, depth - 1)
    if len(text) - start > MAX_STATEMENT_CHARS:
        first = text.count("\n", 0, start) + 1
        raise SpecError([Diagnostic("too-large", f"a statement longer than {MAX_STATEMENT_CHARS} characters "
                                    "(split it up, or use a loop)", Location(file, first, 1))])
