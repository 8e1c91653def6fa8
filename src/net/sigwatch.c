#include "net/sigwatch.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

static int fill_set(sigset_t *set, const int *sigs, size_t n)
{
    sigemptyset(set);
    for (size_t i = 0; i < n; i++)
        if (sigaddset(set, sigs[i]) < 0)
            return -EINVAL;
    return 0;
}

int sb_sigwatch_block(const int *sigs, size_t n)
{
    sigset_t set;
    int rc = fill_set(&set, sigs, n);
    if (rc < 0)
        return rc;
    return -pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void on_readable(uv_poll_t *p, int status, int events)
{
    (void)events;
    sb_sigwatch *w = p->data;
    if (status < 0)
        return;
    /* Bounded: at most one pending instance of each blocked signal, so a few reads drain it. */
    struct signalfd_siginfo info[8];
    while (!w->closed) {
        ssize_t got = read(w->fd, info, sizeof info);
        if (got < (ssize_t)sizeof info[0])
            return; /* EAGAIN: nothing more pending (or EINTR: the poll comes back) */
        for (size_t i = 0; i < (size_t)got / sizeof info[0] && !w->closed; i++)
            w->cb(w->arg, (int)info[i].ssi_signo);
    }
}

static void on_closed(uv_handle_t *h)
{
    sb_sigwatch *w = h->data;
    close(w->fd);
    w->fd = -1;
}

void sb_sigwatch_close(sb_sigwatch *w)
{
    if (w->closed || w->fd < 0)
        return;
    w->closed = true;
    uv_close((uv_handle_t *)&w->poll, on_closed);
}

int sb_sigwatch_start(sb_sigwatch *w, uv_loop_t *loop, const int *sigs, size_t n, sb_sigwatch_cb cb, void *arg)
{
    sigset_t set;
    int rc = fill_set(&set, sigs, n);
    if (rc < 0)
        return rc;
    *w = (sb_sigwatch){.fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC), .cb = cb, .arg = arg};
    if (w->fd < 0)
        return -errno;
    if ((rc = uv_poll_init(loop, &w->poll, w->fd)) < 0) {
        close(w->fd);
        w->fd = -1;
        return rc;
    }
    w->poll.data = w;
    if ((rc = uv_poll_start(&w->poll, UV_READABLE, on_readable)) < 0) {
        sb_sigwatch_close(w);
        return rc;
    }
    return 0;
}

