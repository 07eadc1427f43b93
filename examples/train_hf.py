"""A small Hugging Face Trainer job that follows gridshift's plan with one callback (CPU or GPU, seconds).

A GPT-2-style causal language model built from a config in code, trained on random tokens: nothing is
downloaded. ``plans.integrations.hf.GridshiftCallback`` does gridshift's whole job protocol: the
mode's clock plan (swapped at a mode change), the batch size (``GRIDSHIFT_BATCH_SIZE`` at start; the
Trainer keeps its DataLoader through a mode change, and says so), progress, the outcome, and, for a
pausable job, a checkpoint on SIGTERM and the resume from it (``GRIDSHIFT_RESUME=1``).

    python examples/train_hf.py --max-steps 40
    python examples/train_hf.py --max-steps 2000 --layers 12 --width 768 --heads 12 --seq-len 512   # GPT-2 small

``--step-overhead-s`` stands in for an accelerator's step time on a CPU run; ``--timing`` prints the
mean step time (steps after the first ``--warmup-steps``, the GPU synchronised at both ends) and the
median time between step ends (robust to a slow step now and then) as one JSON line, with the time gridshift's
callback spent in its own code per step over the same steps (``TrainingSession.busy_s``);
``--no-gridshift`` runs the same script without the callback (the baseline of
``benchmarks/device/hf_trainer_check.py``).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from typing import Any

import torch
import transformers

from plans.integrations.hf import GridshiftCallback
from plans.integrations.protocol import GridshiftJob


class RandomTokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """Item ``i`` is the same random sequence on every run (and after a resume)."""

    def __init__(self, n: int, seq_len: int, vocab: int, seed: int = 0) -> None:
        self.n, self.seq_len, self.vocab, self.seed = n, seq_len, vocab, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        ids = torch.randint(0, self.vocab, (self.seq_len,), generator=g)
        return {"input_ids": ids, "labels": ids}


class Report(transformers.TrainerCallback):  # type: ignore[misc]
    """Prints a line every ``every`` steps, paces a CPU run, and times the steps after ``warmup``."""

    def __init__(self, every: int, overhead_s: float, warmup: int, gridshift: GridshiftCallback | None) -> None:
        self.every, self.overhead_s, self.warmup = every, overhead_s, warmup
        self.gridshift = gridshift
        self.t0: float | None = None
        self.t1: float | None = None
        self.ends: list[float] = []  # each timed step's end (no GPU sync: the queue paces the steps)
        self.busy = [0.0, 0.0]  # gridshift's own seconds at t0 and t1

    def _busy_s(self) -> float:
        session = self.gridshift.session if self.gridshift is not None else None
        return session.busy_s if session is not None else 0.0

    def _now(self) -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # twice a run, not per step
        return time.perf_counter()

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == self.warmup and self.t0 is None:
            self.t0 = self._now()
            self.busy[0] = self._busy_s()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.t0 is not None:
            self.ends.append(time.perf_counter())
        if self.overhead_s:
            time.sleep(self.overhead_s)
        if state.global_step % self.every == 0:
            print(f"step {state.global_step}/{state.max_steps}", flush=True)

    def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.t1 = self._now()
        self.busy[1] = self._busy_s()


def main(argv: list[str] | None = None) -> int:
    job = GridshiftJob.from_env()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=job.start_batch_size(8), help="per device")
    p.add_argument("--grad-accum", type=int, default=2, help="micro-batches per optimizer step")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--bf16", action="store_true", help="mixed precision (bf16 autocast)")
    p.add_argument("--output-dir", default=None, help="the Trainer's output_dir (default: a temporary one)")
    p.add_argument("--mode-poll-s", type=float, default=1.0, help="how often to look for a mode change")
    p.add_argument("--step-overhead-s", type=float, default=0.0, help="idle time per step (accelerator stand-in)")
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--timing", action="store_true", help="print the mean step time as JSON at the end")
    p.add_argument("--warmup-steps", type=int, default=10, help="steps left out of --timing")
    p.add_argument("--no-gridshift", action="store_true", help="the same run without gridshift's callback")
    args = p.parse_args(argv)
    transformers.set_seed(0)
    config = transformers.GPT2Config(vocab_size=args.vocab, n_positions=args.seq_len, n_embd=args.width,
                                     n_layer=args.layers, n_head=args.heads, bos_token_id=args.vocab - 1,
                                     eos_token_id=args.vocab - 1)
    model = transformers.GPT2LMHeadModel(config)
    data = RandomTokens(args.max_steps * args.batch_size * args.grad_accum, args.seq_len, args.vocab)
    with tempfile.TemporaryDirectory(prefix="train_hf-") as tmp:
        targs = transformers.TrainingArguments(
            output_dir=args.output_dir or tmp, max_steps=args.max_steps, per_device_train_batch_size=args.batch_size,
            gradient_accumulation_steps=args.grad_accum, learning_rate=1e-3, report_to=[], save_strategy="no",
            logging_steps=args.log_every, disable_tqdm=True, dataloader_num_workers=0, bf16=args.bf16,
            use_cpu=not torch.cuda.is_available(), seed=0)
        gridshift = None if args.no_gridshift else GridshiftCallback(poll_interval_s=args.mode_poll_s)
        report = Report(args.log_every, args.step_overhead_s, args.warmup_steps, gridshift)
        trainer = transformers.Trainer(model=model, args=targs, train_dataset=data,
                                       callbacks=[report] + ([gridshift] if gridshift else []))
        out = trainer.train(resume_from_checkpoint=gridshift.resume_from if gridshift else None)
    print(f"done: {trainer.state.global_step} steps, train_loss={out.training_loss:.4f}", flush=True)
    if args.timing and report.t0 is not None and report.t1 is not None:
        steps = trainer.state.global_step - args.warmup_steps
        gaps = sorted(b - a for a, b in zip(report.ends, report.ends[1:]))
        print(json.dumps({"timing": {"steps": steps, "seconds": report.t1 - report.t0,
                                     "step_ms": 1000 * (report.t1 - report.t0) / max(steps, 1),
                                     "median_step_ms": 1000 * gaps[len(gaps) // 2] if gaps else None,
                                     "gridshift": not args.no_gridshift,
                                     "gridshift_us_per_step": 1e6 * (report.busy[1] - report.busy[0]) / max(steps, 1)}}),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
