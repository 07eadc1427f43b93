"""In-process power-limit profiling driven by the HF Trainer and Lightning callbacks
(``GridshiftCallback(power_limit=...)``) on their REAL libraries, with tiny models built from local
configs (nothing is downloaded), on CPU and the simulated backend; skipped without the libraries,
except under CI=true (tests/requires.py).

Also torch.distributed's rank combine on two real gloo processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.simulated import SimulatedBackend
from plans.integrations.power_limit import PowerLimitCallback, torch_distributed_combine
from plans.power_limit import Measured, PowerLimitProfiler
from plans.profile_store import ProfileStore
from plans.selectors import ZeusCost
from tests.requires import need

LIMITS = (700.0, 500.0, 300.0)
STEPS = 24  # 1 wait + 3 limits x (1 warm-up + 3 profiled) = 13 steps of profiling, then the selected limit


def _callback(tmp_path: Path) -> tuple[PowerLimitCallback, SimulatedBackend, ProfileStore]:
    backend = SimulatedBackend()
    store = ProfileStore(tmp_path / "profiles")
    prof = PowerLimitProfiler(LIMITS, ZeusCost(0.5), wait_steps=1, warmup_steps=1, profile_steps=3)
    cb = PowerLimitCallback(backend, prof, meter=backend.meter(), store=store, gpu_model="sim", fingerprint="tiny")
    return cb, backend, store


class _LimitLog:
    """Records the limit in force at each step (wraps the backend's apply)."""

    def __init__(self, backend: SimulatedBackend) -> None:
        self.applied: list[float] = []
        real = backend.apply

        def apply(settings):
            self.applied.append(settings.power_limit_w)
            return real(settings)

        backend.apply = apply  # type: ignore[method-assign]


def _check(cb: PowerLimitCallback, backend: SimulatedBackend, store: ProfileStore, log: _LimitLog) -> None:
    assert cb.done, cb.state
    saved = store.load("sim", "tiny")
    assert saved is not None and sorted(m.power_limit_w for m in saved.measurements) == sorted(LIMITS)
    assert saved.world_size == 1
    assert log.applied[:3] == list(LIMITS) and log.applied[-1] == cb.state.selected_w
    assert backend.current is None  # restored at train end


def test_the_hf_trainer_callback_profiles_power_limits(tmp_path):
    torch = need("torch")
    transformers = need("transformers")
    need("accelerate")
    from plans.integrations.hf import GridshiftCallback

    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(0, 64, (8,), generator=g), "labels": int(i % 2)} for i in range(64)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=STEPS, per_device_train_batch_size=4, report_to=[],
        use_cpu=True, save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    cb, backend, store = _callback(tmp_path)
    log = _LimitLog(backend)
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[GridshiftCallback(power_limit=cb)]).train()
    _check(cb, backend, store, log)


def test_the_lightning_callback_profiles_power_limits(tmp_path):
    torch = need("torch")
    pl = need("lightning.pytorch")
    from plans.integrations.lightning import GridshiftCallback


    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g))
    cb, backend, store = _callback(tmp_path)
    log = _LimitLog(backend)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
                         callbacks=[GridshiftCallback(power_limit=cb)])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(ds, batch_size=4))
    _check(cb, backend, store, log)


def test_combine_is_off_without_torch_distributed():
    need("torch")
    assert torch_distributed_combine() is None


def _rank(rank: int, world: int, init: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        combine, ws, r = torch_distributed_combine()  # type: ignore[misc]
        m = combine(Measured(time_s=1.0 + rank, energy_j=10.0 * (rank + 1), steps=5))
        backend = SimulatedBackend()
        cb = PowerLimitCallback(backend, PowerLimitProfiler(LIMITS, ZeusCost(0.5)), meter=backend.meter())
        attached = cb.use_torch_distributed()
        Path(out, f"{rank}.json").write_text(json.dumps(
            {"time": m.time_s, "energy": m.energy_j, "steps": m.steps, "world": ws, "rank": r,
             "attached": attached, "cb_world": cb.world_size, "saves": cb.saves_profile}))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_sum_energy_and_take_the_slowest_time(tmp_path):
    mp = need("torch.multiprocessing")
    mp.spawn(_rank, args=(2, f"file://{tmp_path / 'rendezvous'}", str(tmp_path)), nprocs=2, join=True)
    got = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    for r, g in enumerate(got):
        assert (g["time"], g["energy"], g["steps"], g["world"], g["rank"]) == (2.0, 30.0, 5, 2, r)
        assert g["attached"] and g["cb_world"] == 2
    assert [g["saves"] for g in got] == [True, False]  # only rank 0 writes the profile
