"""A small Lightning job that follows gridshift's plan with one callback (CPU or GPU, seconds).

A regression model whose ``training_step`` calls its submodule (``self.net``), on random data built
in code. ``plans.integrations.lightning.GridshiftCallback`` does gridshift's whole job protocol: the
mode's clock plan (phases from Lightning's own events, swapped at a mode change), the batch size
(the module's ``batch_size``, taken by the DataLoader rebuilt every epoch), progress, the outcome,
and, for a pausable job, a checkpoint on SIGTERM and the resume from it (``GRIDSHIFT_RESUME=1``).

    python examples/train_lightning.py --epochs 4

``--step-overhead-s`` stands in for an accelerator's step time on a CPU run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import lightning.pytorch as pl
import torch

from plans.integrations.lightning import GridshiftCallback
from plans.integrations.protocol import GridshiftJob

FEATURES = 16


class Regression(pl.LightningModule):
    def __init__(self, batch_size: int, steps_per_epoch: int, width: int, overhead_s: float, log_every: int) -> None:
        super().__init__()
        self.batch_size = batch_size  # gridshift's callback sets it; the next epoch's DataLoader takes it
        self.steps_per_epoch, self.overhead_s, self.log_every = steps_per_epoch, overhead_s, log_every
        self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
        self.true_w = torch.randn(FEATURES, 1, generator=torch.Generator().manual_seed(1))

    def train_dataloader(self) -> Any:
        n = self.steps_per_epoch * self.batch_size
        x = torch.randn(n, FEATURES, generator=torch.Generator().manual_seed(self.current_epoch))
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x @ self.true_w), batch_size=self.batch_size)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        if self.overhead_s:
            time.sleep(self.overhead_s)
        if (self.global_step + 1) % self.log_every == 0:
            print(f"step {self.global_step + 1} epoch {self.current_epoch} batch_size={len(x)}", flush=True)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main(argv: list[str] | None = None) -> int:
    job = GridshiftJob.from_env()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=job.start_batch_size(32))
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--mode-poll-s", type=float, default=1.0, help="how often to look for a mode change")
    p.add_argument("--step-overhead-s", type=float, default=0.0, help="idle time per step (accelerator stand-in)")
    p.add_argument("--log-every", type=int, default=5)
    args = p.parse_args(argv)
    pl.seed_everything(0, verbose=False)
    model = Regression(args.batch_size, args.steps_per_epoch, args.width, args.step_overhead_s, args.log_every)
    gridshift = GridshiftCallback(poll_interval_s=args.mode_poll_s)
    with tempfile.TemporaryDirectory(prefix="train_lightning-") as tmp:
        trainer = pl.Trainer(max_epochs=args.epochs, accelerator="auto", devices=1, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=tmp, reload_dataloaders_every_n_epochs=1, callbacks=[gridshift])
        trainer.fit(model, ckpt_path=gridshift.resume_from)
    print(f"done: {trainer.global_step} steps, train_loss={float(trainer.callback_metrics['train_loss']):.4f}",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
