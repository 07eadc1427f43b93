"""The job's side of clock plans: run the plan gridshift handed over, swap it when the mode file
announces a new mode, report the switches in the result file, and let the report confirm them.

Clock calls go to the fake NVML (tests/fakes) through the NVIDIA backend's journalled path, or to
the executor's dry run under GRIDSHIFT_NVML_READ_ONLY=1. Time is injected: the mode file is looked
at when the injected clock says a poll interval has passed; ``flush`` waits for the worker thread.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from backends.nvidia.backend import NvidiaClockControl
from flows.job.span_settings import job_settings
from plans.integrations.clock_runner import ClockPlanRunner, run_clock_plan
from plans.integrations.protocol import GridshiftJob, ModeAnnouncement, read_result_file, write_mode_file
from scheduler.report import settings_phrase
from tests.backends.nvidia_helpers import make_backend
from tests.fakes.clock_plans import make_plan, write_plan

FAST = (1980, 1410, 1200)  # per phase: layer0.forward, layer0.backward, optimizer
SLOW = (1410, 1200, 1410)
PHASES = ("layer0.forward", "layer0.backward", "optimizer")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _files(tmp_path: Path) -> tuple[Path, Path, GridshiftJob]:
    fast = write_plan(tmp_path / "fast.json", make_plan(FAST))
    slow = write_plan(tmp_path / "slow.json", make_plan(SLOW))
    job = GridshiftJob(batch_size=None, mode_file=tmp_path / "mode.json", result_file=tmp_path / "result.json",
                       clock_plan=fast)
    return fast, slow, job


def _announce(job: GridshiftJob, seq: int, mode: str, plan: Path | None) -> ModeAnnouncement:
    ann = ModeAnnouncement(seq=seq, mode=mode, batch_size=None, since=f"2026-12-02T0{seq}:00:00+00:00",
                           clock_plan=str(plan) if plan else None)
    assert job.mode_file is not None
    write_mode_file(job.mode_file, ann)
    return ann


def _sm_locks(fake: Any) -> list[int]:
    return [c[2] for c in fake.state()["calls"] if c[0] == "nvmlDeviceSetGpuLockedClocks"]


def _step(runner: ClockPlanRunner) -> None:
    runner.on_step_begin()
    for phase in PHASES:
        runner.on_phase(phase)
        runner.flush()  # one switch per phase, so the counts below are exact


def test_the_job_runs_its_plan_swaps_it_on_a_mode_change_and_reports_the_switches(tmp_path: Path) -> None:
    fast, slow, job = _files(tmp_path)
    backend, fake, _ = make_backend(tmp_path)
    clock = Clock()
    announced = [_announce(job, 0, "speed", fast)]
    runner = ClockPlanRunner(job, control=NvidiaClockControl(backend), min_interval_s=0.0, poll_interval_s=60.0,
                             clock=clock).start()
    for _ in range(2):
        _step(runner)
    assert _sm_locks(fake) == [*FAST, *FAST]  # the plan's clock at each phase, on the (fake) GPU

    announced.append(_announce(job, 1, "efficiency", slow))
    _step(runner)  # within the poll interval: the new mode is not seen yet
    assert runner.plan_path == str(fast)
    clock.t += 60.0
    _step(runner)  # a step boundary after the interval: swapped
    assert runner.plan_path == str(slow)
    assert _sm_locks(fake)[-3:] == list(SLOW)

    announced.append(_announce(job, 2, "eco", None))  # a mode without a plan: the lock is undone
    clock.t += 60.0
    _step(runner)
    assert fake.state()["gpus"][0]["locked_sm_mhz"] is None
    runner.close()

    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    runs = [(r.mode_seq, r.plan, r.step, r.switches, r.errors, r.dry_run) for r in result.clock_plans]
    # fast: 9 locks in 3 steps + the reset at the swap; slow: 3 locks + its reset
    assert runs == [(0, str(fast), 0, 10, 0, False), (1, str(slow), 4, 4, 0, False), (2, None, 5, 0, 0, False)]
    resets = [c for c in fake.state()["calls"] if c[0] == "nvmlDeviceResetGpuLockedClocks"]
    assert len(_sm_locks(fake)) + len(resets) == 10 + 4  # what the job reports is what the GPU got

    # gridshift's report: each span confirmed by the job's own account
    words = [settings_phrase(d) for d in job_settings(announced, None, result)]
    assert words == ["clock plan fast.json (run by the job: 10 clock switches)",
                     "clock plan slow.json (run by the job: 4 clock switches)",
                     "clock plan none (the job runs no plan, its clock lock undone)"]
    assert all(s.confirmed and s.applied_by == "job" for d in job_settings(announced, None, result) for s in d)


def test_read_only_means_a_dry_run_and_the_report_says_no_clock_changed(tmp_path: Path) -> None:
    fast, slow, job = _files(tmp_path)
    _, fake, _ = make_backend(tmp_path)
    announced = [_announce(job, 0, "speed", fast)]
    env = {"GRIDSHIFT_NVML_READ_ONLY": "1"}
    runner = ClockPlanRunner.from_env(env, job=job, min_interval_s=0.0, clock=Clock()).start()
    _step(runner)
    assert runner.executor is not None and runner.executor.control.calls == [  # type: ignore[attr-defined]
        ("set_locked_sm_clock_mhz", (f, f)) for f in FAST]
    runner.close()
    assert _sm_locks(fake) == []  # nothing reached the GPU
    result = read_result_file(tmp_path / "result.json")
    (span,) = job_settings(announced, None, result)
    assert settings_phrase(span) == "clock plan fast.json (run by the job in dry run: 4 clock switches logged, no clock changed)"
    assert not span[0].confirmed


def test_a_real_control_under_read_only_is_refused_and_the_errors_reported(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fast, _, job = _files(tmp_path)
    backend, fake, _ = make_backend(tmp_path)
    monkeypatch.setenv("GRIDSHIFT_NVML_READ_ONLY", "1")
    announced = [_announce(job, 0, "speed", fast)]
    with ClockPlanRunner(job, control=NvidiaClockControl(backend), min_interval_s=0.0, clock=Clock()) as runner:
        _step(runner)
    assert _sm_locks(fake) == []  # refused before the driver
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.clock_plans[0].errors == 3 and result.clock_plans[0].switches == 0
    (span,) = job_settings(announced, None, result)
    assert not span[0].confirmed and "3 clock switch(es) failed" in span[0].how and "read-only" in span[0].how


def test_without_a_plan_or_mode_file_the_runner_does_nothing(tmp_path: Path) -> None:
    job = GridshiftJob(batch_size=None, mode_file=None, result_file=tmp_path / "result.json")
    with ClockPlanRunner.from_env({}, job=job) as runner:
        runner.on_step_begin()
        runner.on_phase("forward")
    assert runner.executor is None and not (tmp_path / "result.json").exists()


def test_modes_without_plans_report_nothing_and_a_shared_plan_is_confirmed_per_mode(tmp_path: Path) -> None:
    fast, _, job = _files(tmp_path)
    clock = Clock()
    announced = [_announce(job, 0, "speed", None)]
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0, poll_interval_s=1.0, clock=clock).start()
    _step(runner)
    assert runner.executor is None and not (tmp_path / "result.json").exists()  # no plan: nothing to report
    for seq, mode in ((1, "efficiency"), (2, "eco")):  # two modes that share one plan
        announced.append(_announce(job, seq, mode, fast))
        clock.t += 1.0
        _step(runner)
    runner.close()
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and [(r.mode_seq, r.switches) for r in result.clock_plans] == [(1, 4), (2, 4)]
    words = [settings_phrase(d) for d in job_settings(announced, None, result)]
    assert words == ["", "clock plan fast.json (run by the job in dry run: 4 clock switches logged, no clock changed)",
                     "clock plan fast.json (run by the job in dry run: 4 clock switches logged, no clock changed)"]


def test_the_pytorch_helper_hooks_the_plan_phases_and_follows_the_mode_file(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    fast, slow, job = _files(tmp_path)
    backend, fake, _ = make_backend(tmp_path)
    clock = Clock()
    announced = [_announce(job, 0, "speed", fast)]

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = torch.nn.Linear(4, 4)
            self.head = torch.nn.Linear(4, 1)

        def forward(self, x: Any) -> Any:
            return self.head(torch.relu(self.layer0(x)))

    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    locks_per_step: list[int | None] = []
    with run_clock_plan(model, opt, job=job, control=NvidiaClockControl(backend), min_interval_s=0.0,
                        poll_interval_s=60.0, clock=clock) as runner:
        for step in range(4):
            if step == 2:
                announced.append(_announce(job, 1, "efficiency", slow))
                clock.t += 60.0
            model(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            runner.flush()
            locks_per_step.append(fake.state()["gpus"][0]["locked_sm_mhz"][0])
    assert locks_per_step == [FAST[2], FAST[2], SLOW[2], SLOW[2]]  # the optimizer phase's clock of the plan in force
    assert set(_sm_locks(fake)) <= set(FAST) | set(SLOW)
    assert fake.state()["gpus"][0]["locked_sm_mhz"] is None  # closed: the lock undone
    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    assert [(r.mode_seq, Path(r.plan).name if r.plan else None) for r in result.clock_plans] == [(0, "fast.json"), (1, "slow.json")]
    assert all(r.switches > 0 and r.errors == 0 for r in result.clock_plans)
    assert [d[0].confirmed for d in job_settings(announced, None, result)] == [True, True]
    assert not runner._hooks  # closed: hooks removed, the model is left as it was


def _switch_at(job: GridshiftJob, slow: Path, at_step: int) -> tuple[Any, list[ModeAnnouncement]]:
    """A framework callback that announces the efficiency mode (with ``slow``) at ``at_step``."""
    announced: list[ModeAnnouncement] = []

    def announce(step: int) -> None:
        if step == at_step:
            announced.append(_announce(job, 1, "efficiency", slow))

    return announce, announced


def test_hf_trainer_clock_plan_callback(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from plans.integrations.power_limit import hf_clock_plan_callback

    fast, slow, job = _files(tmp_path)
    announced = [_announce(job, 0, "speed", fast)]
    announce, later = _switch_at(job, slow, 3)

    class Switch(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            announce(state.global_step)

    config = transformers.BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=16, num_labels=2)
    model = transformers.BertForSequenceClassification(config)
    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(0, 64, (8,), generator=g), "labels": int(i % 2)} for i in range(32)]
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=6, per_device_train_batch_size=4,
                                          report_to=[], use_cpu=True, save_strategy="no", logging_strategy="no",
                                          disable_tqdm=True, dataloader_num_workers=0)
    # BERT's phases: the whole model's forward/backward and the optimizer step
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0, poll_interval_s=0.0, clock=Clock())
    for p, c in ((fast, FAST), (slow, SLOW)):
        write_plan(p, make_plan(c, phases=("forward", "backward", "optimizer")))
    transformers.Trainer(model=model, args=args, train_dataset=data,
                         callbacks=[hf_clock_plan_callback(runner), Switch()]).train()
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and [r.mode_seq for r in result.clock_plans] == [0, 1]
    assert all(r.switches > 0 and r.dry_run for r in result.clock_plans)
    assert len(job_settings(announced + later, None, result)) == 2


def test_lightning_clock_plan_callback(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pl = pytest.importorskip("lightning.pytorch")
    from plans.integrations.power_limit import lightning_clock_plan_callback

    fast, slow, job = _files(tmp_path)
    _announce(job, 0, "speed", fast)
    announce, _ = _switch_at(job, slow, 3)

    class Tiny(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer0 = torch.nn.Linear(8, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            announce(batch_idx)
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer0(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    g = torch.Generator().manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(32, 8, generator=g), torch.randn(32, 1, generator=g))
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0, poll_interval_s=0.0, clock=Clock())
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path),
                         callbacks=[lightning_clock_plan_callback(runner)])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(ds, batch_size=4))
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and [r.mode_seq for r in result.clock_plans] == [0, 1]
    assert all(r.switches > 0 and r.dry_run for r in result.clock_plans)


def test_the_result_file_keeps_acks_plans_and_outcome_whatever_the_order(tmp_path: Path) -> None:
    fast, _, job = _files(tmp_path)
    ann = _announce(job, 0, "speed", fast)
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0, clock=Clock()).start()
    job.acknowledge(ann, 64, epoch=0)
    job.finish(reached=True, epochs=1)
    runner.close()  # after finish: the outcome is kept
    result = read_result_file(tmp_path / "result.json")
    assert result is not None and result.reached is True and len(result.batch_sizes) == 1 and len(result.clock_plans) == 1


@pytest.mark.parametrize("framework", ["hf", "lightning"])
def test_the_framework_callbacks_drive_the_runner_in_their_event_order(tmp_path: Path, framework: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Where transformers / lightning are missing (CI), their callback base classes are stood in for,
    and the events are called in the order the Trainers call them, on a real torch model."""
    import types

    torch = pytest.importorskip("torch")
    from plans.integrations.power_limit import hf_clock_plan_callback, lightning_clock_plan_callback

    stand_in = types.ModuleType("stand_in")
    stand_in.TrainerCallback = object  # type: ignore[attr-defined]
    stand_in.Callback = object  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", stand_in)
    monkeypatch.setitem(sys.modules, "lightning", types.ModuleType("lightning"))
    monkeypatch.setitem(sys.modules, "lightning.pytorch", stand_in)
    fast, slow, job = _files(tmp_path)
    for p, c in ((fast, FAST), (slow, SLOW)):
        write_plan(p, make_plan(c, phases=("forward", "backward", "optimizer")))
    announced = [_announce(job, 0, "speed", fast)]
    runner = ClockPlanRunner(job, dry_run=True, min_interval_s=0.0, poll_interval_s=0.0, clock=Clock())
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4, requires_grad=True)
    trainer = types.SimpleNamespace(optimizers=[opt])
    if framework == "hf":
        cb = hf_clock_plan_callback(runner)
        cb.on_train_begin(None, None, None, model=model, optimizer=opt)
        begin, end = (lambda: cb.on_step_begin(None, None, None)), (lambda: cb.on_train_end(None, None, None))
    else:
        cb = lightning_clock_plan_callback(runner)
        cb.on_train_start(trainer, model)
        begin, end = (lambda: cb.on_train_batch_start(trainer, model, None, 0)), (lambda: cb.on_train_end(trainer, model))
    calls_at: list[int] = []
    for step in range(4):
        if step == 2:
            announced.append(_announce(job, 1, "efficiency", slow))
        begin()
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        runner.flush()
        calls_at.append(runner.executor.control.calls[-1][1][0])  # type: ignore[union-attr]
    end()
    assert calls_at == [FAST[2], FAST[2], SLOW[2], SLOW[2]]  # the optimizer phase's clock, swapped at step 2
    result = read_result_file(tmp_path / "result.json")
    assert result is not None
    assert [(r.mode_seq, r.dry_run, r.switches > 0) for r in result.clock_plans] == [(0, True, True), (1, True, True)]
    (first,), (second,) = job_settings(announced, None, result)
    assert "dry run" in first.how and "dry run" in second.how
