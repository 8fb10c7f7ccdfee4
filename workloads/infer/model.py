"""The network as ONNX: exported from PyTorch, quantised to INT8, opened in ONNX Runtime.

Export: ``torch.onnx.export(..., dynamo=False)``, the TorchScript exporter, chosen on
purpose. Since torch 2.9 the default is the torch.export-based exporter, which needs
onnxscript and onnx_ir, and those need ml_dtypes >= 0.5 while TensorFlow 2.15 (in the same
environment) pins ml-dtypes ~= 0.3.1. ResNet-50 has no control flow, so the older exporter
writes the same graph; its deprecation warning is silenced here. The batch axis is dynamic,
so one file serves every batch size.

INT8: ``onnxruntime.quantization.quantize_static``, weights per output channel as signed
int8 and activations as unsigned int8 (ONNX Runtime's default for x86: the u8 x s8 dot
products of AVX2 ``vpmaddubsw`` and AVX-512/AVX VNNI ``vpdpbusd``), activation ranges from
MinMax calibration over training pictures. Two encodings exist: QDQ (QuantizeLinear /
DequantizeLinear around float operators, which ONNX Runtime fuses into integer kernels) and
QOperator (QLinearConv and friends written directly). Which is faster depends on the CPU
and the ONNX Runtime version, so ``int8_format="auto"`` times both briefly and keeps the
faster, and the run reports which.
"""

from __future__ import annotations

import ctypes
import functools
import os
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from contract.schema import ExecutionProvider

INPUT_NAME = "images"
OUTPUT_NAME = "logits"
OPSET = 17
INT8_FORMATS = ("qdq", "qoperator")
# GPU providers first, where this onnxruntime build has them; the CPU provider always.
PREFERRED_PROVIDERS = ExecutionProvider.PREFERRED
CALIBRATION_BATCH = 16
# Each GPU provider's own library in onnxruntime/capi/. onnxruntime-gpu lists TensorRT and
# CUDA as available whether or not the libraries they need (libnvinfer, cuBLAS, cuDNN) are
# installed, and a session asked for one that cannot load prints an "EP Error" and falls
# back: four times a run on an H200 without TensorRT. A provider is asked for only when its
# library loads, which is ONNX Runtime's own test: the shared bridge first, globally.
PROVIDER_LIBRARIES = {
    ExecutionProvider.TENSORRT: "libonnxruntime_providers_tensorrt.so",
    ExecutionProvider.CUDA: "libonnxruntime_providers_cuda.so",
}
SHARED_PROVIDER_LIBRARY = "libonnxruntime_providers_shared.so"


def export_onnx(model, image_size: int, path: Path) -> Path:
    """Write ``model`` (a torch module, put in eval mode) as ONNX with a dynamic batch axis."""
    import torch

    model = model.eval().to(memory_format=torch.contiguous_format)
    example = torch.zeros(1, 3, image_size, image_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter's
        warnings.simplefilter("ignore", UserWarning)
        torch.onnx.export(
            model,
            (example,),
            str(path),
            dynamo=False,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
        )
    return path


class CalibrationBatches:
    """``onnxruntime.quantization.CalibrationDataReader``: training pictures in batches."""

    def __init__(self, pixels: np.ndarray, batch: int = CALIBRATION_BATCH) -> None:
        self._pixels = pixels
        self._batch = batch
        self._batches: Iterator[dict[str, np.ndarray]] = self._make()

    def _make(self) -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, len(self._pixels), self._batch):
            yield {INPUT_NAME: self._pixels[start : start + self._batch]}

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)

    def rewind(self) -> None:
        self._batches = self._make()


def quantize_int8(fp32_path: Path, calibration: np.ndarray, int8_format: str, out: Path) -> Path:
    """Statically quantise ``fp32_path`` to ``out``, calibrated on ``calibration`` pixels."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if int8_format not in INT8_FORMATS:
        raise ValueError(f"int8 format must be one of {INT8_FORMATS}, not {int8_format!r}")
    prepared = out.with_name(out.stem + "-prepared.onnx")
    quant_pre_process(str(fp32_path), str(prepared))  # shape inference + graph optimisation
    quantize_static(
        str(prepared),
        str(out),
        CalibrationBatches(calibration),
        quant_format=QuantFormat.QDQ if int8_format == "qdq" else QuantFormat.QOperator,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
    )
    prepared.unlink(missing_ok=True)
    return out


def unloadable_providers(capi: Path, names: list[str]) -> dict[str, str]:
    """{provider: the loader's error} for those of ``names`` whose library in ``capi``
    (onnxruntime's ``capi`` folder) does not load here. A provider without a library of
    its own there (CPU, or a build laid out otherwise) is taken to load."""
    libraries = {name: capi / PROVIDER_LIBRARIES.get(name, "-") for name in names}
    libraries = {name: path for name, path in libraries.items() if path.is_file()}
    shared = capi / SHARED_PROVIDER_LIBRARY
    unloadable = {}
    if libraries and shared.is_file():
        try:
            ctypes.CDLL(str(shared), mode=ctypes.RTLD_GLOBAL)
        except OSError as error:
            return dict.fromkeys(libraries, str(error))
    for name, library in libraries.items():
        try:
            ctypes.CDLL(str(library))
        except OSError as error:
            unloadable[name] = str(error)
    return unloadable


@functools.cache
def skipped_providers() -> dict[str, str]:
    """The providers this onnxruntime build lists but cannot load here, and why."""
    import onnxruntime

    listed = [n for n in onnxruntime.get_available_providers() if n in PROVIDER_LIBRARIES]
    return unloadable_providers(Path(onnxruntime.__file__).parent / "capi", listed)


def providers() -> list[str]:
    """The execution providers to ask for, best first, among those this build has and can
    load."""
    import onnxruntime

    available = set(onnxruntime.get_available_providers()) - set(skipped_providers())
    return [name for name in PREFERRED_PROVIDERS if name in available]


@dataclass
class Session:
    """An ONNX Runtime session and the provider that really runs it."""

    session: object
    provider: str

    def run(self, pixels: np.ndarray) -> np.ndarray:
        return self.session.run([OUTPUT_NAME], {INPUT_NAME: pixels})[0]  # type: ignore[attr-defined]


def open_session(path: Path, threads: int | None = None) -> Session:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.log_severity_level = 3  # errors only: no per-node placement chatter
    session = onnxruntime.InferenceSession(str(path), options, providers=providers())
    return Session(session, session.get_providers()[0])


def faster_int8_format(
    candidates: dict[str, Path], pixels: np.ndarray, batches: int = 3
) -> tuple[str, dict[str, float]]:
    """The format whose model runs ``batches`` batches of ``pixels`` in the least time
    (after one untimed batch each), and the seconds each took. Interleaved so load on a
    shared machine falls on both alike."""
    sessions = {name: open_session(path) for name, path in candidates.items()}
    for session in sessions.values():
        session.run(pixels)
    seconds = dict.fromkeys(sessions, 0.0)
    for _ in range(batches):
        for name, session in sessions.items():
            start = time.perf_counter()
            session.run(pixels)
            seconds[name] += time.perf_counter() - start
    return min(seconds, key=seconds.__getitem__), seconds
