/* config: the gateway's YAML configuration, parsed into plain structs (schema in
 * docs/configuration.md).
 *
 * sb_config_parse() takes the YAML text (the caller reads the file; this module does no I/O),
 * validates it completely and either returns a config or a list of errors, each with the
 * line and column of the offending node. Unknown keys are errors (a typo must not silently
 * become a default). A parsed config is immutable: the live gateway swaps whole configs. */
#ifndef SB_PROTO_CONFIG_H
#define SB_PROTO_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/adaptive.h"
#include "core/retry.h"
#include "core/sched.h"
#include "proto/auth.h"
#include "proto/kv_events.h"

typedef struct sb_endpoint_config {
    char *host;        /* as written: IPv4/IPv6 literal (IPv6 without its brackets) or a name */
    uint16_t port;
    char *address;     /* "host:port" as written, for logs and explanations */
    char **label_keys; /* n_labels <= SB_MAX_LABELS pairs, for the labels filter; NULL if none */
    char **label_values;
    size_t n_labels;
    bool draining;     /* start draining: takes no new requests; default false */
    /* Where it came from: written in the file, discovered through DNS (a pool's endpoints_from)
     * or registered through POST /admin/endpoints. Only sb_config_with_members sets the last
     * two; the file's endpoints are SB_EP_CONFIG (0). */
    enum sb_endpoint_source { SB_EP_CONFIG = 0, SB_EP_DNS, SB_EP_API } source;
} sb_endpoint_config;

/* A pool's `kv_events:` (docs/configuration.md): where each endpoint's engine publishes its
 * KV-cache events (net/kv_subscriber.h reads them). The addresses are patterns in which "{host}"
 * stands for each endpoint's host (sb_config_kv_address). */
typedef struct sb_kv_events_config {
    /* Patterns. endpoint: default "tcp://{host}:5557" (vLLM's default port), `port: N` short for
     * "tcp://{host}:N"; replay_endpoint: NULL for no replay (vLLM has none unless configured),
     * `replay_port: N` short for "tcp://{host}:N". */
    char *endpoint;
    char *replay_endpoint;
    char *topic;                    /* the exact topic accepted; "" (default): every topic */
    uint32_t stale_after_ms;        /* silence counted as stale; default 10000 */
    uint32_t replay_timeout_ms;     /* deadline of one replay; default 2000 */
    uint32_t max_messages_per_turn; /* per endpoint, per loop turn; default 64 */
    uint32_t reconnect_ms;          /* ZMQ reconnect interval, doubled up to reconnect_max_ms; 100 */
    uint32_t reconnect_max_ms;      /* default 5000 */
    uint32_t heartbeat_ms;          /* ZMTP heartbeat interval (timeout 3x); default 5000 */
    bool replay_on_join;            /* met mid-stream, replay the publisher's buffer; default true */
    uint32_t cover_ms;              /* how long the router's own marks count on an endpoint whose
                                       stream is heard (the report lag); default 2000 */
    uint32_t port, replay_port;     /* the shorthands as written; 0 when not given */
    sb_kv_limits limits;            /* max_batch_bytes, max_events, ...: sb_kv_limits_default() */
} sb_kv_events_config;

/* A pool name's bytes with its NUL: names go into fixed fields of decision records
 * (core/explain.h) and metric labels, so the configuration refuses longer ones rather than let
 * them be cut there. As SB_PROFILE_NAME_MAX for profile names. */
#define SB_POOL_NAME_MAX 64

/* `fallbacks:` (net/fallback.c): where a pool's requests go when it cannot take them: it is
 * saturated past flow control's bound, it has no available endpoint, or every endpoint failed
 * before the first byte. Tried in order, each once; only the requested pool's list is followed
 * (a fallback's own fallbacks are not: one hop), so A -> B and B -> A are both allowed. */
#define SB_FALLBACKS_MAX 8 /* entries per pool: bounds the metric's label set and the tries */
typedef struct sb_fallback_config {
    char *pool_name; /* as written: another pool of this file */
    uint32_t pool;   /* its index in cfg->pools (resolved once every pool is read) */
    char *model;     /* sent upstream in the body's model; NULL: the fallback pool's served name */
} sb_fallback_config;

