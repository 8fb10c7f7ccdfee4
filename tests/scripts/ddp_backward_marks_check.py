"""Checks, on the torch it runs with, what ``workloads.record.anatomy.BackwardMarks`` relies on:
two gloo ranks, DDP (its own C++ all-reduce, small buckets); at the final callback that
``BackwardMarks`` queues, every gradient is computed and still local (DDP has not yet
written the averaged ones); when ``backward`` returns, they are averaged. Prints one JSON
line per rank and step. Usage: ddp_backward_marks_check.py PORT"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from workloads.record.anatomy import BackwardMarks


def worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4000), torch.nn.ReLU(), torch.nn.Linear(4000, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    marks = BackwardMarks(time.perf_counter)
    inputs = torch.full((3, 4), float(rank + 1))  # each rank its own gradients
    for step in range(3):
        ddp.zero_grad()
        loss = ddp(inputs).sum()
        seen = {}
        marks.watch(loss)
        noted = marks._graph_done

        def spy(noted=noted, seen=seen):
            noted()
            seen.update({n: p.grad.clone() for n, p in model.named_parameters()})

        marks._graph_done = spy
        started = time.perf_counter()
        loss.backward()
        marks.backward_returned()
        names = [n for n, _ in model.named_parameters()]
        grads = torch.autograd.grad(model(inputs).sum(), list(model.parameters()))
        local = dict(zip(names, grads, strict=True))
        mean = {n: g.clone() for n, g in local.items()}
        for tensor in mean.values():
            dist.all_reduce(tensor)
            tensor /= 2
        line = json.dumps({
            "torch": torch.__version__, "rank": rank, "step": step,
            "all_gradients_at_callback": sorted(seen) == sorted(local),
            "local_at_callback": all(torch.equal(seen[n], local[n]) for n in seen),
            "ranks_differ": any(not torch.allclose(local[n], mean[n]) for n in names),
            "averaged_after_backward": all(
                torch.allclose(p.grad, mean[n]) for n, p in model.named_parameters()
            ),
            "ordered": started < marks.compute_done <= marks.communication_done,
        })  # fmt: skip
        os.write(1, (line + "\n").encode())  # one write: the ranks' lines never interleave
    dist.barrier()
    dist.destroy_process_group()
    # Leave without running the C++ destructors: torch 2.13's CPU build, after a clean
    # destroy_process_group, aborts at exit in 1 run of 5-10 on a quiet machine ("terminate
    # called without an active exception", a thread still joinable), after every line
    # this check prints was written.
    os._exit(0)


if __name__ == "__main__":
    mp.spawn(worker, args=(int(sys.argv[1]),), nprocs=2)
