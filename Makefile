# The README's two commands: `make demo` and `make test`. Both build the environment first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SYSTEM_PACKAGES := chromium chromium-driver openssh-server victoria-metrics prometheus \
	prometheus-node-exporter iproute2 slurm-wlm munge libfuse2 \
	libopenmpi-dev openmpi-bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test check docs-check scenarios env frameworks user-torch-env dlio-env system-packages lint bench clean

# The main job: ResNet-50 with Horovod + TensorFlow, 2 processes, 3 epochs, profiled by a
# local agent and collector, on a small TFRecord data set made once and dropped from the
# page cache before the run, so epoch 1 reads it from disk and later epochs do not.
# Sized for <= 3 minutes on 2 cores (timings in the README): 256 pictures
# per epoch (4 steps of 2 x 32) trained at ResNet-50's smallest input, 32 px, but stored
# at 640 px (45 MB in all), so the data set's reads stand out from the machine's others.
DEMO_DATA := runs/demo-data-256x640
DEMO_DATA_ARGS := --format tfrecord --images 256 --classes 10 --image-size 640 --shards 8
DEMO_RUN_ARGS := --framework tensorflow --data-dir $(DEMO_DATA) --np 2 --epochs 3 \
	--batch-size 32 --image-size 32 --warmup-steps 2 --step-every 1 --drop-caches --profile

demo: env frameworks
	@[ -f $(DEMO_DATA)/manifest.json ] || \
		$(PY) -m workloads dataset make $(DEMO_DATA_ARGS) --out $(DEMO_DATA)
	$(PY) -m workloads run $(DEMO_RUN_ARGS)

# Everything (its time on 2 cores: docs/performance.md): ruff; every test not marked
# serial or node_wide in TEST_WORKERS pytest-xdist workers, a file's tests on one worker in
# order (most tests wait on servers, processes and timeouts, so workers gain even on 2
# cores); then the node_wide ones (tests/conftest.py NODE_WIDE: Slurm, Ansible over sshd,
# the documented commands), each thing's files on one of 2 workers; then the serial ones
# alone (SERIAL: network namespaces, cgroups, what measures the machine); then the
# scenarios, on a quiet machine.
TEST_WORKERS ?= 4
PYTEST_REPORT := --durations=15

test: env frameworks system-packages user-torch-env dlio-env
	$(PY) -m ruff check .
	$(PY) -m pytest --ignore=tests/scenarios -m "not serial and not node_wide" \
		-n $(TEST_WORKERS) --dist loadfile $(PYTEST_REPORT)
	$(PY) -m pytest --ignore=tests/scenarios -m node_wide -n 2 --dist loadfile $(PYTEST_REPORT)
	$(PY) -m pytest --ignore=tests/scenarios -m serial $(PYTEST_REPORT)
	$(MAKE) --no-print-directory scenarios

# The fast loop: ruff and the in-process tests (tests/unit: no ML frameworks, no Debian
# packages, no browser), each test held to 15 s so the tier stays under 2 minutes.
check: env
	$(PY) -m ruff check .
	$(PY) -m pytest tests/unit -q --timeout 15

# Every shell command of README.md and docs/*.md: each one's subcommand and options against
# its real --help, and the blocks not marked `<!-- docs-check: skip (why) -->` run from a
# fresh git clone of what is committed, with this .venv: the README's `make demo` first
# (about 3 minutes), then the blocks on its run and data set, servers started and stopped
# (bench/docs_check/docs_check.py; tests/system/test_docs_commands.py runs it in `make test`).
docs-check: env
	$(PY) bench/docs_check/docs_check.py

# Real trainings with each effect a finding explains produced for real (tests/scenarios/):
# run last, on a machine no other test is loading.
scenarios: env frameworks system-packages
	$(PY) -m pytest tests/scenarios $(PYTEST_REPORT)

env: $(VENV)/.installed dashboard/assets/plotly-basic.min.js

