"""Plain block lines (``forward F12 on 3 time 2.5ms memory 1GB``) read without the parser.

A spec written out by a tool or a profiler is thousands of such lines, and lark's LALR parser with
positions costs about half a millisecond each (20,000 lines took 10 s). A line that is one block
declaration at the top level, with plain names, whole-number devices and number-with-unit options,
is built here straight into the syntax tree the parser would have built (same nodes, same
locations; `tests/unit/test_plain_lines.py` compares the two), and blanked out of the text the parser
reads. Any other line, or anything unusual on it, is left to the parser, which also reports every
syntax error.
"""
from __future__ import annotations

import re
from fractions import Fraction

from tessel_dsl.errors import Location
from tessel_dsl.lang.syntax import BlockDecl, DevAll, DevRange, Name, Num, Quantity, Stmt

_NAME = r"[A-Za-z_][A-Za-z_0-9]*"
# At most 16 digits before the point: the parser refuses longer numbers with its own message.
_NUM = r"[0-9]{1,16}(?:\.[0-9]+)?"
_WS = r"[ \t\f]+"
_KINDS = ("forward", "backward", "input_grad", "weight_grad", "other")
_END = re.compile(r"[ \t\f]*(?:#[^\n]*)?\Z")


def _num(text: str, loc: Location) -> Num:
    return Num(Fraction(text) if "." in text else int(text), loc)


class PlainLines:
    """Reads the plain block lines of one file; `keywords` are the grammar's reserved words (a name
    spelled like one is left to the parser, and a unit is never one: in ``time 1 memory 2`` the
    time has no unit)."""

    def __init__(self, file: str, keywords: frozenset[str]):
        self.file = file
        self.keywords = keywords
        unit = rf"(?:[ \t\f]*(?!(?:{'|'.join(sorted(keywords))})\b)({_NAME}))?"
        self.head = re.compile(rf"({'|'.join(_KINDS)}){_WS}({_NAME})(?:{_WS}of{_WS}({_NAME}))?"
                               rf"(?:{_WS}on{_WS}(?:(all)\b|([0-9]{{1,16}})(?:[ \t\f]*\.\.[ \t\f]*([0-9]{{1,16}}))?))?")
        # Longer words first: `grad time 2x` is not `grad NAME`.
        self.options = [(words, re.compile(rf"{_WS}(?P<kw>{_WS.join(words.split())}){_WS}({_NUM}){unit}"))
                        for words in ("time", "memory", "grad time", "infer memory")]
        self.grad = re.compile(rf"{_WS}(?P<kw>grad){_WS}({_NAME})")

    def line(self, text: str, number: int) -> BlockDecl | None:
        """The block declared by `text` (line `number`), or None to leave the line to the parser."""
        head = self.head.match(text)
        if head is None:
            return None
        file = self.file
        kind, block, forward, everywhere, lo, hi = head.groups()
        if block in self.keywords or forward in self.keywords:
            return None
        where = Location(file, number, head.start(2) + 1)
        name = Name(block, (block,), where)
        of = Name(forward, (forward,), Location(file, number, head.start(3) + 1)) if forward else None
        devices = None
        if everywhere:
            devices = DevAll(Location(file, number, head.start(4) + 1))
        elif lo:
            first = _num(lo, Location(file, number, head.start(5) + 1))
            devices = DevRange(first, _num(hi, Location(file, number, head.start(6) + 1)) if hi else None, first.loc)
        options = []
        pos = head.end()
        while not _END.match(text, pos):
            for words, rx in self.options:
                m = rx.match(text, pos)
                if m:
                    at = Location(file, number, m.start(2) + 1)
                    value: object = Quantity(_num(m.group(2), at), m.group(3), at)
                    break
            else:
                m = self.grad.match(text, pos)
                if m is None or m.group(2) in self.keywords:
                    return None
                words = "grad"
                value = Name(m.group(2), (m.group(2),), Location(file, number, m.start(2) + 1))
            options.append((words, value, Location(file, number, m.start("kw") + 1)))
            pos = m.end()
        return BlockDecl(where, kind, name, of, devices, tuple(options))


def split_plain_lines(text: str, file: str, keywords: frozenset[str]) -> tuple[str, list[Stmt]]:
    """(`text` with its plain top-level block lines blanked, the blocks those lines declare).

    A line is taken only where the parser would read it as a statement of its own: at column 1,
    outside brackets, not after a line continued with a backslash or a line opening an indented
    body (``for ...:``, whose missing body the parser must report), and not before an indented
    line (an indentation error is reported at the line before it)."""
    reader = PlainLines(file, keywords)
    lines = text.split("\n")
    # Whether the next line with content is indented: the parser reports that indentation at
    # the end of the line before it, which must stay its own.
    indented_next = [False] * len(lines)
    following = False
    for i in range(len(lines) - 1, -1, -1):
        indented_next[i] = following
        bare = lines[i].lstrip(" \t\f\r")
        if bare and not bare.startswith("#"):
            following = lines[i][:1] in (" ", "\t", "\f")
    taken: list[Stmt] = []
    depth = 0
    prev_open = False  # the previous line with content ends in ':' or '\' (or sits in brackets)
    for i, line in enumerate(lines):
        if depth == 0 and not prev_open and not indented_next[i] and line[:1].isalpha():
            decl = reader.line(line.rstrip("\r"), i + 1)
            if decl is not None:
                taken.append(decl)
                lines[i] = ""
                continue
        code = line.split("#", 1)[0].rstrip(" \t\f\r") if "#" in line and '"' not in line else line.rstrip(" \t\f\r")
        if '"' in code or "#" in code:
            prev_open = True  # a string or comment this scan does not follow: leave the next line to the parser
        elif code:
            for c in code:
                if c in "([{":
                    depth += 1
                elif c in ")]}":
                    depth = max(0, depth - 1)
            prev_open = code.endswith((":", "\\")) or depth > 0
    return "\n".join(lines), taken
