# dsv4 build. `make` builds the CPU programs into $(BUILD)/, `make cuda` adds the CUDA backend,
# `make test` runs every CPU test. SAN=1 builds with ASan+UBSan into build-san/.
# Each folder under src/ is one module archive; tests in tests/<module>/ link that module and
# its dependencies only, so modules can be developed and tested independently.

SAN ?= 0
ifeq ($(SAN),1)
BUILD ?= build-san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
OPT ?= -O1
else
BUILD ?= build
SANFLAGS :=
OPT ?= -O2
endif

CC ?= gcc
NVCC ?= $(shell command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)
WARN := -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS := -std=c11 $(OPT) -g $(WARN) -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -pthread -Iinclude -Isrc $(SANFLAGS) $(EXTRA_CFLAGS)
LDFLAGS := -pthread $(SANFLAGS) $(EXTRA_LDFLAGS)
LDLIBS := -lm

# module -> modules it depends on (link order: dependents first)
DEPS_common :=
DEPS_gguf := common
DEPS_quant := common
DEPS_model := gguf quant common
DEPS_text := gguf common
DEPS_engine := model text quant gguf common
DEPS_server := engine model text quant gguf common
DEPS_app := server engine model text quant gguf common

# external libraries per module
EXT_text := -lpcre2-8
EXT_engine :=
EXT_server := -lmicrohttpd -ljansson
EXT_app := -ledit
# extra libraries for a module's tests only
TEST_EXT_text := -ljansson

MODULES := $(notdir $(patsubst %/,%,$(wildcard src/*/)))
# nested backend folders compile into the engine module
engine_SRCS := $(wildcard src/engine/*.c src/graph/*.c src/backend/*.c src/backend/cpu/*.c src/session/*.c)
define module_srcs
$(if $(filter engine,$(1)),$(engine_SRCS),$(wildcard src/$(1)/*.c))
endef
LIB_MODULES := common gguf quant model text engine server

lib_path = $(BUILD)/lib$(1).a
libs_for = $(foreach m,$(1) $(DEPS_$(1)),$(call lib_path,$(m)))
ext_for = $(sort $(foreach m,$(1) $(DEPS_$(1)),$(EXT_$(m))))

OBJ = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

.PHONY: all cuda bench-cuda test test-% clean run fuzz format check-format check
all: programs

# ---- module archives ----
define module_rule
$(1)_OBJS := $$(call OBJ,$$(call module_srcs,$(1)))
$$(call lib_path,$(1)): $$($(1)_OBJS)
	@mkdir -p $$(dir $$@)
	@rm -f $$@
	$$(if $$($(1)_OBJS),ar rcs $$@ $$($(1)_OBJS),ar rcs $$@)
endef
$(foreach m,$(LIB_MODULES),$(eval $(call module_rule,$(m))))

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- programs (app/<name>/*.c -> $(BUILD)/<name>) ----
PROGRAMS := $(notdir $(patsubst %/,%,$(wildcard app/*/)))
define program_rule
$(BUILD)/$(1): $$(call OBJ,$$(wildcard app/$(1)/*.c)) $$(foreach m,$$(DEPS_app),$$(call lib_path,$$(m)))
	$$(CC) $$(LDFLAGS) -o $$@ $$^ $$(call ext_for,app) $$(LDLIBS)
endef
$(foreach p,$(PROGRAMS),$(eval $(call program_rule,$(p))))
programs: $(addprefix $(BUILD)/,$(PROGRAMS))

# ---- tests (tests/<module>/test_*.c -> $(BUILD)/tests/<module>/test_*) ----
TEST_SRCS := $(wildcard tests/*/test_*.c)
TEST_BINS := $(patsubst %.c,$(BUILD)/%,$(TEST_SRCS))
test_module = $(word 2,$(subst /, ,$(1)))
define test_rule
$(patsubst %.c,$(BUILD)/%,$(1)): $(1) tests/common/testutil.h $$(call libs_for,$$(call test_module,$(1)))
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) -Itests -o $$@ $(1) $$(call libs_for,$$(call test_module,$(1))) -lcmocka $$(call ext_for,$$(call test_module,$(1))) $$(TEST_EXT_$$(call test_module,$(1))) $$(LDLIBS) $$(LDFLAGS)
endef
$(foreach t,$(TEST_SRCS),$(eval $(call test_rule,$(t))))