$(VENV)/.installed: pyproject.toml
	@command -v python3 >/dev/null || { echo "python3 is missing: apt-get install python3"; exit 1; }
	@python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q python3-venv; }
	[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# plotly.js's basic bundle for the dashboard, from the npm registry (pinned, sha512-checked)
dashboard/assets/plotly-basic.min.js: dashboard/fetch_bundle.py | $(VENV)/.installed
	$(PY) -m dashboard.fetch_bundle

# The workloads' ML frameworks (extras tensorflow, mxnet, pytorch, infer) and Horovod 0.28.1,
# compiled here against TensorFlow 2.15 and MXNet 1.9.1 with gloo (no MPI, no PyTorch:
# PyTorch runs use torch.distributed). The compiled wheel is cached outside the checkout,
# keyed by the framework versions, so a second set-up installs it in seconds; a build
# that fails with MXNet is retried without it (MXNet then runs one process only).
HOROVOD_VERSION := 0.28.1
WHEEL_CACHE := $(HOME)/.cache/epochscope/wheels
HOROVOD_WHEELS := $(WHEEL_CACHE)/horovod-$(HOROVOD_VERSION)-tf2.15.1-mx1.9.1-py311
HOROVOD_ENV := HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
	HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_CPU_OPERATIONS=gloo MAKEFLAGS=-j$$(nproc)

frameworks: $(VENV)/.frameworks

$(VENV)/.frameworks: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[dev,tensorflow,mxnet,pytorch,infer]'
	@command -v cmake >/dev/null && command -v g++ >/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q cmake g++; }
	@if ! ls $(HOROVOD_WHEELS)/horovod-$(HOROVOD_VERSION)-*.whl >/dev/null 2>&1; then \
		echo "building horovod $(HOROVOD_VERSION) into $(HOROVOD_WHEELS) (minutes)"; \
		rm -rf $(HOROVOD_WHEELS).tmp && mkdir -p $(HOROVOD_WHEELS).tmp && \
		{ $(HOROVOD_ENV) HOROVOD_WITH_MXNET=1 $(PY) -m pip wheel --no-deps \
			--no-build-isolation -w $(HOROVOD_WHEELS).tmp horovod==$(HOROVOD_VERSION) || \
		  { echo "horovod did not build with MXNet: building it without (MXNet: 1 process)"; \
		    $(HOROVOD_ENV) HOROVOD_WITHOUT_MXNET=1 $(PY) -m pip wheel --no-deps \
			--no-build-isolation -w $(HOROVOD_WHEELS).tmp horovod==$(HOROVOD_VERSION); }; } && \
		rm -rf $(HOROVOD_WHEELS) && mv $(HOROVOD_WHEELS).tmp $(HOROVOD_WHEELS); \
	fi
	$(PY) -m pip install -q $(HOROVOD_WHEELS)/horovod-$(HOROVOD_VERSION)-*.whl
	TF_CPP_MIN_LOG_LEVEL=2 $(PY) -c 'import tensorflow, mxnet, torch, horovod.tensorflow, onnx, onnxruntime'
	touch $@

# A user's own PyTorch environment, where `workloads profile` is tested with torchvision
# (which does not load beside the project's CPU torch 2.13.0): CUDA torch 2.14.1 and
# torchvision 0.29.1 (they run on CPU), and PyTorch Lightning (added to a venv made before
# it), made once outside the checkout like the Horovod wheel. This checkout goes into it the way a user installs epochscope (the `profile`
# extra, no framework pin); the check after it fails if that replaced the user's torch.
USER_TORCH := 2.14.1
USER_TORCHVISION := 0.29.1
USER_LIGHTNING := 2.6.6
USER_TORCH_VENV := $(HOME)/.cache/epochscope/venvs/torch$(USER_TORCH)-tv$(USER_TORCHVISION)-py311
USER_PY := $(USER_TORCH_VENV)/bin/python

