/* admission: flow control's adapter between the pure core/admission.h and the gateway. */
#ifndef SB_NET_ADMISSION_H
#define SB_NET_ADMISSION_H

#include "net/gateway_types.h"

/* Admission (net/admission.c): routes a request through flow control; re-examines the
 * queues when a request ends and on the periodic tick. */
int sb_gateway_admission_start(sb_gateway *gw);
void sb_gateway_admit(sb_gateway *gw, sb_http_req *req, const sb_proxy_target *t, const sb_sched_request *rr);
void sb_gateway_admission_done(sb_gateway *gw, uint32_t pool);
void sb_gateway_admission_tick(sb_gateway *gw, sb_ns now);
void sb_gateway_admission_stop(sb_gateway *gw);
/* Answers every queued request 503 (reason draining, Retry-After: 1): the end of a drain window. */
void sb_gateway_admission_refuse_draining(sb_gateway *gw);
/* Dispatches every queued request now (a gateway being retired by a reload). */
void sb_gateway_admission_flush(sb_gateway *gw);
/* A reload that kept the shape (gw->cfg is the new configuration): flow control turned on or
 * off, or new bounds and waits applied in place; queued requests keep their place. Returns
 * -1 if some pool could not take the new bounds (it keeps its old ones). */
int sb_gateway_admission_reconfigure(sb_gateway *gw);
void sb_gateway_admission_free(sb_gateway *gw);

#endif