typedef struct sb_pool_config {
    char *name;           /* at most SB_POOL_NAME_MAX - 1 bytes */
    char **models;        /* [0] is the served name, the rest are aliases; n_models >= 1 */
    size_t n_models;
    char **adapters;      /* LoRA adapters served by this pool, requested as `model` */
    size_t n_adapters;
    char *engine;         /* "vllm" (default), "sglang", "llamacpp", "trtllm", "custom" */
    /* `kind: provider`: an external OpenAI-compatible service, not model servers of one's own:
     * no scrape, no /health unless asked (probe.health_interval_ms), no KV events, profile
     * least-request unless named (docs/configuration.md, "Providers"). Default: engine. */
    bool provider;
    char *profile;        /* scheduling profile name; "default" when not given */
    bool adaptive;        /* adaptive weights (core/adaptive.h); default false (a mapping: true) */
    bool prefix_share;    /* the prefix index sized to this gateway's traffic share; default false */
    bool prefix_calibrate;              /* the prefix index learns from answers' cached tokens; default true */
    sb_adaptive_params adaptive_params; /* `adaptive:` as a mapping; defaults otherwise */
    sb_endpoint_config *endpoints;
    size_t n_endpoints; /* >= 1, unless endpoints_from or `endpoints: []` (filled at run time) */
    /* probing (`probe:`); min <= interval <= max */
    uint32_t probe_interval_ms;     /* metrics scrape, base of the adaptive rule; default 100 */
    uint32_t probe_min_interval_ms; /* busiest endpoints; default 50 */
    uint32_t probe_max_interval_ms; /* idle endpoints; default 1000 */
    uint32_t probe_timeout_ms;      /* one scrape or health check; default 500 */
    uint32_t stale_ms;              /* a report older than this is stale; default 1000 */
    char *probe_path;               /* default "/metrics" (every engine) */
    char *health_path;              /* default "/health" */
    uint32_t health_interval_ms;    /* active health checks; 0 = none; default 2000 */
    bool probe_enabled;             /* false: no scraping (ORCA headers still count); default true */
    /* The synchronous probe: when one of the sync_candidates best-ranked endpoints has a report
     * older than sync_max_age_ms, scrape them and decide again, waiting at most
     * sync_timeout_ms (net/probe.h). 0 = off (default); timeout default 50; candidates 2 (1-8). */
    uint32_t probe_sync_max_age_ms;
    uint32_t probe_sync_timeout_ms;
    uint32_t probe_sync_candidates;
    /* passive health (`health:`); base_eject_ms <= max_eject_ms */
    uint32_t max_failures;          /* consecutive failures that eject; default 3 */
    uint32_t base_eject_ms;         /* first ejection, doubled per ejection; default 1000 */
    uint32_t max_eject_ms;          /* bound of the doubling; default 30000 */
    double failure_rate;            /* ...or this failure rate over the window; 0 = off; 0.25 */
    uint32_t min_requests;          /* requests in the window before the rate counts; 10 */
    uint32_t window_ms;             /* the rate's window; default 10000 */
    uint32_t max_eject_percent;     /* ejected endpoints at most this share (one always may); 50 */
    /* metric names (`metrics:`), set for engine "custom" only (all three); NULL otherwise */
    char *metric_running;
    char *metric_waiting;
    char *metric_kv_usage;
    /* `upstream_api_key`: the whole header line "Authorization: Bearer KEY\r\n" sent to this
     * pool's model servers instead of the client's Authorization; NULL: the client's passes.
     * Wiped when freed. With `upstream_api_key_file`, filled by the cmd layer from that file. */
    char *upstream_auth_header;
    char *upstream_api_key_file; /* as written; NULL if none */
    /* TLS toward the pool's endpoints (net/upstream.h): on when they are written https://
     * (every one of them; discovered and registered endpoints follow the pool). `tls:` sets
     * how: ca_file (NULL: the system's store), a client certificate (cert and key, or
     * neither), server_name (SNI and the name verified; NULL: each endpoint's host), verify
     * (default true; false accepts any certificate). */
    bool tls;
    char *tls_ca_file, *tls_cert, *tls_key, *tls_server_name;
    bool tls_verify;
    sb_kv_events_config *kv_events; /* NULL: no event subscription (the approximate index alone) */
    /* `endpoints_from: {dns: "name:port", interval_ms}`: every A and AAAA address of the name is
     * an endpoint (net/discovery.c), beside the listed ones. NULL host: none. */
    char *dns_host;
    uint16_t dns_port;
    uint32_t dns_interval_ms; /* default 5000 */
    sb_fallback_config *fallbacks; /* `fallbacks:`, in order; at most SB_FALLBACKS_MAX */
    size_t n_fallbacks;
} sb_pool_config;

