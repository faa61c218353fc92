"""Read `.tsl` text into a checked `Spec`: grammar -> syntax tree -> evaluation -> checks.

`parse` and `parse_file` are the only entry points; both raise `TslSyntaxError` for text that does
not follow the grammar and one `SpecError` listing every semantic problem. No lark object survives
into the IR.
"""
from __future__ import annotations

import gc
import heapq
import importlib.resources
import re
from dataclasses import replace
from pathlib import Path

from lark import Lark, Token
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.indenter import DedentError, Indenter

from tessel_dsl.errors import Diagnostic, Location, SpecError, TesselError, TslSyntaxError
from tessel_dsl.ir import Edge, Mode, Spec
from tessel_dsl.lang import syntax as A
from tessel_dsl.lang.assemble import device_memory, link_backwards, placed
from tessel_dsl.lang.derive import derive_backward, project_infer
from tessel_dsl.lang.options import grammar_block_options
from tessel_dsl.lang.plain_lines import split_plain_lines
from tessel_dsl.lang.source_text import Unreadable, check_statement_length, read_spec_text
from tessel_dsl.lang.tree import ToAst

__all__ = ["parse", "parse_file"]

_PARSER: Lark | None = None
# Options fixed with the grammar (and so in the shipped tables); the per-process ones, postlex and
# propagate_positions, are given when the tables are loaded, as lark allows.
LARK_OPTIONS = dict(parser="lalr", start=["start", "expr"], maybe_placeholders=False)


class _Indenter(Indenter):
    """Python-style blocks; also remembers the last token so odd failures can be located."""

    NL_type = "_NEWLINE"
    OPEN_PAREN_types = ["LPAR", "LSQB", "LBRACE"]
    CLOSE_PAREN_types = ["RPAR", "RSQB", "RBRACE"]
    INDENT_type = "_INDENT"
    DEDENT_type = "_DEDENT"
    tab_len = 8

    def handle_NL(self, token: Token):
        try:
            yield from super().handle_NL(token)
        except DedentError:
            indent = token.rsplit("\n", 1)[1]
            raise _BadIndent(token.end_line or 1, len(indent) + 1) from None


class _BadIndent(Exception):
    def __init__(self, line: int, column: int):
        self.line, self.column = line, column


def grammar_text() -> str:
    """The grammar, `tessel_dsl/grammar/tessel.lark` (package data, shipped by an install), with
    its block options written in from `options.OPTIONS`."""
    text = (importlib.resources.files("tessel_dsl") / "grammar" / "tessel.lark").read_text()
    marker = "// {block_opt}\n"
    if text.count(marker) != 1:
        raise RuntimeError("grammar/tessel.lark must hold the line '// {block_opt}' once")
    return text.replace(marker, grammar_block_options() + "\n")


def lark_parser() -> Lark:
    """The LALR parser, made once per process: from the tables shipped in the package when they
    belong to this grammar and lark release (`grammar_tables` says why), else from the grammar."""
    global _PARSER
    if _PARSER is None:
        text = grammar_text()
        _PARSER = prebuilt_parser(text)
        if _PARSER is None:
            _PARSER = Lark(text, postlex=_Indenter(), propagate_positions=True, cache=True, **LARK_OPTIONS)
    return _PARSER


def grammar_digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def prebuilt_parser(text: str) -> Lark | None:
    """The parser from `lalr_tables`, or None when they were built from another grammar or by
    another lark release (their format is lark's own)."""
    import lark

    try:
        from tessel_dsl.lang import lalr_tables as T
    except ImportError:  # a tree without the generated module
        return None

    if T.LARK_VERSION != lark.__version__ or T.GRAMMAR_SHA256 != grammar_digest(text):
        return None
    return Lark._load_from_dict(T.DATA, T.MEMO, postlex=_Indenter(), propagate_positions=True)


# ---- syntax errors --------------------------------------------------------------------------

_TOKEN_WORDS = {
    "_NEWLINE": "end of line", "$END": "end of file", "_INDENT": "an indented block",
    "_DEDENT": "end of the indented block", "NAME": "a name", "NUMBER": "a number",
    "PERCENT": "a percentage", "STRING": 'a "quoted path"', "CMP": "a comparison (<, <=, ==, !=, >=, >)",
}


