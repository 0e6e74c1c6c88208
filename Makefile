# tesserad — the one build.
#
#   make              libtessera, tesserad, libtessera-client, tessera-cli
#   make test         build and run every Criterion suite (unit, e2e, gpu: skipped without one)
#   make attack       the hostile-tenant suites alone (part of make test too)
#   make check-layers the daemon's layering rules (part of make test)
#   make run          build, start tesserad on its default endpoint, run examples through the CLI
#   make bench        build and run the benchmarks (results go into docs/benchmarks.md by hand)
#   make install PREFIX=/usr/local DESTDIR=   (make install-check: build against it, both ways)
#   make format       clang-format every C file;  make format-check  fails on a difference
#   make image        the container image (deploy/Containerfile) with podman or docker; IMAGE=name:tag
#   make k8s-check    deploy/k8s against the Kubernetes schemas, and the image's entrypoint run here
#
# Switches: SANITIZE=address,undefined   STATIC=1   CUDA_HOME=/usr/local/cuda   BUILD=build
# Source lists are the folders' contents: a new module is a new file, picked up here.

BUILD ?= build
PREFIX ?= /usr/local
DESTDIR ?=
CUDA_HOME ?= /usr/local/cuda
CC ?= cc
CLANG_FORMAT ?= clang-format

# nng is the pinned release tools/nng.sh builds (static; Debian's 1.5.2 loses
# its listener to one aborted connect), shared by every BUILD directory.
NNG_VERSION := 1.11.0
NNG_PREFIX ?= build/deps/nng-$(NNG_VERSION)
NNG_LIB := $(NNG_PREFIX)/lib/libnng.a

CPPFLAGS += -I$(NNG_PREFIX)/include -D_GNU_SOURCE -Ilib/include -Iclient/include -I$(BUILD)/gen -Idaemon \
            -I$(CUDA_HOME)/include -MMD -MP
CFLAGS ?= -O2 -g
CFLAGS += -std=c11 -Wall -Wextra -Werror -pthread -fPIC
LDLIBS += $(NNG_LIB) -lmbedtls -lmbedx509 -lmbedcrypto -luv -lprotobuf-c -lcjson -lsystemd -ldl -lm -pthread
# The daemon's fleet cache speaks RESP through hiredis (daemon/serve/redis.c);
# the client library and the CLI do not link it.
DAEMON_LDLIBS := -lhiredis

ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif
ifeq ($(STATIC),1)
LDFLAGS += -static
endif

PROTO_C := $(BUILD)/gen/tessera.pb-c.c
PROTO_H := $(BUILD)/gen/tessera.pb-c.h