/* ext_proc body modes as configured (Envoy's processing_mode.request_body_mode and
 * response_body_mode): the picker must know which one Envoy uses, since in BUFFERED mode Envoy
 * waits for the headers' answer before it sends the body. */
enum sb_extproc_mode { SB_EXTPROC_MODE_FULL_DUPLEX = 0, SB_EXTPROC_MODE_BUFFERED = 1, SB_EXTPROC_MODE_NONE = 2 };

typedef struct sb_config {
    char *listen_host;            /* default "127.0.0.1"; IPv6 without brackets; NULL: no HTTP proxy
                                   * listener (`listen: null`, only beside ext_proc) */
    uint16_t listen_port;         /* default 8080 */
    /* limits */
    size_t max_body_bytes;        /* default 16 MiB */
    size_t max_header_bytes;      /* default 64 KiB */
    size_t max_connections;       /* client connections; default 10000 */
    /* Event loops serving the client listener (net/workers.h); 0: auto, the cores available
     * (resolved by cmd/serve.c before the gateway starts). 1: one loop, no threads. */
    size_t workers;
    /* `io_uring: false`: the loops write through libuv, a system call per write; default on,
     * where the kernel allows (net/iobatch.h). Read at start: a reload keeps the running one. */
    bool io_uring_off;
    size_t max_prompt_blocks;     /* hashed blocks per request; default 16384 */
    size_t max_json_depth;        /* JSON nesting (arrays and objects) in bodies; default 128 */
    size_t max_json_tokens;       /* JSON values (keys included) in a body; default 1 Mi */
    size_t max_buffered_body_bytes; /* request body bytes held over all connections; 256 MiB */
    uint32_t linger_ms;           /* after an early answer, read and discard up to this long; 5000 */
    uint32_t drain_ms;            /* shutdown.drain_ms: SIGTERM lets requests finish this long; 30000 */
    size_t linger_bytes;          /* ...and up to this many bytes; default 64 MiB */
    size_t max_refusing_connections; /* past max_connections, answered 503 at once; default 64 */
    /* timeouts, milliseconds */
    uint32_t connect_ms;          /* upstream connect; default 1000 */
    uint32_t response_ms;         /* upstream silence (before and between bytes); default 600000 */
    uint32_t idle_ms;             /* client keep-alive idle; default 60000 */
    uint32_t header_ms;           /* client request head + body read; default 10000 */
    uint32_t upstream_idle_ms;    /* pooled upstream connection idle; default 30000 */
    /* upstream */
    size_t max_idle_per_endpoint; /* pooled keep-alive connections per endpoint; default 1024 */
    bool orca_request;            /* ask upstreams for endpoint-load-metrics; default true */
    bool stream_usage;            /* ask streams for usage, strip it from clients that did not; true */
    size_t max_held_event_bytes;  /* limits: an unfinished SSE event held while stripping; 16 KiB */
    /* `retry:` (core/retry.h): what is retried, how often, with what backoff and budget */
    sb_retry_policy retry;
    /* routing */
    size_t block_bytes;           /* prefix block size in canonical-prompt bytes; default 64 */
    char *default_pool;           /* pool for requests naming no model; NULL = 400 */
    char *session_header;         /* session affinity header; default "x-session-id" */
    size_t prefix_chars;          /* prefix-hash key length in bytes; default 100 */
    /* kv_index: the precise index of engine-reported blocks (core/kv_index.h) */
    size_t kv_max_entries; /* (block, endpoint) entries per pool; default 1 Mi (65-88 MiB) */
    size_t kv_block_size;  /* engine block size in tokens; default 16 (vLLM's) */
    /* tokenize: engines' /tokenize answers (proto/tokenize.h, core/tok_cache.h) */
    size_t tokenize_cache_bytes;      /* token-id cache per pool; default 64 MiB */
    size_t tokenize_margin_tokens;    /* ids a proven prefix gives back; default 128 */
    uint32_t tokenize_timeout_ms;     /* a /tokenize request's deadline; default 2000 */
    uint32_t tokenize_wait_ms;        /* how long a request waits for its ids before routing
                                         on the approximate index; default 20 */
    size_t tokenize_max_answer_bytes; /* a longer answer is refused; default 8 MiB */
    /* flow control (net/admission.c): queues by priority band while a pool is saturated */
    bool flow_enabled;            /* default true */
    uint32_t flow_max_wait_ms[3]; /* per band (critical, standard, sheddable); 30 s, 10 s, 2 s */
    uint32_t flow_max_queued[3];  /* per band; 1024 each */
    size_t flow_max_bytes[3];     /* request bodies queued per band; 64 MiB each */
    uint32_t flow_max_queued_total; /* over all bands; 2048 */
    size_t flow_max_bytes_total;  /* over all bands; 128 MiB */
    double flow_gate_queue;       /* queue while every endpoint has more waiting; default 1 */
    double flow_gate_kv;          /* ...or KV use above this; default -1: the profile's */
    /* API keys, as digests only (proto/auth.h): client keys (`auth.api_keys` and the keys
     * file's, once the cmd layer has read it) and flow_control.api_keys' bands, merged. */
    sb_auth_keys api_keys;
    bool auth_enabled;            /* `auth` names keys or a keys file: API requests need a key */
    char *auth_api_keys_file;     /* as written; NULL if none */
    /* observability */
    char *access_log;             /* path, "-" for stdout, NULL for none (default) */
    /* `http2:` on the client listener (net/http2.c): h2c by prior knowledge and h2 by ALPN. */
    bool http2_enabled;                       /* default true */
    uint32_t http2_max_streams;               /* max_concurrent_streams; default 100 */
    size_t http2_window_bytes;                /* initial_window_size; default 256 KiB */
    size_t http2_max_header_list_bytes;       /* default limits.max_header_bytes */
    size_t http2_max_connection_header_bytes; /* heads held per connection; 0: 4 x max_header_list_bytes */
    size_t http2_connection_window_bytes;     /* connection_window_size; 0: 4 x initial_window_size */
    size_t http2_stream_buffer_bytes;         /* a stream's answer held for a slow client; 0: 64 KiB */
    uint32_t http2_reset_burst;               /* resets per connection (client's and the server's); 0: 1000 */
    uint32_t http2_reset_rate;                /* refill per second; 0: 33 */
    bool log_decisions;           /* access log lines carry the decision explanation; default false */
    bool debug_endpoints;         /* serve GET /debug/endpoints; default true */
    size_t metrics_max_models;    /* `metrics.max_models`: model label values per pool (the served
                                   * name, then adapters in order); the rest share model="other";
                                   * default 32 */
    /* the admin listener (`admin:`): /metrics and the debug pages, apart from the client listener */
    char *admin_host;             /* default "127.0.0.1"; NULL: no admin listener (listen: null) */
    uint16_t admin_port;          /* default 8081 */
    size_t admin_max_connections; /* default 64 */
    bool admin_metrics_auth;      /* /metrics needs the token too; default false */
    bool admin_has_token;         /* admin.token given, or admin_token_file read */
    /* SHA-256 of the admin bearer token */
    uint8_t admin_token_digest[SB_AUTH_DIGEST_LEN];
    char *admin_token_file;       /* as written; NULL if none */
    size_t admin_max_body_bytes;  /* bodies of admin POSTs (registrations, reports); 64 KiB */
    /* TLS on the client listener (`tls: {cert, key}`, net/tls.h): PEM files, re-read on every
     * reload (SIGHUP) so certificates rotate without a restart; NULL: plain HTTP (both NULL) */
    char *tls_cert;
    char *tls_key;
    /* The ring of recent decisions behind /debug/decisions (net/decisions.h): records kept
     * (0: none, the page answers an empty list) and candidates per record. 512 and 16. */
    size_t admin_decisions;
    size_t admin_decision_candidates;
    /* the endpoint picker (`ext_proc:`; net/picker.c): Envoy's external-processing stream on a
     * gRPC listener, beside or instead of the proxy's */
    char *extproc_host;     /* NULL: no ext_proc listener (the default) */
    uint16_t extproc_port;  /* default 9002 */
    char *extproc_tls_cert; /* PEM; NULL: plain h2c (then tls_key is NULL too) */
    char *extproc_tls_key;
    uint32_t extproc_fallbacks;                       /* endpoints named after the pick; default 0 (an ORIGINAL_DST
                                                       * cluster reads one ip:port), at most 7 */
    size_t extproc_chunk_bytes;                       /* streamed_response chunks sent back; default 62,000 */
    int extproc_request_body_mode;                    /* enum sb_extproc_mode: what Envoy is configured to send */
    int extproc_response_body_mode;                   /* ...a protocol_config on a stream wins over both */
    uint32_t extproc_max_streams;                     /* per connection; default 1024 */
    size_t extproc_max_connections;                   /* default 1024 */
    uint32_t extproc_idle_ms;                         /* a connection with no stream this long closes; 300000 */
    bool extproc_has_token;                           /* ext_proc.token: calls must carry authorization: Bearer TOKEN */
    uint8_t extproc_token_digest[SB_AUTH_DIGEST_LEN]; /* its SHA-256 */
    /* gateway sync (`sync:`; net/peer_sync.h): gateway replicas tell each other what they sent
     * where. Off unless sync_listen is set. */
    char *sync_listen;             /* ZMQ address this gateway publishes on, e.g. tcp://0.0.0.0:5600 */
    char **sync_peers;             /* the other gateways' publish addresses */
    size_t n_sync_peers;           /* at most 64 */
    uint32_t sync_heartbeat_ms;    /* a heartbeat when nothing else was sent this long; 1000 */
    uint32_t sync_peer_timeout_ms; /* a peer silent this long: its requests stop counting; 5000 */
    size_t sync_max_tracked;       /* peers' requests counted at once; 65536 */
    uint32_t sync_max_request_ms;  /* a peer's request whose end is never heard; 600000 */
    /* sync.key_file: the fleet's CURVE secret key (Z85, 40 characters; `switchboard keygen`).
     * With it the peers' traffic is encrypted and only holders of the key publish or read. */
    char *sync_key_file;
    bool sync_has_key;
    char sync_key[41]; /* the secret, Z85, NUL-terminated; wiped with the config */
    /* sync.rotation_key_file: a second fleet key accepted beside key_file while the fleet moves
     * from one key to another (docs/configuration.md, "Rotating the key"). */
    char *sync_rotation_key_file;
    bool sync_has_rotation_key;
    char sync_rotation_key[41];
    /* membership at run time (`discovery:`; net/discovery.h) */
    uint32_t discovery_apply_ms;     /* changes within this window apply once; default 20 */
    uint32_t discovery_drain_ms;     /* a removed endpoint drains at most this long; 30000 */
    size_t discovery_max_endpoints;  /* dynamic (DNS + API) endpoints per pool; default 256 */
    uint32_t discovery_retry_ms;     /* first retry of a failed resolution; default 1000 */
    uint32_t discovery_retry_max_ms; /* bound of its doubling; default 30000 */
    /* scheduling profiles defined under `profiles:`, fully built (labels point into strings
     * owned by the config); none of them shadows a built-in name */
    sb_profile *profiles;
    size_t n_profiles;
    sb_pool_config *pools;
    size_t n_pools;               /* >= 1 */
    /* private: an effective config (sb_config_with_members) points at its base, which counts
     * the effective configs alive on it */
    struct sb_config *base;
    size_t derived;
} sb_config;

