/* The end of a worker thread that sleeps on cv, under mu, until it has
 * work or *quit is set. */
#ifndef FX_UTIL_THREAD_H
#define FX_UTIL_THREAD_H

#include <pthread.h>

/* Sets *quit under mu, wakes every waiter on cv and joins the thread. */
static inline void thread_stop(pthread_t thread, pthread_mutex_t *mu,
                               pthread_cond_t *cv, int *quit)
{
    pthread_mutex_lock(mu);
    *quit = 1;
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(mu);
    pthread_join(thread, NULL);
}

#endif
