"""The integrations on the REAL frameworks, in this process (CPU, tiny models built in code, nothing
downloaded): every phase of a plan fires through accelerate's wrapped optimizer, a submodule call,
gradient accumulation and mixed precision; the HF Trainer and Lightning callbacks follow a mode
change (clock plan swapped, batch size applied or kept with the reason); a corrupt plan at a mode
change is one warning and training completes; a plain loop paused by SIGTERM and resumed ends with
the weights of an uninterrupted run. Clock calls are a dry run. Skipped without the libraries,
except under CI=true (tests/requires.py).
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from plans.integrations.phase_hooks import PhaseHooks
from plans.integrations.protocol import ModeAnnouncement, read_result_file, write_mode_file
from tests.fakes.clock_plans import make_plan, write_plan
from tests.requires import need

PHASES = ("forward", "backward", "optimizer")


@pytest.fixture
def gridshift_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gridshift's variables for a job in ``tmp_path``, the speed mode's plan announced (seq 0)."""
    fast = write_plan(tmp_path / "fast.json", make_plan((1980, 1410, 1200), phases=PHASES))
    write_plan(tmp_path / "slow.json", make_plan((1410, 1200, 1980), phases=PHASES))
    write_mode_file(tmp_path / "mode.json", ModeAnnouncement(0, "speed", 8, "t0", clock_plan=str(fast)))
    for k, v in {"GRIDSHIFT_MODE_FILE": "mode.json", "GRIDSHIFT_RESULT_FILE": "result.json",
                 "GRIDSHIFT_PROGRESS_FILE": "progress", "GRIDSHIFT_CLOCK_PLAN": "fast.json"}.items():
        monkeypatch.setenv(k, str(tmp_path / v))
    monkeypatch.setenv("GRIDSHIFT_NVML_READ_ONLY", "1")
    monkeypatch.setenv("GRIDSHIFT_BATCH_SIZE", "8")
    return tmp_path


def _announce(folder: Path, seq: int, batch_size: int, plan: str) -> None:
    write_mode_file(folder / "mode.json", ModeAnnouncement(seq, ("speed", "efficiency")[seq % 2], batch_size,
                                                           f"t{seq}", clock_plan=str(folder / plan)))


def test_phase_hooks_fire_through_accelerates_optimizer_a_submodule_autocast_and_accumulation() -> None:
    torch = need("torch")
    accelerate = need("accelerate")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = torch.nn.Linear(4, 8)
            self.head = torch.nn.Linear(8, 1)

        def forward(self, x: Any) -> Any:
            return self.head(torch.relu(self.layer0(x)))

    model, opt = accelerate.Accelerator(cpu=True).prepare(Net(), torch.optim.SGD(Net().parameters(), lr=0.1))
    assert type(opt).__name__ == "AcceleratedOptimizer"  # the wrapper that has no hook table of its own
    fired: list[str] = []
    hooks = PhaseHooks(fired.append, model=model, optimizer=opt)
    assert hooks.install(["forward", "backward", "layer0.forward", "layer0.backward", "optimizer"]) == []
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    for _ in range(2):  # two optimizer steps of two micro-batches each, in bf16 autocast
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x).float().pow(2).mean() / 2
            loss.backward()
        opt.step()
        opt.zero_grad()
    micro = ["forward", "layer0.forward", "backward", "layer0.backward"]
    assert fired == [*micro, *micro, "optimizer"] * 2
    model.eval()
    with torch.no_grad():
        model(x)  # evaluation switches nothing
    hooks.remove()
    model.train()
    model(x).sum().backward()  # removed: the model is as it was
    assert len(fired) == 18