typedef struct sb_config_error {
    int line;      /* 1-based; 0 when not tied to a node */
    int column;    /* 1-based */
    char message[240];
} sb_config_error;

typedef struct sb_config_errors {
    sb_config_error items[32];
    size_t n;        /* errors recorded (at most 32 kept) */
    size_t total;    /* errors found */
} sb_config_errors;

/* Parses and validates. Returns 0 and sets *out (caller frees with sb_config_free), or -1 and
 * fills *errs (at least one error) with *out untouched. Secrets (API keys, the admin token,
 * upstream keys) are hashed or moved into the config, and every scalar of the YAML document
 * and libyaml's copies of the input are wiped before returning; `text` itself is the
 * caller's to wipe. Paths of secret files are recorded, not read: see sb_config_*_file below. */
int sb_config_parse(const char *text, size_t len, sb_config **out, sb_config_errors *errs);

/* Frees cfg. A config that others derived from (sb_config_with_members) is freed when the last
 * of them and its own holder have called this. */
void sb_config_free(sb_config *cfg);

/* A dynamic endpoint, as the membership keeps it (net/discovery.c): pool index, source (dns or
 * api), its address and what a registration gave. Strings are borrowed for the call. */
typedef struct sb_member {
    size_t pool;
    enum sb_endpoint_source source;
    const char *host; /* literal or name, IPv6 without brackets */
    uint16_t port;
    bool draining;
    const char *const *label_keys;
    const char *const *label_values;
    size_t n_labels;
} sb_member;

