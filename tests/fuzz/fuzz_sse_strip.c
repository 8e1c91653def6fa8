/* fuzz_sse_strip: libFuzzer target for src/proto/sse_strip.c (outside input: a model server's
 * streamed answer, from which the gateway takes the usage chunk it asked for).
 *
 * `make fuzz` builds and runs every target (FUZZ_SECONDS each). The committed corpus
 * (tests/fuzz/corpus/sse_strip) is also replayed by tests/unit/proto/test_sse_strip.c. Besides
 * crashes and sanitizer reports it checks what sse_strip_check.h says: the same output whatever
 * the cuts, never more out than in, the hold within its buffer, a stream with nothing stripped
 * passed byte for byte. */
#include "sse_strip_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (sse_strip_check(data, size) != 0)
        abort();
    return 0;
}
