/* The simulator's informational endpoints: GET /v1/models and POST /tokenize (vLLM's shapes),
 * and the model-name check the completion endpoints share. */
#include "sim/server_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "sim/sim_request.h"
#include "sim/tokenizer.h"

/* The engine adapter id for a model name: 0 for the base model, i + 1 for adapter i, -1 if
 * the replica does not serve it. */
int srv_model_adapter(const sb_sim_fleet *f, const sb_sim_request *pr)
{
    if (pr->model_len > SB_SIM_MODEL_MAX)
        return -1;
    if (!strcmp(pr->model, f->model))
        return 0;
    for (size_t i = 0; i < f->opts.n_adapters; i++)
        if (!strcmp(pr->model, f->adapters[i]))
            return (int)i + 1;
    return -1;
}

void srv_respond_unknown_model(sb_http_req *h, const char *model)
{
    char msg[SB_SIM_MODEL_MAX + 64];
    snprintf(msg, sizeof(msg), "The model `%s` does not exist.", model);
    srv_respond_error(h, 404, "NotFoundError", msg, NULL);
}

void srv_handle_models(replica *r, sb_http_req *h)
{
    sb_sim_fleet *f = r->fleet;
    const char *owner = sb_sim_flavor_name(f->opts.flavor);
    unsigned long long created = (unsigned long long)time(NULL);
    sb_buf b = {0};
    sb_buf_puts(&b, "{\"object\":\"list\",\"data\":[{\"id\":\"");
    sb_buf_json_escape(&b, f->model, strlen(f->model));
    sb_buf_printf(&b, "\",\"object\":\"model\",\"created\":%llu,\"owned_by\":\"%s\",\"root\":\"", created, owner);
    sb_buf_json_escape(&b, f->model, strlen(f->model));
    sb_buf_printf(&b, "\",\"parent\":null,\"max_model_len\":%u,\"permission\":[]}", f->max_model_len);
    for (size_t i = 0; i < f->opts.n_adapters; i++) {
        const char *a = f->adapters[i];
        sb_buf_puts(&b, ",{\"id\":\"");
        sb_buf_json_escape(&b, a, strlen(a));
        sb_buf_printf(&b, "\",\"object\":\"model\",\"created\":%llu,\"owned_by\":\"%s\",\"root\":\"/adapters/", created,
                      owner);
        sb_buf_json_escape(&b, a, strlen(a));
        sb_buf_puts(&b, "\",\"parent\":\"");
        sb_buf_json_escape(&b, f->model, strlen(f->model));
        sb_buf_puts(&b, "\",\"max_model_len\":null,\"permission\":[]}");
    }
    sb_buf_puts(&b, "]}");
    srv_respond_json(h, 200, &b);
    sb_buf_free(&b);
}

void srv_handle_tokenize(replica *r, sb_http_req *h)
{
    sb_sim_fleet *f = r->fleet;
    sb_buf prompt = {0}, b = {0};
    sb_sim_request pr;
    uint32_t *tokens = NULL;
    int rc = sb_sim_request_parse(h->body, h->body_len, SB_SIM_API_TOKENIZE, &pr, &prompt);
    if (rc == -EINVAL) {
        srv_respond_error(h, 400, "BadRequestError", pr.error, NULL);
        goto done;
    }
    if (rc == 0 && pr.model_len && srv_model_adapter(f, &pr) < 0) {
        srv_respond_unknown_model(h, pr.model);
        goto done;
    }
    size_t n = rc == 0 ? sb_tokenize(prompt.data ? prompt.data : "", prompt.len, NULL, 0) : 0;
    tokens = n ? sb_malloc(n * sizeof(*tokens)) : NULL;
    if (rc < 0 || (n && !tokens)) {
        srv_respond_error(h, 500, "InternalServerError", "out of memory", NULL);
        goto done;
    }
    sb_tokenize(prompt.data, prompt.len, tokens, n);
    sb_buf_printf(&b, "{\"count\":%zu,\"max_model_len\":%u,\"tokens\":[", n, f->max_model_len);
    for (size_t i = 0; i < n; i++)
        sb_buf_printf(&b, i ? ",%u" : "%u", tokens[i]);
    sb_buf_puts(&b, "],\"token_strs\":null}");
    srv_respond_json(h, 200, &b);
done:
    sb_free(tokens);
    sb_buf_free(&prompt);
    sb_buf_free(&b);
}
