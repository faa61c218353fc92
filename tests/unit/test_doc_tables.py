"""The lists README.md and docs/ show that the code holds (block options, error codes, each verb
page's options table) are the code's own, as `python bench/doc_tables.py --write` writes them."""
from __future__ import annotations

from tests.helpers import load_bench


def test_readme_blocks_are_what_the_code_says():
    stale = load_bench("doc_tables").stale()
    assert not stale, "\n".join(stale) + "\nrun: python bench/doc_tables.py --write"


def test_each_block_option_is_listed_with_its_words_and_doc():
    from tessel_dsl.lang.options import OPTIONS

    tables = load_bench("doc_tables")
    listed = tables.current(tables.ROOT / "README.md", "block-options").splitlines()
    assert [line.split("`")[1] for line in listed] == [f"{o.words} {o.metavar}" for o in OPTIONS]
    assert all(o.doc for o in OPTIONS), "every block option needs a `doc` for the README"
