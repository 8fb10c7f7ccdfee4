# The README's two commands: `make demo` and `make test`. Both build the environment first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
SYSTEM_PACKAGES := chromium chromium-driver openssh-server victoria-metrics prometheus \
	prometheus-node-exporter iproute2
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test env system-packages lint bench clean

demo: env
	$(PY) -m agent.demo --seconds 30

test: env system-packages
	$(PY) -m ruff check .
	$(PY) -m pytest

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@command -v python3 >/dev/null || { echo "python3 is missing: apt-get install python3"; exit 1; }
	@python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q python3-venv; }
	[ -x $(PY) ] || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

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
