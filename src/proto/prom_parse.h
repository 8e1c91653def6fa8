/* prom_parse: a zero-copy, zero-allocation parser for the Prometheus text exposition format
 * (version 0.0.4), for reading model servers' GET /metrics answers.
 *
 * In the picohttpparser spirit: the caller owns the bytes; the parser hands back slices into
 * them and keeps only a small caller-embedded state (sb_prom_parser), so it never allocates,
 * never copies a sample, and never reads past `len`. Two ways to drive it:
 *   - a cursor: sb_prom_init, sb_prom_feed(buf), then sb_prom_next until SB_PROM_END;
 *     a body arriving in chunks is fed chunk after chunk, the caller carrying the unconsumed
 *     tail (an incomplete last line) to the front of the next chunk;
 *   - one call over a whole body with callbacks: sb_prom_parse.
 *
 * What is read (the format as Prometheus's own Go parser reads it, plus CRLF):
 *   - `# HELP name text` and `# TYPE name type` lines: they open a family. Its type
 *     (counter, gauge, histogram, summary, untyped) is reported with each of its samples;
 *     a sample belongs to the open family when its name is the family name, or the family
 *     name plus one of _total _count _sum _bucket _created _info _gcount _gsum. Other `#`
 *     lines are comments; blank lines are skipped.
 *   - samples `name{label="value",...} value [timestamp_ms]`: names [a-zA-Z_:][a-zA-Z0-9_:]*
 *     (colons, as in vllm:num_requests_running), label names [a-zA-Z_][a-zA-Z0-9_]*, spaces
 *     or tabs around tokens, `{}` and a trailing comma allowed. Label values stay escaped in
 *     the slices (\\ \" \n); sb_prom_unescape decodes one into a caller buffer. Any other
 *     escape is malformed, as in Prometheus.
 *   - values: decimal integers and floats with an optional exponent (Go's 1.7537953269352946e+09,
 *     C++ stream defaults such as 1.23457e+06), NaN, +Inf, -Inf (case-insensitive, also
 *     Inf and Infinity, as Go's strconv.ParseFloat reads them). Hexadecimal floats, digit
 *     underscores, nan(...) payloads, values beyond a double's range (an error in Go too) and
 *     tokens of 128 bytes or more are malformed; underflow rounds to 0. Short decimals are
 *     converted exactly without libc; long ones with strtod, so under a non-"C" LC_NUMERIC
 *     those would be refused, never misread (switchboard never calls setlocale).
 *     Timestamps: optional signed 64-bit integers (ms).
 *   - a line ends at '\n'; a '\r' before it is ignored.
 *
 * Truncation: only lines ending in '\n' are parsed (the format requires the last line to end
 * in one). A body cut anywhere therefore yields exactly the samples of its complete lines, a
 * prefix of what the whole body yields; the incomplete tail is left unconsumed.
 *
 * Malformed lines are reported (line number, reason) and skipped: never fatal.
 *
 * Filtering: an optional want(name) callback is consulted once per family (at its HELP or
 * TYPE line, with the family name) and once per run of samples outside any family (with the
 * sample name). Lines of an unwanted family are skipped with a name comparison and a memchr to
 * the next newline: their labels and values are never parsed, nor checked.
 *
 * Not checked (the consumer does not need them and they cost): duplicate label names, the
 * grouping of a family's lines, histogram bucket order, HELP text escapes.
 * Not for: OpenMetrics (# EOF, exemplars, units), protobuf, or writing the format. */
#ifndef SB_PROTO_PROM_PARSE_H
#define SB_PROTO_PROM_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Labels per sample at most; a sample with more is reported malformed. The widest label set
 * in the captures, vLLM's cache_config_info, has 12 (later releases add a few). */
#define SB_PROM_MAX_LABELS 64
/* Longest family name kept (it must survive across sb_prom_feed calls); a longer family's
 * samples are read as outside any family: untyped, and want() asked on every line. */
#define SB_PROM_FAMILY_MAX 256

typedef enum sb_prom_type {
    SB_PROM_UNTYPED = 0, /* no TYPE line, or `untyped` */
    SB_PROM_COUNTER,
    SB_PROM_GAUGE,
    SB_PROM_HISTOGRAM,
    SB_PROM_SUMMARY,
} sb_prom_type;

/* Bytes inside the caller's buffer (or inside the parser, for sample.family). */
typedef struct sb_prom_slice {
    const char *p;
    size_t len;
} sb_prom_slice;

typedef struct sb_prom_label {
    sb_prom_slice name;
    sb_prom_slice value; /* between the quotes, still escaped: see sb_prom_unescape */
} sb_prom_label;

/* One sample. Slices point into the buffer last fed (family: into the parser); they are
 * valid while that buffer lives and until the next sb_prom_next on the same parser. */