LIB_SRC := $(wildcard lib/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/tessera.pb-c.o
LIB_A := $(BUILD)/lib/libtessera.a

# daemon/ is in folders (docs/architecture.md): every .c below it but main.c.
DAEMON_SRC := $(filter-out daemon/main.c,$(shell find daemon -name '*.c' | sort))
DAEMON_OBJ := $(DAEMON_SRC:%.c=$(BUILD)/%.o)
DAEMON_A := $(BUILD)/daemon/libtesserad.a

# Tier-3 kernels: kernels/*.cu built by nvcc into images that are embedded into
# the daemon as C arrays: gemm_sm90.cu and attn_sm90.cu as sm_90a cubins, gemm_sm80.cu as a
# fatbin with sm_80 code (every sm_8x), sm_90 code (Hopper runs no sm_8x code)
# and compute_80 PTX. Without nvcc the daemon is built with empty images
# (kernels/embedded_none.c) and its tier-3 candidates decline. NVCC=false forces that.
NVCC ?= $(CUDA_HOME)/bin/nvcc
NVCCFLAGS ?= -gencode=arch=compute_90a,code=sm_90a -cubin -O3 -std=c++17
NVCC80FLAGS ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=sm_90 \
               -gencode=arch=compute_80,code=compute_80 -fatbin -O3 -std=c++17
HAVE_NVCC := $(shell command -v $(NVCC) >/dev/null 2>&1 && $(NVCC) --version >/dev/null 2>&1 && echo 1)
KERNEL_CUBIN := $(BUILD)/kernels/gemm_sm90.cubin
ATTN_CUBIN := $(BUILD)/kernels/attn_sm90.cubin
KERNEL80_IMAGE := $(BUILD)/kernels/gemm_sm80.fatbin
ifeq ($(HAVE_NVCC),1)
KERNEL_OBJ := $(BUILD)/gen/kernels_embedded.o $(BUILD)/gen/kernels80_embedded.o \
              $(BUILD)/gen/attn_embedded.o
else
KERNEL_OBJ := $(BUILD)/kernels/embedded_none.o
endif
DAEMON_OBJ += $(KERNEL_OBJ)
TESSERAD := $(BUILD)/bin/tesserad

CLIENT_SRC := $(wildcard client/*.c)
CLIENT_OBJ := $(CLIENT_SRC:%.c=$(BUILD)/%.o)
# The build's own archive (client objects only; the programs here link
# libtessera beside it) and the installed one, complete with libtessera, the
# protobuf code and nng, so that a program links it with only Debian packages.
CLIENT_A := $(BUILD)/client/libtessera-client.a
CLIENT_DIST_A := $(BUILD)/dist/libtessera-client.a
CLIENT_SO := $(BUILD)/client/libtessera-client.so
# ABI 0: the soname changes when a public struct or call changes incompatibly.
CLIENT_SONAME := libtessera-client.so.0
CLIENT_MAP := client/libtessera-client.map
CLI_SRC := $(wildcard client/cli/*.c)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
CLI := $(BUILD)/bin/tessera-cli

UNIT_SRC := $(wildcard tests/unit/*_test.c)
E2E_SRC := $(wildcard tests/e2e/*_test.c)
GPU_SRC := $(wildcard tests/gpu/*_test.c)
TEST_SUPPORT_SRC := $(wildcard tests/support/*.c)
TEST_SUPPORT_OBJ := $(TEST_SUPPORT_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(UNIT_SRC:%.c=$(BUILD)/%) $(E2E_SRC:%.c=$(BUILD)/%) $(GPU_SRC:%.c=$(BUILD)/%)

BENCH_SRC := $(wildcard tests/bench/*.c)
BENCH_BIN := $(BENCH_SRC:%.c=$(BUILD)/%)

ALL_LIBS := $(DAEMON_A) $(CLIENT_A) $(LIB_A)

.PHONY: all test unit e2e gpu run bench install format format-check clean fuzz fuzz-smoke \
        fuzz-build fuzz-seeds soak gemm-check gemm80-check attn-check check-layers install-check attack image k8s-check
all: $(TESSERAD) $(CLI) $(CLIENT_SO)

# ---- generated protobuf code ----
$(PROTO_C) $(PROTO_H): proto/tessera.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --c_out=$(BUILD)/gen -Iproto $<

$(BUILD)/gen/tessera.pb-c.o: $(PROTO_C)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(filter-out -Werror,$(CFLAGS)) -w -c $< -o $@

$(NNG_LIB):
	tools/nng.sh $(NNG_PREFIX)

# Every object may include the generated header and nng's.
$(BUILD)/%.o: %.c | $(PROTO_H) $(NNG_LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# A kernel image as C: the array $(1) (64-byte aligned, for the driver) and its
# length $(1)_len, generated from the rule's first prerequisite.
define embed_image
	@mkdir -p $(dir $@)
	{ echo '/* Generated from $< by the Makefile. */' && echo '#include <stddef.h>' && \
	  echo '__attribute__((aligned(64))) const unsigned char $(1)[] = {' && \
	  xxd -i < $< && echo '};' && \
	  echo 'const size_t $(1)_len = sizeof $(1);'; } > $@.tmp
	mv $@.tmp $@
endef

$(BUILD)/gen/%_embedded.o: $(BUILD)/gen/%_embedded.c
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(KERNEL_CUBIN): kernels/gemm_sm90.cu kernels/gemm_params.h kernels/gemm_common.cuh \
                 kernels/sm90_common.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) kernels/gemm_sm90.cu -o $@

$(BUILD)/gen/kernels_embedded.c: $(KERNEL_CUBIN)
	$(call embed_image,tsrd_gemm_sm90_cubin)

$(ATTN_CUBIN): kernels/attn_sm90.cu kernels/attn_params.h kernels/sm90_common.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) kernels/attn_sm90.cu -o $@

$(BUILD)/gen/attn_embedded.c: $(ATTN_CUBIN)
	$(call embed_image,tsrd_attn_sm90_cubin)

$(KERNEL80_IMAGE): kernels/gemm_sm80.cu kernels/gemm80_params.h kernels/gemm_params.h kernels/gemm_common.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC80FLAGS) kernels/gemm_sm80.cu -o $@

$(BUILD)/gen/kernels80_embedded.c: $(KERNEL80_IMAGE)
	$(call embed_image,tsrd_gemm_sm80_image)

