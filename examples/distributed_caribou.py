"""CARIBOU on a node-classification graph across processes: the private aggregation released with
``torch.distributed`` (each process its block of nodes), the head trained with DDP.

Pipeline (edge-level DP, Zheng et al. 2025, arXiv:2506.22727, Sec. 4.5; as ``cora_caribou.py``
with one fixed configuration instead of its search): an edge-free encoder (an MLP with a linear
classifier, trained with ``DistributedDataParallel`` on every process's own training nodes; it
reads no edge and costs nothing at edge level), its embedding's rows put on the unit ball,
CARIBOU's contractive graph layer released across the processes
(:class:`pyg_private.distributed.DistributedContractiveGraphLayer`: every process computes and
perturbs the rows of its block, the accountant of rank 0 is charged once, before any noise), and
GAP's multi-input head on ``[X0 || X^K]`` (``--without-x0``: ``X^K`` alone) trained with DDP as the encoder
(post-processing of the release). The accuracies are summed over the processes; rank 0 prints
them and the accountant report.

Any graph of ``example_data.NAMES`` with node features (``--dataset``): it is cleaned first
(self-loops dropped, duplicate and one-directional entries merged: the recipes' deterministic,
1-stable map, ``pyg_private/models/recipe_inputs.py``), and CARIBOU's random 10% / rest / 20% split is
drawn over its **labelled** nodes (``y >= 0``). **delta = 1/|E|** (``--delta`` overrides it), ``|E|``
the undirected edges of the cleaned graph (Cora: 1/5278), the rule of every example here.

Every process loads the whole dataset and keeps its block (rank 0 first, so that only one process
prepares PyG's cache); a deployment on a graph that does not fit one machine loads only its block:
its rows of the features and the edges whose first id lies in the block, with global ids.

Launch, one machine, two processes (nccl when CUDA has a GPU for each of the machine's processes,
gloo on the CPU otherwise, e.g. two processes on a one-GPU machine; ``--standalone`` picks a free
port for the rendezvous)::

    torchrun --standalone --nproc_per_node 2 examples/distributed_caribou.py --quick

Run without ``torchrun`` (``python examples/distributed_caribou.py --quick``), it is a world of
one process (gloo, or nccl on a GPU, over a local TCP rendezvous): the same pipeline, one block.

Several machines (run on each, with its own ``--node-rank``)::

    torchrun --nnodes 2 --nproc_per_node 4 --node-rank 0 --rdzv-backend c10d \\
        --rdzv-endpoint HOST:29500 examples/distributed_caribou.py

The noise comes from every process's own OS-seeded stream (``--secure-mode`` for the OS CSPRNG);
nothing is seeded but the split and the initialisation of the encoder and the head.

**Options.** ``--quick`` (K = 2, 100 epochs; well under 2 minutes on one thread per process on
Cora). ``--threads N`` sets torch's CPU threads **per process** (default 1, so that two processes
on a 2-core machine do not oversubscribe it); ``--threads 0`` gives every process an even share
of its machine's cores (``os.cpu_count() // LOCAL_WORLD_SIZE``, at least 1: the share this script
used to take by default). ``--out`` (default ``outputs``): rank 0 writes the run's row to
``<dataset>_distributed_caribou.csv`` (``_quick`` appended with ``--quick``) as soon as the
accuracies are in; rank 0's progress bars (stderr) follow the encoder's and the head's training.
Without the dataset's files, one line says where they come from and the process exits with status 2
(under ``torchrun``, the launcher then reports the failed workers in its own words).
"""
from __future__ import annotations

import argparse
import math
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.nn import MLP

