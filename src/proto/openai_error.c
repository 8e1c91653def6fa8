#include "proto/openai_error.h"

#include <string.h>

static int str_or_null(sb_buf *b, const char *s)
{
    if (!s)
        return sb_buf_puts(b, "null");
    if (sb_buf_puts(b, "\"") < 0 || sb_buf_json_escape(b, s, strlen(s)) < 0)
        return -1;
    return sb_buf_puts(b, "\"");
}

int sb_openai_error(sb_buf *b, const char *message, const char *type, const char *param, const char *code)
{
    if (sb_buf_puts(b, "{\"error\":{\"message\":") < 0 || str_or_null(b, message) < 0 ||
        sb_buf_puts(b, ",\"type\":") < 0 || str_or_null(b, type) < 0 || sb_buf_puts(b, ",\"param\":") < 0 ||
        str_or_null(b, param) < 0 || sb_buf_puts(b, ",\"code\":") < 0 || str_or_null(b, code) < 0)
        return -1;
    return sb_buf_puts(b, "}}");
}
