# torchrun --nproc_per_node=4 hetero_boundary.py: encoder tp1 dp4 -> LLM tp2 dp2 on the same 4 ranks
# (or RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set per process: torch 1.13's torchrun fails on Python 3.11)
import torch
import torch.distributed as dist

from zipccl import hetero

dist.init_process_group("gloo")  # "nccl" with CUDA tensors: the same code
rank, tokens, hidden = dist.get_rank(), [5, 3, 8, 2, 7, 1, 4, 6], 16  # uneven tokens per sample
layout = hetero.Layout(4, llm={"tp": 2}, encoders=[{"tp": 1}])
groups = hetero.new_groups(layout)  # {(module, "tp"|"cp"|"dp"|"pp"|...): ProcessGroup}
exchange = hetero.BoundaryExchange(layout, tokens, hidden, dtype=torch.float32)

torch.manual_seed(0)
encoder = torch.nn.Linear(8, hidden)  # this rank's encoder replica: its samples' rows, packed
my_rows = sum(e - b for _, b, e, _ in layout.segments(1, rank, tokens))
llm_in = exchange(encoder(torch.randn(my_rows, 8)))  # rows of this LLM rank's samples, tp-replicated
llm_in.square().sum().backward()  # the gradient goes back through the adjoint plan
# (with a real tp LLM: all-reduce the input gradient over groups[("llm", "tp")] first, see plan.h)
for p in encoder.parameters():
    dist.all_reduce(p.grad, group=groups[("encoder0", "dp")])
print(f"rank {rank}: encoder rows {my_rows} -> LLM input {tuple(llm_in.shape)}, "
      f"grad norm {encoder.weight.grad.norm():.3f}")
dist.destroy_process_group()
