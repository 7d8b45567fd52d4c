"""A plain training script, as a team would have it: flags in, losses printed, nothing of
hpsearch in it. ``examples/command_mode/space.yaml`` sweeps it unmodified.

Run it by hand::

    python examples/command_mode/train.py --lr=0.05 --epochs=5 --out_dir=/tmp/digits
    torchrun --nproc_per_node=2 examples/command_mode/train.py --lr=0.05 --out_dir=/tmp/d2

It is DDP the torchrun way: when ``WORLD_SIZE`` is set it joins the process group from
the environment (NCCL on GPUs, gloo on CPUs), shards the data by rank and averages
gradients. Rank 0 prints one ``key=value`` line per epoch and saves ``ckpt.pt`` in
``--out_dir``; ``--init_from=resume`` continues from it.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out_dir", default="out")
    parser.add_argument("--init_from", choices=["scratch", "resume"], default="scratch")
    return parser.parse_args()


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits  # ships with scikit-learn: no download

    data = load_digits()
    return torch.tensor(data.data, dtype=torch.float32) / 16.0, torch.tensor(data.target)


def main() -> None:
    args = parse_args()
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    device = torch.device("cpu")
    if distributed:
        if torch.cuda.is_available():
            device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    x, y = digits()
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train_idx, val_idx = order[300:], order[:300]
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    model.to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)

    os.makedirs(args.out_dir, exist_ok=True)
    ckpt = os.path.join(args.out_dir, "ckpt.pt")
    start = 0
    if args.init_from == "resume" and os.path.exists(ckpt):
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["epoch"]
        if rank == 0:
            print(f"resumed from {ckpt} at epoch {start}", flush=True)

    per_rank = args.batch_size // world
    for epoch in range(start, args.epochs):
        model.train()
        mine = train_idx[torch.randperm(len(train_idx))][rank::world]
        for i in range(0, len(mine) - per_rank + 1, per_rank):
            batch = mine[i:i + per_rank]
            loss = nn.functional.cross_entropy(model(x[batch].to(device)), y[batch].to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = model(x[val_idx].to(device))
            val_loss = nn.functional.cross_entropy(logits, y[val_idx].to(device)).item()
            accuracy = (logits.argmax(1).cpu() == y[val_idx]).float().mean().item()
        if rank == 0:
            tmp = ckpt + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, tmp)
            os.replace(tmp, ckpt)  # a kill mid-save leaves the previous checkpoint whole
            print(f"epoch={epoch + 1} train_loss={loss.item():.4f} val_loss={val_loss:.4f} "
                  f"val_accuracy={accuracy:.4f} world_size={world}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