tests: $(TEST_BINS) programs

# `make test` runs every CPU test binary and the script tests, then prints one summary line.
test: tests
	@BUILD=$(BUILD) scripts/run-tests

# `make test-gguf` runs the tests of one module only.
test-%: $(BUILD)/lib%.a
	@$(MAKE) --no-print-directory $(patsubst %.c,$(BUILD)/%,$(wildcard tests/$*/test_*.c))
	@BUILD=$(BUILD) scripts/run-tests $*

# ---- CUDA backend: compiles for sm_90 (Hopper paths) and sm_80 (generic paths) ----
CU_SRCS := $(wildcard src/backend/cuda/*.cu)
NVFLAGS_BASE := -O3 -lineinfo -std=c++17 -Xcompiler -Wall,-Wextra -Werror all-warnings -Isrc -Iinclude
NVFLAGS := $(NVFLAGS_BASE) -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80
CU_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CU_SRCS))
$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -MMD -MP -c $< -o $@
# The op kernels follow the CPU's float evaluation order, which a fused multiply-add would change.
$(BUILD)/obj/src/backend/cuda/cuda_ops_%.o: NVFLAGS += --fmad=false
# The warpgroup (wgmma) MoE products exist for sm_90a only: no other image of that file is built,
# and the backend takes them only on a compute capability 9.0 device that reports the kernels.
$(BUILD)/obj/src/backend/cuda/cuda_ops_moe_x16.o: NVFLAGS = $(NVFLAGS_BASE) --fmad=false \
	-gencode arch=compute_90a,code=sm_90a
# So is the exact Q8_0 warpgroup GEMM (cuda_gemm_q8_wg.h: dsv4_cuda_q8_wg_device_ok asks the runtime).
$(BUILD)/obj/src/backend/cuda/cuda_gemm_q8_wg.o: NVFLAGS = $(NVFLAGS_BASE) --fmad=false \
	-gencode arch=compute_90a,code=sm_90a
# And the warpgroup routed gate/up and down products (cuda_moe_ws.h: dsv4_cuda_moe_ws_device_ok).
$(BUILD)/obj/src/backend/cuda/cuda_moe_ws.o: NVFLAGS = $(NVFLAGS_BASE) --fmad=false \
	-gencode arch=compute_90a,code=sm_90a
$(BUILD)/libcuda_backend.a: $(CU_OBJS)
	@rm -f $@
	ar rcs $@ $^
# CUDA programs in $(BUILD)/cuda/: the same host objects, with libcuda_backend.a ahead of the module
# archives and dsv4_backend_cuda_create forced undefined, so the real backend is pulled and the
# stub (cuda_stub.o in libengine.a) never is. cudart is linked statically.
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart_static -lstdc++ -ldl -lrt
CUDA_PROGRAMS := dsv4 dsv4-bench
define cuda_program_rule
$(BUILD)/cuda/$(1): $$(call OBJ,$$(wildcard app/$(1)/*.c)) $(BUILD)/libcuda_backend.a $$(foreach m,$$(DEPS_app),$$(call lib_path,$$(m)))
	@mkdir -p $$(dir $$@)
	$$(CC) $$(LDFLAGS) -o $$@ $$(filter %.o,$$^) -Wl,--undefined=dsv4_backend_cuda_create $(BUILD)/libcuda_backend.a $$(foreach m,$$(DEPS_app),$$(call lib_path,$$(m))) $$(call ext_for,app) $$(LDLIBS) $$(CUDA_LDLIBS)
endef
$(foreach p,$(CUDA_PROGRAMS),$(eval $(call cuda_program_rule,$(p))))
# Op-by-op CUDA vs CPU check for the GPU machine (not part of `make test`).
$(BUILD)/cuda/cuda_ops_check: tests/cuda/cuda_ops_check.c $(BUILD)/libcuda_backend.a $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -Wl,--undefined=dsv4_backend_cuda_create $(BUILD)/libcuda_backend.a $(call libs_for,engine) $(call ext_for,engine) $(LDLIBS) $(CUDA_LDLIBS) $(LDFLAGS)
# Host-only check of the generic product's block decoders against quant_dot_* (runs anywhere).
$(BUILD)/cuda/gemm_units_check: tests/cuda/gemm_units_check.cu src/backend/cuda/cuda_gemm_units.cuh \
		src/backend/cuda/cuda_exact_units.cuh $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< $(call libs_for,engine) -lm -lpthread
cuda: programs $(BUILD)/libcuda_backend.a $(addprefix $(BUILD)/cuda/,$(CUDA_PROGRAMS)) $(BUILD)/cuda/cuda_ops_check \
	$(BUILD)/cuda/gemm_units_check $(BUILD)/cuda/smallops_units_check $(BUILD)/cuda/recip_gpu_check
# GPU check (H100 / H200, run on the device): the warpgroup product and B layout of the exact MoE kernels.
$(BUILD)/cuda/wgmma_x16_check: tests/cuda/wgmma_x16_check.cu src/backend/cuda/cuda_wgmma_x16.cuh \
		src/backend/cuda/cuda_moe_x16.cuh $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS_BASE) -gencode arch=compute_90a,code=sm_90a -o $@ $< $(call libs_for,engine) -cudart static -lm -lpthread
# GPU check (H100 / H200, run on the device): the exact Q8_0 warpgroup GEMM against quant_dot_q8_0, bit for bit.
$(BUILD)/cuda/q8_wg_check: tests/cuda/q8_wg_check.cu tests/cuda/q8_wg_data.h src/backend/cuda/cuda_gemm_q8_wg.cu \
		src/backend/cuda/cuda_gemm_q8_wg.cuh src/backend/cuda/cuda_gemm_q8_wg.h $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS_BASE) --fmad=false -gencode arch=compute_90a,code=sm_90a -Itests/cuda -o $@ $< \
		src/backend/cuda/cuda_gemm_q8_wg.cu $(call libs_for,engine) -cudart static -lm -lpthread
# GPU check (run on the device): the HC Sinkhorn reciprocal against __frcp_rn for all 2^32 floats.
$(BUILD)/cuda/recip_gpu_check: tests/cuda/recip_gpu_check.cu src/backend/cuda/cuda_smallops_units.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< -cudart static
# Host-only check of the lane-split HC split and router top-k against the CPU backend (runs anywhere).
$(BUILD)/cuda/smallops_units_check: tests/cuda/smallops_units_check.cu src/backend/cuda/cuda_smallops_units.cuh \
		$(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< $(call libs_for,engine) -lm -lpthread
# Standalone GPU tests (main(), no cmocka; need a GPU to run): the attention kernels against the
# CPU backend of libengine.a. Linked from the attention objects only, so other CUDA files in progress
# cannot break it.
CUDA_ATTN_OBJS := $(filter $(BUILD)/obj/src/backend/cuda/cuda_attn_%,$(CU_OBJS))
$(BUILD)/cuda/test_cuda_attn: tests/cuda/test_cuda_attn.cu $(CUDA_ATTN_OBJS) $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(CUDA_ATTN_OBJS) $(call libs_for,engine) -cudart static -lm -lpthread
.PHONY: cuda-tests cuda-host-checks
# The CUDA kernels' units emulated on the host (no GPU needed): each program checks the kernels'
# index arithmetic, decoders and reduction orders against the CPU reference; all must pass.
CUDA_HOST_CHECKS := q8_0_mma_emu_check moe_grouped_emu_check f16_mma_emu_check moe_mma_emu_check \
	attn_fast_emu_check moe_wide_emu_check moe_decode_emu_check mvw_emu_check gemm_units_check \
	smallops_units_check hc_tail_emu_check attn_tc_emu_check cuda_matvec_emu gemm_blas_emu_check \
	blas_loader_check moe_half_emu_check iscore_tiled_emu_check moe_x16_emu_check q8_wg_emu_check \
	moe_ws_emu_check hc_mix_tc_emu_check select_emu_check
cuda-host-checks: $(addprefix $(BUILD)/cuda/,$(CUDA_HOST_CHECKS))
	@set -e; for t in $(CUDA_HOST_CHECKS); do \
	  $(BUILD)/cuda/$$t >$(BUILD)/cuda/$$t.log 2>&1 || { echo "FAIL $$t (log: $(BUILD)/cuda/$$t.log)"; tail -5 $(BUILD)/cuda/$$t.log; exit 1; }; \
	  echo "ok   $$t: $$(tail -1 $(BUILD)/cuda/$$t.log)"; done
cuda-tests: $(BUILD)/cuda/test_cuda_attn $(BUILD)/cuda/q8_0_mma_emu_check $(BUILD)/cuda/moe_grouped_emu_check \
	$(BUILD)/cuda/f16_mma_emu_check $(BUILD)/cuda/moe_mma_emu_check $(BUILD)/cuda/attn_fast_emu_check \
	$(BUILD)/cuda/moe_wide_emu_check $(BUILD)/cuda/moe_decode_emu_check \
	$(BUILD)/cuda/mvw_emu_check $(BUILD)/cuda/hc_tail_emu_check \
	$(BUILD)/cuda/attn_tc_emu_check $(BUILD)/cuda/wgmma_x16_check $(BUILD)/cuda/q8_wg_check \
	$(BUILD)/cuda/test_oracle
# The HF-oracle fixture test linked with the CUDA backend (run on the GPU machine from the repo root with
# DSV4_TEST_BACKEND=cuda; on the CPU it is the same test as `make test` runs).
$(BUILD)/cuda/test_oracle: tests/engine/test_oracle.c tests/common/testutil.h $(BUILD)/libcuda_backend.a \
		$(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< -Wl,--undefined=dsv4_backend_cuda_create $(BUILD)/libcuda_backend.a \
		$(call libs_for,engine) -lcmocka $(call ext_for,engine) $(LDLIBS) $(CUDA_LDLIBS) $(LDFLAGS)
# Host-only emulation of the register-tail HC pre step's layout and sum orders (runs anywhere).
# Host-only replay of the indexer's bit-by-bit selection (select_bits_kernel) against the CPU's selection.
$(BUILD)/cuda/select_emu_check: tests/cuda/select_emu_check.cu src/backend/cuda/cuda_select_units.cuh \
		$(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Itests/cuda -o $@ $< $(call libs_for,engine) -lm -lpthread
# Host-only replay of the register-tiled indexer scoring's threads (DSV4_CUDA_ISCORE=tiled).
$(BUILD)/cuda/iscore_tiled_emu_check: tests/cuda/iscore_tiled_emu_check.cu src/backend/cuda/cuda_iscore_tiled_units.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< -lm
$(BUILD)/cuda/hc_tail_emu_check: tests/cuda/hc_tail_emu_check.cu src/backend/cuda/cuda_hc_tail_units.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< -lm
# Host-only replay of the prefill HC mix on TF32 tensor cores against float64.
$(BUILD)/cuda/hc_mix_tc_emu_check: tests/cuda/hc_mix_tc_emu_check.cu src/backend/cuda/cuda_hc_mix_tc.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< -lm
# Host-only emulation of the tensor-core prefill attention against float64 (runs anywhere).
$(BUILD)/cuda/attn_tc_emu_check: tests/cuda/attn_tc_emu_check.cu src/backend/cuda/cuda_attn_tc.cuh \
		src/backend/cuda/cuda_attn_fast.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< -lm
$(BUILD)/cuda/attn_fast_emu_check: tests/cuda/attn_fast_emu_check.cu src/backend/cuda/cuda_attn_fast.cuh \
		$(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,engine) -lm -lpthread
# Host-only emulation of the f16 tensor-core MoE gate/up against float64 and quant_dot_* (runs anywhere).
$(BUILD)/cuda/moe_half_emu_check: tests/cuda/moe_half_emu_check.cu tests/cuda/iq2_rows.h src/backend/cuda/cuda_moe_half.cuh \
		src/backend/cuda/cuda_moe_wide.cuh src/backend/cuda/cuda_gemm_blas.cuh $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,engine) -lm -lpthread
# Host-only emulation of the producer / consumer MoE gate/up's decode, tiles and accumulator map against
# float64 of the f16 operands (runs anywhere).
$(BUILD)/cuda/moe_ws_emu_check: tests/cuda/moe_ws_emu_check.cu tests/cuda/iq2_rows.h src/backend/cuda/cuda_moe_ws.cuh \
		src/backend/cuda/cuda_moe_half.cuh src/backend/cuda/cuda_moe_wide.cuh $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,engine) -lm -lpthread
# Host-only emulation of the exact warpgroup MoE products' units against quant_dot_* (runs anywhere).
$(BUILD)/cuda/moe_x16_emu_check: tests/cuda/moe_x16_emu_check.cu src/backend/cuda/cuda_moe_x16.cuh \
		src/backend/cuda/cuda_moe_half.cuh src/backend/cuda/cuda_moe_wide.cuh $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< $(call libs_for,engine) -lm -lpthread
# Host-only emulation of the wide-tile tensor-core grouped MoE products against quant_dot_* (runs anywhere).
$(BUILD)/cuda/moe_wide_emu_check: tests/cuda/moe_wide_emu_check.cu src/backend/cuda/cuda_moe_wide.cuh \
		src/backend/cuda/cuda_moe_mma.cuh src/backend/cuda/cuda_moe_grouped.cuh src/backend/cuda/cuda_gemm_q8_0_mma.cuh \
		$(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< $(call libs_for,engine) -lm -lpthread
$(BUILD)/cuda/moe_decode_emu_check: tests/cuda/moe_decode_emu_check.cu src/backend/cuda/cuda_moe_decode_units.cuh \
		src/backend/cuda/cuda_mv_units.cuh $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,quant) -lm
# Host-only emulation of the warp-per-row Q8_0/F16 matvec against quant_dot_* (runs anywhere).
$(BUILD)/cuda/mvw_emu_check: tests/cuda/mvw_emu_check.cu src/backend/cuda/cuda_mvw_units.cuh \
		src/backend/cuda/cuda_mvw.h $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,quant) -lm
# Host-only emulation of the tensor-core grouped MoE products against quant_dot_* (runs anywhere).
$(BUILD)/cuda/moe_mma_emu_check: tests/cuda/moe_mma_emu_check.cu src/backend/cuda/cuda_moe_mma.cuh \
		src/backend/cuda/cuda_moe_grouped.cuh src/backend/cuda/cuda_gemm_q8_0_mma.cuh $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< $(call libs_for,engine) -lm -lpthread
# Host-only emulation of the grouped MoE path against quant_dot_* and the CPU moe op (runs anywhere).
$(BUILD)/cuda/moe_grouped_emu_check: tests/cuda/moe_grouped_emu_check.cu src/backend/cuda/cuda_moe_grouped.cuh \
		src/backend/cuda/cuda_gemm_units.cuh $(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< $(call libs_for,engine) -lm -lpthread
# Host-only emulation of the Q8_0 tensor-core prefill GEMMs (v1, v2) against quant_dot_q8_0 (runs anywhere).
$(BUILD)/cuda/q8_0_mma_emu_check: tests/cuda/q8_0_mma_emu_check.cu src/backend/cuda/cuda_gemm_q8_0_mma.cuh \
		src/backend/cuda/cuda_gemm_q8_0_mma2.cuh src/backend/cuda/cuda_gemm_units.cuh $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,quant) -lm
# Host-only emulation of the exact Q8_0 warpgroup GEMM's loads, swizzle, descriptors and accumulator map
# against quant_dot_q8_0 (runs anywhere; the kernels themselves: q8_wg_check on the GPU).
$(BUILD)/cuda/q8_wg_emu_check: tests/cuda/q8_wg_emu_check.cu tests/cuda/q8_wg_data.h src/backend/cuda/cuda_gemm_q8_wg.cuh \
		src/backend/cuda/cuda_wgmma_x16.cuh $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -Itests/cuda -o $@ $< $(call libs_for,quant) -lm
# Host-only check of the cuBLAS loader (dlopen / dlsym only; runs anywhere).
$(BUILD)/cuda/blas_loader_check: tests/cuda/blas_loader_check.cu src/backend/cuda/cuda_blas.cu src/backend/cuda/cuda_blas.h \
		$(call libs_for,common)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< src/backend/cuda/cuda_blas.cu $(call libs_for,common) -ldl -lpthread
# Host-only check of the cuBLAS prefill products' operand units (runs anywhere).
$(BUILD)/cuda/gemm_blas_emu_check: tests/cuda/gemm_blas_emu_check.cu src/backend/cuda/cuda_gemm_blas.cuh \
		src/backend/cuda/cuda_act_quant.cuh $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,quant) -lm
# Host-only emulation of the F16 tensor-core prefill GEMM against a float64 sum (runs anywhere).
$(BUILD)/cuda/f16_mma_emu_check: tests/cuda/f16_mma_emu_check.cu src/backend/cuda/cuda_gemm_f16_mma.cuh \
		$(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,quant) -lm
# CUDA matvec benchmark (host reference from the quant module; cudart linked statically).
bench-cuda: $(BUILD)/bench/cuda_matvec_bench $(BUILD)/bench/cuda_matvec_emu $(BUILD)/bench/cuda_prefill_q8_0_bench \
	$(BUILD)/bench/cuda_prefill_f16_bench $(BUILD)/bench/pdl_cost_bench \
	$(BUILD)/bench/cuda_moe_prefill_bench $(BUILD)/bench/cuda_moe_decode_bench \
	$(BUILD)/bench/cuda_mvw_bench $(BUILD)/bench/l2_prefetch_bench $(BUILD)/bench/peer_capture_probe
# which cross-device copies stream capture records (two GPUs)
$(BUILD)/bench/peer_capture_probe: bench/kernels/peer_capture_probe.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -Xcompiler -Wall,-Wextra -Werror all-warnings -gencode arch=compute_90,code=sm_90 -o $@ $<
# L2 prefetch of dense decode weights (bulk prefetch needs sm_90)
$(BUILD)/bench/l2_prefetch_bench: bench/kernels/l2_prefetch_bench.cu $(BUILD)/libcuda_backend.a $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -Xcompiler -Wall,-Wextra -Werror all-warnings -Isrc -gencode arch=compute_90,code=sm_90 \
		-o $@ $< $(BUILD)/libcuda_backend.a \
		$(call libs_for,quant) -lpthread -lm
# programmatic dependent launch needs sm_90
$(BUILD)/bench/pdl_cost_bench: bench/kernels/pdl_cost_bench.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -o $@ $<
# The routed-MoE prefill paths through the CUDA backend's moe op (real backend forced, as cuda_ops_check).
$(BUILD)/bench/cuda_moe_prefill_bench: bench/kernels/cuda_moe_prefill_bench.cu $(BUILD)/libcuda_backend.a \
		$(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< -Xlinker --undefined=dsv4_backend_cuda_create $(BUILD)/libcuda_backend.a \
		$(call libs_for,engine) $(call ext_for,engine) -lpthread -lm -ldl -lrt
# --fmad=false: the bench's copy of the 5-launch path's mid kernel keeps that kernel's evaluation order.
$(BUILD)/bench/cuda_moe_decode_bench: bench/kernels/cuda_moe_decode_bench.cu $(BUILD)/libcuda_backend.a \
		$(call libs_for,engine)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) --fmad=false -o $@ $< $(BUILD)/libcuda_backend.a $(call libs_for,engine) -lpthread -lm
$(BUILD)/bench/cuda_mvw_bench: bench/kernels/cuda_mvw_bench.cu src/backend/cuda/cuda_mvw_units.cuh \
		$(BUILD)/libcuda_backend.a $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(BUILD)/libcuda_backend.a $(call libs_for,quant) -lpthread -lm
$(BUILD)/bench/cuda_prefill_f16_bench: bench/kernels/cuda_prefill_f16_bench.cu $(BUILD)/libcuda_backend.a \
		$(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(BUILD)/libcuda_backend.a $(call libs_for,quant) -lpthread -lm
$(BUILD)/bench/cuda_prefill_q8_0_bench: bench/kernels/cuda_prefill_q8_0_bench.cu $(BUILD)/libcuda_backend.a \
		$(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(BUILD)/libcuda_backend.a $(call libs_for,quant) -lpthread -lm
$(BUILD)/bench/cuda_matvec_emu $(BUILD)/cuda/cuda_matvec_emu: bench/kernels/cuda_matvec_emu.cu \
		$(wildcard src/backend/cuda/*.cuh) $(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(call libs_for,quant) -lm
$(BUILD)/bench/cuda_matvec_bench: bench/kernels/cuda_matvec_bench.cu $(BUILD)/libcuda_backend.a \
		$(call libs_for,quant)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -o $@ $< $(BUILD)/libcuda_backend.a $(call libs_for,quant) -lpthread -lm

# ---- fuzzing (clang + libFuzzer) ----
FUZZ_SECONDS ?= 60
fuzz: $(BUILD)/fuzz/fuzz_gguf
# UBSan must abort (no recover) or libFuzzer never sees its findings; headers are prerequisites only.
$(BUILD)/fuzz/fuzz_gguf: tests/fuzz/fuzz_gguf.c $(wildcard src/gguf/*.c src/common/*.c src/gguf/*.h src/common/*.h)
	@mkdir -p $(dir $@)
	clang -std=c11 -O1 -g -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Isrc \
		-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $(filter %.c,$^) -lm
fuzz-run: $(BUILD)/fuzz/fuzz_gguf
	@mkdir -p $(BUILD)/fuzz/corpus
	@echo "fuzzing the GGUF reader for $(FUZZ_SECONDS) s (log: $(BUILD)/fuzz/fuzz.log)"
	@$(BUILD)/fuzz/fuzz_gguf -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -rss_limit_mb=2048 \
		$(BUILD)/fuzz/corpus tests/fuzz/seeds > $(BUILD)/fuzz/fuzz.log 2>&1 \
		|| { tail -n 60 $(BUILD)/fuzz/fuzz.log; exit 1; }
	@tail -n 3 $(BUILD)/fuzz/fuzz.log

# ---- main job: synthesize the tiny model if none is given, then run it ----
MODEL ?=
PROMPT ?= Hello! Tell me a short story.
run: programs
	@scripts/run-default "$(BUILD)" "$(MODEL)" "$(PROMPT)"

# The README's test command: CUDA compiles, the sanitizer run of the file-format tests, the
# 60 s fuzz of the GGUF reader, then the whole CPU suite (its summary line comes last).
check:
	$(MAKE) cuda
	$(MAKE) cuda-tests
	$(MAKE) cuda-host-checks
	$(MAKE) SAN=1 test-gguf
	$(MAKE) fuzz-run
	$(MAKE) test

format:
	clang-format -i $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
check-format:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h' '*.cu' '*.cuh')

clean:
	rm -rf build build-san