def _describe_terminal(name: str) -> str:
    if name in _TOKEN_WORDS:
        return _TOKEN_WORDS[name]
    try:
        pattern = lark_parser().get_terminal(name).pattern
    except KeyError:
        return name.lower()
    return f"'{pattern.value}'" if pattern.type == "str" else name.lower()


def _expected(names) -> tuple[str, ...]:
    words = sorted({_describe_terminal(n) for n in names})
    return tuple(w for w in words if w.startswith("'")) + tuple(w for w in words if not w.startswith("'"))


def _syntax_error(text: str, file: str, line: int, column: int, message: str,
                  expected: tuple[str, ...] = ()) -> TslSyntaxError:
    lines = text.splitlines() or [""]
    if line < 1 or line > len(lines):
        line, column = len(lines), len(lines[-1]) + 1
    return TslSyntaxError(message, Location(file, line, max(1, column)), lines[line - 1], expected)


def _parser_expected(e: UnexpectedToken) -> tuple[str, ...]:
    """What the parser would have accepted; lark's own list can name the lexer's view instead."""
    try:
        # Terminals only: lark's own rules (``__block_star_5``) mean nothing to the user.
        names = [n for n in e.interactive_parser.choices()
                 if n.isupper() or (n.startswith(("_", "$")) and not n.startswith("__"))]
    except Exception:  # no parser state to ask: fall back to lark's list
        names = []
    return _expected(names or e.expected)


def _convert(e: Exception, text: str, file: str, line_off: int = 0, col_off: int = 0,
             template_len: int = 0) -> TslSyntaxError:
    """A lark failure as a TslSyntaxError; offsets place errors inside a name template."""
    def at(line: int, column: int) -> tuple[int, int]:
        return (line + line_off, column + col_off) if line_off else (line, column)

    if isinstance(e, _BadIndent):
        return _syntax_error(text, file, *at(e.line, e.column),
                             "this line's indentation matches no enclosing block")
    if isinstance(e, UnexpectedCharacters):
        ch = e.char if e.char.isprintable() else repr(e.char)
        return _syntax_error(text, file, *at(e.line, e.column), f"unexpected character {ch!r}"
                             if ch == e.char else f"unexpected character {ch}", _expected(e.allowed))
    if isinstance(e, UnexpectedToken):
        tok = e.token
        expected = _parser_expected(e)
        if tok.type == "$END":
            if line_off or col_off:  # the end of a name template is its closing brace
                return _syntax_error(text, file, line_off + 1, col_off + template_len + 1,
                                     "unexpected '}' in a name template", expected)
            return _syntax_error(text, file, -1, 1, "unexpected end of file", expected)
        what = _TOKEN_WORDS.get(tok.type) if tok.type in ("_NEWLINE", "_INDENT", "_DEDENT") else None
        what = what or f"'{tok}'"
        line, column = (tok.line, tok.column) if tok.line else (e.line, e.column)
        message = f"unexpected {what}"
        before = text.splitlines()[line - 1][:column - 1] if not line_off and line and 0 < line <= len(text.splitlines()) else ""
        if tok.type == "COMMA" and re.search(r"\bon\s+[^\s\[]+$", before):
            message += " (several devices are written [0, 1] or 0..1)"
        return _syntax_error(text, file, *at(line or -1, column or 1), message, expected)
    if isinstance(e, UnexpectedEOF):
        return _syntax_error(text, file, -1, 1, "unexpected end of file", _expected(e.expected))
    return _syntax_error(text, file, *at(getattr(e, "line", -1) or -1, getattr(e, "column", 1) or 1),
                         f"cannot read this: {e}")


def _parse_tree(text: str, file: str, start: str = "start", offsets: tuple[int, int] = (0, 0),
                full_text: str | None = None):
    try:
        return lark_parser().parse(text, start=start)
    except (UnexpectedInput, _BadIndent) as e:
        raise _convert(e, full_text or text, file, *offsets, template_len=len(text)) from None
    except (LarkError, AssertionError, RecursionError) as e:  # bracket or nesting trouble
        raise _syntax_error(full_text or text, file, -1, 1, f"cannot read this file ({type(e).__name__})") from None