def test_the_hf_trainer_follows_mode_changes_with_accumulation_and_mixed_precision(
        gridshift_env: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch = need("torch")
    transformers = need("transformers")
    need("accelerate")
    from plans.integrations.hf import KEPT_BATCH_SIZE, GridshiftCallback

    folder = gridshift_env
    (folder / "broken.json").write_text('{"gpu_model": ')

    class Switch(transformers.TrainerCallback):  # type: ignore[misc]
        """gridshift's side: a new mode after step 3 (batch size 4, the slow plan), a corrupt plan after step 6."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == 3:
                _announce(folder, 1, 4, "slow.json")
            if state.global_step == 6:
                _announce(folder, 2, 8, "broken.json")

    config = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                     bos_token_id=63, eos_token_id=63)
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": (ids := torch.randint(0, 64, (16,), generator=g)), "labels": ids} for _ in range(80)]
    args = transformers.TrainingArguments(
        output_dir=str(folder / "out"), max_steps=9, per_device_train_batch_size=8, gradient_accumulation_steps=2,
        bf16=True, use_cpu=True, report_to=[], save_strategy="no", logging_steps=3, disable_tqdm=True,
        dataloader_num_workers=0)
    gridshift = GridshiftCallback(poll_interval_s=0.0)
    with caplog.at_level(logging.WARNING, logger="gridshift.integrations"):
        transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=data,
                             callbacks=[Switch(), gridshift]).train()
    # the corrupt plan: one line, and training completed
    (warning,) = [r.getMessage() for r in caplog.records if r.name.startswith("gridshift")]
    assert warning.startswith("gridshift: clock plan not run: ") and "broken.json" in warning
    result = read_result_file(folder / "result.json")
    assert result is not None and result.steps == 9 and result.metric_name == "loss"
    fast, slow, broken = result.clock_plans
    for run in (fast, slow):  # every phase fired in both modes: forward/backward twice per optimizer step
        assert run.dry_run and run.errors == 0 and run.unfired == ()
        assert set(run.phase_switches) == set(PHASES) and min(run.phase_switches.values()) > 0
        assert run.phase_switches["forward"] == 2 * run.phase_switches["optimizer"]
    assert (slow.mode_seq, slow.step) == (1, 3) and (broken.errors, broken.switches) == (1, 0)
    assert [(a.mode_seq, a.batch_size, a.reason) for a in result.batch_sizes] == [
        (0, 8, None), (1, 8, KEPT_BATCH_SIZE), (2, 8, None)]
    assert [(w.start_step, w.end_step, w.ended) for w in result.windows] == [(0, 9, "finished")]
    assert (folder / "progress").read_text() == "1.000000\n"


def test_lightning_phases_fire_when_training_step_calls_a_submodule_and_the_batch_size_is_applied(
        gridshift_env: Path, caplog: pytest.LogCaptureFixture) -> None:
    torch = need("torch")
    pl = need("lightning.pytorch")
    from plans.integrations.lightning import GridshiftCallback

    folder = gridshift_env
    write_plan(folder / "fast.json", make_plan((1980, 1410, 1200, 1755), phases=(*PHASES, "net.0.forward")))

    class Tiny(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 8
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
            self.sizes: list[int] = []

        def train_dataloader(self) -> Any:
            x = torch.randn(32, 4, generator=torch.Generator().manual_seed(self.current_epoch))
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                               batch_size=self.batch_size)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            self.sizes.append(len(x))
            if self.global_step == 2 and batch_idx == 2:
                _announce(folder, 1, 16, "slow.json")  # gridshift's mode change, mid-epoch
            loss = torch.nn.functional.mse_loss(self.net(x), y)  # the submodule call of issue 30
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    model = Tiny()
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(folder),
                         reload_dataloaders_every_n_epochs=1,
                         callbacks=[GridshiftCallback(poll_interval_s=0.0, warn_after_steps=3)])
    with caplog.at_level(logging.WARNING, logger="gridshift.integrations"):
        trainer.fit(model)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("gridshift")] == []
    assert model.sizes == [8] * 4 + [16] * 2 + [16] * 2  # the epoch after the change runs the new size
    result = read_result_file(folder / "result.json")
    assert result is not None and result.steps == 8 and result.metric_name == "train_loss"
    fast, slow = result.clock_plans
    assert set(fast.phase_switches) == {*PHASES, "net.0.forward"} and fast.unfired == ()
    assert set(slow.phase_switches) == set(PHASES) and min(slow.phase_switches.values()) > 0
    acks = [(a.mode_seq, a.batch_size, a.reason) for a in result.batch_sizes]
    assert acks == [(0, 8, None), (1, 8, "switching to 16 at the next epoch"), (1, 16, None)]


def test_a_plain_loop_paused_by_sigterm_and_resumed_ends_with_the_weights_of_an_uninterrupted_run(
        gridshift_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch = need("torch")
    from plans.integrations.torch_loop import TrainingLoop

    monkeypatch.setenv("GRIDSHIFT_CHECKPOINT_DIR", str(gridshift_env / "ckpt"))

    def train(stop_at: int | None) -> Any:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        with TrainingLoop(model, opt, total_steps=12, batch_size=8, poll_interval_s=0.0) as loop:
            while loop.step < 12:
                size = loop.epoch_boundary(loop.step // 4)
                for _ in range(loop.step % 4, 4):
                    x = torch.randn(size, 4, generator=torch.Generator().manual_seed(loop.step))
                    torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
                    opt.step()
                    opt.zero_grad()
                    if loop.step + 1 == stop_at:
                        os.kill(os.getpid(), signal.SIGTERM)  # gridshift's planned pause, mid-step
                    loop.step_done()
            loop.finish()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    straight = train(None)
    (gridshift_env / "result.json").unlink()
    with pytest.raises(SystemExit) as stopped:
        train(stop_at=6)
    assert stopped.value.code == 0 and (gridshift_env / "ckpt" / "torch-step-6.pt").exists()
    monkeypatch.setenv("GRIDSHIFT_RESUME", "1")
    monkeypatch.setenv("GRIDSHIFT_WINDOW", "1")
    resumed = train(None)
    assert torch.equal(resumed, straight)  # no step lost, none repeated
    result = read_result_file(gridshift_env / "result.json")
    assert result is not None
    assert [(w.start_step, w.end_step, w.ended) for w in result.windows] == [(0, 6, "paused"), (6, 12, "finished")]
    assert Path(result.windows[1].checkpoint or "").name == "torch-step-6.pt"