from example_data import add_dataset_argument, file_stem, spec
from example_io import CsvWriter, add_out_argument, output_stem, progress
from example_protocol import edge_delta, load_clean, random_labelled_split
from pyg_private import PrivacyAccountant
from pyg_private.datasets import attach_split
from pyg_private.distributed import DistributedContractiveGraphLayer, even_row_ranges, row_block
from pyg_private.models import CaribouConfig
from pyg_private.models.caribou import MultiInputHead
from pyg_private.nn import ContractiveGraphLayer
from pyg_private.transforms import l2_row_normalize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_dataset_argument(parser, "Cora")
    parser.add_argument("--epsilon", type=float, default=8.0, help="inf: the same pipeline without noise")
    parser.add_argument("--delta", type=float, default=None,
                        help="default: 1/|E|, |E| the undirected edges of the cleaned graph (every example's rule)")
    parser.add_argument("--K", type=int, default=6)
    parser.add_argument("--contraction", type=float, default=0.9)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="the split and the initialisations")
    parser.add_argument("--secure-mode", action="store_true", help="every random bit of the noise from the OS")
    parser.add_argument("--embedding", type=int, default=16, help="the encoder's embedding width")
    parser.add_argument("--without-x0", action="store_true", help="the head sees X^K alone (how much class "
                        "information the release carries by itself)")
    parser.add_argument("--quick", action="store_true", help="K=2, 100 epochs (under 2 minutes on one thread)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads per process (default: 1); 0: this machine's cores divided among its "
                             "processes (os.cpu_count() // LOCAL_WORLD_SIZE)")
    add_out_argument(parser, "the CSV (written by rank 0)")
    args = parser.parse_args()
    if args.threads < 0:
        parser.error(f"`--threads` must be >= 0 (0: the machine's cores shared among its processes); "
                     f"got {args.threads}")
    if args.quick:
        args.K, args.epochs = 2, 100

    # one GPU per process of this machine, or none: NCCL does not take two processes on one GPU, and
    # rank 1 of two has no device cuda:1 on a one-GPU machine
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available() and torch.cuda.device_count() >= local_world and dist.is_nccl_available()
    if "RANK" in os.environ:  # launched by torchrun: its rendezvous
        dist.init_process_group("nccl" if cuda else "gloo")
    else:  # run directly: a world of one process, over a local TCP rendezvous on a free port
        dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}",
                                rank=0, world_size=1)
    try:
        run(parser, args, cuda)
        dist.barrier()
    finally:  # after run() returned: DDP, which holds the group, is gone before the group is destroyed
        dist.destroy_process_group()


