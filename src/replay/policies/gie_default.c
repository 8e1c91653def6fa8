/* gie-default: the Gateway API Inference Extension's default scheduling profile, assembled from
 * switchboard's own plug-ins: prefix-cache scorer weight 3, queue scorer 2, KV-cache utilisation
 * scorer 2, max-score picker (kubernetes-sigs/gateway-api-inference-extension: the EPP's
 * default-plugins.yaml scheduling profile "default"; scorer semantics in
 * pkg/epp/scheduling/framework/plugins/).
 *
 * Where our plug-ins differ from theirs (docs/replay.md, "Reference policies"):
 * - prefix: GIE's prefix-cache scorer (plugins/multi/prefix/plugin.go) hashes 64-character
 *   blocks, matches at most 256 of them (the first 16,384 characters, about 4,096 tokens: longer
 *   prompts score on their head only, over 256 blocks) and keeps an LRU of 31,250 blocks per
 *   server; ours uses the same 64-byte blocks over the whole prompt (up to the gateway's
 *   max_prompt_blocks), scores matched / prompt blocks, and bounds each endpoint's entries by the
 *   capacity its engine reports (num_gpu_blocks x block_size tokens).
 * - queue: GIE's min-max of the scraped waiting queue; ours adds requests sent since the
 *   scrape and floors the range at 4 requests (docs/routing.md).
 * - kv-cache: both score 1 - utilisation; ours adds the prompt tokens sent since the scrape.
 * - filters: GIE's default profile has none; ours keeps `healthy` (a no-op in replay, where
 *   every replica is healthy). */
#include "replay/policy.h"

static void build(sb_profile *p)
{
    sb_profile_init(p, "gie-default");
    p->filters[p->n_filters++] = sb_filter_find("healthy");
    p->scorers[p->n_scorers++] = (sb_weighted_scorer){sb_scorer_find("prefix"), 3.0};
    p->scorers[p->n_scorers++] = (sb_weighted_scorer){sb_scorer_find("queue"), 2.0};
    p->scorers[p->n_scorers++] = (sb_weighted_scorer){sb_scorer_find("kv-cache"), 2.0};
    p->picker = sb_picker_find("max-score");
}

const sb_replay_policy_def sb_policy_gie_default = {
    .name = "gie-default",
    .summary = "Gateway API Inference Extension default profile: prefix 3, queue 2, kv-cache 2, max-score "
               "(gateway-api-inference-extension default-plugins.yaml; plugins/multi/prefix/plugin.go)",
    .build = build,
};