def parse_module(text: str, file: str) -> A.Module:
    """Text -> syntax tree (`lang_ast.Module`); raises TslSyntaxError."""
    text = text.lstrip("\ufeff")
    if not text.endswith("\n"):
        text += "\n"
    check_statement_length(text, file)

    def parse_expr(src: str, loc: Location) -> A.Expr:
        tree = _parse_tree(src, file, "expr", (loc.line - 1, loc.column - 1), text)
        return ToAst(file, parse_expr).transform(tree)

    # Plain block lines are read directly (`plain_lines` says why); the parser reads the rest.
    rest, plain = split_plain_lines(text, file, _keywords())
    tree = _parse_tree(rest, file, full_text=text)
    try:
        parsed = ToAst(file, parse_expr).transform(tree)
    except LarkError as e:  # a TesselError raised inside the transformer arrives wrapped
        inner = getattr(e, "orig_exc", None)
        if isinstance(inner, TesselError):
            raise inner from None
        raise _syntax_error(text, file, -1, 1, f"cannot read this file: {e}") from None
    if plain:
        parsed = list(heapq.merge(parsed, plain, key=lambda s: s.loc.line))
    return A.Module(file, parsed)


_KEYWORDS: frozenset[str] | None = None


def _keywords() -> frozenset[str]:
    """The grammar's words (`forward`, `time`, `all`, ...): the lexer never reads them as names."""
    global _KEYWORDS
    if _KEYWORDS is None:
        import re

        _KEYWORDS = frozenset(t.pattern.value for t in lark_parser().terminals
                              if t.pattern.type == "str" and re.fullmatch(r"[A-Za-z_]\w*", t.pattern.value))
    return _KEYWORDS


# ---- evaluation -----------------------------------------------------------------------------


def _loader(diags: list[Diagnostic]):
    def load(path: str, loc: Location) -> A.Module | None:
        try:
            text = read_spec_text(path, include=True)
        except Unreadable as e:
            shown = path.replace("\x00", "\\0")  # printable, even with a NUL byte
            diags.append(Diagnostic("include-error", f"cannot include {shown}: {e}", loc))
            return None
        return parse_module(text, path)
    return load