def _free_port() -> int:
    """A TCP port that is free on this machine now (for the one-process world)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fit_ddp(module: torch.nn.Module, inputs: torch.Tensor, y: torch.Tensor, train: torch.Tensor, *, epochs: int,
            total_train: int, world: int, desc: str = "training") -> torch.nn.Module:
    """Full-batch Adam with DDP on every process's own training nodes. The loss is each process's sum
    over its nodes divided by the global count, times the world size (DDP averages the gradients), so
    the step is the single-process full-batch step."""
    model = DistributedDataParallel(module)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-3)
    model.train()
    for _ in progress(range(epochs), desc=desc, disable=dist.get_rank() != 0):  # one bar: rank 0's
        opt.zero_grad()
        loss = F.cross_entropy(model(inputs[train]), y[train], reduction="sum") * world / total_train
        loss.backward()
        opt.step()
    module.eval()
    return module


def run(parser: argparse.ArgumentParser, args: argparse.Namespace, cuda: bool) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    share = max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    torch.set_num_threads(args.threads or share)  # default 1 per process; 0: this process's share of the cores

    # the data: every process keeps its block of nodes (rank 0 prepares the cache first)
    if rank != 0:
        dist.barrier()
    data = load_clean(parser, args.dataset)  # cleaned: self-loops dropped, duplicate / one-way entries merged
    if rank == 0:
        dist.barrier()
    if args.delta is None:
        args.delta = edge_delta(data)  # 1/|E| of the cleaned graph
    data = attach_split(data, random_labelled_split(data.y, 0.1, None, 0.2, seed=args.seed))
    n = data.num_nodes
    start, end = even_row_ranges(n, world)[rank]
    x_block = data.x[start:end].float().to(device)
    edges = row_block(data.edge_index, (start, end)).to(device)
    y = data.y[start:end].to(device)
    masks = {name: getattr(data, f"{name}_mask")[start:end].to(device) for name in ("train", "val", "test")}

    # the edge-free encoder (an MLP and a linear classifier, DDP on the training nodes; it reads no edge,
    # so it costs nothing at edge level), its embedding's rows on the unit ball
    num_classes = int(data.y.max()) + 1  # public at edge level: labels are not the protected unit
    config = CaribouConfig(hidden=64, dropout=0.5)
    total = torch.tensor([int(masks["train"].sum())], device=device)
    dist.all_reduce(total)
    total_train = int(total.item())
    torch.manual_seed(args.seed)
    encoder = torch.nn.Sequential(MLP([x_block.size(1), 64, args.embedding], act="selu", dropout=0.5,
                                      plain_last=False), torch.nn.Linear(args.embedding, num_classes)).to(device)
    fit_ddp(encoder, x_block, y, masks["train"], epochs=args.epochs, total_train=total_train, world=world,
            desc="encoder (DDP)")
    with torch.no_grad():
        x0 = l2_row_normalize(encoder[0](x_block))

    # the release: one charge, on rank 0, before any process draws noise
    private = math.isfinite(args.epsilon)
    accountant = PrivacyAccountant(budget={"edge": (args.epsilon, args.delta)}) if rank == 0 and private else None
    noise = {"epsilon": args.epsilon, "delta": args.delta} if private else {"noise_multiplier": 0.0}
    layer = DistributedContractiveGraphLayer(ContractiveGraphLayer(
        args.K, args.contraction, min_degree=0, accountant=accountant, secure_mode=args.secure_mode, **noise))
    t0 = time.perf_counter()
    released = layer(x0, edges, row_range=(start, end), num_nodes=n)
    seconds = time.perf_counter() - t0
    z = released if args.without_x0 else torch.cat([x0, released], dim=-1)

    # the head on the release, with DDP (post-processing)
    torch.manual_seed(args.seed + 1)
    head = fit_ddp(MultiInputHead(z.size(1) // x0.size(1), x0.size(1), config, num_classes).to(device), z, y,
                   masks["train"], epochs=args.epochs, total_train=total_train, world=world, desc="head (DDP)")
    with torch.no_grad():
        pred = head(z).argmax(dim=-1)
    counts = torch.tensor([[int((pred[m] == y[m]).sum()), int(m.sum())] for m in masks.values()], device=device)
    dist.all_reduce(counts)
    if rank == 0:
        acc = {name: c[0].item() / max(c[1].item(), 1) for name, c in zip(masks, counts)}
        print(f"{args.dataset}: {n} nodes on {world} processes, CARIBOU K={args.K}, C_L={args.contraction}, "
              f"epsilon={args.epsilon:g}, delta={args.delta:g}: release {seconds:.2f} s (rank 0)")
        print(f"accuracy: train {acc['train']:.3f}, val {acc['val']:.3f}, test {acc['test']:.3f}")
        print(accountant.report() if accountant is not None else "no noise: nothing to account")
        path = output_stem(args.out, f"{file_stem(args.dataset)}_distributed_caribou",
                           "quick" if args.quick else "full") + ".csv"
        spent = accountant.epsilon("edge", args.delta) if accountant is not None else math.inf
        with CsvWriter(path) as writer:
            writer.write({"dataset": spec(args.dataset).label, "processes": world, "K": args.K,
                          "contraction": args.contraction, "epsilon": args.epsilon, "delta": args.delta,
                          "epsilon_spent": spent,
                          "without_x0": args.without_x0, "epochs": args.epochs, "seed": args.seed,
                          "threads_per_process": torch.get_num_threads(), "release_seconds": round(seconds, 3),
                          **{f"{name}_accuracy": round(value, 4) for name, value in acc.items()}})
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
