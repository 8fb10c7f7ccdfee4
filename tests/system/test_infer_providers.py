"""Which ONNX Runtime execution providers `workloads infer` asks for.

On a real H200 (bench/gpu_check/results/h200-2026-11-28.md) onnxruntime-gpu 1.31.1 listed
TensorrtExecutionProvider as available, but TensorRT was not installed: every session
printed an "EP Error" (libnvinfer.so.10 missing) and fell back to CUDA. A provider is now
asked for only when its library in onnxruntime/capi/ loads, the shared provider bridge
loaded first, as ONNX Runtime loads them.

This machine has no GPU and no onnxruntime-gpu, so the provider libraries here are small
real ELF libraries built with gcc, laid out as onnxruntime-gpu lays out its own: one whose
dependency (``libnvinfer.so.10``) is missing, and one that needs a symbol of the bridge.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from workloads.infer.model import (
    PROVIDER_LIBRARIES,
    SHARED_PROVIDER_LIBRARY,
    unloadable_providers,
)

TENSORRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"


def _library(out: Path, source: str, *link: str) -> Path:
    c_file = out.with_suffix(".c")
    c_file.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(c_file), *link], check=True)
    return out


@pytest.fixture
def capi(tmp_path) -> Path:
    """An onnxruntime/capi/ folder whose TensorRT provider needs a libnvinfer that is gone,
    and whose CUDA provider loads once the bridge's ``Provider_GetHost`` is there."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the provider libraries")
    capi = tmp_path / "capi"
    capi.mkdir()
    _library(capi / SHARED_PROVIDER_LIBRARY, "void *Provider_GetHost(void) { return 0; }\n")
    uses_bridge = (
        "void *Provider_GetHost(void);\nvoid *provider(void) { return Provider_GetHost(); }\n"
    )
    _library(capi / PROVIDER_LIBRARIES[CUDA], uses_bridge)
    gone = tmp_path / "tensorrt"
    gone.mkdir()
    _library(
        gone / "libnvinfer.so", "int nvinfer(void) { return 10; }\n", "-Wl,-soname,libnvinfer.so.10"
    )
    _library(
        capi / PROVIDER_LIBRARIES[TENSORRT],
        "int nvinfer(void);\nint provider(void) { return nvinfer(); }\n",
        f"-L{gone}",
        "-lnvinfer",
    )
    shutil.rmtree(gone)
    return capi


def test_a_provider_whose_library_cannot_load_is_left_out_with_the_loaders_reason(capi):
    unloadable = unloadable_providers(capi, [TENSORRT, CUDA, "CPUExecutionProvider"])
    assert list(unloadable) == [TENSORRT]
    assert "libnvinfer.so.10: cannot open shared object file" in unloadable[TENSORRT]


def test_a_build_without_provider_libraries_leaves_nothing_out(tmp_path):
    """onnxruntime (CPU) has no capi/ provider libraries: nothing is left out."""
    assert unloadable_providers(tmp_path, [TENSORRT, CUDA, "CPUExecutionProvider"]) == {}