def build_spec(module: A.Module, sets: dict[str, str] | None = None, mode: str | None = None) -> Spec:
    """Evaluate a parsed module into a checked Spec (raises SpecError with every problem)."""
    from tessel_dsl.lang.evaluate import Evaluator
    from tessel_dsl.lang.spec_check import cap_repeated, diagnose, source_problems

    load_diags: list[Diagnostic] = []
    ev = Evaluator(module, sets, _loader(load_diags))
    out = ev.run()
    diags = load_diags + ev.diags
    if mode is not None and mode not in ("train", "infer"):
        diags.append(Diagnostic("bad-mode", f"mode must be train or infer, got {mode!r}"))
        mode = None
    chosen = Mode(mode or out.mode or "train")
    blocks, edges = link_backwards(ev, ev.blocks, diags), ev.edges
    if out.derive_time is not None:
        blocks, edges = derive_backward(blocks, edges, out.derive_time, ev.forward_opts, diags, out.derive_loc,
                                       ev._time_res[1] if ev._time_res else "unit")
    else:
        # `grad ...` options only shape derived backward blocks: without the derive line they
        # would be ignored, and the spec would silently lose its backward pass.
        for b in ev.blocks:
            fo = ev.forward_opts.get(b.name)
            if fo is not None and (fo.grad_time is not None or fo.grad_name is not None):
                diags.append(Diagnostic("grad-without-derive", f"`grad` options of {b.name} have no effect "
                                        "without a `derive backward` line", b.span))
    if chosen is Mode.INFER:
        blocks, edges = project_infer(blocks, edges, ev.forward_opts)
    # The same dependency written twice is one edge; the copy that carries a tensor wins.
    first: dict[tuple[str, str], int] = {}
    unique: list[Edge] = []
    for e in edges:
        key = (e.src, e.dst)
        if key not in first:
            first[key] = len(unique)
            unique.append(e)
        elif e.tensor is not None and unique[first[key]].tensor is None:
            unique[first[key]] = e
    memory = out.memory if out.memory is not None else 0
    if chosen is Mode.INFER and out.infer_memory is not None:
        memory = out.infer_memory
    per_device, reserved = device_memory(ev, out, chosen, memory, diags)
    spec = Spec(
        name=out.name or (Path(module.file).stem if module.file != "<string>" else "spec"),
        devices=out.devices or 0, memory=memory, blocks=tuple(blocks), edges=tuple(unique),
        microbatches=out.microbatches, mode=chosen, expectations=tuple(ev.expectations),
        units=out.units, link=out.link, params=tuple(ev.param_text), source=module.file,
        device_memory=per_device, reserved=reserved,
    )
    if out.devices is not None and out.memory is not None and not ev.stopped:
        # A reserve above its capacity has been reported at its `memory` line already.
        found = [d for d in diagnose(spec, ev._seen_header) if d.code != "reserve-too-large"]
        # After an evaluation error, blocks or edges may be missing: do not report that twice.
        if diags and ev.skipped_blocks:
            found = [d for d in found if d.code not in ("unknown-name", "no-blocks")]
        elif diags:
            found = [d for d in found if d.code != "no-blocks"]
        # A backward block without `of` was reported by `link_backwards` with the fix: once is enough.
        said = {d.message.split(" does not say")[0] for d in diags if d.code == "missing-forward"}
        found = [d for d in found if not (d.code == "missing-forward" and d.message.endswith("has no forward block")
                                           and d.message.removesuffix(" has no forward block") in said)]
        diags += [placed(d, ev, module.file) for d in found]
    if not diags and (spec.devices < 1 or not spec.blocks):
        # Whatever was skipped said nothing: a spec with nothing to schedule is never accepted.
        diags.append(placed(Diagnostic("bad-devices", "the spec has no usable device count")
                             if spec.devices < 1 else Diagnostic("no-blocks", "the placement declares no blocks"),
                             ev, module.file))
    warnings: list[Diagnostic] = list(ev.rounded)
    if not diags:
        found = source_problems(spec, ev.independent)
        warnings += [d for d in found if d.severity == "warning"]
        diags += [d for d in found if d.severity != "warning"]
    if diags:
        diags.sort(key=lambda d: (d.location is None, d.location.file if d.location else "",
                                  d.location.line if d.location else 0, d.location.column if d.location else 0))
        raise SpecError(cap_repeated(diags))
    return replace(spec, warnings=tuple(warnings)) if warnings else spec


def parse(text: str, file: str = "<string>", sets: dict[str, str] | None = None,
          mode: str | None = None) -> Spec:
    """Parse and check `.tsl` text; `sets` overrides parameters, `mode` the file's train/infer."""
    if not isinstance(text, str):
        raise SpecError([Diagnostic("bad-input", f"spec text must be a string, got {type(text).__name__}")])
    # Reading a spec makes hundreds of thousands of small objects and no reference cycles worth
    # collecting: the cyclic collector's passes over them were a third of the time of a long spec.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _parse(text, file, sets, mode)
    finally:
        if collecting:
            gc.enable()


def _parse(text: str, file: str, sets: dict[str, str] | None, mode: str | None) -> Spec:
    try:
        module = parse_module(text, file)
    except RecursionError:  # the tree is built recursively; absurd nesting cannot be read
        raise _syntax_error(text, file, 1, 1, "this file nests expressions too deeply to read") from None
    try:
        return build_spec(module, sets, mode)
    except RecursionError:
        raise SpecError([Diagnostic("too-large", "expressions are nested too deeply to evaluate",
                                    Location(file, 1, 1))]) from None


def parse_file(path, sets: dict[str, str] | None = None, mode: str | None = None) -> Spec:
    """Read, parse and check a `.tsl` file (includes are relative to it)."""
    try:
        text = read_spec_text(path)
    except Unreadable as e:
        raise SpecError([Diagnostic("cannot-read", f"cannot read spec: {e}", Location(str(path), 0, 0))]) from None
    return parse(text, str(path), sets, mode)