user-torch-env: $(VENV)/.installed
	@if [ ! -f $(USER_TORCH_VENV)/.frameworks ]; then \
		echo "making $(USER_TORCH_VENV): torch $(USER_TORCH) + torchvision $(USER_TORCHVISION) (minutes)"; \
		rm -rf $(USER_TORCH_VENV) && python3 -m venv $(USER_TORCH_VENV) && \
		$(USER_PY) -m pip install -q torch==$(USER_TORCH) torchvision==$(USER_TORCHVISION) && \
		touch $(USER_TORCH_VENV)/.frameworks; \
	fi
	@$(USER_PY) -c 'import lightning' 2>/dev/null || \
		$(USER_PY) -m pip install -q lightning==$(USER_LIGHTNING)
	@$(USER_PY) -I -c 'import sys, workloads; sys.exit(not workloads.__file__.startswith("$(CURDIR)/"))' \
		2>/dev/null || $(USER_PY) -m pip install -q -e '.[profile]'
	$(USER_PY) -c 'import torch, torchvision, lightning; assert torch.__version__.startswith("$(USER_TORCH)"), torch.__version__'

# DLIO (dlio-benchmark $(DLIO_VERSION), MLPerf Storage's emulated trainings), against whose own
# report `workloads profile`'s AU and samples/s are checked (tests/system/test_dlio_crosscheck.py):
# in its own venv outside the checkout, made once like the user's torch one, with this
# checkout installed into it the way a user installs epochscope. Its mpi4py is built
# against Open MPI (libopenmpi-dev), which it also runs on (a lone rank needs no mpirun).
DLIO_VERSION := 2.0.0
DLIO_VENV := $(HOME)/.cache/epochscope/venvs/dlio-$(DLIO_VERSION)-py311
DLIO_PY := $(DLIO_VENV)/bin/python
# dlio-benchmark 2.0.0's requirements less nvidia-dali-cuda110: on PyPI that is a stub whose
# build downloads the wheel from pypi.nvidia.com, which is not a registry a fresh machine
# may reach. DLIO imports DALI only in its DALI readers and loaders; the cross-check runs
# its PyTorch loader.
DLIO_REQUIREMENTS := 'Pillow>=9.3.0' 'PyYAML>=6.0.0' 'h5py>=3.11.0' 'mpi4py>=3.1.4' \
	'numpy>=1.23.5' 'omegaconf>=2.2.0' 'pandas>=1.5.1' 'psutil>=5.9.8' pydftracer==1.0.2 \
	'hydra-core>=1.3.2' 'tensorflow>=2.11.0' 'torch>=2.2.0' torchaudio torchvision

dlio-env: $(VENV)/.installed system-packages
	@if [ ! -f $(DLIO_VENV)/.installed ]; then \
		echo "making $(DLIO_VENV): dlio-benchmark $(DLIO_VERSION) (minutes)"; \
		rm -rf $(DLIO_VENV) && python3 -m venv $(DLIO_VENV) && \
		$(DLIO_PY) -m pip install -q --no-deps dlio-benchmark==$(DLIO_VERSION) && \
		$(DLIO_PY) -m pip install -q $(DLIO_REQUIREMENTS) && \
		touch $(DLIO_VENV)/.installed; \
	fi
	@$(DLIO_PY) -I -c 'import sys, workloads; sys.exit(not workloads.__file__.startswith("$(CURDIR)/"))' \
		2>/dev/null || $(DLIO_PY) -m pip install -q -e '.[profile]'
	$(DLIO_PY) -c 'import dlio_benchmark.main, mpi4py.MPI'

# Debian packages the tests drive for real. Services are kept from starting on install
# (policy-rc.d): each test starts its own on loopback.
system-packages:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages: $$missing"; \
		made_policy=0; \
		if [ ! -e /usr/sbin/policy-rc.d ]; then \
			printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee /usr/sbin/policy-rc.d >/dev/null; \
			$(SUDO) chmod +x /usr/sbin/policy-rc.d; made_policy=1; fi; \
		$(SUDO) apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends $$missing; \
		status=$$?; \
		[ $$made_policy = 1 ] && $(SUDO) rm -f /usr/sbin/policy-rc.d; \
		exit $$status; \
	fi

lint: env
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