# The stand-alone check of the Hopper attention kernels (kernels/attn_check.cu); it needs an
# sm_90 GPU to run.
ATTN_CHECK := $(BUILD)/gpu/bin/attn_check
attn-check: $(ATTN_CHECK)
$(ATTN_CHECK): kernels/attn_check.cu kernels/attn_sm90.cu kernels/attn_params.h kernels/sm90_common.cuh
	@mkdir -p $(dir $@)
	$(NVCC) -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o $@ kernels/attn_check.cu -lcuda

# The stand-alone check of the Hopper GEMM kernels (kernels/gemm_check.cu); it needs an sm_90
# GPU to run.
GEMM_CHECK := $(BUILD)/gpu/bin/gemm_check
gemm-check: $(GEMM_CHECK)
$(GEMM_CHECK): kernels/gemm_check.cu kernels/gemm_sm90.cu kernels/gemm_params.h kernels/gemm_common.cuh \
               kernels/gemm_check_common.cuh kernels/check_common.cuh kernels/sm90_common.cuh
	@mkdir -p $(dir $@)
	$(NVCC) -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -o $@ kernels/gemm_check.cu -lcuda

# The stand-alone check of the sm_80 family (kernels/gemm80_check.cu); it needs a GPU to run.
GEMM80_CHECK := $(BUILD)/gpu/bin/gemm80_check
gemm80-check: $(GEMM80_CHECK)
$(GEMM80_CHECK): kernels/gemm80_check.cu kernels/gemm_sm80.cu kernels/gemm80_params.h kernels/gemm_common.cuh \
                 kernels/gemm_check_common.cuh \
                 kernels/gemm_params.h
	@mkdir -p $(dir $@)
	$(NVCC) -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=sm_90 -O3 \
		-std=c++17 -o $@ kernels/gemm80_check.cu kernels/gemm_sm80.cu -lcuda