typedef struct sb_prom_sample {
    sb_prom_slice name;   /* the series name as written: vllm:iteration_tokens_total_bucket */
    sb_prom_slice family; /* the open family it belongs to, else equal to name */
    sb_prom_type type;    /* the family's type; SB_PROM_UNTYPED outside any family */
    size_t n_labels;
    sb_prom_label labels[SB_PROM_MAX_LABELS];
    double value;
    bool has_timestamp;
    int64_t timestamp_ms;
    uint32_t line; /* 1-based, counted over everything fed to this parser */
} sb_prom_sample;

/* Asked whether a family (or a sample outside any family) is wanted: name is not
 * NUL-terminated. Must not call back into the parser. */
typedef bool (*sb_prom_want_fn)(void *ud, const char *name, size_t len);

/* Caller-embedded cursor state. Fields are read-only for the caller. */
typedef struct sb_prom_parser {
    /* public, read-only */
    size_t consumed;      /* bytes of the current buffer consumed (complete lines) */
    uint32_t line;        /* lines consumed so far, over all buffers */
    uint32_t n_samples;   /* samples returned */
    uint32_t n_malformed; /* malformed lines skipped */
    uint32_t n_skipped;   /* lines skipped as unwanted */
    uint32_t error_line;  /* after SB_PROM_MALFORMED: its line number */
    const char *error;    /* after SB_PROM_MALFORMED: a static reason */

    /* private */
    const char *buf;
    size_t len;
    sb_prom_want_fn want;
    void *want_ud;
    size_t family_len; /* 0: no open family */
    sb_prom_type family_type;
    bool family_wanted;
    bool family_declared; /* opened by HELP/TYPE (not by a run of untyped samples) */
    char family[SB_PROM_FAMILY_MAX];
} sb_prom_parser;

enum sb_prom_status {
    SB_PROM_SAMPLE = 1,     /* *out holds the next sample */
    SB_PROM_END = 0,        /* no complete line left: feed more, or stop */
    SB_PROM_MALFORMED = -1, /* a line was skipped: see error_line, error; call again */
};

/* Prepares a parser with an optional filter (want NULL: every family is wanted). No buffer
 * yet: sb_prom_next returns SB_PROM_END until sb_prom_feed. Cannot fail. */
void sb_prom_init(sb_prom_parser *p, sb_prom_want_fn want, void *want_ud);

/* Gives the parser the next bytes of the body (it keeps the pointer, not a copy); resets
 * `consumed` to 0. The open family survives from the previous buffer, so a body may be fed
 * in pieces, as long as each piece starts where the previous one's consumed bytes ended. */
void sb_prom_feed(sb_prom_parser *p, const char *buf, size_t len);

/* Advances to the next wanted sample. Returns SB_PROM_SAMPLE with *out filled, SB_PROM_END
 * when only an incomplete line (or nothing) is left (p->consumed then says where it starts),
 * or SB_PROM_MALFORMED after skipping one bad line (p->error_line, p->error); the caller
 * simply calls again. *out holds a sample only after SB_PROM_SAMPLE (otherwise its contents
 * are unspecified). */
int sb_prom_next(sb_prom_parser *p, sb_prom_sample *out);

/* The whole-body driver. on_sample is called for each wanted sample, on_malformed (may be
 * NULL) for each skipped bad line, in input order. Returns the bytes consumed: len, or the
 * offset where an incomplete last line starts (it is ignored). Cannot fail. If `stats` is not
 * NULL the parser's final counters are copied there. */
typedef struct sb_prom_handler {
    sb_prom_want_fn want; /* NULL: everything */
    void (*on_sample)(void *ud, const sb_prom_sample *s);
    void (*on_malformed)(void *ud, uint32_t line, const char *reason);
    void *ud;
} sb_prom_handler;

size_t sb_prom_parse(const char *buf, size_t len, const sb_prom_handler *h, sb_prom_parser *stats);

/* Decodes an escaped label value (\\ \" \n) into out, NUL-terminated. Returns the decoded
 * length, or -1 (out holds no meaningful text) if a decoded value plus NUL does not fit in
 * cap or an escape is invalid. Never reads past n or writes past cap. */
long sb_prom_unescape(const char *s, size_t n, char *out, size_t cap);

/* The raw (escaped) value of label `name` (NUL-terminated) in s, or NULL if absent. The first
 * occurrence wins. */
const sb_prom_slice *sb_prom_label_value(const sb_prom_sample *s, const char *name);

/* True when the slice holds exactly the NUL-terminated string `str`. */
bool sb_prom_slice_eq(sb_prom_slice a, const char *str);

const char *sb_prom_type_name(sb_prom_type t);

#endif
