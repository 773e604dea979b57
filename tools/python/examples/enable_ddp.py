# torchrun --nproc_per_node=8 enable_ddp.py   (one GPU per process; NCCL between the nodes)
import os

import zipccl

# Before the first NCCL communicator: NCCL_NET_PLUGIN -> this wheel's plugin, ZIPCCL_* settings.
env = zipccl.enable("auto", stats_file=f"/tmp/zipccl-stats.{os.getpid()}.jsonl")
print({k: v for k, v in env.items() if k != "NCCL_NET_PLUGIN"}, "plugin:", os.path.basename(env["NCCL_NET_PLUGIN"]))

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4096, 4096).cuda().bfloat16())
for _ in range(10):
    model(torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)).float().square().mean().backward()
dist.destroy_process_group()  # connections close: the plugin writes their statistics
for rec in zipccl.stats():
    print(rec)
