"""The fake NVML for the agent as a real process (this machine has no GPU: mocked).

Put first on PYTHONPATH by ``tests.support.fake_nvml.fake_nvml_env``: this module is the real
``pynvml`` (constants, error classes, structures) with the functions the gpu sampler calls
replaced by ``tests.support.fake_nvml.FakeNvml`` answering from the JSON file named by
``EPOCHSCOPE_FAKE_NVML``.
"""

import importlib.util
import os
import sys
from importlib.machinery import PathFinder

_here = os.path.dirname(os.path.abspath(__file__))
_spec = PathFinder.find_spec("pynvml", [p for p in sys.path if os.path.abspath(p or ".") != _here])
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
globals().update({k: v for k, v in vars(_real).items() if not k.startswith("__")})

from tests.support.fake_nvml import FUNCTIONS, FakeNvml  # noqa: E402

_fake = FakeNvml.from_json(os.environ["EPOCHSCOPE_FAKE_NVML"], nvml=_real)
for _name in FUNCTIONS:
    globals()[_name] = getattr(_fake, _name)
