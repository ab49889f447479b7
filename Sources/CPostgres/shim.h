// libpq, PostgreSQL's own C client (Debian's libpq5, 15), for TaskServer's PostgreSQL store.
#ifndef TASKSERVER_CPOSTGRES_SHIM_H
#define TASKSERVER_CPOSTGRES_SHIM_H

#include <libpq-fe.h>

// A notice processor that drops notices ("relation already exists, skipping" and the like):
// libpq's default prints them to stderr, outside the server's log.
static void cpostgres_ignore_notice(void *argument, const char *message) {
    (void)argument;
    (void)message;
}

static inline void cpostgres_silence_notices(PGconn *connection) {
    PQsetNoticeProcessor(connection, cpostgres_ignore_notice, NULL);
}

#endif
