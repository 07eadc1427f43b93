"""Power-limit profiling in the HF Trainer and Lightning callbacks on a real GPU, training for real, MEASURE-ONLY.

    GRIDSHIFT_NVML_READ_ONLY=1 PYTHONPATH=. OUT=/tmp/out python3 benchmarks/device/adapters_check.py

Refuses to run unless ``GRIDSHIFT_NVML_READ_ONLY=1``: every NVML setter is then refused before the
driver, so no power limit is applied (the callback's SetLimit actions come back "skipped") and the
profile windows all run at the limit found. What is real: the training (a small BERT built from a
local config with the HF Trainer; a small MLP with Lightning; nothing is downloaded), the step
boundaries the callbacks see, the energy windows from the GPU's NVML counter, the rank combine path
and the stored profile. What it is NOT: a profile of different limits (they were not applied), so
the selected limit is an artefact of measurement noise and must not be read as a recommendation.

For each framework it prints and writes ``$OUT/adapters_check.json``: the stored profile (as the
flow will read it), the limit the in-process selector chose, the limit the flow's
``choose_power_limit`` picks from that profile for the next run, whether the backend restored the
limit at train end, the backend's applied/skipped fields, and wall time. Without a CUDA GPU it runs
on CPU against ``GRIDSHIFT_NVML_MODULE=tests.fakes.fake_nvml`` (a smoke test; numbers mean nothing),
or writes a "skipped" record.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("OUT", "."))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def finish(result: dict[str, Any]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "adapters_check.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


class _ApplyLog:
    """Wraps ``backend.apply`` to record what the callback asked for and what the backend did."""

    def __init__(self, backend: Any) -> None:
        self.calls: list[dict[str, Any]] = []
        real = backend.apply

        def apply(settings: Any) -> Any:
            applied = real(settings)
            self.calls.append({"asked_w": settings.power_limit_w, "changed": list(applied.changed),
                               "skipped": [str(s) for s in applied.skipped]})
            return applied

        backend.apply = apply


def _callback(backend: Any, caps: Any, store_dir: Path, fingerprint: str, args: argparse.Namespace) -> Any:
    from plans.integrations.power_limit import PowerLimitCallback
    from plans.profile_store import ProfileStore
    from scheduler.settings.auto_power import auto_power_limit_profiler
    from scheduler.policy.types import Mode

    mode = Mode(power_limit_select="zeus_cost", eta=0.5)
    profiler = auto_power_limit_profiler(mode, caps, step_w=args.step_w, warmup_steps=args.warmup_steps,
                                         profile_steps=args.profile_steps)
    if profiler is None:
        raise SystemExit("the device reports no power-limit range")
    model = caps.devices[0].name if caps.devices else "gpu"
    return PowerLimitCallback(backend, profiler, meter=backend.meter(), store=ProfileStore(store_dir),
                              gpu_model=model, fingerprint=fingerprint), mode, model


def _report(name: str, cb: Any, mode: Any, model: str, caps: Any, store_dir: Path, apply_log: _ApplyLog,
            backend: Any, wall_s: float, steps: int) -> dict[str, Any]:
    from plans.profile_store import ProfileStore
    from scheduler.settings.auto_power import choose_power_limit

    stored = ProfileStore(store_dir).load(model, cb.fingerprint)
    choice = choose_power_limit(mode, caps, stored, None) if stored is not None else None
    windows = [w for w in cb.meter.windows if w.name.startswith("gridshift-power-limit-")]
    return {
        "framework": name,
        "train_steps": steps,
        "wall_s": round(wall_s, 3),
        "profiling_done": cb.done,
        "selected_in_process_w": getattr(cb.state, "selected_w", None),
        "flow_choice_next_run": None if choice is None else {"power_limit_w": choice.power_limit_w, "reason": choice.reason},
        "stored_profile": None if stored is None else stored.to_json(),
        "profile_file": str(ProfileStore(store_dir).path_for(model, cb.fingerprint)),
        "windows": [{"name": w.name, "s": round(w.duration_s, 4), "j": round(w.energy_j, 3), "approximate": w.approximate}
                    for w in windows],
        "limits_applied": any(c["changed"] for c in apply_log.calls),
        "apply_calls": apply_log.calls,
        "restored_at_train_end": backend.current is None,
        "world_size": cb.world_size,
    }


def run_hf(torch: Any, device: str, backend: Any, caps: Any, work: Path, args: argparse.Namespace, smoke: bool) -> dict[str, Any]:
    import transformers

    from plans.integrations.hf import GridshiftCallback

    width, layers, seq, batch = (32, 1, 16, 8) if smoke else (512, 4, 128, 32)
    config = transformers.BertConfig(vocab_size=1000, hidden_size=width, num_hidden_layers=layers,
                                     num_attention_heads=max(width // 64, 2), intermediate_size=4 * width,
                                     max_position_embeddings=seq, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    # one epoch longer than the whole run: an epoch end inside a profiling window cancels it (Zeus's
    # "profile inside the first epoch"), so a short epoch would never let the pass finish
    data = [{"input_ids": torch.randint(0, 1000, (seq,), generator=g), "labels": int(i % 2)}
            for i in range(batch * (args.steps + 1))]
    cb, mode, gpu = _callback(backend, caps, work / "hf-profiles", "adapters-check-hf", args)
    apply_log = _ApplyLog(backend)
    targs = transformers.TrainingArguments(
        output_dir=str(work / "hf-out"), max_steps=args.steps, per_device_train_batch_size=batch, report_to=[],
        use_cpu=not device.startswith("cuda"), bf16=device.startswith("cuda"), save_strategy="no",
        logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    t0 = time.perf_counter()
    transformers.Trainer(model=model, args=targs, train_dataset=data, callbacks=[GridshiftCallback(power_limit=cb)]).train()
    return _report("hf_trainer", cb, mode, gpu, caps, work / "hf-profiles", apply_log, backend, time.perf_counter() - t0, args.steps)


def run_lightning(torch: Any, device: str, backend: Any, caps: Any, work: Path, args: argparse.Namespace, smoke: bool) -> dict[str, Any]:
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]

    from plans.integrations.lightning import GridshiftCallback

    width, batch = (64, 32) if smoke else (4096, 4096)

    class MLP(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.Linear(width, width),
                                           torch.nn.GELU(), torch.nn.Linear(width, 1))

        def training_step(self, b: Any, i: int) -> Any:
            x, y = b
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(batch, width, generator=g), torch.randn(batch, 1, generator=g)

    class Batches(torch.utils.data.Dataset):
        """One epoch of ``args.steps + 1`` whole batches (the same random batch), for the reason above."""

        def __len__(self) -> int:
            return args.steps + 1

        def __getitem__(self, i: int) -> Any:
            return x, y

    cb, mode, gpu = _callback(backend, caps, work / "pl-profiles", "adapters-check-lightning", args)
    apply_log = _ApplyLog(backend)
    trainer = pl.Trainer(max_steps=args.steps, accelerator="gpu" if device.startswith("cuda") else "cpu", devices=1,
                         precision="bf16-mixed" if device.startswith("cuda") else "32-true", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(work / "pl-out"), callbacks=[GridshiftCallback(power_limit=cb)])
    t0 = time.perf_counter()
    trainer.fit(MLP(), torch.utils.data.DataLoader(Batches(), batch_size=None))
    return _report("lightning", cb, mode, gpu, caps, work / "pl-profiles", apply_log, backend, time.perf_counter() - t0, args.steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-w", type=float, default=100.0, help="power-limit grid step (W), from the maximum down")
    ap.add_argument("--warmup-steps", type=int, default=10)
    ap.add_argument("--profile-steps", type=int, default=60)
    ap.add_argument("--steps", type=int, default=0, help="training steps (default: enough to profile every limit, +50)")
    ap.add_argument("--only", choices=("hf", "lightning"), default=None)
    args = ap.parse_args()
    result: dict[str, Any] = {"script": "benchmarks/device/adapters_check.py", "args": vars(args), "python": sys.version.split()[0]}
    if os.environ.get("GRIDSHIFT_NVML_READ_ONLY") != "1":
        log("refusing to run: set GRIDSHIFT_NVML_READ_ONLY=1 (this check must never change the GPU's power limit)")
        return 2
    result["read_only"] = True
    try:
        import torch
    except ImportError:
        return finish({**result, "skipped": "torch not installed"})
    fake = os.environ.get("GRIDSHIFT_NVML_MODULE")
    cuda = torch.cuda.is_available()
    if not cuda and not fake:
        log("no CUDA GPU visible (set GRIDSHIFT_NVML_MODULE=tests.fakes.fake_nvml for a CPU smoke test)")
        return finish({**result, "skipped": "no CUDA GPU"})
    device = "cuda:0" if cuda else "cpu"
    smoke = not cuda
    if smoke:
        args.warmup_steps, args.profile_steps = min(args.warmup_steps, 1), min(args.profile_steps, 3)

    from backends.errors import BackendError
    from backends.nvidia import NvidiaBackend

    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
    backend = NvidiaBackend(env={"CUDA_VISIBLE_DEVICES": first}, recover=False, per_rank=False)
    try:
        caps = backend.capabilities()
    except BackendError as exc:
        return finish({**result, "skipped": f"NVML unavailable: {exc}"})
    lo, hi = caps.power_limit_range_w or (0.0, 0.0)
    n_limits = int((hi - lo) // args.step_w) + 1
    if args.steps <= 0:
        args.steps = 1 + n_limits * (args.warmup_steps + args.profile_steps) + 50
    result.update(torch=torch.__version__, device=device, fake_nvml=bool(fake), can_control=caps.can_control,
                  control_note=caps.control_note, gpu=caps.devices[0].name if caps.devices else None,
                  power_limit_range_w=caps.power_limit_range_w, status_before=backend.status()["devices"][0])
    for name, fn in (("hf", run_hf), ("lightning", run_lightning)):
        if args.only not in (None, name):
            continue
        work = OUT / f"{name}-work"  # the stored profile files stay here for the record
        try:
            log(f"{name}: training {args.steps} steps on {device}, {n_limits} limits, measure-only")
            result[name] = fn(torch, device, backend, caps, work, args, smoke)
        except ImportError as exc:
            result[name] = {"skipped": f"not installed: {exc}"}
    result["status_after"] = backend.status()["devices"][0]
    backend.close()
    return finish(result)


if __name__ == "__main__":
    raise SystemExit(main())
