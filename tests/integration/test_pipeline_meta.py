"""A model built on the meta device and filled by `init` from a state dict: the buffers a state
dict leaves out (rotary tables, position ids) are rebuilt the way the model's constructor makes
them, so training equals one process's; a buffer nothing can rebuild is refused before step 1."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tessel_dsl.errors import ExecutionError  # noqa: E402
from tessel_dsl.executor.local_ranks import run_ranks  # noqa: E402
from tests import pipeline_cases as pc  # noqa: E402
from tests import pipeline_support as ps  # noqa: E402

STEPS, N = 4, 4


@pytest.mark.parametrize("build", [pc.qwen2, pc.llama], ids=["qwen2", "llama"])
def test_hugging_face_models_built_on_meta_train_as_one_process(build):
    plan = ps.searched_plan(ps.vshape(2, N))
    data = ps.batches(96, STEPS, 2 * N, 8)
    want = pc.reference(build, pc.lm_loss, data, N)
    got = run_ranks(pc.pipelined, 2, plan, build, pc.lm_loss, pc.decoder_blocks(plan.spec), data, 1, True,
                    timeout=300)
    pc.compare(got, want)


def _on_meta_with_state_dict_init(build, blocks_of):
    """`build()` on meta, materialised as a rank holding every mapped submodule would be, with
    an init that loads a CPU build's state dict (non-persistent buffers are not in it)."""
    from tessel_dsl.executor.meta_init import materialise

    full = build()
    with torch.device("meta"):
        model = build()
    subs = dict(model.named_modules())
    mapped = {f: subs[f] for f in blocks_of(model)}
    sources = dict(full.named_modules())
    materialise(model, mapped, set(mapped), torch.device("cpu"),
                lambda fqn, mod: mod.load_state_dict(sources[fqn].state_dict()))
    return model, full


def test_bert_position_ids_and_rotary_tables_are_rebuilt_from_the_config():
    from transformers import BertConfig, BertModel

    def bert():
        torch.manual_seed(0)
        return BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                    intermediate_size=32, max_position_embeddings=24))

    model, full = _on_meta_with_state_dict_init(bert, lambda m: ["embeddings", "encoder", "pooler"])
    for name, want in full.named_buffers():
        assert torch.equal(dict(model.named_buffers())[name], want), name
    model, full = _on_meta_with_state_dict_init(pc.qwen2, lambda m: ["model.embed_tokens", "model.layers",
                                                                       "model.norm", "lm_head"])
    got = dict(model.named_buffers())
    assert set(got) == {"model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"}
    for name, want in full.named_buffers():
        assert torch.equal(got[name], want), name


class _Scaled(torch.nn.Module):
    """A layer whose non-persistent buffer has no config to be rebuilt from."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 0.5), persistent=False)
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        return self.lin(x) * self.scale


def test_a_buffer_init_leaves_unset_and_nothing_can_rebuild_is_refused_by_name():
    from tessel_dsl.executor.meta_init import materialise

    full = _Scaled()
    with torch.device("meta"):
        model = torch.nn.Sequential(_Scaled())
    with pytest.raises(ExecutionError, match=r"non-persistent buffers 0\.scale are on the meta device and "
                                             r"init\('0', module\) did not fill them.*neither _Scaled nor a module enclosing it has a `config`"):
        materialise(model, {"0": model[0]}, {"0"}, torch.device("cpu"),
                    lambda fqn, mod: mod.load_state_dict(full.state_dict()))
    with torch.device("meta"):
        model = torch.nn.Sequential(_Scaled())
    with pytest.raises(ExecutionError, match=r"init\('0', module\) left 0\.count unset"):
        materialise(model, {"0": model[0]}, {"0"}, torch.device("cpu"),
                    lambda fqn, mod: mod.lin.load_state_dict(full.lin.state_dict()))
    # An init that sets the buffer itself is taken as it is.
    with torch.device("meta"):
        model = torch.nn.Sequential(_Scaled())

    def init(fqn, mod):
        mod.lin.load_state_dict(full.lin.state_dict())
        mod.count.zero_()
        mod.scale.fill_(0.25)
    materialise(model, {"0": model[0]}, {"0"}, torch.device("cpu"), init)
    assert float(model[0].scale[0]) == 0.25