/* The effective configuration: base with each pool's endpoints followed by the members of that
 * pool, in the order given (pure: same inputs, same config). A member whose address is already an
 * endpoint of its pool is skipped (the file's entry wins), as is one naming no pool of base.
 * The result shares everything but the pools and their endpoints with base, and keeps base alive:
 * free both with sb_config_free, in any order. Returns NULL when out of memory. */
sb_config *sb_config_with_members(sb_config *base, const sb_member *members, size_t n);
/* The file's configuration an effective one was built from (cfg itself for a parsed one). */
const sb_config *sb_config_base(const sb_config *cfg);
/* Checks an endpoint address as the file's `endpoints:` items are checked ("host:port" or
 * "[v6]:port"; s NUL-terminated) and copies the host (without brackets) into host[cap]. Returns
 * NULL, or the reason it is refused (static text). */
const char *sb_config_split_address(const char *s, char *host, size_t cap, uint16_t *port);
/* "host:port" ("[v6]:port" for an IPv6 host) into buf; false when it does not fit. */
bool sb_config_format_address(const char *host, uint16_t port, char *buf, size_t cap);

/* Whether host (as parsed from an address) is a loopback literal or "localhost". */
bool sb_config_host_is_loopback(const char *host);

/* The secret files named by a parsed config are read by the caller (the cmd layer), whose
 * text these take; each wipes `text` before returning. Return 0, or -1 with msg filled
 * (naming no secret). */