$(LIB_A): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(DAEMON_A): $(DAEMON_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^ $(if $(DAEMON_OBJ),,)

$(CLIENT_A): $(CLIENT_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# Only the calls of tessera/client.h are exported (CLIENT_MAP).
$(CLIENT_SO): $(CLIENT_OBJ) $(LIB_A) $(CLIENT_MAP)
	@mkdir -p $(dir $@)
	$(CC) -shared $(LDFLAGS) -Wl,-soname,$(CLIENT_SONAME) -Wl,--version-script=$(CLIENT_MAP) \
		-o $@ $(CLIENT_OBJ) $(LIB_A) $(LDLIBS)

$(CLIENT_DIST_A): $(CLIENT_OBJ) $(LIB_OBJ) $(NNG_LIB)
	@mkdir -p $(dir $@)
	rm -f $@
	{ echo "create $@"; for o in $(CLIENT_OBJ) $(LIB_OBJ); do echo "addmod $$o"; done; \
	  echo "addlib $(NNG_LIB)"; echo save; echo end; } | ar -M
	ranlib $@

$(TESSERAD): $(BUILD)/daemon/main.o $(DAEMON_A) $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(DAEMON_LDLIBS) $(LDLIBS)

$(CLI): $(CLI_OBJ) $(CLIENT_A) $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Tests link everything: static archives pull in only what a suite uses.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUPPORT_OBJ) $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(TEST_SUPPORT_OBJ) $(ALL_LIBS) $(DAEMON_LDLIBS) $(LDLIBS) -lcriterion

# A stand-in NVML for the GPU gauges' tests (tests/fake/nvml.c), loaded by the
# daemon through LD_LIBRARY_PATH.
FAKE_NVML := $(BUILD)/tests/fake/libnvidia-ml.so.1
$(FAKE_NVML): tests/fake/nvml.c
	@mkdir -p $(dir $@)
	$(CC) -shared -fPIC -O2 -Wall -Wextra -Werror -o $@ $<
$(BUILD)/tests/e2e/metrics_http_test: $(FAKE_NVML)

$(BUILD)/tests/bench/%: $(BUILD)/tests/bench/%.o $(ALL_LIBS)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< $(ALL_LIBS) $(DAEMON_LDLIBS) $(LDLIBS)

test: check-layers all $(TEST_BIN)
	BUILD=$(BUILD) tests/run-tests.sh $(TEST_BIN)

# The daemon's layers (docs/architecture.md): backend/ knows nothing of the
# serving code, and serve/ nothing of the handlers or the transport above it.
check-layers:
	@if grep -rnE '#include "(serve|handlers|net)/' daemon/backend; then \
		echo "check-layers: daemon/backend/ includes a serving header (above)"; exit 1; fi
	@if grep -rnE '#include "(handlers|net)/' daemon/serve; then \
		echo "check-layers: daemon/serve/ includes a handlers/ or net/ header (above)"; exit 1; fi

unit: all $(UNIT_SRC:%.c=$(BUILD)/%)
	BUILD=$(BUILD) tests/run-tests.sh $(UNIT_SRC:%.c=$(BUILD)/%)

e2e: all $(E2E_SRC:%.c=$(BUILD)/%)
	BUILD=$(BUILD) tests/run-tests.sh $(E2E_SRC:%.c=$(BUILD)/%)

gpu: all $(GPU_SRC:%.c=$(BUILD)/%)
	BUILD=$(BUILD) tests/run-tests.sh $(GPU_SRC:%.c=$(BUILD)/%)

run: all
	BUILD=$(BUILD) tools/run-demo.sh

bench: all $(BENCH_BIN)
	BUILD=$(BUILD) tools/run-bench.sh $(BENCH_BIN)

# Binaries, the client library with headers and a pkg-config file, the systemd
# unit (its ExecStart follows PREFIX), an example config and the man pages.
# The config goes to $(SYSCONFDIR)/tesserad, never over an existing one.
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR ?= $(PREFIX)/lib/systemd/system
TSRD_VERSION_TEXT := $(shell sed -n 's/^\#define TSRD_VERSION "\(.*\)"/\1/p' daemon/config.h)
# libtessera-client.so.0.MINOR.PATCH for daemon version 0.MINOR.PATCH.
VERSION_MINOR_PATCH := $(shell echo $(TSRD_VERSION_TEXT) | cut -d. -f2-)
install: all $(CLIENT_DIST_A)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include/tessera $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man8 \
		$(DESTDIR)$(PREFIX)/share/doc/tesserad $(DESTDIR)$(SYSCONFDIR)/tesserad
	install -m 0755 $(TESSERAD) $(CLI) $(DESTDIR)$(PREFIX)/bin/
	install -m 0644 $(CLIENT_DIST_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 0755 $(CLIENT_SO) $(DESTDIR)$(PREFIX)/lib/$(CLIENT_SONAME).$(VERSION_MINOR_PATCH)
	ln -sf $(CLIENT_SONAME).$(VERSION_MINOR_PATCH) $(DESTDIR)$(PREFIX)/lib/$(CLIENT_SONAME)
	ln -sf $(CLIENT_SONAME) $(DESTDIR)$(PREFIX)/lib/libtessera-client.so
	install -d $(DESTDIR)$(PREFIX)/share/tessera $(DESTDIR)$(PREFIX)/share/doc/tesserad/docs
	install -m 0644 proto/tessera.proto $(DESTDIR)$(PREFIX)/share/tessera/
	install -m 0644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/tesserad/docs/
	install -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/tesserad/
	install -m 0644 client/include/tessera/client.h lib/include/tessera/status.h \
		$(DESTDIR)$(PREFIX)/include/tessera/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|'"$$(sed -n 's/^#define TSRD_VERSION "\(.*\)"/\1/p' daemon/config.h)"'|' \
		deploy/tessera-client.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/tessera-client.pc
	sed -e 's|/usr/bin/tesserad|$(PREFIX)/bin/tesserad|' -e 's|/etc/tesserad/|$(SYSCONFDIR)/tesserad/|' \
		deploy/tesserad.service > $(DESTDIR)$(UNITDIR)/tesserad.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/tesserad.service
	install -m 0644 deploy/man/tessera-cli.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 0644 deploy/man/tesserad.8 $(DESTDIR)$(PREFIX)/share/man/man8/
	install -m 0644 deploy/tesserad.json deploy/tesserad.example.json \
		$(DESTDIR)$(PREFIX)/share/doc/tesserad/
	test -e $(DESTDIR)$(SYSCONFDIR)/tesserad/tesserad.json || \
		install -m 0640 deploy/tesserad.json $(DESTDIR)$(SYSCONFDIR)/tesserad/tesserad.json

# The hostile-tenant suite (docs/reliability.md, "Admission and hostile peers"):
# the end-to-end attacks on the listeners, admission, shared memory and the
# kernel cache, and the unit checks of the files a person hands the CLI, as a
# target of its own, bounded in time.
ATTACK_SUITES := e2e/listener e2e/transport e2e/admission e2e/decode e2e/ring e2e/contention e2e/replay_memory \
                 e2e/connections e2e/watchdog e2e/shm_shrink e2e/shm_owner e2e/cache_trust \
                 e2e/cache_tenants e2e/cli unit/npy unit/json unit/envelope unit/guard
ATTACK_BIN := $(ATTACK_SUITES:%=$(BUILD)/tests/%_test)
ATTACK_SECONDS ?= 900
attack: all $(ATTACK_BIN)
	BUILD=$(BUILD) timeout $(ATTACK_SECONDS) tests/run-tests.sh $(ATTACK_BIN)

# The installed client as its users see it: shared and static builds of a
# small program through pkg-config, run against a real daemon.
install-check: all $(CLIENT_DIST_A)
	BUILD=$(BUILD) tools/install-check.sh

# The container image: deploy/build-image.sh stages the context and runs podman
# build or docker build, and says so when neither can run here.
IMAGE ?= tesserad:$(TSRD_VERSION_TEXT)
image:
	BUILD=$(BUILD) deploy/build-image.sh $(IMAGE)

# deploy/k8s without a cluster: the API schemas, the manifests against each
# other and the image, and the image's entrypoint started with the ConfigMap's
# config (tools/k8s-check.sh).
k8s-check: all
	BUILD=$(BUILD) tools/k8s-check.sh

# ---- fuzzing: libFuzzer targets tests/fuzz/fuzz_<name>.c (tests/fuzz/README.md) ----
# A separate clang build under $(FUZZ_BUILD): the lib/ and daemon/ sources are
# compiled again with coverage and ASan+UBSan, so the normal build is untouched.
FUZZ_CC ?= clang-14
FUZZ_BUILD ?= $(BUILD)/fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 20
FUZZ_TARGETS := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := -g -O1 -std=c11 -pthread $(FUZZ_SAN) -fsanitize=fuzzer-no-link
FUZZ_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o) $(FUZZ_BUILD)/gen/tessera.pb-c.o
# Only the request target needs the daemon.
FUZZ_DAEMON_OBJ := $(DAEMON_SRC:%.c=$(FUZZ_BUILD)/%.o) $(FUZZ_BUILD)/kernels/embedded_none.o

# Sources not owned by the fuzz targets are built without -Werror: a warning
# only clang gives must not stop fuzzing.
$(FUZZ_BUILD)/gen/tessera.pb-c.o: $(PROTO_C)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -w -c $< -o $@
$(FUZZ_BUILD)/%.o: %.c | $(PROTO_H) $(NNG_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -Wall -c $< -o $@
$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJ) | $(PROTO_H) $(NNG_LIB)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CPPFLAGS) $(FUZZ_CFLAGS) -Wall -Wextra -Werror -fsanitize=fuzzer \
		-o $@ $< $(filter %.o,$^) $(DAEMON_LDLIBS) $(LDLIBS)
