# switchboard build. `make` builds build/switchboard; `make test` builds an ASan+UBSan
# variant and runs unit (cmocka) and integration tests; `make bench` runs benchmarks;
# `make demo` runs a gateway in front of a simulated fleet; `make fuzz` runs every libFuzzer
# target over its committed corpus for a bounded time (needs clang); `make check-format`
# checks the lines changed since main against .clang-format (it never rewrites).
# Sources are found by layer: every src/<layer>/*.c except src/cmd goes into libsb.a;
# every tests/unit/**/test_*.c becomes its own test binary linked against it.

CC      ?= gcc
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Werror -Wno-unused-parameter -Wmissing-prototypes
INC     := -Isrc -Ibuild/gen
LIBS    := -luv -luring -lhttp_parser -lyaml -lxxhash -lnghttp2 -lssl -lcrypto -lzmq -lmsgpackc -lprotobuf-c -lm
# EXTRA_CFLAGS / EXTRA_LDFLAGS: a packager's flags (debian/rules passes dpkg-buildflags' hardening).
CFLAGS_REL  := $(CSTD) -O2 -g $(WARN) $(INC) $(EXTRA_CFLAGS)
CFLAGS_SAN  := $(CSTD) -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
               -fno-sanitize-recover=undefined $(WARN) $(INC)

# ThreadSanitizer: the gateway with workers (net/guard.h, net/workers.h) under the multi-worker
# integration tests (`make tsan`, part of `make test`). libuv itself is not instrumented.
CFLAGS_TSAN := $(CSTD) -O1 -g -fno-omit-frame-pointer -fsanitize=thread $(WARN) $(INC)

