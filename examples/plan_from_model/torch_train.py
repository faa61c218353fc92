
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from tinymodels import llama
from torch.distributed.pipelining import PipelineStage, Schedule1F1B


class Stage(nn.Module):  # Hugging Face's forward cannot run part of the model: one per stage
    def __init__(self, model, lo, hi, first, last):
        super().__init__()
        inner = model.model
        self.embed = inner.embed_tokens if first else None
        self.layers = nn.ModuleList(inner.layers[lo:hi])
        self.rotary = inner.rotary_emb
        self.norm = inner.norm if last else None
        self.head = model.lm_head if last else None

    def forward(self, x):
        h = self.embed(x) if self.embed is not None else x
        pos = torch.arange(h.shape[1], device=h.device)[None]
        pe = self.rotary(h, pos)
        for layer in self.layers:
            h = layer(h, position_embeddings=pe, position_ids=pos)
        return self.head(self.norm(h)) if self.head is not None else h


def loss_fn(logits, labels):
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cpu")
model = llama()
per = len(model.model.layers) // world  # the split: yours to choose and balance
part = Stage(model, rank * per, (rank + 1) * per, rank == 0, rank == world - 1).to(device)
stage = PipelineStage(part, rank, world, device)
schedule = Schedule1F1B(stage, n_microbatches=4, loss_fn=loss_fn)  # the schedule: yours to choose
opt = torch.optim.AdamW(part.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(1)
for step in range(3):
    s = torch.randint(0, 96, (8, 9), generator=g)
    tokens, labels = s[:, :-1], s[:, 1:]
    losses = []
    if rank == 0:
        schedule.step(tokens)
    elif rank == world - 1:
        schedule.step(target=labels, losses=losses)
    else:
        schedule.step()
    opt.step()
    opt.zero_grad()
    if losses:
        print(step, float(sum(losses) / len(losses)))
dist.destroy_process_group()
