import torch
import torch.nn.functional as F
from tinymodels import llama

from tessel_dsl.executor.pipeline import Pipeline


def loss_fn(out, labels):
    return F.cross_entropy(out.logits.float().flatten(0, 1), labels.flatten())


pipe = Pipeline("plan.json", llama(), loss_fn)  # the binding: plan.blocks.json beside the plan
opt = torch.optim.AdamW(pipe.param_groups(), lr=1e-2)
g = torch.Generator().manual_seed(1)
for step in range(3):
    s = torch.randint(0, 96, (8, 9), generator=g)
    loss = pipe.step(s[:, :-1], s[:, 1:])
    opt.step()
    opt.zero_grad()
    print(step, loss)
