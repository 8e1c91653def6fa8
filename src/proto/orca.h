/* orca: parses the ORCA load report a model server attaches to a response
 * (`endpoint-load-metrics` header), in its TEXT and JSON forms:
 *   TEXT named_metrics.kv_cache_usage_perc=0.12, named_metrics.num_requests_waiting=3
 *   JSON {"cpu_utilization":0.3,"named_metrics":{"kv_cache_usage_perc":0.12,"num_requests_waiting":3}}
 * (the Gateway API Inference Extension's convention for vLLM). The result is a partial
 * endpoint report: only the fields present are set (their have_ flags).
 *
 * Pure, no allocation; never reads past the header value. The binary (BIN, protobuf) form is
 * not supported: it returns -1 and the caller ignores the header. */
#ifndef SB_PROTO_ORCA_H
#define SB_PROTO_ORCA_H

#include <stddef.h>

#include "core/endpoint.h"

/* Fills *out (zeroed first) from a header value. Returns the number of fields recognised
 * (0 if none), or -1 if the value is malformed or in an unsupported format. */
int sb_orca_parse(const char *value, size_t len, sb_endpoint_report *out);

#endif