LIB_SRC  := $(shell find src -name '*.c' ! -path 'src/cmd/*' | sort)
# Assembly units (src/net/ui_files.S: the dashboard's files under src/ui/, put in read-only data
# with .incbin). Their objects depend on every file under src/ui/ as well, so editing a UI file
# rebuilds the binary.
ASM_SRC  := $(shell find src -name '*.S' | sort)
UI_FILES := $(shell find src/ui -type f | sort)
CMD_SRC  := $(shell find src/cmd -name '*.c' | sort)
# Protocol buffers (src/proto/*.proto): protoc-c generates C into build/gen/ at build time
# (never committed); the generated units go into libsb.a beside src/, and every object
# depends on the generated headers, as on src/'s, so a clean checkout builds with plain make.
PROTO_SRC := $(sort $(wildcard src/proto/*.proto))
GEN_SRC  := $(PROTO_SRC:src/proto/%.proto=build/gen/%.pb-c.c)
GEN_HDRS := $(PROTO_SRC:src/proto/%.proto=build/gen/%.pb-c.h)
HDRS     := $(shell find src -name '*.h') $(GEN_HDRS)
TEST_SRC := $(shell find tests/unit -name 'test_*.c' | sort)

REL_OBJ  := $(LIB_SRC:src/%.c=build/rel/%.o) $(GEN_SRC:build/gen/%.c=build/rel/gen/%.o) $(ASM_SRC:src/%.S=build/rel/%.o)
SAN_OBJ  := $(LIB_SRC:src/%.c=build/san/%.o) $(GEN_SRC:build/gen/%.c=build/san/gen/%.o) $(ASM_SRC:src/%.S=build/san/%.o)
TSAN_OBJ := $(LIB_SRC:src/%.c=build/tsan/%.o) $(GEN_SRC:build/gen/%.c=build/tsan/gen/%.o) $(ASM_SRC:src/%.S=build/tsan/%.o)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=build/san/tests/%)
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=build/bench/%)

# Fuzzing: the library instrumented for coverage (fuzzer-no-link) and each target linked
# with libFuzzer's main. FUZZ_SECONDS bounds each target's run.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 30
CFLAGS_FUZZ  := $(CSTD) -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
                -fno-sanitize-recover=undefined $(WARN) $(INC)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
FUZZ_OBJ := $(LIB_SRC:src/%.c=build/fuzz/obj/%.o) $(GEN_SRC:build/gen/%.c=build/fuzz/obj/gen/%.o) \
            $(ASM_SRC:src/%.S=build/fuzz/obj/%.o)
# check-format compares with this revision: only lines changed since it are checked, since
# the tree as a whole predates .clang-format.
FORMAT_BASE ?= main

# Integration tests import Debian's python3-zmq and python3-msgpack (scripts/deps.sh test):
# run them with Debian's interpreter when there is one, not a pyenv shim that cannot see them.
PYTHON := $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)

.PHONY: install uninstall package all deps test call-graph unit integration tsan bench bench-build soak demo clean check-format fuzz fuzz-build
all: deps build/switchboard

deps:
	@scripts/deps.sh build

# One protoc-c run per .proto writes both its .c and .h (a grouped pattern rule). -Isrc/proto
# resolves the imports between our .proto files; the generated includes then name each
# other by file name, found beside them in build/gen/.
build/gen/%.pb-c.c build/gen/%.pb-c.h: src/proto/%.proto $(PROTO_SRC)
	@mkdir -p build/gen
	@echo "PROTOC  $<"; protoc-c --c_out=build/gen -Isrc/proto $<

.SECONDARY: $(GEN_SRC) $(GEN_HDRS)

# The release and commit (base/version.c): regenerated on every make, replaced only when they
# changed, so a new commit rebuilds version.o and the binaries, and nothing else. A tree
# outside git (a tarball) builds with commit "unknown".
build/gen/sb_build_version.h: FORCE
	@mkdir -p build/gen
	@scripts/gen_version.sh > $@.tmp && { cmp -s $@.tmp $@ || mv $@.tmp $@; }; rm -f $@.tmp

build/rel/base/version.o build/san/base/version.o build/tsan/base/version.o build/fuzz/obj/base/version.o: build/gen/sb_build_version.h

.PHONY: FORCE
FORCE:

# protoc-c's initialisers for messages with a oneof ({0} for a union) trip -Wmissing-braces.
GEN_WARN := -Wno-missing-braces

build/rel/gen/%.o: build/gen/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC      $<"; $(CC) $(CFLAGS_REL) $(GEN_WARN) -c $< -o $@

build/san/gen/%.o: build/gen/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC san  $<"; $(CC) $(CFLAGS_SAN) $(GEN_WARN) -c $< -o $@

build/tsan/gen/%.o: build/gen/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC tsan $<"; $(CC) $(CFLAGS_TSAN) $(GEN_WARN) -c $< -o $@

build/fuzz/obj/gen/%.o: build/gen/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC fuzz $<"; $(FUZZ_CC) $(CFLAGS_FUZZ) $(GEN_WARN) -c $< -o $@

# The assembler only includes bytes (.incbin): no sanitizer or optimisation flags apply, so the
# variants differ by directory only. (One rule per variant: a pattern rule with several targets
# would be taken as making them all at once.)
ASM_RECIPE = @mkdir -p $(dir $@); echo "AS      $<"; $(CC) -c $< -o $@
build/rel/%.o: src/%.S $(UI_FILES)
	$(ASM_RECIPE)
build/san/%.o: src/%.S $(UI_FILES)
	$(ASM_RECIPE)
build/tsan/%.o: src/%.S $(UI_FILES)
	$(ASM_RECIPE)
build/fuzz/obj/%.o: src/%.S $(UI_FILES)
	$(ASM_RECIPE)

build/rel/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC      $<"; $(CC) $(CFLAGS_REL) -c $< -o $@

build/san/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC san  $<"; $(CC) $(CFLAGS_SAN) -c $< -o $@

build/tsan/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC tsan $<"; $(CC) $(CFLAGS_TSAN) -c $< -o $@

build/tsan/libsb.a: $(TSAN_OBJ)
	@rm -f $@; ar rcs $@ $^

build/tsan/switchboard: $(CMD_SRC) build/tsan/libsb.a $(HDRS)
	$(CC) $(CFLAGS_TSAN) $(CMD_SRC) build/tsan/libsb.a $(LIBS) -o $@

build/rel/libsb.a: $(REL_OBJ)
	@rm -f $@; ar rcs $@ $^

build/san/libsb.a: $(SAN_OBJ)
	@rm -f $@; ar rcs $@ $^

build/switchboard: $(CMD_SRC) build/rel/libsb.a $(HDRS)
	$(CC) $(CFLAGS_REL) $(CMD_SRC) build/rel/libsb.a $(EXTRA_LDFLAGS) $(LIBS) -o $@

build/san/switchboard: $(CMD_SRC) build/san/libsb.a $(HDRS)
	$(CC) $(CFLAGS_SAN) $(CMD_SRC) build/san/libsb.a $(LIBS) -o $@

build/san/tests/%: tests/unit/%.c build/san/libsb.a $(HDRS) tests/unit/sb_test.h $(wildcard tests/unit/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SAN) -Itests/unit $< build/san/libsb.a $(LIBS) -lcmocka -o $@

build/bench/%: bench/%.c build/rel/libsb.a $(HDRS) bench/bench_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) $< build/rel/libsb.a $(LIBS) -o $@

build/fuzz/obj/%.o: src/%.c $(HDRS)
	@mkdir -p $(dir $@)
	@echo "CC fuzz $<"; $(FUZZ_CC) $(CFLAGS_FUZZ) -c $< -o $@

build/fuzz/libsb.a: $(FUZZ_OBJ)
	@rm -f $@; ar rcs $@ $^

build/fuzz/%: tests/fuzz/%.c build/fuzz/libsb.a $(HDRS)
	$(FUZZ_CC) $(CFLAGS_FUZZ) -fsanitize=fuzzer $< build/fuzz/libsb.a $(LIBS) -o $@

unit: $(TEST_BIN)
	@scripts/run_unit.sh $(TEST_BIN)

integration: build/san/switchboard build/switchboard
	@$(PYTHON) tests/integration/run.py

# The multi-worker tests under ThreadSanitizer: two workers (the harness pins
# SWITCHBOARD_WORKERS), the gateway stopped on the first report (tests/integration/fixtures.py
# fails a test whose log has one). TSAN_TESTS: the files run (globs, as run.py takes them); seven,
# to keep `make test` under ten minutes: the whole suite passes under it too (TSAN_TESTS='test_*.py').
TSAN_TESTS ?= test_workers.py test_gateway.py test_overload.py test_drain.py test_http2.py test_precise.py test_sync.py
tsan: build/tsan/switchboard build/switchboard
	@SB_BIN=$(CURDIR)/build/tsan/switchboard SWITCHBOARD_WORKERS=2 \
	  TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 suppressions=$(CURDIR)/tests/integration/tsan.supp" $(PYTHON) tests/integration/run.py $(TSAN_TESTS)

test:
	@scripts/deps.sh test
	@python3 scripts/include_graph.py
	@SB_REQUIRE_EXTPROC=1 $(MAKE) --no-print-directory call-graph bench-build unit integration tsan

# Call circles between modules, from the objects' symbols (what #include lines cannot show).
call-graph: build/san/libsb.a
	@python3 scripts/call_graph.py build/san

# The benchmarks are compiled by `make test` too, so a change that breaks one is seen at once
# (bench_collide once stopped `make bench` for sessions unnoticed).
bench-build: $(BENCH_BIN)

bench: all $(BENCH_BIN)
	@scripts/deps.sh bench
	@bench/run.sh

# A bounded soak (SOAK_SECONDS, default 180): mixed load, faults on and off, RSS and
# descriptors sampled; prints its verdict (bench/soak.py).
soak: all
	@python3 bench/soak.py

demo: all
	@build/switchboard demo

fuzz-build:
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz: $(FUZZ_CC) is not installed (libFuzzer comes with clang)" >&2; exit 1; }
	@$(MAKE) --no-print-directory FUZZ_CC=$(FUZZ_CC) $(FUZZ_BIN)

fuzz: fuzz-build
	@scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BIN)

check-format:
	@scripts/check_format.sh $(FORMAT_BASE)

# Installation: the binary, its manual page, the demo configuration as $(SYSCONFDIR)/switchboard/
# switchboard.yaml (kept when one is there: it is the operator's), systemd units with this
# prefix's paths, the licence and the docs. DESTDIR stages (the Debian package does).
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
SYSCONFDIR ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
UNITDIR    ?= $(if $(filter /usr,$(PREFIX)),/lib/systemd/system,$(PREFIX)/lib/systemd/system)
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/switchboard
UNITS      := switchboard.service switchboard-demo-fleet.service
UNIT_SUBST := -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g'

install: build/switchboard
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SYSCONFDIR)/switchboard $(DESTDIR)$(UNITDIR) \
		$(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR)/examples
	install -m 0755 build/switchboard $(DESTDIR)$(BINDIR)/switchboard
	[ -e $(DESTDIR)$(SYSCONFDIR)/switchboard/switchboard.yaml ] || \
		install -m 0644 examples/demo.yaml $(DESTDIR)$(SYSCONFDIR)/switchboard/switchboard.yaml
	for u in $(UNITS); do sed $(UNIT_SUBST) deploy/systemd/$$u.in > $(DESTDIR)$(UNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	gzip -9n < docs/switchboard.1 > $(DESTDIR)$(MANDIR)/man1/switchboard.1.gz
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -m 0644 docs/*.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 examples/*.yaml $(DESTDIR)$(DOCDIR)/examples/
	$(if $(NO_LICENSE),,install -m 0644 LICENSE $(DESTDIR)$(DOCDIR)/LICENSE)

# The configuration stays (it is the operator's); everything else install put there goes.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/switchboard $(DESTDIR)$(MANDIR)/man1/switchboard.1.gz
	for u in $(UNITS); do rm -f $(DESTDIR)$(UNITDIR)/$$u; done
	rm -rf $(DESTDIR)$(DOCDIR)

# A Debian package from debian/ (dpkg-buildpackage, binary only, unsigned) into build/pkg/,
# then lintian over it.
package:
	@scripts/deps.sh package
	@scripts/package.sh

clean:
	rm -rf build
