"""Submodule names that are not in the model get a guess: the same name under another prefix,
or the closest spelling."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.block_map import check_blocks, forward_graph  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402


@pytest.mark.parametrize("wrong,guess", [
    ("layres.1", "layers.1"),                 # a typo
    ("layers_1", "layers.1"),
    ("model.layers.1", "layers.1"),           # a prefix too many
    ("hed", "head"),
])
def test_a_wrong_submodule_name_gets_a_did_you_mean_hint(wrong, guess):
    spec = ps.vshape(2, 2)
    blocks = {"F0": ["embed", "pos", "layers.0", wrong], "F1": ["layers.2", "layers.3", "norm", "head"]}
    with pytest.raises(ExecutionError, match=rf"block 'F0': the model has no submodule '{wrong}' "
                                             rf"\(did you mean {guess}[,?]"):
        check_blocks(spec, ps.gpt(), list(forward_graph(spec)), blocks)


def test_a_name_like_none_gets_no_hint():
    spec = ps.vshape(2, 2)
    blocks = {"F0": ["embed", "pos", "layers.0", "xyz"], "F1": ["layers.2", "layers.3", "norm", "head"]}
    with pytest.raises(ExecutionError, match=r"no submodule 'xyz'$"):
        check_blocks(spec, ps.gpt(), list(forward_graph(spec)), blocks)