$(FUZZ_BUILD)/fuzz_request: $(FUZZ_DAEMON_OBJ)

# Regenerates the binary seed corpora (request, kcache_entry); deterministic.
$(FUZZ_BUILD)/gen_seeds: tests/fuzz/gen_seeds.c $(LIB_A)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) -Wno-missing-braces -o $@ $< $(LIB_A) $(LDLIBS)
fuzz-seeds: $(FUZZ_BUILD)/gen_seeds
	mkdir -p tests/fuzz/corpus/request tests/fuzz/corpus/kcache_entry
	$(FUZZ_BUILD)/gen_seeds tests/fuzz/corpus

fuzz-build: $(FUZZ_BIN)
fuzz: $(FUZZ_BIN)
	tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_BUILD) $(FUZZ_TARGETS)
fuzz-smoke: $(FUZZ_BIN)
	tests/fuzz/run.sh $(FUZZ_SMOKE_SECONDS) $(FUZZ_BUILD) $(FUZZ_TARGETS)

# ---- load and soak: tests/bench/loadgen against a real tesserad ----
# SOAK_ARGS adds loadgen options, e.g. SOAK_ARGS="--reconnect-every 500" (docs/reliability.md).
SOAK_SECONDS ?= 600
SOAK_CLIENTS ?= 32
SOAK_ARGS ?=
soak: all $(BUILD)/tests/bench/loadgen
	BUILD=$(BUILD) SOAK_LOADGEN_ARGS="$(SOAK_ARGS)" tools/soak.sh $(SOAK_SECONDS) $(SOAK_CLIENTS)

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh')
format:
	$(CLANG_FORMAT) -i $(FORMAT_FILES)
format-check:
	$(CLANG_FORMAT) --dry-run --Werror $(FORMAT_FILES)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