/* auth.api_keys_file's text: its keys join cfg->api_keys (sb_auth_parse_keys_file). *line is
 * the line of the error, 0 if none. */
int sb_config_set_keys_file(sb_config *cfg, char *text, size_t len, int *line, char *msg, size_t cap);
/* admin.token_file's text: one token, surrounding blanks and newlines ignored. */
int sb_config_set_admin_token(sb_config *cfg, char *text, size_t len, char *msg, size_t cap);
/* A pool's upstream_api_key_file's text: one key, surrounding blanks and newlines ignored. */
int sb_config_set_upstream_key(sb_config *cfg, size_t pool, char *text, size_t len, char *msg, size_t cap);
/* sync.key_file's text: one CURVE secret key in Z85 (40 characters of ZeroMQ's Z85 alphabet),
 * surrounding blanks and newlines ignored. */
int sb_config_set_sync_key(sb_config *cfg, char *text, size_t len, char *msg, size_t cap);
/* The same for sync.rotation_key_file. */
int sb_config_set_sync_rotation_key(sb_config *cfg, char *text, size_t len, char *msg, size_t cap);

/* The profile a pool's `profile:` names: a user profile of cfg, else the built-in of that
 * name, else NULL (never for a pool of a parsed config: the loader checks every name). The
 * result lives as long as cfg (a built-in, for ever). */
const sb_profile *sb_config_profile(const sb_config *cfg, const char *name);

/* Writes pattern with each "{host}" replaced by host (an IPv6 host gets brackets unless the
 * pattern has them) into out, NUL-terminated. 0, or -1 if it does not fit in cap. */
int sb_config_kv_address(const char *pattern, const char *host, uint16_t port, char *out, size_t cap);

/* Formats errors one per line as "FILE:LINE:COL: message" into buf (NUL-terminated). */
void sb_config_errors_format(const sb_config_errors *errs, const char *file, char *buf, size_t cap);

#endif
