"""NVML error codes map onto backends.errors; the binding guard refuses unofficial pynvml."""

from __future__ import annotations

import types

import pynvml
import pytest

from backends.errors import BackendError, DeviceLost, NoDevice, NoPermission, Unsupported
from backends.nvidia._nvml import ERROR_MAP, Nvml, load_nvml_module, translate_nvml_error


def test_every_nvml_error_subclass_is_mapped() -> None:
    codes = {cls(code).value for code, cls in pynvml.NVMLError._valClassMapping.items()}
    subclasses = {getattr(pynvml, n).__new__(getattr(pynvml, n)).value
                  for n in dir(pynvml) if n.startswith("NVMLError_")}
    assert subclasses == codes
    missing = sorted(codes - set(ERROR_MAP))
    assert not missing, f"NVML error codes without a gridshift mapping: {missing}"


@pytest.mark.parametrize(("code", "expected"), [
    (pynvml.NVML_ERROR_NO_PERMISSION, NoPermission),
    (pynvml.NVML_ERROR_NOT_SUPPORTED, Unsupported),
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, NoDevice),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, NoDevice),
    (pynvml.NVML_ERROR_GPU_IS_LOST, DeviceLost),
    (pynvml.NVML_ERROR_FREQ_NOT_SUPPORTED, Unsupported),
    (pynvml.NVML_ERROR_UNKNOWN, BackendError),
])
def test_translation_picks_the_class_and_names_the_action(code: int, expected: type) -> None:
    err = translate_nvml_error(pynvml.NVMLError(code), "set power limit", gpu_index=3)
    assert type(err) is expected
    assert "set power limit on GPU 3" in str(err)
    if expected is NoPermission:
        assert err.action == "set power limit" and err.gpu_index == 3


def test_wrapper_translates_and_chains() -> None:
    def refuse(*_a: object) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)

    module = types.SimpleNamespace(NVMLError=pynvml.NVMLError, nvmlDeviceSetPowerManagementLimit=refuse)
    with pytest.raises(NoPermission) as info:
        Nvml(module).set_power_limit_mw(object(), 300_000, gpu_index=0)
    assert isinstance(info.value.__cause__, pynvml.NVMLError_NoPermission)


def test_real_binding_without_driver_is_no_device() -> None:
    lib = Nvml(load_nvml_module("pynvml"))
    try:
        lib.init()
    except NoDevice as exc:
        assert "Library Not Found" in str(exc) or "Driver" in str(exc)
    else:  # a machine with a driver: nothing to check here
        lib.shutdown()


def test_unofficial_binding_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fake_unofficial_pynvml", types.ModuleType("fake_unofficial_pynvml"))
    with pytest.raises(NoDevice, match="not the official NVML binding"):
        load_nvml_module("fake_unofficial_pynvml")


def test_missing_binding_is_no_device() -> None:
    with pytest.raises(NoDevice, match="not installed"):
        load_nvml_module("no_such_nvml_binding_module")


def test_env_seam_loads_the_fake(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRIDSHIFT_NVML_MODULE", "tests.fakes.fake_nvml")
    module = load_nvml_module()
    assert module.__name__ == "tests.fakes.fake_nvml"


def test_deprecated_shim_warning_does_not_break_strict_runs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import sys
    import warnings

    (tmp_path / "shim_like_pynvml.py").write_text(
        "import warnings\n"
        "warnings.warn('The pynvml package is deprecated. Please install nvidia-ml-py instead.', FutureWarning)\n"
        "def _nvmlGetFunctionPointer(name):\n    raise RuntimeError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shim_like_pynvml", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_nvml_module("shim_like_pynvml").__name__ == "shim_like_pynvml"
