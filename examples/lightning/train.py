"""A Lightning script, as a team would have it: a tiny classifier on scikit-learn's digits,
a ``LightningModule``, Lightning's own progress bar and ``CSVLogger``; nothing of hpsearch
in it. ``space.yaml`` next to this file sweeps it unmodified, reading the ``metrics.csv``
the logger writes.

Run it by hand::

    python examples/lightning/train.py --out_dir /tmp/pl --lr 0.05 --max_epochs 5
"""

from __future__ import annotations

import argparse
import os
import warnings

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--max_epochs", type=int, default=5)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ckpt_path", default=None, help="a checkpoint to continue from")
    return parser.parse_args()


class Classifier(L.LightningModule):
    def __init__(self, lr: float, hidden: int):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def training_step(self, batch, batch_idx):  # noqa: ANN001
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):  # noqa: ANN001
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


def loaders(batch_size: int) -> tuple[DataLoader, DataLoader]:
    from sklearn.datasets import load_digits  # ships with scikit-learn: no download

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y)
    cut = int(len(x) * 0.8)
    train = TensorDataset(x[:cut], y[:cut])
    val = TensorDataset(x[cut:], y[cut:])
    return (DataLoader(train, batch_size=batch_size, shuffle=True),
            DataLoader(val, batch_size=256))


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    L.seed_everything(args.seed)
    train, val = loaders(args.batch_size)
    trainer = L.Trainer(max_epochs=args.max_epochs, accelerator="cpu", devices=1,
                        default_root_dir=args.out_dir,
                        # written as logged (the default, every 100 steps, is for speed)
                        logger=CSVLogger(args.out_dir, name="logs", version=0,
                                         flush_logs_every_n_steps=1),
                        enable_model_summary=False)
    trainer.fit(Classifier(args.lr, args.hidden), train, val, ckpt_path=args.ckpt_path)


if __name__ == "__main__":
    main()
